"""Live progress while `run` works: one line per change when output is not a terminal."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from .schemas.monitor import Monitor

PLAIN_HEARTBEAT_SEC = 60.0


def summary_line(monitor: Monitor) -> str:
    """The run at a glance, in one line (also what `status` prints)."""
    p, s, m = monitor.progress, monitor.spending, monitor.meter
    parts = [
        f"{p.done}/{p.selected} done",
        f"{p.passed} passed",
        f"{p.failed} failed",
        f"{p.agent_failed} agent_failed",
        f"{p.infra_failed} infra_failed",
        f"{p.running} running",
    ]
    if s.run_spent_usd is not None:
        parts.append(f"run ${s.run_spent_usd:.2f}")
    if s.campaign_remaining_usd is not None:
        parts.append(f"campaign left ${s.campaign_remaining_usd:.2f}")
    if m.age_sec is not None:
        parts.append(f"meter {m.age_sec:.0f}s old")
    if monitor.disk.resource_free_bytes is not None:
        parts.append(f"disk {monitor.disk.resource_free_bytes / (1 << 30):.0f} GiB free")
    if monitor.stop_reason:
        parts.append(f"stopping: {monitor.stop_reason}")
    return " | ".join(parts)


@dataclass
class ProgressView:
    stream: TextIO
    _last: str = ""
    _last_at: float = field(default=0.0)

    @classmethod
    def for_stream(cls, stream: TextIO = sys.stdout) -> "ProgressView":
        return cls(stream)

    def update(self, monitor: Monitor) -> None:
        line = summary_line(monitor)
        # Only the counts decide whether a line is news; ages and free bytes change every poll.
        key = line.split(" | run ")[0] + (monitor.stop_reason or "")
        now = time.monotonic()
        if key != self._last or now - self._last_at >= PLAIN_HEARTBEAT_SEC:
            stamp = monitor.observed_at.strftime("%H:%M:%S")
            print(f"[{stamp}] {line}", file=self.stream, flush=True)
            self._last, self._last_at = key, now

    def close(self) -> None:
        pass
