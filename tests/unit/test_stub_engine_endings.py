"""The stub Ouroboros engine's endings: plans, MCP errors, finality, budget and deadline rails, cancel."""

from __future__ import annotations

import time

import pytest
from test_stub_engine import base_settings, plan, ready_stub, seed, spawn  # noqa: F401 (fixture)


# ---- endings ------------------------------------------------------------------------------------------
def ending_of(view: dict) -> tuple:
    return (
        view["status"],
        view["reason_code"],
        view["outcome_axes"]["execution"]["status"],
        view["outcome_axes"]["execution"]["reason_code"],
    )


@pytest.mark.parametrize(
    "description,expected,rounds",
    [
        ("no marker at all", ("completed", "final_message", "ok", "final_message"), 1),
        ("[demo-policy: unknown-tag]", ("completed", "final_message", "ok", "final_message"), 1),
        ("[demo-policy: two]", ("completed", "final_message", "ok", "final_message"), 3),
        ("[demo-policy: over]", ("completed", "round_limit", "best_effort", "round_limit"), 2),
        ("[demo-policy: spin]", ("completed", "round_limit", "best_effort", "round_limit"), 2),
        ("[demo-policy: boom]", ("failed", "llm_api_error", "infra_failed", "llm_api_error"), 1),
    ],
)
def test_plan_endings(ready_stub, description, expected, rounds):
    task = ready_stub.submit(description)
    view = ready_stub.settled(task)
    assert ending_of(view) == expected
    assert view["total_rounds"] == rounds
    usage = [r for r in ready_stub.log_rows("events") if r.get("task_id") == task and r["type"] == "llm_usage"]
    assert len(usage) == rounds and all(r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 for r in usage)
    assert view["prompt_tokens"] == sum(r["prompt_tokens"] for r in usage)
    assert view["accounted_upper_bound_usd"] == pytest.approx(0.001 * rounds)
    if expected[1] == "final_message":
        assert view["final_answer"] == "done"


def test_mcp_errors_are_recorded_and_the_plan_continues(ready_stub):
    task = ready_stub.submit("[demo-policy: two]")
    ready_stub.settled(task)
    rows = [r for r in ready_stub.log_rows("tools") if r["task_id"] == task]
    assert [r["tool"] for r in rows] == ["mcp_nowhere__a", "mcp_nowhere__b"]
    assert all(r["is_error"] and r["type"] == "tool_call" for r in rows)
    chat = [r for r in ready_stub.log_rows("chat") if r["task_id"] == task]
    assert [r["direction"] for r in chat] == ["in", "out"]


def test_artifact_and_cost_finality_progress_after_the_terminal_write(spawn, tmp_path):
    stub = spawn(base_settings(STUB_COST_FINAL_DELAY_SEC=1.0, STUB_ARTIFACT_DELAY_SEC=0.4))
    stub.wait_ready()
    (tmp_path / "ws").mkdir()
    task = stub.submit("no marker", workspace_root=str(tmp_path / "ws"), memory_mode="empty")
    seen: list = []
    stub.wait_task(task, lambda v: v.get("cost_final") is True, seen=seen)
    artifacts = [v["artifact_status"] for v in seen]
    compact = [a for i, a in enumerate(artifacts) if i == 0 or artifacts[i - 1] != a]
    assert compact[-2:] == ["finalizing", "ready_no_changes"] and compact[0] == "pending"
    terminal = [v for v in seen if v["status"] == "completed"]
    assert terminal[0]["cost_final"] is False and terminal[0]["cost_with_children_partial"] is True
    assert terminal[-1]["cost_final"] is True and terminal[-1]["cost_with_children_partial"] is False


def test_budget_and_deadline_rails(spawn):
    # The late task's deadline (counted from its submission) falls inside its second round: a round
    # is at least its 1 s pace, so the second cannot end before 1.9 s, and the first has 0.9 s for
    # its worker to start and its bookkeeping. With 0.3 s rounds and 0.45 s that was 0.15 s, which a
    # loaded machine overran: the deadline then stopped the task after one round.
    stub = spawn(
        base_settings(
            STUB_SECONDS_PER_ROUND=1.0,
            OUROBOROS_PER_TASK_COST_USD=0.0025,
            STUB_EXTRA_PLANS={"long": plan(*[("nowhere", f"t{i}") for i in range(10)])},
        )
    )
    stub.wait_ready()
    spender = stub.submit("[demo-policy: long]")
    late = stub.submit("[demo-policy: long]", timeout_sec=1.9)
    view = stub.settled(spender)
    assert ending_of(view) == ("completed", "budget_exhausted", "best_effort", "budget_exhausted")
    assert view["total_rounds"] == 3
    view = stub.settled(late)
    assert ending_of(view) == ("completed", "deadline_local", "best_effort", "deadline_local")
    assert view["total_rounds"] == 2


def test_hang_cancel_and_terminal_stickiness(ready_stub):
    task = ready_stub.submit("[demo-policy: hang]")
    ready_stub.wait_task(task, lambda v: v["status"] == "running")
    time.sleep(1.0)
    assert ready_stub.get(f"/api/tasks/{task}")[1]["status"] == "running"  # HANG never ends itself
    assert ready_stub.post(f"/api/tasks/{task}/cancel", {}) == (200, {"ok": True, "task_id": task})
    view = ready_stub.settled(task)
    assert ending_of(view) == ("cancelled", "cancelled", "cancelled", "cancelled")
    assert ready_stub.post(f"/api/tasks/{task}/cancel", {})[0] == 404  # terminal is sticky
    done = ready_stub.submit("no marker")
    ready_stub.settled(done)
    assert ready_stub.post(f"/api/tasks/{done}/cancel", {})[0] == 404
    assert ready_stub.get(f"/api/tasks/{done}")[1]["status"] == "completed"


def test_finalize_then_cancel_is_202_then_cancelled(ready_stub):
    task = ready_stub.submit("[demo-policy: hang]")
    ready_stub.wait_task(task, lambda v: v["status"] == "running")
    status, body = ready_stub.post(f"/api/tasks/{task}/cancel", {"stop_policy": "finalize_then_cancel"})
    assert status == 202 and body["cancel_state"] == "pending"
    view = ready_stub.settled(task)
    assert view["status"] == "cancelled" and view["cancel_state"] == "cancelled"
