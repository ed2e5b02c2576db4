"""A closed terminal never ends a run (run/signals.py): the launcher's SIGHUP handler keeps the process
alive and sends its output to the run root from then on.

The child is a real session leader on a real pseudo-terminal (pty.fork); the test closes the terminal's
master side, so the kernel itself sends the SIGHUP a closed SSH session or terminal window sends."""

from __future__ import annotations

import os
import pty
import signal
import sys
import time
from pathlib import Path

CHILD = """
import sys, time
from pathlib import Path
from cowork_adapter.run.signals import LAUNCHER_SIGNALS
LAUNCHER_SIGNALS.install(Path(sys.argv[1]))
print("ready", flush=True)
deadline = time.monotonic() + 60
while LAUNCHER_SIGNALS.hangups == 0 and time.monotonic() < deadline:
    time.sleep(0.05)
print(f"after the hangup: {LAUNCHER_SIGNALS.hangups}", flush=True)
print("stderr too", file=sys.stderr, flush=True)
"""


def test_a_closed_terminal_leaves_the_launcher_running_with_its_output_in_the_run_root(tmp_path: Path) -> None:
    output = tmp_path / "launcher-output.log"
    pid, master = pty.fork()
    if pid == 0:  # the child: a session leader whose controlling terminal is the pty
        try:
            os.execv(sys.executable, [sys.executable, "-c", CHILD, str(output)])
        finally:
            os._exit(127)
    seen = b""
    deadline = time.monotonic() + 60
    while b"ready" not in seen and time.monotonic() < deadline:
        seen += os.read(master, 1024)
    assert b"ready" in seen
    os.close(master)  # the terminal closes: the kernel sends SIGHUP to the session's controlling process
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the child ended by {status!r}"
    text = output.read_text()
    assert "terminal closed (SIGHUP)" in text
    assert "after the hangup: 1" in text and "stderr too" in text


def test_without_the_handler_the_same_hangup_kills_the_process(tmp_path: Path) -> None:
    """The control: the same child without install() dies of the same SIGHUP (the test can fail)."""
    pid, master = pty.fork()
    if pid == 0:
        try:
            os.execv(sys.executable, [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"])
        finally:
            os._exit(127)
    seen = b""
    deadline = time.monotonic() + 60
    while b"ready" not in seen and time.monotonic() < deadline:
        seen += os.read(master, 1024)
    os.close(master)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGHUP
