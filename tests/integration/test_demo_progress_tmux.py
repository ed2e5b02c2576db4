"""The demo in a terminal (tmux) is never silent: a progress line within 10 s of starting, and a
line at least every 10 s until its verdict.

Runs `cowork-adapter demo --scenario pass` in a private tmux server on the test-bed daemon and reads
the pane: the first `[HH:MM:SS] demo ...` line must appear within 10 s of the start, and the
timestamps of consecutive lines must never be more than 10 s apart while the scenario runs.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
import time
from datetime import datetime
from itertools import pairwise

import pytest
from tmux_server import Tmux

from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import run_label

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
FIRST_LINE_SEC = 10.0
MAX_GAP_SEC = 10
DEMO_TIMEOUT_SEC = 1500
LINE = re.compile(r"^\[(\d\d:\d\d:\d\d)\] demo \d+m\d\ds: ")


def test_the_demo_says_what_runs_within_10_s_and_never_goes_silent(docker_host, tmp_path):
    root = tmp_path / "demo"
    command = [
        sys.executable,
        "-m",
        "cowork_adapter",
        "demo",
        "--run-root",
        str(root),
        "--docker-host",
        docker_host,
        "--scenario",
        "pass",
    ]
    script = tmp_path / "demo.sh"
    script.write_text("#!/bin/bash\n" + shlex.join(command) + '\necho "demo exit $?"\nsleep 3600\n')
    script.chmod(0o700)
    tmux = Tmux("cowork-demo", scrollback=5000)
    session = "demo"
    try:
        tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", str(script))
        tmux("set-option", "-t", session, "history-limit", "20000")
        started = time.monotonic()
        first_seen = None
        text = ""
        deadline = started + DEMO_TIMEOUT_SEC
        while time.monotonic() < deadline:
            text = tmux.pane(session)
            if first_seen is None and any(LINE.match(line) for line in text.splitlines()):
                first_seen = time.monotonic() - started
            if "demo exit" in text:
                break
            time.sleep(0.5 if first_seen is None else 5)
        assert first_seen is not None and first_seen <= FIRST_LINE_SEC, (first_seen, text)
        assert "demo exit 0" in text, text
    finally:
        tmux.kill()
    lines = [line for line in text.splitlines() if LINE.match(line)]
    assert any("scenario 1/1 pass" in line for line in lines), lines
    assert any("scenario pass done" in line for line in lines), lines
    stamps = [datetime.strptime(LINE.match(line).group(1), "%H:%M:%S") for line in lines]
    gaps = [(b - a).total_seconds() % 86400 for a, b in pairwise(stamps)]
    assert max(gaps) <= MAX_GAP_SEC, (max(gaps), lines)
    assert "demo verdict: PASS" in text, text
    assert label_is_empty(docker_host, run_label(root / "runs" / "pass"))
