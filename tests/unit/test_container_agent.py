"""The agent phase end to end on the host: fake benchmark tree, fake Ouroboros server, the real
mcp-proxy and a real stdio MCP server. Every path must leave a summary and one Status line."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path

import pytest
from test_container_support import FAKE_KEY, MODEL, FakeBench, run_config, status_lines


def _files(root: Path):
    return [p for p in root.rglob("*") if p.is_file()]


def _assert_common(bench: FakeBench, proc, status: str) -> dict:
    assert proc.returncode == 0, proc.stderr
    lines = status_lines(proc.stdout)
    assert lines == [f"====== Status: {status} ======"], proc.stdout
    summary_lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[cowork] summary: ")]
    assert len(summary_lines) == 1 and "Pass:" not in summary_lines[0]
    summary = bench.summary()
    assert summary["schema"] == "cowork_adapter.adapter_summary.v1"
    assert summary["bench_status"] == status
    assert FAKE_KEY not in proc.stdout and FAKE_KEY not in proc.stderr
    for path in _files(bench.task_root):
        assert FAKE_KEY.encode() not in path.read_bytes(), path
    return summary


def test_completed_with_real_proxy_and_key_custody(tmp_path):
    bench = FakeBench(tmp_path)
    proc = bench.run("agent")
    summary = _assert_common(bench, proc, "success")
    assert summary["reason_code"] == "final_message" and summary["infra_failed"] is False
    assert summary["adapter_stage"] == "finished" and summary["model_activity_observed"] is True
    assert summary["mcp_servers"] == ["notes"] and summary["ouroboros_timeout_sec"] >= 60
    assert summary["cost_final"] is True and summary["cost_finality_wait_exhausted"] is False
    assert summary["artifact_status"] == "ready" and summary["prompt_tokens"] == 120
    root = bench.task_root
    for name in (
        "traj_log.json",
        "traj.json",
        "applied_settings.json",
        "preprocess.log",
        "mcp_proxy.log",
        "ouroboros_server.log",
    ):
        assert (root / name).exists(), name
    log = json.loads((root / "traj_log.json").read_text())
    assert log["status"] == "success" and log["config"]["task_dir"] == "demo-task"
    copied = {p.name for p in (root / "ouroboros").iterdir()}
    assert {"events.jsonl", "tools.jsonl", "chat.jsonl", f"{summary['ouroboros_task_id']}.json"} <= copied
    assert "[REDACTED]" in (root / "ouroboros" / "events.jsonl").read_text()
    assert "booting with key [REDACTED]" in (root / "ouroboros_server.log").read_text()
    traj = json.loads((root / "traj.json").read_text())
    assert traj["final_answer"].startswith("done; the key is [REDACTED]")
    # The key left os.environ: no child saw it; only settings.json (0600) carries it.
    for name in ("preprocess.env.json", "server.env.json", "mcp_server.env.json"):
        env = json.loads((bench.envdump / name).read_text())
        assert FAKE_KEY not in env.values() and "COWORK_PROVIDER_KEY" not in env, name
    server_env = json.loads((bench.envdump / "server.env.json").read_text())
    assert (
        server_env["OUROBOROS_DATA_DIR"] == str(bench.data) and server_env["OUROBOROS_WORKER_START_METHOD"] == "spawn"
    )
    mcp_env = json.loads((bench.envdump / "mcp_server.env.json").read_text())
    assert mcp_env["PG_HOST"] == "pg-test-host" and mcp_env["WS"].endswith("workspace")
    settings_path = bench.data / "settings.json"
    assert stat.S_IMODE(settings_path.stat().st_mode) == 0o600
    settings = json.loads(settings_path.read_text())
    assert settings["OPENROUTER_API_KEY"] == FAKE_KEY and settings["OUROBOROS_MAX_ROUNDS"] == 7
    assert settings["MCP_SERVERS"][0]["url"].endswith("/servers/notes/mcp")
    assert "OPENROUTER_API_KEY" not in json.loads((root / "applied_settings.json").read_text())
    body = json.loads((bench.data / "fake_received.json").read_text())
    assert body["description"] == "You are a careful agent.\n\nWrite a note."
    assert body["workspace_mode"] == "external" and body["memory_mode"] == "empty"
    assert body["metadata"] == {"source": "cowork-bench", "delegation_role": "root"}
    assert (root / "workspace" / "hello.txt").read_text() == "hello"
    # Processes are gone: the proxy port no longer answers.
    import urllib.request

    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{bench.config['proxy_port']}/status", timeout=2)


@pytest.mark.parametrize(
    "scenario,status,reason,infra,truncated",
    [
        ("round_limit", "max_turns_reached", "round_limit", False, True),
        ("llm_api_error", "failed", "llm_api_error", True, False),
        ("create_503", "failed", "task_create_failed", True, False),
        ("die_after_submit", "failed", "server_died", True, False),
        ("exit_at_start", "failed", "server_start_failed", True, False),
        ("zero_workers", "failed", "server_start_failed", True, False),
    ],
)
def test_engine_outcomes(tmp_path, scenario, status, reason, infra, truncated):
    bench = FakeBench(tmp_path, servers=())
    extra = {"COWORK_START_WAIT_SEC": "3"} if scenario == "zero_workers" else {}
    proc = bench.run("agent", FAKE_OURO_SCENARIO=scenario, **extra)
    summary = _assert_common(bench, proc, status)
    assert (summary["reason_code"], summary["infra_failed"], summary["truncated"]) == (reason, infra, truncated)
    submitted = scenario not in ("exit_at_start", "zero_workers")
    assert summary["task_submission_started"] is submitted
    if scenario == "llm_api_error":
        assert summary["model_activity_observed"] is None  # submitted, zero tokens: unknown, not "none"
    if not submitted:
        assert summary["model_activity_observed"] is False
    assert json.loads((bench.task_root / "traj_log.json").read_text())["status"] == status


@pytest.mark.parametrize(
    "setup,reason,stage",
    [
        ("config_invalid", "config_invalid", "init"),
        ("model_mismatch", "model_mismatch", "init"),
        ("preprocess_failed", "preprocess_failed", "preprocess"),
        ("mcp_missing", "mcp_config_missing", "mcp"),
        ("mcp_invalid", "mcp_config_invalid", "mcp"),
        ("no_key", "config_invalid", "init"),
    ],
)
def test_adapter_failures_write_a_summary(tmp_path, setup, reason, stage):
    servers = {"mcp_missing": ("nowhere",), "mcp_invalid": ("broken",)}.get(setup, ())
    bench = FakeBench(tmp_path, servers=servers)
    extra: dict = {}
    if setup == "config_invalid":
        del bench.config["proxy_port"]
        bench.save_config()
    elif setup == "model_mismatch":
        extra["LLM_MODEL"] = "other/model"
    elif setup == "preprocess_failed":
        extra["FAKE_PREPROCESS_EXIT"] = "3"
    proc = bench.run("agent", **extra) if setup != "no_key" else bench.run("agent", COWORK_PROVIDER_KEY="")
    summary = _assert_common(bench, proc, "failed")
    assert summary["reason_code"] == reason and summary["infra_failed"] is True
    assert summary["adapter_stage"] == stage and summary["task_submission_started"] is False
    assert summary["model"] == MODEL


def test_unreadable_config_still_writes_summary(tmp_path):
    bench = FakeBench(tmp_path, servers=())
    bench.config_path.write_text("{not json")
    proc = bench.run("agent", "--weird-flag", "x", "--debug", MODEL_NAME=MODEL)
    summary = _assert_common(bench, proc, "failed")
    assert summary["reason_code"] == "config_invalid"
    assert "--weird-flag" in summary["unknown_flags"]


def test_sigterm_after_submit_is_wall_clock_timeout(tmp_path):
    bench = FakeBench(tmp_path, servers=())
    proc = bench.popen("agent", FAKE_OURO_SCENARIO="stuck")
    received = bench.data / "fake_received.json"
    deadline = time.monotonic() + 60
    while not received.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.6)  # a few polls, so a checkpoint has run
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert status_lines(stdout) == ["====== Status: failed ======"]
    summary = bench.summary()
    assert summary["reason_code"] == "wall_clock_timeout" and summary["truncated"] is True
    assert summary["infra_failed"] is False and summary["task_submission_started"] is True
    assert summary["model_activity_observed"] is None
    assert (bench.task_root / "ouroboros" / "events.jsonl").exists()
    server_pid = int((bench.data / "fake_pid").read_text())
    with pytest.raises(ProcessLookupError):  # the server's process group was stopped
        os.kill(server_pid, 0)


def test_outer_deadline_before_submit_is_infra(tmp_path):
    bench = FakeBench(tmp_path, servers=(), config=run_config(task_timeout_sec=14))
    proc = bench.run("agent", FAKE_OURO_SCENARIO="never_ready")
    summary = _assert_common(bench, proc, "failed")
    assert summary["reason_code"] == "wall_clock_timeout" and summary["infra_failed"] is True
