"""The supervisor's stop rules with a real child process group and injected meter, disk and publish."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from cowork_adapter.campaign.observe import MeterBlind
from cowork_adapter.errors import CampaignPersistenceError
from cowork_adapter.run.supervisor import Supervisor
from cowork_adapter.vocab import StopReason


class FakeMeter:
    """Accepts every read at once (anchor = now) unless told to go blind or to decide a stop."""

    def __init__(self, *, blind_after: int | None = None, decision_after: int | None = None, error=None):
        self.calls = 0
        self.blind_after = blind_after
        self.decision_after = decision_after
        self.error = error

    def observe(self, deadline: float):
        self.calls += 1
        if self.error is not None:
            raise self.error
        if self.blind_after is not None and self.calls > self.blind_after:
            raise MeterBlind("silent")
        if self.decision_after is not None and self.calls > self.decision_after:
            return time.monotonic(), StopReason.RUN_BUDGET
        return time.monotonic(), None


def make(tmp_path: Path, argv: list[str], meter: FakeMeter, **kw) -> Supervisor:
    events: list[tuple[str, dict]] = []
    sup = Supervisor(
        runner_argv=argv,
        runner_env=dict(os.environ),
        runner_cwd=tmp_path,
        console_log=tmp_path / "console.log",
        stop_file=tmp_path / "stop",
        blindness_sec=30.0,
        meter=meter,
        disk_check=kw.pop("disk_check", lambda: None),
        publish=kw.pop("publish", lambda live: None),
        on_event=lambda kind, data: events.append((kind, data)),
        poll_sec=0.1,
        group_grace_sec=kw.pop("group_grace_sec", 2.0),
        **kw,
    )
    sup.events = events  # type: ignore[attr-defined]
    return sup


# A runner that leaves a grandchild in its group: stopping must take the whole group.
LONG_RUNNER = ["bash", "-c", "sleep 300 & wait"]


def group_gone(pgid: int, settle: float = 5.0) -> bool:
    """No process of the group exists at all, once init has had a moment to reap killed ones."""
    deadline = time.monotonic() + settle
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def test_runner_that_finishes_is_not_a_stop_and_fences_admission(tmp_path):
    sup = make(tmp_path, ["bash", "-c", "echo hello"], FakeMeter())
    result = sup.run(time.monotonic())
    assert result.stop_reason is None
    assert result.runner_exit_code == 0
    assert (tmp_path / "stop").read_text() == "runner_finished\n"
    assert b"hello" in (tmp_path / "console.log").read_bytes()


def test_blind_meter_stops_with_budget_meter_unavailable_and_kills_the_group(tmp_path):
    sup = make(tmp_path, LONG_RUNNER, FakeMeter(blind_after=1))
    result = sup.run(time.monotonic())
    assert result.stop_reason == StopReason.BUDGET_METER_UNAVAILABLE
    assert group_gone(sup.proc.pid)
    assert (tmp_path / "stop").read_text() == "budget_meter_unavailable\n"


def test_budget_decision_stops_at_once(tmp_path):
    sup = make(tmp_path, LONG_RUNNER, FakeMeter(decision_after=2))
    result = sup.run(time.monotonic())
    assert result.stop_reason == StopReason.RUN_BUDGET
    assert sup.meter.calls == 3  # no further poll after the deciding one
    assert group_gone(sup.proc.pid)


def test_campaign_write_failure_stops_with_campaign_persistence_failed(tmp_path):
    sup = make(tmp_path, LONG_RUNNER, FakeMeter(error=CampaignPersistenceError("disk full")))
    assert sup.run(time.monotonic()).stop_reason == StopReason.CAMPAIGN_PERSISTENCE_FAILED


def test_unexpected_failure_is_supervisor_error_never_a_finished_runner(tmp_path):
    sup = make(tmp_path, LONG_RUNNER, FakeMeter(error=RuntimeError("bug")))
    result = sup.run(time.monotonic())
    assert result.stop_reason == StopReason.SUPERVISOR_ERROR
    assert "RuntimeError: bug" in result.supervisor_error
    assert group_gone(sup.proc.pid)


def test_disk_reserve_stops(tmp_path):
    sup = make(tmp_path, LONG_RUNNER, FakeMeter(), disk_check=lambda: StopReason.DISK_RESERVE)
    assert sup.run(time.monotonic()).stop_reason == StopReason.DISK_RESERVE


def test_expired_anchor_never_starts_the_runner(tmp_path):
    sup = make(tmp_path, ["bash", "-c", "touch started"], FakeMeter())
    result = sup.run(time.monotonic() - 31.0)
    assert result.stop_reason == StopReason.BUDGET_METER_UNAVAILABLE
    assert sup.proc is None and not (tmp_path / "started").exists()


def test_slow_publish_that_uses_up_the_bound_stops(tmp_path):
    clock = {"offset": 0.0}

    def publish(live):
        clock["offset"] = 31.0  # as if the ledger write took 31 s

    sup = make(tmp_path, LONG_RUNNER, FakeMeter(), publish=publish, clock=lambda: time.monotonic() + clock["offset"])

    class AnchorNow(FakeMeter):
        def observe(self, deadline):
            self.calls += 1
            return time.monotonic(), None  # the anchor is the real time; the clock runs 31 s ahead

    sup.meter = AnchorNow()
    assert sup.run(time.monotonic()).stop_reason == StopReason.BUDGET_METER_UNAVAILABLE


def test_sigterm_is_recorded_as_signal_15_and_handlers_are_restored(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    sup = make(tmp_path, LONG_RUNNER, FakeMeter())
    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()
    result = sup.run(time.monotonic())
    assert result.stop_reason == "signal_15"
    assert group_gone(sup.proc.pid)
    assert signal.getsignal(signal.SIGTERM) == before


def test_an_existing_stop_file_keeps_the_first_cause(tmp_path):
    (tmp_path / "stop").write_text("operator_said_so\n")
    sup = make(tmp_path, LONG_RUNNER, FakeMeter(decision_after=0))
    sup.run(time.monotonic())
    assert (tmp_path / "stop").read_text() == "operator_said_so\n"


@pytest.mark.parametrize("cause", ["signal_2", "stop_requested"])
def test_first_cause_wins(tmp_path, cause):
    sup = make(tmp_path, LONG_RUNNER, FakeMeter())
    sup.request_stop(cause)
    sup.request_stop(StopReason.RUN_BUDGET)
    result = sup.run(time.monotonic())
    assert result.stop_reason == cause
    assert result.stop_causes == [cause, StopReason.RUN_BUDGET]


def test_the_supervisor_polls_at_the_cadence_the_manifest_records(tmp_path):
    """Issue 21 item 8: one poll constant. The real supervisor's default wait is the 15 s that
    `budget_record` writes into the manifest (tests elsewhere pass a short poll_sec explicitly)."""
    from cowork_adapter.config import RunConfig
    from cowork_adapter.run.launch import budget_record

    (tmp_path / "seed").mkdir()
    (tmp_path / "bench").mkdir()
    cfg = RunConfig.from_flags(
        repo_dir=tmp_path / "seed",
        bench_root=tmp_path / "bench",
        docker_host="unix:///d",
        run_root=tmp_path / "runs" / "r",
        dry_run=True,
    )
    supervisor = Supervisor(
        runner_argv=["true"],
        runner_env={},
        runner_cwd=tmp_path,
        console_log=tmp_path / "c.log",
        stop_file=tmp_path / "stop",
        blindness_sec=30.0,
        meter=None,
        disk_check=lambda: None,
        publish=lambda live: None,
        on_event=lambda kind, data: None,
    )
    recorded = budget_record(cfg).meter
    assert supervisor.poll_sec == recorded.poll_sec == 15.0
    assert recorded.read_slice_sec == 5.0


# A runner whose EXIT trap takes 1.5 s and leaves a mark (as the upstream runner's removes its
# containers one by one): the fast stop must not wait for it.
def slow_trap_runner(tmp_path: Path) -> list[str]:
    return ["bash", "-c", f"trap 'sleep 1.5; touch {tmp_path}/trapped' EXIT; sleep 300 & wait"]


class Removal:
    """A stand-in remove_labelled that records what the world looked like when it was called."""

    def __init__(self, stop_file: Path):
        self.stop_file, self.calls = stop_file, []

    def __call__(self, reason: str) -> None:
        self.calls.append({"reason": reason, "at": time.monotonic(), "fenced": self.stop_file.exists()})


def test_fast_stop_kills_the_group_and_removes_without_its_trap_then_the_group_is_gone(tmp_path):
    removal = Removal(tmp_path / "stop")
    sup = make(tmp_path, slow_trap_runner(tmp_path), FakeMeter(decision_after=1), remove_labelled=removal)
    result = sup.run(time.monotonic())
    assert result.stop_reason == StopReason.RUN_BUDGET
    assert len(removal.calls) == 1
    call = removal.calls[0]
    assert call["reason"] == StopReason.RUN_BUDGET
    assert call["fenced"]  # the fence comes first: no creation is admitted while it removes
    assert group_gone(sup.proc.pid)  # the group is stopped, as before
    # How fast is bench_stop_latency.py's to measure; here: nothing waited for the trap, which
    # never ran (it would have written its file 1.5 s after a SIGTERM).
    time.sleep(2.0)
    assert not (tmp_path / "trapped").exists()  # SIGKILL: the trap never ran, nothing waited for it
    assert ("stop_requested", {"reason": "run_budget", "path": "fast"}) in sup.events


def test_runner_trap_path_leaves_the_removal_to_the_runner(tmp_path):
    from cowork_adapter.vocab import StopPath

    removal = Removal(tmp_path / "stop")
    # A grace well past the trap's 1.5 s: with 2 s, the trap's own sleep and touch (two processes
    # to start on a loaded machine) had 0.5 s, and a trap SIGKILLed short of its file failed the test.
    sup = make(
        tmp_path,
        slow_trap_runner(tmp_path),
        FakeMeter(decision_after=1),
        remove_labelled=removal,
        stop_path=StopPath.RUNNER_TRAP,
        group_grace_sec=10.0,
    )
    started = time.monotonic()
    result = sup.run(time.monotonic())
    assert result.stop_reason == StopReason.RUN_BUDGET
    assert removal.calls == []
    assert time.monotonic() - started >= 1.5  # it waited for the trap
    assert (tmp_path / "trapped").exists()
    assert group_gone(sup.proc.pid)


def test_a_runner_that_finishes_by_itself_gets_no_stop_removal(tmp_path):
    removal = Removal(tmp_path / "stop")
    sup = make(tmp_path, ["bash", "-c", "true"], FakeMeter(), remove_labelled=removal)
    assert sup.run(time.monotonic()).stop_reason is None
    assert removal.calls == []


def test_a_stop_before_the_runner_started_removes_nothing(tmp_path):
    removal = Removal(tmp_path / "stop")
    sup = make(tmp_path, ["bash", "-c", "touch started"], FakeMeter(), remove_labelled=removal)
    assert sup.run(time.monotonic() - 31.0).stop_reason == StopReason.BUDGET_METER_UNAVAILABLE
    assert removal.calls == [] and sup.proc is None


def test_a_signal_during_a_meter_read_stops_without_a_disk_check_or_publish(tmp_path):
    """A stop cause that arrives while the meter is read ends the loop right after the read."""
    published, checked = [], []

    class SlowRead(FakeMeter):
        def observe(self, deadline):
            self.calls += 1
            if self.calls == 2:
                sup.request_stop(StopReason.STOP_REQUESTED)  # as a SIGTERM handler would, mid-read
            return time.monotonic(), None

    sup = make(tmp_path, LONG_RUNNER, SlowRead(), publish=published.append, disk_check=lambda: checked.append(1))
    assert sup.run(time.monotonic()).stop_reason == StopReason.STOP_REQUESTED
    assert len(published) == 1 and len(checked) == 1  # the first turn's only


class BlockedRead(FakeMeter):
    """The second meter read blocks (as a read does up to its 5 s timeout) until the stop has removed
    the run's containers, or 30 s: a stop that waits for the loop's turn removes only after it."""

    def __init__(self, removed: threading.Event):
        super().__init__()
        self.removed, self.reading, self.returned = removed, threading.Event(), False

    def observe(self, deadline):
        self.calls += 1
        if self.calls == 2:
            self.reading.set()
            self.removed.wait(30.0)
            self.returned = True
        return time.monotonic(), None


@pytest.mark.parametrize("source", ["another_thread", "signal"])
def test_a_stop_decided_outside_the_loop_does_not_wait_for_a_meter_read_in_progress(tmp_path, source):
    removed, calls = threading.Event(), []
    meter = BlockedRead(removed)

    def remove(reason: str) -> None:
        calls.append({"reason": reason, "read_returned": meter.returned, "fenced": (tmp_path / "stop").exists()})
        removed.set()

    sup = make(tmp_path, LONG_RUNNER, meter, remove_labelled=remove)

    def stop() -> None:
        assert meter.reading.wait(30.0)
        if source == "signal":
            os.kill(os.getpid(), signal.SIGTERM)  # the handler is the supervisor's while it runs
        else:
            sup.stop_at_once(StopReason.GATEWAY_BUDGET)

    stopper = threading.Thread(target=stop)
    stopper.start()
    result = sup.run(time.monotonic())
    stopper.join()
    cause = f"signal_{signal.SIGTERM}" if source == "signal" else StopReason.GATEWAY_BUDGET
    assert result.stop_reason == cause
    # Removed once, fenced first, while the loop was still inside the read; the loop's own stop at
    # its end found the group signalled and did not remove again.
    assert calls == [{"reason": cause, "read_returned": False, "fenced": True}]
    assert group_gone(sup.proc.pid)
    assert [kind for kind, _ in sup.events].count("stop_requested") == 1


def test_a_stop_asked_for_before_the_start_starts_no_runner(tmp_path):
    removal = Removal(tmp_path / "stop")
    sup = make(tmp_path, ["bash", "-c", f"touch {tmp_path}/started"], FakeMeter(), remove_labelled=removal)
    sup.request_stop(StopReason.HOST_LEASE_LOST)
    assert sup.run(time.monotonic()).stop_reason == StopReason.HOST_LEASE_LOST
    assert sup.proc is None and removal.calls == [] and not (tmp_path / "started").exists()
    assert (tmp_path / "stop").read_text() == f"{StopReason.HOST_LEASE_LOST}\n"
