"""What the entrypoint does for a real 6.97-era Ouroboros server: offline pip at start, loopback
without proxies, readiness with a supervisor error, a git-root workspace, and refusals that say why."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from cowork_adapter.container import ouroboros

PATHS = SimpleNamespace(app_root="/a", seed_dir="/s", data_dir="/d", runtime_dir="/r")


def test_server_env_keeps_pip_offline_and_loopback_unproxied():
    env = ouroboros.server_env(
        {"NO_PROXY": "mirror.local", "HTTP_PROXY": "http://p:3128", "OUROBOROS_X": "1"}, paths=PATHS, port=8765
    )
    assert env["PIP_NO_INDEX"] == "1" and env["PIP_DISABLE_PIP_VERSION_CHECK"] == "1"
    assert env["NO_PROXY"] == "mirror.local,127.0.0.1,localhost" and env["no_proxy"] == "127.0.0.1,localhost"
    assert "OUROBOROS_X" not in env and env["HTTP_PROXY"] == "http://p:3128"


def test_ready_needs_no_supervisor_error():
    assert ouroboros.server_ready({"supervisor_ready": True, "workers_total": 2, "supervisor_error": None})
    assert not ouroboros.server_ready({"supervisor_ready": True, "workers_total": 2, "supervisor_error": "boom"})


class _State:
    """A loopback HTTP server answering GET /api/state and POST /api/tasks with canned bodies."""

    def __init__(self, state: dict, task_status: int = 400, task_body: dict | None = None):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                return

            def _send(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                outer.gets += 1
                self._send(200, outer.state)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._send(task_status, task_body or {})

        self.state, self.gets = state, 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_reported_supervisor_error_fails_the_start_at_once():
    fake = _State({"supervisor_ready": True, "workers_total": 0, "supervisor_error": "init failed: no git"})
    try:
        with pytest.raises(ouroboros.EngineFailure) as err:
            ouroboros.wait_server(None, fake.port, time.monotonic() + 30)
        assert err.value.reason == "server_start_failed" and "no git" in str(err.value)
        assert fake.gets == 1  # at once: on the first reading of the state, not at the 30 s deadline
    finally:
        fake.close()


def test_a_refused_task_names_the_servers_reason():
    fake = _State({}, 400, {"error": "workspace_root must be a git worktree root"})
    try:
        with pytest.raises(ouroboros.EngineFailure) as err:
            ouroboros.submit(fake.port, {"description": "x"})
        assert err.value.reason == "task_create_failed" and "git worktree root" in str(err.value)
    finally:
        fake.close()


def test_workspace_becomes_its_own_git_root_and_the_repository_goes_away(tmp_path):
    (tmp_path / "sales.csv").write_text("a,b\n")
    assert ouroboros.ensure_worktree_root(str(tmp_path)) is True
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert top.stdout.strip() == str(tmp_path.resolve())
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked == ["sales.csv"]
    assert ouroboros.ensure_worktree_root(str(tmp_path)) is False  # already a repository: left alone
    ouroboros.remove_worktree_git(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sales.csv"]


def test_unpriced_rows_do_not_wait_for_a_finality_that_never_comes():
    from cowork_adapter.container.outcome import cost_unsettled

    unpriced = {"status": "completed", "cost_final": False, "non_final_rows": 6, "unknown_unmetered": 6}
    pending = {"status": "completed", "cost_final": False, "non_final_rows": 6, "unknown_unmetered": 2}
    assert cost_unsettled(unpriced) is False
    assert cost_unsettled(pending) is True
    assert cost_unsettled({"status": "completed", "cost_final": False}) is True


def test_release_697_cost_fields_reach_the_summary():
    import inspect

    from cowork_adapter.container.outcome import apply_result, new_summary

    params = inspect.signature(new_summary).parameters
    summary = new_summary(**{name: None for name in params}) if params else new_summary()
    apply_result(summary, {"status": "completed", "cost_usd": 0.125, "cost_usd_with_children": 0.25})
    assert summary["cost_usd"] == 0.125 and summary["cost_usd_with_children"] == 0.25
