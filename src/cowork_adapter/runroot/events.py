"""The append-only events.jsonl writer and an incremental, torn-line tolerant reader.

One JSON object per line. Appends are validated against the typed model of their kind, written
with one O_APPEND write and fsynced. A write failure raises OSError: the caller reports
`cowork_diagnostic_write_failed` and carries on.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from ..schemas.events import EVENT_MODELS, _Event, parse_event
from ..schemas.record import RecordInvalid, convert
from ..vocab import EventKind


def utc_now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_ts(text: Any) -> float | None:
    """Seconds since the epoch of an event `ts`, or None when it is not a timestamp."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class EventLog:
    """events.jsonl of one run: `append()` for the writer, `read_new()` for a follower.

    One instance may do both; the reader keeps its own byte offset and never consumes a last
    line that has no newline yet (a write in progress or a writer that died mid-line).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.offset = 0
        self.skipped_lines = 0  # complete lines that were not JSON objects

    # ------------------------------------------------------------ writing

    def append(self, kind: EventKind | str, *, ts: str | None = None, **payload: Any) -> _Event:
        """Validate and append one event of `kind`; returns the typed event written."""
        model = EVENT_MODELS[EventKind(kind)]
        # Through convert, a missing or unknown field is a RecordInvalid like any bad value.
        event = convert(msgspec.to_builtins({"ts": ts or utc_now_iso(), **payload}), model)
        self.append_event(event)
        return event

    def append_event(self, event: _Event) -> None:
        line = event.to_line().encode("utf-8")
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            # A writer that died mid-line left a fragment: start on a fresh line so it stays alone.
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(f"short write to {self.path}: {written} of {len(line)} bytes")
            os.fsync(fd)
        finally:
            os.close(fd)

    # ------------------------------------------------------------ reading

    def read_new(self) -> list[dict[str, Any]]:
        """Records appended since the last call (decoded objects, in file order).

        A missing file reads as nothing new. Complete lines that are not JSON objects are
        skipped and counted in `skipped_lines`. A file shorter than the offset (replaced)
        is read again from the start.
        """
        try:
            with open(self.path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                end = fh.tell()
                if end < self.offset:
                    self.offset = 0
                fh.seek(self.offset)
                chunk = fh.read(end - self.offset)
        except FileNotFoundError:
            return []
        cut = chunk.rfind(b"\n")
        if cut < 0:
            return []
        complete = chunk[: cut + 1]
        self.offset += len(complete)
        records: list[dict[str, Any]] = []
        for raw in complete.split(b"\n"):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except (UnicodeDecodeError, ValueError):
                self.skipped_lines += 1
                continue
            if isinstance(value, dict):
                records.append(value)
            else:
                self.skipped_lines += 1
        return records

    def read_new_typed(self) -> list[_Event]:
        """Like read_new(), but typed; records that match no event model are skipped and counted."""
        events: list[_Event] = []
        for record in self.read_new():
            try:
                events.append(parse_event(record))
            except RecordInvalid:
                self.skipped_lines += 1
        return events


def read_all(path: Path | str) -> list[dict[str, Any]]:
    """Every complete record of an events.jsonl, untyped (for tests and demo checks)."""
    return EventLog(path).read_new()


def read_events(path: Path | str) -> tuple[list[_Event], int]:
    """The host's one reader of a whole events.jsonl: (typed events in file order, the number of
    complete lines that are not a valid event). A missing file reads as ([], 0)."""
    log = EventLog(path)
    events = log.read_new_typed()
    return events, log.skipped_lines
