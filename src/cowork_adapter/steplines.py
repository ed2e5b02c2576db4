"""Plain timestamped step lines for a long step (an image build): one line when the step changes and
one at least every `interval` seconds while it lasts, so a person never waits in silence.

    [12:00:05] building cowork-ouroboros:abc: Step 4/15 : RUN /opt/install-venv.sh (0m40s in this step)
"""

from __future__ import annotations

import sys
import threading
import time
from datetime import datetime, timezone
from typing import TextIO

STEP_LINE_SEC = 10.0


class StepLines:
    def __init__(self, what: str, stream: TextIO | None = None, interval: float = STEP_LINE_SEC) -> None:
        self.what = what
        self.stream = stream or sys.stderr
        self.interval = interval
        self.step = "starting"
        self.since = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _say(self) -> None:
        with self._lock:
            step, since = self.step, self.since
        seconds = int(time.monotonic() - since)
        stamp = datetime.now(timezone.utc).strftime("%H:%M:%S")
        try:
            print(f"[{stamp}] {self.what}: {step} ({seconds // 60}m{seconds % 60:02d}s in this step)",
                  file=self.stream, flush=True)
        except (OSError, ValueError):
            pass  # a closed terminal never stops the work

    def set(self, step: str) -> None:
        step = " ".join(step.split())
        with self._lock:
            self.step = step if len(step) <= 120 else step[:117] + "..."
            self.since = time.monotonic()
        self._say()

    def __enter__(self) -> "StepLines":
        self._say()

        def beat() -> None:
            while not self._stop.wait(self.interval):
                self._say()

        self._thread = threading.Thread(target=beat, name="step-lines", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 1)


__all__ = ["StepLines", "STEP_LINE_SEC"]
