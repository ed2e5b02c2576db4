"""The observation algorithm and cadence, on a fake clock: every timing rule without sleeping."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pytest

from cowork_adapter.campaign.meter import MeterError, MeterReading
from cowork_adapter.campaign.observe import (
    AcceptedTooLate,
    MeterBlind,
    MeterObserver,
    MeterSchedule,
    validate_blindness,
)
from cowork_adapter.campaign.store import JsonFileCampaignStore, open_campaign, read_campaign
from cowork_adapter.errors import CampaignPersistenceError
from cowork_adapter.schemas.campaign import key_fingerprint
from cowork_adapter.vocab import MeterPhase


class FakeClock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.t += seconds


class FakeMeter:
    """Scripted reads. Each step is (seconds it takes, usage or exception). A read that takes longer
    than its timeout ends at the timeout with a timeout error, as KeyMeter's bounded read does,
    unless `honour_timeout` is False (a broken reader that answers late)."""

    def __init__(self, clock: FakeClock, steps, *, default=None, honour_timeout: bool = True) -> None:
        self.clock, self.steps, self.default, self.honour = clock, list(steps), default, honour_timeout
        self.calls: list[tuple[float, float]] = []  # (start time, timeout)

    def __call__(self, timeout: float) -> MeterReading:
        start = self.clock.t
        self.calls.append((start, timeout))
        duration, outcome = self.steps.pop(0) if self.steps else self.default
        if self.honour and duration > timeout:
            self.clock.t += timeout
            raise MeterError("timeout", f"no answer within {timeout:.1f}s")
        self.clock.t += duration
        if isinstance(outcome, Exception):
            raise outcome
        return MeterReading(usage=outcome, limit=None, limit_remaining=None, requested_at_monotonic=start)

    @property
    def starts(self) -> list[float]:
        return [s for s, _ in self.calls]


class Saver:
    def __init__(self, clock: FakeClock, last: float | None = 0.0, cost: float = 0.0, fail: Exception | None = None):
        self.clock, self.last, self.cost, self.fail = clock, last, cost, fail
        self.saved: list[float] = []

    def __call__(self, usage: float, _at: datetime) -> None:
        self.clock.t += self.cost
        if self.fail:
            raise self.fail
        self.saved.append(usage)
        self.last = usage


def observer(clock, meter, saver, seen=None):
    return MeterObserver(
        read=meter,
        save=saver,
        last_accepted=lambda: saver.last,
        clock=clock,
        on_observation=(seen.append if seen is not None else (lambda _o: None)),
        wall=lambda: datetime(2025, 1, 1, tzinfo=UTC),
    )


def run_supervisor_meter(clock, obs, schedule, rounds):
    """The supervisor's meter part: observe with deadline anchor+B, accept, wait next_wait."""
    for _ in range(rounds):
        reading = obs.observe(schedule.deadline)
        schedule.accept(reading)
        clock.sleep(schedule.next_wait(clock.monotonic()))


def test_healthy_meter_is_read_at_0_15_30():
    clock = FakeClock()
    meter = FakeMeter(clock, [], default=(0.0, 1.0))
    obs = observer(clock, meter, Saver(clock))
    schedule = MeterSchedule(blindness_sec=30, anchor=0.0)
    run_supervisor_meter(clock, obs, schedule, rounds=4)
    assert meter.starts == [0.0, 15.0, 30.0, 45.0]
    assert all(timeout == 5.0 for _, timeout in meter.calls)


def test_an_erroring_read_is_retried_3_seconds_later():
    clock = FakeClock(15.0)
    meter = FakeMeter(clock, [(0.0, MeterError("http_503", "503")), (0.0, 2.0)])
    seen = []
    reading = observer(clock, meter, Saver(clock), seen).observe(45.0)
    assert meter.starts == [15.0, 18.0]
    assert reading.request_time == 18.0 and reading.attempts == 2
    assert [(o.accepted, o.error_type) for o in seen] == [(False, "http_503"), (True, None)]


def test_a_slow_read_uses_only_its_5_second_slice_and_the_retry_follows_3_seconds_later():
    clock = FakeClock(15.0)
    meter = FakeMeter(clock, [(60.0, 2.0), (0.0, 2.0)])
    reading = observer(clock, meter, Saver(clock)).observe(45.0)
    assert meter.calls[0] == (15.0, 5.0)
    assert meter.starts == [15.0, 23.0]  # fails at 20, pauses 3
    assert reading.request_time == 23.0


@pytest.mark.parametrize("failure", ["slow", "error"])
def test_a_persistent_outage_blinds_the_run_exactly_at_B(failure):
    clock = FakeClock()
    step = (60.0, 1.0) if failure == "slow" else (0.0, MeterError("transport", "connection refused"))
    meter = FakeMeter(clock, [(0.0, 1.0)], default=step)
    obs = observer(clock, meter, Saver(clock))
    schedule = MeterSchedule(blindness_sec=30, anchor=0.0)
    with pytest.raises(MeterBlind) as blind:
        run_supervisor_meter(clock, obs, schedule, rounds=3)
    assert clock.t == 30.0
    assert blind.value.last_error and blind.value.observations
    if failure == "slow":
        assert meter.starts == [0.0, 15.0, 23.0]  # 23 + min(5, 7) = 28, pause min(3, 2) → 30
        assert meter.calls[-1][1] == 5.0
    else:
        assert meter.starts == [0.0, 15.0, 18.0, 21.0, 24.0, 27.0]


