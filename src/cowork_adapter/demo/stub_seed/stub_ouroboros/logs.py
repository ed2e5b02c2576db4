"""The five JSONL logs under `<data>/logs/` (never rotated: the benchmark sentinel asks for that)."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from pathlib import Path

from .admission import iso_utc

LOG_NAMES = ("events", "tools", "progress", "chat", "supervisor")


class JsonlLogs:
    def __init__(self, logs_dir: Path):
        self._dir = logs_dir
        self._dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def append(self, name: str, row: dict) -> dict:
        """Append one row (stamped with `ts` first) to `<name>.jsonl`; returns the row."""
        if name not in LOG_NAMES:
            raise ValueError(f"unknown log {name!r}")
        stamped = {"ts": iso_utc(datetime.now(timezone.utc)), **row}
        line = json.dumps(stamped, ensure_ascii=False, sort_keys=False) + "\n"
        with self._lock, open(self._dir / f"{name}.jsonl", "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
        return stamped
