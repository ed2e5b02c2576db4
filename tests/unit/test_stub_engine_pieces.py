"""The stub Ouroboros engine: the seed's pure pieces (outcomes, costs, settings, workspace), the compatible endpoint."""

from __future__ import annotations

import json

from test_stub_engine import base_settings, seed, seed_modules, spawn  # noqa: F401 (fixture)


# ---- pure pieces of the seed ---------------------------------------------------------------------------
def test_outcome_table_and_status_monotonicity(seed_modules):
    outcomes = seed_modules["outcomes"]
    table = {
        r: (
            outcomes.terminal_fields(r)["status"],
            outcomes.outcome_axes({"status": outcomes.terminal_fields(r)["status"], "reason_code": r})["execution"][
                "status"
            ],
        )
        for r in outcomes.ENDINGS
    }
    assert table == {
        "final_message": ("completed", "ok"),
        "round_limit": ("completed", "best_effort"),
        "budget_exhausted": ("completed", "best_effort"),
        "deadline_local": ("completed", "best_effort"),
        "llm_api_error": ("failed", "infra_failed"),
        "task_exception": ("failed", "failed"),
        "cancelled": ("cancelled", "cancelled"),
    }
    accepts = outcomes.accepts_write
    assert accepts("scheduled", "running") and accepts("running", "completed")
    assert not accepts("running", "scheduled") and not accepts("completed", "cancelled")
    assert accepts("completed", "completed") and accepts("completed", None)
    view = outcomes.public_view({"status": "running", "result_status": "x", "compat_result_status": "y"})
    assert "result_status" not in view and "compat_result_status" not in view


def test_cost_families_and_tool_names(seed_modules):
    cost = seed_modules["accounting"].cost_fields
    newest, legacy = cost(0.25, 3, False), cost(0.25, 3, True, "legacy")
    assert newest["accounted_upper_bound_usd"] == 0.25 and newest["cost_known"] is True
    assert "cost_usd" not in newest and newest["non_final_rows"] == 3
    assert legacy["cost_usd"] == 0.25 and "accounted_upper_bound_usd" not in legacy
    assert legacy["cost_final"] is True and legacy["non_final_rows"] == 0
    name = seed_modules["naming"].mcp_tool_name
    assert name("my-srv", "readFile") == "mcp_my_srv__readfile"
    assert name("pptx", "create_presentation") == "mcp_pptx__create_presentation"
    assert len(name("s" * 40, "t" * 80)) <= 64


def test_settings_precedence_and_mcp_rows(seed_modules):
    settings = seed_modules["settings"]
    merged = settings.merge_settings(
        {"OUROBOROS_MODEL": "file", "OPENROUTER_API_KEY": ""},
        {"OUROBOROS_MODEL": "env", "OPENROUTER_API_KEY": "k", "UNRELATED": "x", "STUB_NEVER_READY": "1"},
    )
    assert merged == {"OUROBOROS_MODEL": "file", "OPENROUTER_API_KEY": "k", "STUB_NEVER_READY": "1"}
    rows = settings.parse_mcp_servers(
        json.dumps(
            [
                {"id": "a", "name": "a", "enabled": True, "url": "http://127.0.0.1:1/servers/a/mcp"},
                {"id": "a", "name": "dup", "enabled": True, "url": "http://127.0.0.1:1/x"},
                {"id": "b", "name": "b", "url": "http://127.0.0.1:1/servers/b/mcp"},  # enabled defaults false
                {"id": "c", "name": "c", "enabled": True, "url": "file:///etc/passwd"},
            ]
        )
    )
    assert [r["name"] for r in rows] == ["a"]
    config = settings.config_from_settings({"OPENAI_COMPATIBLE_API_KEY": "k2", "STUB_EXIT_MID_TASK": "true"})
    assert config.supervisor_error() is None and config.exit_mid_task == 1
    assert settings.config_from_settings({}).supervisor_error()


def test_workspace_change_detection(seed_modules, tmp_path):
    ws = seed_modules["workspace"]
    (tmp_path / "a.txt").write_text("1")
    before = ws.snapshot(str(tmp_path))
    assert ws.artifact_status(before, ws.snapshot(str(tmp_path))) == "ready_no_changes"
    (tmp_path / "b.txt").write_text("2")
    assert ws.artifact_status(before, ws.snapshot(str(tmp_path))) == "ready_with_changes"
    assert ws.artifact_status(None, None) == "not_applicable"


def test_a_compatible_base_url_gets_one_real_request_per_round(spawn):
    """With OPENAI_COMPATIBLE_BASE_URL the stand-in calls it each round with its credential as bearer;
    the answer's usage (tokens and cost) is the round's usage row; a refused call ends llm_api_error."""
    import hashlib

    from cowork_adapter.demo.chat_standin import ChatStandin

    endpoint = ChatStandin(cost_per_request=0.125).start()
    try:
        settings = base_settings(
            OPENAI_COMPATIBLE_BASE_URL=endpoint.base_url,
            OPENAI_COMPATIBLE_API_KEY="tok-1",
            OUROBOROS_MODEL="openai-compatible::demo-stub-model",
        )
        del settings["OPENROUTER_API_KEY"]
        stub = spawn(settings)
        assert stub.wait_ready()["supervisor_ready"]
        record = stub.settled(stub.submit("no marker"))
        assert record["status"] == "completed"
        served = endpoint.chat_requests()
        usage = [r for r in stub.log_rows("events") if r["type"] == "llm_usage"]
        assert served and len(usage) == len(served)
        assert {s["auth_sha256"] for s in served} == {hashlib.sha256(b"Bearer tok-1").hexdigest()}
        assert {s["model"] for s in served} == {"demo-stub-model"}  # the routing prefix is not sent
        assert [(u["prompt_tokens"], u["completion_tokens"], u["cost"]) for u in usage] == [
            (s["prompt_tokens"], s["completion_tokens"], 0.125) for s in served
        ]
    finally:
        endpoint.stop()
    refused = spawn(base_settings(OPENAI_COMPATIBLE_BASE_URL="http://127.0.0.1:9/v1"), name="refused")
    assert refused.wait_ready()["supervisor_ready"]
    record = refused.settled(refused.submit("no marker"))
    assert (record["status"], record["reason_code"]) == ("failed", "llm_api_error")
