"""The model-free probes through the real mcp-proxy and a real stdio MCP server."""

from __future__ import annotations

import json

from test_container_support import FakeBench


def test_inventory_lists_tools_of_the_task_servers(tmp_path):
    bench = FakeBench(tmp_path)
    out = tmp_path / "probes"
    proc = bench.run("inventory", "--probe-output", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "inventory.json").read_text())
    assert report["notes"]["ok"] is True
    assert sorted(report["notes"]["tools"]) == ["add_note", "list_notes", "pg_host"]
    assert (out / "notes.stderr.log").exists() and (out / "notes.probe.log").exists()


def test_inventory_fails_on_a_broken_server(tmp_path):
    bench = FakeBench(tmp_path, servers=("notes", "broken"))
    out = tmp_path / "probes"
    proc = bench.run("inventory", "--probe-output", str(out))
    assert proc.returncode == 1 and "Status:" not in proc.stdout
    report = json.loads((out / "inventory.json").read_text())
    assert report["notes"]["ok"] is True and report["notes"]["tool_count"] == 3
    assert report["broken"]["ok"] is False and report["broken"]["error"].startswith("mcp_config_invalid")


def test_stateful_probe_state_survives_sessions(tmp_path):
    bench = FakeBench(tmp_path)
    out = tmp_path / "probes"
    spec = {"server": "notes", "expect": "alpha | beta",
            "calls": [{"name": "add_note", "arguments": {"text": "alpha"}},
                      {"name": "add_note", "arguments": {"text": "beta"}},
                      {"name": "pg_host"}, {"name": "pg_host"},
                      {"name": "list_notes"}]}
    proc = bench.run("stateful", "--probe-output", str(out), COWORK_STATEFUL_PROBE=json.dumps(spec))
    report = json.loads((out / "stateful.json").read_text())
    assert proc.returncode == 0, report
    assert report["ok"] is True and len(report["sessions"]) == 5
    assert report["sessions"][2]["text"] == "pg-test-host"


def test_stateful_probe_reports_lost_state(tmp_path):
    bench = FakeBench(tmp_path)
    out = tmp_path / "probes"
    spec = {"server": "notes", "expect": "never-written", "calls": [{"name": "list_notes"}]}
    proc = bench.run("stateful", "--probe-output", str(out), COWORK_STATEFUL_PROBE=json.dumps(spec))
    assert proc.returncode == 1 and json.loads((out / "stateful.json").read_text())["ok"] is False
