"""events.jsonl: typed appends, incremental reads, torn lines, write failures."""

from __future__ import annotations

import json

import pytest

from cowork_adapter.runroot.events import EventLog, parse_ts, read_all
from cowork_adapter.schemas.events import EVENT_MODELS, MeterReading, TaskStarted, parse_event
from cowork_adapter.schemas.record import RecordInvalid
from cowork_adapter.vocab import EventKind


def test_every_event_kind_has_a_model():
    assert set(EVENT_MODELS) == set(EventKind)


def test_append_writes_one_typed_line_per_event(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    log.append(EventKind.TASK_STARTED, task="a", runner_id="1-x")
    log.append("meter_reading", usage=12.5, run_spent_usd=0.5)
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["kind"] == "task_started" and first["schema"] == "cowork_adapter.event.v1"
    assert parse_ts(first["ts"]) is not None
    assert isinstance(parse_event(json.loads(lines[1])), MeterReading)


def test_append_validates_payload(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    with pytest.raises(RecordInvalid):
        log.append(EventKind.TASK_STARTED, runner_id="no task")
    with pytest.raises(RecordInvalid):
        log.append(EventKind.TASK_STARTED, task="a", surprise=1)
    assert not (tmp_path / "events.jsonl").exists()


def test_read_new_is_incremental_and_waits_for_a_torn_last_line(tmp_path):
    path = tmp_path / "events.jsonl"
    writer, reader = EventLog(path), EventLog(path)
    assert reader.read_new() == []  # no file yet
    writer.append(EventKind.TASK_STARTED, task="a")
    assert [r["task"] for r in reader.read_new()] == ["a"]
    assert reader.read_new() == []
    with open(path, "ab") as fh:
        fh.write(b'{"schema": "cowork_adapter.event.v1", "kind": "task_sta')  # a write in progress
    assert reader.read_new() == []
    with open(path, "ab") as fh:
        fh.write(b'rted", "ts": "2026-01-01T00:00:00Z", "task": "b"}\n')
    assert [r.task for r in reader.read_new_typed()] == ["b"]


def test_append_after_a_dead_writers_fragment_starts_a_fresh_line(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"kind": "task_started", "ts": "x", "ta')  # the previous writer died mid-line
    log = EventLog(path)
    log.append(EventKind.TASK_STARTED, task="c")
    records = read_all(path)
    assert [r.get("task") for r in records] == ["c"]
    assert EventLog(path).read_new() and log.skipped_lines == 0
    reader = EventLog(path)
    reader.read_new()
    assert reader.skipped_lines == 1  # the fragment is its own, skipped line


def test_typed_reader_skips_unknown_kinds(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps({"kind": "mystery", "ts": "x"}) + "\n[1, 2]\n")
    reader = EventLog(path)
    assert reader.read_new_typed() == []
    assert reader.skipped_lines == 2


def test_write_failure_raises_oserror(tmp_path):
    log = EventLog(tmp_path / "missing-dir" / "events.jsonl")
    with pytest.raises(OSError):
        log.append(EventKind.TASK_STARTED, task="a")


def test_replaced_file_is_read_from_the_start(tmp_path):
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.append(EventKind.TASK_STARTED, task="a")
    log.append(EventKind.TASK_STARTED, task="b")
    assert len(log.read_new()) == 2
    path.write_text(TaskStarted(ts="2026-01-01T00:00:00Z", task="z").to_line())
    assert [r["task"] for r in log.read_new()] == ["z"]
