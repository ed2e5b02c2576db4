"""Plain timestamped step lines for a long step (an image build): one line when the step changes and
one at least every `interval` seconds while it lasts, so a person never waits in silence.

    [12:00:05] building cowork-ouroboros:abc: Step 4/15 : RUN /opt/install-venv.sh (0m40s in this step)

Run as a module (`python3 -m cowork_adapter.image.steplines --what W --log FILE --step RE -- CMD...`) it
wraps a command: the command's whole output goes to FILE, and the lines on stderr follow the lines
matching --step. The test bed's shell scripts build through it (testbed/steps.sh) before any venv
exists, so this module uses the standard library only.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from typing import TextIO

STEP_LINE_SEC = 10.0


class StepLines:
    def __init__(
        self, what: str, stream: TextIO | None = None, interval: float = STEP_LINE_SEC, first: str = "starting"
    ) -> None:
        self.what = what
        self.stream = stream or sys.stderr
        self.interval = interval
        self.step = first
        self.detail = ""
        self.since = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _say(self) -> None:
        with self._lock:
            step, detail, since = self.step, self.detail, self.since
        seconds = int(time.monotonic() - since)
        stamp = datetime.now(UTC).strftime("%H:%M:%S")
        now = f" - {detail}" if detail else ""
        try:
            print(
                f"[{stamp}] {self.what}: {step}{now} ({seconds // 60}m{seconds % 60:02d}s in this step)",
                file=self.stream,
                flush=True,
            )
        except (OSError, ValueError):
            pass  # a closed terminal never stops the work

    def set(self, step: str) -> None:
        with self._lock:
            self.step = _short(step)
            self.detail = ""
            self.since = time.monotonic()
        self._say()

    def note(self, detail: str) -> None:
        """What the step does right now (debootstrap's package of the moment): shown by the next beat,
        never a line of its own, so a step of a thousand small lines stays a line every interval."""
        with self._lock:
            self.detail = _short(detail)

    def __enter__(self) -> StepLines:
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


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 120 else text[:117] + "..."


def run_logged(
    what: str,
    argv: list[str],
    log_path: str,
    step: re.Pattern[str],
    detail: re.Pattern[str] | None = None,
    stream: TextIO | None = None,
    interval: float = STEP_LINE_SEC,
    first: str = "starting",
) -> int:
    """Run argv with its output (stdout and stderr) appended to log_path; a line matching `step` starts a
    step (a line at once), one matching `detail` only changes what the beats show. Returns the
    command's exit code (128 + the signal for a command killed by one)."""
    with open(log_path, "ab") as log, StepLines(what, stream, interval, first) as lines:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for raw in proc.stdout:
            log.write(raw)
            log.flush()
            # A progress bar rewrites its line with carriage returns: its last state is the line.
            text = raw.decode("utf-8", "replace").rstrip("\r\n").rsplit("\r", 1)[-1]
            if step.search(text):
                lines.set(text)
            elif detail is not None and detail.search(text):
                lines.note(text)
        code = proc.wait()
    return code if code >= 0 else 128 - code


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m cowork_adapter.image.steplines",
        description="Run a long command with its output in a log and step lines on stderr.",
    )
    parser.add_argument("--what", required=True, help="what is being done, the start of every line")
    parser.add_argument("--log", required=True, help="the file the command's whole output is appended to")
    parser.add_argument("--step", required=True, help="a regular expression: a matching output line starts a step")
    parser.add_argument("--detail", help="a regular expression: a matching line is shown by the next beat")
    parser.add_argument("--first", default="starting", help="the step shown before any output line matches")
    parser.add_argument("--interval", type=float, default=STEP_LINE_SEC, help="seconds between beats (default 10)")
    parser.add_argument("command", nargs="+", help="the command, after --")
    ns = parser.parse_args(args)
    try:
        return run_logged(
            ns.what,
            ns.command,
            ns.log,
            re.compile(ns.step),
            re.compile(ns.detail) if ns.detail else None,
            interval=ns.interval,
            first=ns.first,
        )
    except (OSError, re.error) as exc:
        print(f"steplines: {ns.what}: {exc}", file=sys.stderr)
        return 127


__all__ = ["StepLines", "STEP_LINE_SEC", "run_logged"]

if __name__ == "__main__":
    sys.exit(main())
