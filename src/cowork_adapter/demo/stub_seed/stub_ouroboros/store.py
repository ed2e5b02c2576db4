"""Durable task records: `<data>/task_results/<id>.json`, replaced atomically on every write.

Memory holds the authority; the file mirrors it. Status writes are monotonic and a terminal
status is sticky (a write that would change it is dropped whole).
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path

from .admission import iso_utc
from .outcomes import accepts_write


def write_json_atomic(path: Path, value: dict) -> None:
    """Write a dot-tmp sibling then rename, so readers never see a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(value, handle, ensure_ascii=False, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class ResultStore:
    def __init__(self, results_dir: Path):
        self._dir = results_dir
        self._dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._records: dict[str, dict] = {}

    def path(self, task_id: str) -> Path:
        return self._dir / f"{task_id}.json"

    def exists(self, task_id: str) -> bool:
        with self._lock:
            return task_id in self._records or self.path(task_id).exists()

    def create(self, record: dict) -> bool:
        """Store a new record; False when the id is already taken (memory or disk)."""
        task_id = record["task_id"]
        with self._lock:
            if self.exists(task_id):
                return False
            self._records[task_id] = dict(record)
            write_json_atomic(self.path(task_id), self._records[task_id])
            return True

    def get(self, task_id: str) -> dict | None:
        with self._lock:
            if task_id in self._records:
                return json.loads(json.dumps(self._records[task_id]))
        try:  # a record from an earlier process of the same data root
            return json.loads(self.path(task_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def update(self, task_id: str, changes: dict) -> bool:
        """Apply changes unless they would move the status backwards or off a terminal one."""
        with self._lock:
            current = self._records.get(task_id)
            if current is None:
                return False
            if not accepts_write(current.get("status"), changes.get("status")):
                return False
            current.update(changes)
            current["updated_at"] = iso_utc(datetime.now(timezone.utc))
            current["ts"] = current["updated_at"]
            write_json_atomic(self.path(task_id), current)
            return True

    def records(self) -> list[dict]:
        with self._lock:
            return [dict(r) for r in self._records.values()]
