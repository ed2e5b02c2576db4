"""The stub engine against the REAL mcp-proxy and a real stdio MCP server (host only, no Docker).

The stub opens a fresh MCP session for every tool call, so a counter reading 3 after three
increments proves mcp-proxy kept one stdio session alive across separate HTTP sessions.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from test_stub_engine import FAKE_KEY, StubProcess, base_settings, seed  # noqa: F401 (fixture)

MCP_PROXY = Path(sys.executable).with_name("mcp-proxy")

COUNTER_SERVER = textwrap.dedent(
    """
    from mcp.server.fastmcp import FastMCP

    app = FastMCP("counter")
    state = {"value": 0}


    @app.tool()
    def increment() -> str:
        "Add one to the counter held by this process."
        state["value"] += 1
        return str(state["value"])


    @app.tool()
    def get() -> str:
        "The counter's value."
        return str(state["value"])


    @app.tool()
    def fail() -> str:
        "Always raises, to exercise an MCP error result."
        raise RuntimeError("counter refuses")


    if __name__ == "__main__":
        app.run("stdio")
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def proxy(tmp_path):
    """mcp-proxy serving the counter at /servers/counter/mcp; yields the base URL."""
    if not MCP_PROXY.exists():
        pytest.fail(f"mcp-proxy is not installed next to {sys.executable} (test extras)")
    script = tmp_path / "counter_server.py"
    script.write_text(COUNTER_SERVER)
    config = tmp_path / "mcp_proxy.json"
    config.write_text(
        json.dumps({"mcpServers": {"counter": {"command": sys.executable, "args": [str(script)], "env": {}}}})
    )
    port = free_port()
    with open(tmp_path / "mcp_proxy.log", "wb") as log:  # the child has its own copy of the descriptor
        proc = subprocess.Popen(
            [
                str(MCP_PROXY),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--stateless",
                "--pass-environment",
                "--named-server-config",
                str(config),
            ],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as resp:
                    json.loads(resp.read())
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("mcp-proxy did not come up:\n" + (tmp_path / "mcp_proxy.log").read_text())
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


def test_counter_state_persists_through_the_proxy_across_fresh_sessions(seed, proxy, tmp_path):  # noqa: F811
    steps = [{"server": "counter", "tool": "increment", "arguments": {}}] * 3
    steps += [
        {"server": "counter", "tool": "fail", "arguments": {}},
        {"server": "counter", "tool": "get", "arguments": {}},
    ]
    settings = base_settings(
        MCP_ENABLED=True,
        MCP_TOOL_TIMEOUT_SEC=30,
        MCP_SERVERS=[
            {
                "id": "counter",
                "name": "counter",
                "enabled": True,
                "transport": "streamable_http",
                "url": f"{proxy}/servers/counter/mcp",
            }
        ],
        STUB_EXTRA_PLANS={"count3": {"steps": steps, "ending": "finish", "final_answer": "3"}},
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    stub = StubProcess(seed, tmp_path / "stub", settings)
    try:
        stub.start()
        assert stub.wait_ready()["supervisor_ready"], stub.log()
        task = stub.submit(
            "Count please. [demo-policy: count3]", workspace_root=str(workspace), memory_mode="empty", timeout_sec=120
        )
        view = stub.settled(task, timeout=90)
    finally:
        stub.stop()

    assert (view["status"], view["reason_code"]) == ("completed", "final_message")
    assert view["outcome_axes"]["execution"]["status"] == "ok"
    assert view["final_answer"] == "3" and view["artifact_status"] == "ready_no_changes"

    tools = [r for r in stub.log_rows("tools") if r["task_id"] == task]
    assert [r["tool"] for r in tools] == ["mcp_counter__increment"] * 3 + ["mcp_counter__fail", "mcp_counter__get"]
    assert [r["result_preview"] for r in tools[:3]] == ["1", "2", "3"]
    assert tools[3]["is_error"] is True and "counter refuses" in tools[3]["result_preview"]
    assert tools[4]["result_preview"] == "3" and tools[4]["is_error"] is False

    usage = [r for r in stub.log_rows("events") if r["type"] == "llm_usage" and r["task_id"] == task]
    assert len(usage) == 6 and all(r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 for r in usage)
    assert all(r["cost_known"] is True and r["cost_estimated"] is False for r in usage)

    record = json.loads((stub.data / "task_results" / f"{task}.json").read_text())
    assert record["status"] == "completed" and record["total_rounds"] == 6
    assert record["cost_final"] is True and record["accounted_upper_bound_usd"] == pytest.approx(0.006)
    assert record["prompt_tokens"] == sum(r["prompt_tokens"] for r in usage)
    assert FAKE_KEY not in json.dumps(record)
