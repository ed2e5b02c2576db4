"""Engine `upstream:<entry>`: the benchmark's own entry run unchanged as a child process.

The key reaches only that child (as MODEL_API_KEY and LLM_API_KEY); its output streams through,
scrubbed; SIGTERM is forwarded to its process group.

The benchmark's two entries differ: `main_strands.py` takes `--phase agent` and stops after the
agent; `main.py` (CAMEL) has no `--phase` (argparse refuses it) and grades in the same process.
In the agent container that grading sees no evaluation/ folder and no groundtruth, so its
verdict is not the official one: its `Pass:` line is made unmatchable for the runner's grep and
its eval_res.json is set aside, so the eval phase grades the dump once, officially.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time

from . import protocol

# Where an agent-container verdict of an entry without --phase is kept (evidence, never graded).
AGENT_VERDICT_NAME = "upstream_agent_eval_res.json"
_PHASE_OPTION = re.compile(r"""["']--phase["']""")
_PASS_WORDS = ("Pass:", "pass:", "PASS:")


def accepts_phase(entry_path: str) -> bool:
    """True when the entry declares a `--phase` option (a string literal in its source); an
    unreadable entry counts as not taking it (the child then reports its own failure)."""
    try:
        with open(entry_path, encoding="utf-8", errors="replace") as fh:
            return _PHASE_OPTION.search(fh.read()) is not None
    except OSError:
        return False


def child_argv(bench_python: str, entry: str, task_dir: str, max_steps: int, phase_flag: bool = True) -> list:
    argv = [bench_python, "-u", os.path.join(os.getcwd(), entry), "--task_dir", task_dir, "--max_steps", str(max_steps)]
    return argv + (["--phase", "agent"] if phase_flag else [])


def agent_phase_line(line: str) -> str:
    """The child's line for the runner's log: `Status:` kept (the runner's status), any `Pass:`
    made unmatchable (no verdict is official before the eval phase)."""
    for word in _PASS_WORDS:
        line = line.replace(word, word[:-1] + " =")
    return line


def set_aside_agent_verdict(task_root: str) -> bool:
    """Move an eval_res.json the agent phase wrote to AGENT_VERDICT_NAME; True when one was moved."""
    src = os.path.join(task_root, protocol.EVAL_RES_NAME)
    if not os.path.lexists(src):
        return False
    os.replace(src, os.path.join(task_root, AGENT_VERDICT_NAME))
    return True


def run_child(
    bench_python: str,
    entry: str,
    *,
    task_dir: str,
    max_steps: int,
    key: str | None,
    terms: list,
    out,
    deadline: float,
    phase_flag: bool = True,
) -> int:
    """Run the upstream entry to its end (or the deadline); returns its exit code."""
    env = dict(os.environ)
    if key:
        env["MODEL_API_KEY"] = key
        env["LLM_API_KEY"] = key
    proc = subprocess.Popen(
        child_argv(bench_python, entry, task_dir, max_steps, phase_flag),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def forward(signum, frame):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    previous = signal.signal(signal.SIGTERM, forward)

    def pump():
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            line = agent_phase_line(protocol.scrub(raw.decode("utf-8", "replace"), terms))
            out.write(line)
            out.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        while proc.poll() is None:
            if time.monotonic() >= deadline:
                forward(signal.SIGTERM, None)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.2)
    finally:
        signal.signal(signal.SIGTERM, previous)
        reader.join(timeout=5)
    return proc.returncode