@pytest.mark.parametrize(
    ("value", "error_type", "shown"),
    [
        (math.nan, "nan", "nan"),
        (math.inf, "infinite", "inf"),
        (-math.inf, "infinite", "-inf"),
        (-0.5, "negative", -0.5),
        (9.5, "decreased", 9.5),
        (MeterError("non_numeric", "usage is not a number", observed="abc"), "non_numeric", "'abc'"),
        (MeterError("http_401", "GET /key answered HTTP 401"), "http_401", None),
    ],
)
def test_invalid_readings_are_rejected_recorded_and_never_saved(tmp_path, value, error_type, shown):
    clock = FakeClock(100.0)
    path = tmp_path / "campaign.json"
    with open_campaign(
        JsonFileCampaignStore(path),
        key_fingerprint=key_fingerprint("sk-fake"),
        ceiling=100.0,
        startup_usage=10.0,
        create_if_missing=True,
    ) as campaign:
        before = path.read_bytes()
        seen = []
        meter = FakeMeter(clock, [(0.0, value)], default=(0.0, value))
        obs = MeterObserver(
            read=meter,
            save=campaign.record_usage,
            last_accepted=lambda: campaign.record.last_usage,
            clock=clock,
            on_observation=seen.append,
        )
        with pytest.raises(MeterBlind):
            obs.observe(110.0)
        assert path.read_bytes() == before  # a rejected read never touches the campaign
    assert seen and {o.error_type for o in seen} == {error_type}
    assert seen[0].observed_usage == shown and seen[0].previous_usage == 10.0
    # Diagnostics stay strict JSON even for NaN and infinity.
    json.dumps([o.to_dict() for o in seen], allow_nan=False)


def test_a_lagging_counter_catches_up_inside_the_bound_and_the_anchor_is_the_accepted_request(tmp_path):
    clock = FakeClock(15.0)
    path = tmp_path / "campaign.json"
    with open_campaign(
        JsonFileCampaignStore(path),
        key_fingerprint=key_fingerprint("sk-fake"),
        ceiling=100.0,
        startup_usage=10.0,
        create_if_missing=True,
    ) as campaign:
        seen = []
        meter = FakeMeter(clock, [(1.0, 9.9), (1.0, 10.4)])
        obs = MeterObserver(
            read=meter,
            save=campaign.record_usage,
            last_accepted=lambda: campaign.record.last_usage,
            clock=clock,
            on_observation=seen.append,
        )
        reading = obs.observe(45.0, phase=MeterPhase.FINAL)
    assert reading.usage == 10.4 and reading.request_time == 19.0  # 15 + 1 s read + 3 s pause
    assert read_campaign(path).last_usage == 10.4
    assert [(o.accepted, o.phase, o.observed_usage) for o in seen] == [(False, "final", 9.9), (True, "final", 10.4)]


def test_a_valid_read_that_arrives_after_the_deadline_is_rejected():
    clock = FakeClock(27.0)
    saver = Saver(clock)
    meter = FakeMeter(clock, [(4.0, 5.0)], honour_timeout=False)  # asked for 3 s, answers after 4
    seen = []
    with pytest.raises(MeterBlind):
        observer(clock, meter, saver, seen).observe(30.0)
    assert saver.saved == []
    assert seen[0].error_type == "late"


def test_a_save_that_finishes_after_the_deadline_grants_nothing():
    clock = FakeClock(28.0)
    saver = Saver(clock, cost=3.0)  # the campaign write takes 3 s, ending at 31
    with pytest.raises(AcceptedTooLate):
        observer(clock, FakeMeter(clock, [(0.0, 5.0)]), saver).observe(30.0)
    assert saver.saved == [5.0]  # the accounting is kept, but the run gets no more time


def test_campaign_persistence_error_propagates_without_retry():
    clock = FakeClock()
    meter = FakeMeter(clock, [], default=(0.0, 5.0))
    saver = Saver(clock, fail=CampaignPersistenceError("disk full"))
    with pytest.raises(CampaignPersistenceError):
        observer(clock, meter, saver).observe(30.0)
    assert len(meter.calls) == 1 and clock.t == 0.0


def test_a_deadline_already_past_reads_nothing():
    clock = FakeClock(31.0)
    meter = FakeMeter(clock, [], default=(0.0, 5.0))
    with pytest.raises(MeterBlind):
        observer(clock, meter, Saver(clock)).observe(30.0)
    assert meter.calls == []


def test_a_slow_step_elsewhere_shortens_the_wait_so_one_full_read_still_fits():
    schedule = MeterSchedule(blindness_sec=30, anchor=0.0)
    assert schedule.next_wait(0.0) == 15.0
    assert schedule.next_wait(16.0) == 9.0  # read at 25 with a 5 s slice ends by 30
    assert schedule.next_wait(27.0) == 0.0
    assert schedule.expired(30.0) and not schedule.expired(29.9)


@pytest.mark.parametrize("bad", [20, 20.0, 5, math.nan, math.inf, -31, True])
def test_blindness_must_be_finite_and_above_20(bad):
    with pytest.raises(ValueError):
        validate_blindness(bad)
    assert validate_blindness(20.5) == 20.5


def test_a_stored_reading_is_dated_by_its_age_so_blindness_runs_from_the_poll_that_made_it():
    """A shared campaign's reading host gets another host's stored reading, 12 s old: the run's
    next deadline runs from that poll (anchor 100 - 12), not from this read."""
    clock = FakeClock(100.0)
    saver = Saver(clock)

    def stored(timeout: float) -> MeterReading:
        return MeterReading(
            usage=1.0, limit=None, limit_remaining=None, requested_at_monotonic=clock.t - 12.0, age_sec=12.0
        )

    obs = observer(clock, stored, saver)
    reading = obs.observe(deadline=130.0)
    assert reading.request_time == 88.0
    schedule = MeterSchedule(blindness_sec=30, anchor=80.0)
    schedule.accept(reading)
    assert schedule.deadline == 118.0  # 88 + 30, not 130
