"""--llm-gateway accounting: the gateway log becomes each ledger row's exact spend, the report's
cost per task and per passed task, and the gateway total set against the meter's delta."""

from __future__ import annotations

import json
from pathlib import Path

import synthetic_run as synth  # tests/synthetic_run.py (tests/ is on sys.path)

from cowork_adapter.gateway.server import FENCE_BUDGET
from cowork_adapter.report import make_report
from cowork_adapter.report.build import row_cost
from cowork_adapter.runroot.layout import RunRoot
from cowork_adapter.schemas.gateway import GatewayRequest, encode_row, read_requests
from cowork_adapter.schemas.manifest import GatewayRecord
from cowork_adapter.score.ledger import build_index, write_index


def _row(
    task: str | None, cost: float | None, *, refused: str | None = None, tokens=(10, 2), assumed: float | None = None
) -> GatewayRequest:
    return GatewayRequest(
        at=1.0,
        task=task,
        path="/v1/chat/completions",
        model="m",
        status=200 if not refused else 403,
        latency_ms=3.0,
        prompt_tokens=tokens[0],
        completion_tokens=tokens[1],
        cost_usd=cost,
        refused=refused,
        assumed_cost_usd=assumed,
    )


def _gateway_run(root: Path, spent: float) -> list[str]:
    tasks = synth.synth_run(root, 4, usage_rows=1, other_rows=0)
    manifest = json.loads((root / "run_manifest.json").read_text())
    manifest["llm_gateway"] = GatewayRecord(
        container_url="http://172.17.0.1:1/v1",
        upstream_url="http://p/v1",
        routed_model="openai-compatible::m",
        spent_usd=spent,
        disclosures=["Ouroboros sends no OpenRouter extras on this route."],
        unknown_cost_requests=1,
        assumed_usd=5.0,
        fence_reason=FENCE_BUDGET,
    ).to_dict()
    (root / "run_manifest.json").write_text(json.dumps(manifest))
    evidence = root / "custody" / "evidence"
    evidence.mkdir(parents=True)
    for i, task in enumerate(tasks):  # the shim's record: runner id -> the task's directory
        (evidence / f"{i}-abcd.task").write_text(f"/bench/tasks/finalpool/{task}\n")
    RunRoot(root).gateway_requests.parent.mkdir()
    models = GatewayRequest(at=1.0, task="0-abcd", path="/v1/models", status=200, latency_ms=1.0)  # costs nothing
    rows = [
        _row("0-abcd", 0.25),
        _row("0-abcd", 0.5),
        _row("0-abcd", None, refused="fenced"),
        models,
        _row("1-abcd", None, assumed=5.0),
        _row(None, None, refused="auth"),
    ]
    RunRoot(root).gateway_requests.write_bytes(b"".join(encode_row(r) for r in rows) + b'{"torn')
    return tasks


def test_ledger_rows_carry_each_tasks_gateway_spend(tmp_path):
    root = tmp_path / "run"
    tasks = _gateway_run(root, 0.75)
    assert len(read_requests(root)) == 6  # the torn last line of a killed launcher is skipped
    rows = {r.instance_id: r for r in build_index(root, live=False, interruption_cause="runner_exited")}
    first = rows[tasks[0]].gateway
    assert (first.requests, first.forwarded, first.cost_usd, first.unknown_cost_requests) == (4, 3, 0.75, 0)
    assert (first.prompt_tokens, first.completion_tokens) == (20, 4)
    assert rows[tasks[1]].gateway.unknown_cost_requests == 1
    assert (rows[tasks[1]].gateway.assumed_cost_usd, first.assumed_cost_usd) == (5.0, 0.0)  # disclosed apart
    assert rows[tasks[2]].gateway.requests == 0  # no request at all: an exact zero, not unknown
    # The exact gateway figure wins over the engine's own accounting; an unknown one falls back.
    assert row_cost(rows[tasks[0]]) == 0.75 and row_cost(rows[tasks[2]]) == 0.0
    assert row_cost(rows[tasks[1]]) == row_cost(rows[tasks[1]].replace(gateway=None))


def test_report_sets_the_gateway_total_against_the_meter_and_costs_passed_tasks(tmp_path):
    root = tmp_path / "run"
    _gateway_run(root, 0.75)
    write_index(root, build_index(root, live=False, interruption_cause="runner_exited"))
    monitor = json.loads((root / "monitor.json").read_text())
    monitor["spending"]["run_spent_usd"] = 1.0
    (root / "monitor.json").write_text(json.dumps(monitor))
    cost = make_report([root], 1)["cost"]
    gateway = cost["gateway"]
    assert (gateway["gateway_total_usd"], gateway["meter_delta_usd"], gateway["meter_minus_gateway_usd"]) == (
        0.75,
        1.0,
        0.25,
    )
    assert (gateway["unknown_cost_requests"], gateway["assumed_usd"]) == (1, 5.0)
    report = make_report([root], 1)
    # The routing and what it changed are disclosed in the report, not only in the manifest.
    gateway_notes = [d for d in report["disclosures"] if "model gateway" in d]
    assert any("openai-compatible::m" in d and "http://p/v1" in d for d in gateway_notes), report["disclosures"]
    assert any("no OpenRouter extras" in d for d in gateway_notes), report["disclosures"]
    if report["passed"] and cost["complete"]:
        assert cost["known_per_passed_task_usd"] == cost["known_usd"] / report["passed"]
    else:
        assert cost["known_per_passed_task_usd"] is None


def test_a_run_without_the_gateway_has_no_gateway_figures(tmp_path):
    root = tmp_path / "run"
    synth.synth_run(root, 3, usage_rows=1, other_rows=0)
    rows = build_index(root, live=False, interruption_cause="runner_exited")
    assert all(r.gateway is None for r in rows)
    write_index(root, rows)
    assert make_report([root], 1)["cost"]["gateway"] is None
