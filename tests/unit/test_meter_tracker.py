"""monitor.json's meter block keeps every rejection counted, the latest ones listed, and the
acceptance that followed them; events.jsonl ties that acceptance to the rejections (issue 21, item 3)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

from cowork_adapter.campaign.observe import AcceptedReading, Observation
from cowork_adapter.run.meter_tracker import KEEP_REJECTED, MeterTracker
from cowork_adapter.run.spending import CampaignSpending
from cowork_adapter.schemas.events import MeterConfirmed
from cowork_adapter.schemas.monitor import MeterState
from cowork_adapter.schemas.record import convert, decode
from cowork_adapter.vocab import EventKind

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def rejected(attempt: int, observed=float("nan")) -> Observation:
    return Observation(
        observed_at=f"2026-03-01T12:00:{attempt % 60:02d}+00:00",
        phase="poll",
        attempt=attempt,
        previous_usage=2.0,
        observed_usage=repr(observed),
        accepted=False,
        error_type="nan",
        error="usage is NaN",
    )


def confirmed(attempt: int, usage: float) -> Observation:
    return Observation(
        observed_at="2026-03-01T12:01:00+00:00",
        phase="poll",
        attempt=attempt,
        previous_usage=2.0,
        observed_usage=usage,
        accepted=True,
    )


def reading(usage: float, attempts: int) -> AcceptedReading:
    return AcceptedReading(
        request_time=0.0, usage=usage, limit=None, limit_remaining=None, attempts=attempts, observed_at=NOW
    )


def test_every_rejection_is_counted_the_latest_kept_and_the_confirmation_survives_clean_polls():
    tracker = MeterTracker(blindness_sec=30.0)
    extra = 5
    for attempt in range(1, KEEP_REJECTED + extra + 1):
        assert tracker.observation(rejected(attempt)) is None
    confirmation = tracker.observation(confirmed(KEEP_REJECTED + extra + 1, 2.5))
    tracker.accepted(reading(2.5, KEEP_REJECTED + extra + 1))
    state = decode(tracker.state().to_line(), MeterState)  # as monitor.json holds it
    assert state.rejected_total == KEEP_REJECTED + extra and state.rejected_dropped == extra
    assert [r.attempt for r in state.rejected] == list(range(extra + 1, KEEP_REJECTED + extra + 1))
    assert state.rejected[-1].previous_usage == 2.0 and state.last_error == "nan: usage is NaN"
    assert confirmation is not None and state.confirmation == confirmation
    assert state.confirmation.rejections == KEEP_REJECTED + extra and state.confirmation.usage == 2.5

    tracker.accepted(reading(3.0, 1))  # the next poll is clean: the confirmation is not overwritten
    state = tracker.state()
    assert state.confirmation == confirmation and state.confirmed_after_rejection is False

    tracker.observation(rejected(1))
    tracker.observation(rejected(2))
    later = tracker.observation(confirmed(3, 3.5))
    state = tracker.state()
    assert state.confirmation == later and later.rejections == 2  # a later run of rejections replaces it
    assert state.rejected_total == KEEP_REJECTED + extra + 2 and len(state.rejected) == KEEP_REJECTED


def test_the_confirmation_is_an_event_naming_how_many_rejections_it_ends():
    recorded: list[tuple[EventKind, dict]] = []
    fake = SimpleNamespace(
        tracker=MeterTracker(blindness_sec=30.0),
        run=SimpleNamespace(event=lambda kind, **payload: recorded.append((kind, payload))),
    )
    CampaignSpending._observation(fake, rejected(1))
    CampaignSpending._observation(fake, rejected(2))
    CampaignSpending._observation(fake, confirmed(3, 2.5))
    assert [kind for kind, _ in recorded] == [
        EventKind.METER_REJECTED,
        EventKind.METER_REJECTED,
        EventKind.METER_CONFIRMED,
    ]
    payload = recorded[-1][1]
    assert payload == {"phase": "poll", "previous_usage": 2.0, "usage": 2.5, "rejections": 2}
    event = convert({"ts": NOW.isoformat(), **payload}, MeterConfirmed)
    assert json.loads(event.to_line())["kind"] == "meter_confirmed"
