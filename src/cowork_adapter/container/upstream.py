"""Engine `upstream:<entry>`: the benchmark's own entry run unchanged as a child process.

The key reaches only that child (as MODEL_API_KEY and LLM_API_KEY); its output streams through,
scrubbed; SIGTERM is forwarded to its process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Optional

from . import protocol


def child_argv(bench_python: str, entry: str, task_dir: str, max_steps: int) -> list:
    return [bench_python, "-u", os.path.join(os.getcwd(), entry), "--task_dir", task_dir,
            "--max_steps", str(max_steps), "--phase", "agent"]


def run_child(bench_python: str, entry: str, *, task_dir: str, max_steps: int, key: Optional[str],
              terms: list, out, deadline: float) -> int:
    """Run the upstream entry to its end (or the deadline); returns its exit code."""
    env = dict(os.environ)
    if key:
        env["MODEL_API_KEY"] = key
        env["LLM_API_KEY"] = key
    proc = subprocess.Popen(child_argv(bench_python, entry, task_dir, max_steps), env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)

    def forward(signum, frame):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    previous = signal.signal(signal.SIGTERM, forward)

    def pump():
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            line = protocol.scrub(raw.decode("utf-8", "replace"), terms)
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
