"""SIGINT/SIGTERM for the launcher outside supervision.

Before the runner starts (preflight done, image build, selection) a signal ends the invocation
cleanly: it raises StopSignal, and the manifest is finalised as stopped. During cleanup and
settlement a signal must not interrupt custody: it is only recorded. The supervisor installs its
own handlers while the runner lives and restores these afterwards.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator

HANDLED = (signal.SIGINT, signal.SIGTERM)


class StopSignal(Exception):
    """A signal asked the launcher to stop before the runner started."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal_{signum}")
        self.cause = f"signal_{signum}"


class LauncherSignals:
    def __init__(self) -> None:
        self.received: list[str] = []
        self._critical = 0
        self._previous: dict[int, object] = {}

    def _handler(self, signum: int, _frame) -> None:
        self.received.append(f"signal_{signum}")
        if not self._critical:
            raise StopSignal(signum)

    def install(self) -> None:
        self._previous = {s: signal.signal(s, self._handler) for s in HANDLED}

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @contextmanager
    def critical(self) -> Iterator[None]:
        """Signals inside are recorded, never raised: cleanup and settlement always finish."""
        self._critical += 1
        try:
            yield
        finally:
            self._critical -= 1


LAUNCHER_SIGNALS = LauncherSignals()
