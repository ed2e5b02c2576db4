"""Live progress: ETA arithmetic, the rows both views share, plain lines off a terminal, rich on one."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest

from cowork_adapter.run import live
from cowork_adapter.run.live import ProgressView, eta_seconds, format_duration, progress_rows, summary_line
from cowork_adapter.schemas.monitor import Disk, MeterState, Monitor, Progress, Spending

GIB = 1 << 30


def monitor(done=2, selected=5, passed=1, stop=None, finished=False, **progress) -> Monitor:
    return Monitor(
        observed_at=datetime(2026, 3, 1, 12, 30, 5, tzinfo=UTC),
        launcher_pid=123,
        finished=finished,
        progress=Progress(
            selected=selected, done=done, passed=passed, failed=1, agent_failed=0, infra_failed=0, running=1, **progress
        ),
        spending=Spending(
            campaign_spent_usd=12.5,
            campaign_remaining_usd=37.5,
            run_spent_usd=3.25,
            reserve_usd=5.0,
            run_budget_usd=20.0,
        ),
        meter=MeterState(blindness_sec=30.0, age_sec=7.0, last_usage=8.0),
        disk=Disk(
            resource_free_bytes=80 * GIB, root_free_bytes=70 * GIB, resource_reserve_bytes=GIB, root_reserve_bytes=GIB
        ),
        stop_reason=stop,
        stop_causes=[stop] if stop else [],
    )


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    "done,selected,elapsed,want",
    [
        (0, 5, 100.0, None),  # no pace before the first task
        (1, 5, 100.0, 400.0),
        (5, 5, 100.0, 0.0),
        (2, 0, 10.0, None),
        (3, 4, 0.0, None),
    ],
)
def test_eta(done, selected, elapsed, want):
    assert eta_seconds(done, selected, elapsed) == want


@pytest.mark.parametrize("seconds,text", [(None, "—"), (5, "5s"), (65, "1m05s"), (3725, "1h02m")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_rows_carry_every_field_the_operator_needs():
    rows = dict(progress_rows(monitor(), elapsed_sec=120.0))
    assert rows["tasks"].startswith("2/5 done, 1 running")
    assert rows["passed"] == "1"
    assert rows["run spent"] == "$3.25 of $20.00 budget ($16.75 left)"
    assert rows["campaign"] == "$12.50 spent, $37.50 remaining (reserve $5.00)"
    assert rows["meter"] == "7s old (bound 30s)"
    assert "resource 80.0 GiB free" in rows["disk"] and "/ 70.0 GiB free" in rows["disk"]
    assert rows["elapsed"] == "2m00s" and rows["eta"] == "3m00s"  # 60 s a task, 3 to go
    assert "stopping" not in rows


def test_rows_show_the_stop_and_a_finished_run():
    rows = dict(progress_rows(monitor(stop="signal_15", finished=True), elapsed_sec=60.0))
    assert rows["stopped"] == "signal_15" and rows["eta"] == "finished" and "stopping" not in rows
    live_rows = dict(progress_rows(monitor(stop="signal_15", finished=False), elapsed_sec=60.0))
    assert live_rows["stopping"] == "signal_15" and "stopped" not in live_rows


def test_plain_lines_off_a_terminal_are_timestamped_and_only_on_change(monkeypatch):
    stream = io.StringIO()
    view = ProgressView.for_stream(stream)
    assert view.rich is False
    view.update(monitor())
    view.update(monitor())  # nothing new: no line
    view.update(monitor(done=3, passed=2))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[2026-03-01T12:30:05Z] 2/5 done | 1 passed")
    assert "run $3.25" in lines[0] and "| eta " in lines[0]
    assert lines[1].startswith("[2026-03-01T12:30:05Z] 3/5 done | 2 passed")


def test_plain_heartbeat(monkeypatch):
    stream = io.StringIO()
    view = ProgressView.for_stream(stream)
    monkeypatch.setattr(live, "PLAIN_HEARTBEAT_SEC", 0.0)
    view.update(monitor())
    view.update(monitor())
    assert len(stream.getvalue().splitlines()) == 2


def test_dumb_terminal_gets_plain_lines(monkeypatch):
    monkeypatch.setenv("TERM", "dumb")
    assert ProgressView.for_stream(FakeTTY()).rich is False


def test_rich_table_on_a_terminal(monkeypatch):
    monkeypatch.setenv("TERM", "xterm-256color")
    stream = FakeTTY()
    view = ProgressView.for_stream(stream)
    assert view.rich is True
    view.update(monitor(done=3, passed=2))
    view.update(monitor(done=4, passed=3, stop="signal_15"))
    view.close()
    out = stream.getvalue()
    assert "\x1b[" in out  # drawn with terminal control sequences, in place
    for text in (
        "cowork-adapter run",
        "4/5 done",
        "passed",
        "$3.25 of $20.00",
        "7s old",
        "80.0 GiB",
        "signal_15",
        "eta",
    ):
        assert text in out, text


def test_a_broken_rich_display_falls_back_to_plain_lines(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    stream = FakeTTY()
    view = ProgressView.for_stream(stream)

    def broken(_monitor):
        raise RuntimeError("terminal went away")

    monkeypatch.setattr(view, "_update_rich", broken)
    view.update(monitor())
    view.close()
    assert view.rich is False
    assert "plain lines follow" in stream.getvalue() and "2/5 done" in stream.getvalue()


def test_summary_line_unchanged_contract():
    line = summary_line(monitor(stop="disk_reserve"))
    assert line.startswith("2/5 done | 1 passed | 1 failed | 0 agent_failed | 0 infra_failed | 1 running")
    assert line.endswith("stopping: disk_reserve")


def test_environment_blocked_tasks_are_counted_and_not_waited_for():
    # 25 selected, 19 blocked by a failed server, 3 of the 6 runnable done in 60 s: 3 remain, 60 s.
    assert eta_seconds(3, 25, 60.0, blocked=19) == 60.0
    blocked = monitor(done=3, selected=25, environment_blocked=19)
    rows = dict(progress_rows(blocked, elapsed_sec=60.0))
    assert rows["eta"] == "1m00s"
    assert rows["environment-blocked"] == "19"
    assert "19 environment-blocked" in rows["tasks"]
    assert "| 19 environment_blocked" in summary_line(blocked)
