"""The demo's progress: a plain timestamped line on stderr at every step and at least every few
seconds while one runs, so a person watching (or a log) always sees what runs now.

    [12:00:05] demo 0m05s: scenario 3/9 meter-outage, 0m41s in; 28 checks so far (28 passed)

Plain lines on a terminal too: they survive tmux, pipes and `tee` alike, and the verdict table at
the end is still the summary.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

HEARTBEAT_SEC = 5.0  # well inside the 10 s a watcher may wait for a line


def _duration(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class DemoHeartbeat:
    """What the demo does now, said on every change and every `interval` seconds in between."""

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        interval: float = HEARTBEAT_SEC,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.interval = interval
        self.clock = clock
        self.started = clock()
        self.step = "starting"
        self.step_started = self.started
        self.passed = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def line(self) -> str:
        now = self.clock()
        with self._lock:
            step, since, passed, failed = self.step, self.step_started, self.passed, self.failed
        stamp = datetime.now(UTC).strftime("%H:%M:%S")
        checks = passed + failed
        tally = f"{checks} checks so far ({passed} passed" + (f", {failed} FAILED)" if failed else ")")
        return f"[{stamp}] demo {_duration(now - self.started)}: {step}, {_duration(now - since)} in; {tally}"

    def _say(self) -> None:
        try:
            print(self.line(), file=self.stream, flush=True)
        except (OSError, ValueError):
            pass  # a closed terminal never stops the demo

    def _set(self, step: str) -> None:
        with self._lock:
            self.step, self.step_started = step, self.clock()
        self._say()

    def preparing(self) -> None:
        self._set("preparing the demo benchmark, seed, images and meter stand-in")

    def scenario(self, index: int, name: str) -> None:
        self._set(f"scenario {index}/{self.total} {name}")

    def scenario_done(self, name: str, passed: int, failed: int) -> None:
        with self._lock:
            self.passed += passed
            self.failed += failed
        self._set(f"scenario {name} done ({passed} passed" + (f", {failed} FAILED)" if failed else ")"))

    def start(self) -> DemoHeartbeat:
        self._say()

        def beat() -> None:
            while not self._stop.wait(self.interval):
                self._say()

        self._thread = threading.Thread(target=beat, name="demo-heartbeat", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 1)


__all__ = ["DemoHeartbeat", "HEARTBEAT_SEC"]
