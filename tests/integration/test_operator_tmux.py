"""The operator's view for real: `run` on the demo inside tmux (rich progress read from the pane),
`status --json` against the ledger, and `stop` on a running demo task with verified cleanup.

The provider key (a stand-in that unlocks only the local meter) reaches the launcher through a
0600 file read by a wrapper script, so it is never in tmux's argv or the test process's env.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tmux_server import Tmux

from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.env import agent_started, prepare, read_json, read_rows, wait_for
from cowork_adapter.ops.stop import stop_command

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
PANE_COLS, PANE_ROWS = 150, 60
RUN_TIMEOUT_SEC = 1500


@pytest.fixture(scope="module")
def demo_env(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("operator") / "root", docker_host)
    yield env
    env.meter.stop()


def wrapper_script(env, args: list[str], where: Path) -> Path:
    """A script that exports the key from a 0600 file and execs the launcher (the key is not in argv)."""
    key_file = where / "key"
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(env.key)
    script = where / "launch.sh"
    script.write_text(
        "#!/bin/bash\n"
        f'export {env.key_env}="$(cat {shlex.quote(str(key_file))})"\n'
        f"{shlex.join(args)}\n"
        'echo "launcher exit $?"\n'
        "sleep 3600\n"
    )
    script.chmod(0o700)
    return script


def test_run_in_tmux_renders_rich_progress_and_status_agrees(demo_env, tmp_path):
    run_root = demo_env.run_root("tmux")
    args = demo_env.run_args("tmux", ["demo-csv-totals"], campaign="campaign-tmux.json")
    script = wrapper_script(demo_env, args, tmp_path)
    tmux = Tmux("cowork-op", scrollback=500)
    session = "run"
    try:
        tmux("new-session", "-d", "-s", session, "-x", str(PANE_COLS), "-y", str(PANE_ROWS), str(script))
        seen_live = ""
        deadline = time.monotonic() + RUN_TIMEOUT_SEC
        text = ""
        while time.monotonic() < deadline:
            text = tmux.pane(session)
            if "cowork-adapter run" in text and "0/1 done" in text and not seen_live:
                seen_live = text  # the table while the task was still running
            if "launcher exit" in text:
                break
            time.sleep(2)
        assert "launcher exit" in text, f"the run did not finish in time; pane:\n{text}"
        assert "launcher exit 0" in text, f"pane:\n{text}"
        # The rich table (box-drawn rows, not plain `[time] ...` lines) with the operator's fields.
        assert "cowork-adapter run" in text and "│" in text, text
        assert "1/1 done" in text, text
        for field in ("passed", "run spent", "campaign", "meter", "disk", "eta", "infrastructure failures"):
            assert field in text, f"{field} missing from the pane:\n{text}"
        assert "[20" not in text.split("cowork-adapter run")[-1], "plain lines were printed on a terminal"
        # The table uses the pane's width, not a COLUMNS inherited from the test's environment.
        assert any("disk" in line and line.count("reserve") == 2 for line in text.splitlines()), text
        assert demo_env.key not in text
    finally:
        tmux.kill()

    rows = read_rows(run_root)
    assert rows["demo-csv-totals"]["status"] == "passed"
    out = subprocess.run(
        [sys.executable, "-m", "cowork_adapter", "status", str(run_root), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    statuses = [row["status"] for row in rows.values()]
    assert status["progress"]["passed"] == statuses.count("passed") == 1
    assert status["progress"]["selected"] == len(rows) == 1
    assert status["progress"]["infra_failed"] == statuses.count("infra_failed")
    assert status["state"] == "finished" and status["cleanup_proven"] is True
    assert status["campaign_settlement"] == "recorded" and status["exit_code"] == 0
    assert status["launcher_alive"] is False


def test_stop_a_running_demo_task(demo_env):
    name = "stop"
    run_root = demo_env.run_root(name)
    proc = demo_env.launch(demo_env.run_args(name, ["demo-hang"], campaign="campaign-stop.json"), name)
    try:
        assert wait_for(lambda: agent_started(run_root), 600), "no agent container started"
        assert wait_for(lambda: (run_root / "monitor.json").is_file(), 120), "no monitor.json"
        code = stop_command(run_root, timeout=600)
        assert code == 0
        assert proc.wait(timeout=60) == 3
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=600)
    manifest = read_json(run_root / "run_manifest.json")
    monitor = read_json(run_root / "monitor.json")
    assert manifest["stop_reason"] == "signal_15"  # `stop` takes the SIGTERM path
    assert manifest["exit_code"] == 3 and manifest["finished_at"]
    assert monitor["finished"] is True
    assert label_is_empty(demo_env.docker_host, run_label(run_root))
    campaign = read_json(demo_env.root / "campaign-stop.json")
    assert campaign["active_run"] is None
    assert stop_command(run_root, timeout=5) == 0  # a second stop: the run already ended
