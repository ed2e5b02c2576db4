"""Refusals logged as bounded counts: one row per (caller, cause) per interval, not one per refusal.

Why: an agent holding its token can send thousands of requests a second that the gateway refuses
(over its share, over its limit, a bad shape...); one log row each made the request log grow without
bound, and the launcher rereads that log every 2 s. Here the first refusal of a caller (its task,
else its peer address) for one cause in an interval is written as it happens, and the rest of that
interval's are folded into one row carrying their `count`, written when the interval ends. At most
`max_keys` callers and causes are followed per interval; refusals beyond that are only counted
(`unlogged`, in the manifest's `unlogged_refusals`). So the log grows by at most 2 x max_keys rows
per interval, whatever the callers send.
"""

from __future__ import annotations

import threading

import msgspec

from ..schemas.gateway import GatewayRequest

INTERVAL_SEC = 2.0
MAX_KEYS = 64


class RefusalLog:
    def __init__(self, interval_sec: float = INTERVAL_SEC, max_keys: int = MAX_KEYS) -> None:
        self.interval_sec = interval_sec
        self.max_keys = max_keys
        self.unlogged = 0
        self._lock = threading.Lock()
        self._window: dict[tuple, list] = {}  # key -> [the first row, refusals after it]
        self._ends: float | None = None

    def note(self, row: GatewayRequest, now: float) -> GatewayRequest | None:
        """The row to write now (the first of its kind this interval), or None (counted for later)."""
        key = (row.task if row.task is not None else row.peer, row.refused, row.status)
        with self._lock:
            if self._ends is None:
                self._ends = now + self.interval_sec
            held = self._window.get(key)
            if held is not None:
                held[1] += 1
                return None
            if len(self._window) >= self.max_keys:
                self.unlogged += 1
                return None
            self._window[key] = [row, 0]
            return row

    def due(self, now: float, *, final: bool = False) -> list[GatewayRequest]:
        """The count rows of an interval that has ended (every one when `final`), and a new interval."""
        with self._lock:
            if self._ends is None or (now < self._ends and not final):
                return []
            window, self._window, self._ends = self._window, {}, None
        rows = []
        for first, more in window.values():
            if more:
                rows.append(
                    msgspec.structs.replace(
                        first,
                        at=now,
                        count=more,
                        latency_ms=0.0,
                        error=f"{more} more refusals like the last in the interval",
                    )
                )
        return rows
