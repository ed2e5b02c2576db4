"""SIGINT/SIGTERM/SIGHUP for the launcher outside supervision.

Before the runner starts (preflight done, image build, selection) SIGINT or SIGTERM ends the
invocation cleanly: it raises StopSignal, and the manifest is finalised as stopped. During cleanup
and settlement a signal must not interrupt custody: it is only recorded. The supervisor installs its
own SIGINT/SIGTERM handlers while the runner lives and restores these afterwards.

SIGHUP (the operator's terminal or SSH session closed) never stops a run: a paid campaign must not
end because a laptop lid closed. From the hangup on, the launcher's stdout and stderr go to
`<run_root>/launcher-output.log` (a closed terminal would fail every later write), and the run goes on
to its end; `cowork-adapter status RUN_ROOT` shows it, `cowork-adapter stop RUN_ROOT` stops it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
        self._previous: dict[int, Any] = {}  # what signal.signal returned: a handler, an int or None
        self._output: Path | None = None
        self.hangups = 0

    def _handler(self, signum: int, _frame) -> None:
        self.received.append(f"signal_{signum}")
        if not self._critical:
            raise StopSignal(signum)

    def _hangup(self, _signum: int, _frame) -> None:
        """The terminal closed: keep running, and keep saying what happens, in the run root."""
        self.hangups += 1
        if self.hangups > 1 or self._output is None:
            return
        try:
            fd = os.open(self._output, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            os.write(
                fd,
                (
                    f"[{time.strftime('%H:%M:%S')}] the launcher's terminal closed (SIGHUP); the run goes "
                    "on, and its output continues here\n"
                ).encode(),
            )
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        except OSError:
            pass  # nowhere to write: the run still goes on, and its files say what happened

    def install(self, output: Path | None = None) -> None:
        """`output`: where stdout and stderr go once the terminal closes (RunRoot.launcher_output)."""
        self._output = output
        self._previous = {s: signal.signal(s, self._handler) for s in HANDLED}
        # Kept past restore(): the manifest's last write after the run must not die of a hangup either.
        signal.signal(signal.SIGHUP, self._hangup)

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
