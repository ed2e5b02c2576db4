"""The model-free probes through the real mcp-proxy and a real stdio MCP server."""

from __future__ import annotations

import json
import subprocess

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
    spec = {
        "server": "notes",
        "expect": "alpha | beta",
        "calls": [
            {"name": "add_note", "arguments": {"text": "alpha"}},
            {"name": "add_note", "arguments": {"text": "beta"}},
            {"name": "pg_host"},
            {"name": "pg_host"},
            {"name": "list_notes"},
        ],
    }
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


# A server that, like `uv run <script>`, finds its project (and so its packages) only by walking
# up from its working directory: from anywhere outside the benchmark tree it dies on an import.
PROJECT_BOUND_SERVER_PY = '''
import os, sys
here = os.getcwd()
while not os.path.exists(os.path.join(here, "pyproject.toml")):
    if os.path.dirname(here) == here:
        sys.stderr.write("cwd %s: no project above it\\n" % os.getcwd())
        raise ModuleNotFoundError("No module named 'pandas'")
    here = os.path.dirname(here)
from mcp.server.fastmcp import FastMCP

app = FastMCP("quotes")

@app.tool()
def project_root() -> str:
    """Where the project was found."""
    return here

app.run()
'''


def _project_bound_bench(tmp_path):
    from test_container_support import VENV_PY, write

    bench = FakeBench(tmp_path, servers=("quotes",))
    write(bench.root / "pyproject.toml", "[project]\nname = 'workspace'\nversion = '0'\n")
    write(bench.root / "local_servers" / "quotes_server.py", PROJECT_BOUND_SERVER_PY)
    write(
        bench.root / "configs" / "mcp_servers" / "quotes.yaml",
        f"name: quotes\nparams:\n  command: {VENV_PY}\n  args:\n    - ${{local_servers_paths}}/quotes_server.py\n",
    )
    return bench


def test_inventory_starts_servers_from_a_task_like_workspace(tmp_path):
    """The probe output lives outside the benchmark tree (as /probe does in the probe container),
    yet a server that needs a working directory under it starts and lists its tool."""
    bench = _project_bound_bench(tmp_path)
    out = tmp_path / "probes"
    proc = bench.run("inventory", "--probe-output", str(out))
    report = json.loads((out / "inventory.json").read_text())
    assert proc.returncode == 0, (report, (out / "quotes.stderr.log").read_text())
    assert report["quotes"]["ok"] is True and report["quotes"]["tools"] == ["project_root"]
    # The workspace is where the agent phase would put a task's: dumps/<short>/SingleUserTurn-<task>/.
    workspace = bench.root / "dumps" / "cowork-probe" / "SingleUserTurn-demo-task" / "workspace"
    assert workspace.is_dir() and not (out / "workspace").exists()


def test_inventory_of_all_servers_uses_a_task_like_workspace_too(tmp_path):
    bench = _project_bound_bench(tmp_path)
    (bench.root / "configs" / "mcp_servers" / "broken.yaml").unlink()
    (bench.root / "configs" / "mcp_servers" / "b_notes_dup.yaml").unlink()
    out = tmp_path / "probes-all"
    proc = subprocess.run(
        [
            *bench.argv("inventory", "--probe-output", str(out))[:3],
            "--task_dir",
            "",
            "--phase",
            "inventory",
            "--probe-output",
            str(out),
        ],
        cwd=bench.root,
        env=bench.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads((out / "inventory.json").read_text())
    assert proc.returncode == 0, report
    assert report["quotes"]["ok"] is True and report["notes"]["ok"] is True
    assert (bench.root / "dumps" / "cowork-probe" / "SingleUserTurn-all-servers" / "workspace").is_dir()
