"""The campaign and monitor schemas: strict, versioned, and free of NaN."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pytest

from cowork_adapter.campaign.observe import Observation
from cowork_adapter.schemas.campaign import CampaignRecord, key_fingerprint, parse_campaign
from cowork_adapter.schemas.monitor import MONITOR_SCHEMA, MeterState, Monitor, RejectedObservation
from cowork_adapter.schemas.record import RecordInvalid, convert, decode

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def record(**over) -> CampaignRecord:
    fields = dict(
        fingerprint=key_fingerprint("sk-fake"),
        ceiling_usd=1000.0,
        usage_baseline=10.0,
        prior_spend_usd=2.0,
        last_usage=30.0,
        last_usage_observed_at=T0,
        created_at=T0,
    )
    fields.update(over)
    return CampaignRecord(**fields)


def test_campaign_round_trips_and_carries_derived_totals():
    rec = record()
    data = json.loads(rec.to_json())
    assert data["schema"] == "cowork_adapter.campaign.v1"
    assert (data["spent_usd"], data["remaining_usd"]) == (22.0, 978.0)
    assert parse_campaign(rec.to_json()) == rec


def test_derived_totals_in_the_file_are_recomputed_not_trusted():
    data = json.loads(record().to_json())
    data["spent_usd"] = 0.0
    assert parse_campaign(json.dumps(data)).spent_usd == 22.0


@pytest.mark.parametrize(
    "over",
    [
        {"fingerprint": "sk-fake"},  # a key where a fingerprint belongs
        {"ceiling_usd": 0.0},
        {"last_usage": math.nan},
        {"prior_spend_usd": -1.0},
        {"last_usage": 5.0},  # below the baseline
        {"created_at": datetime(2025, 1, 1)},  # naive timestamp
    ],
)
def test_campaign_rejects_invalid_values(over):
    with pytest.raises(RecordInvalid):
        record(**over)


def test_campaign_rejects_unknown_fields_and_other_schemas():
    data = json.loads(record().to_json())
    with pytest.raises(RecordInvalid):
        CampaignRecord.from_dict({**data, "surprise": 1})
    with pytest.raises(RecordInvalid):
        CampaignRecord.from_dict({**data, "schema": "ouroboros.cowork_bench.campaign.v1"})


def test_campaign_is_immutable():
    with pytest.raises(AttributeError):
        record().last_usage = 99.0


def test_monitor_holds_non_finite_observations_as_strings_only():
    rejected = Observation(
        observed_at=T0.isoformat(),
        phase="poll",
        attempt=1,
        previous_usage=3.0,
        observed_usage="nan",
        accepted=False,
        error_type="nan",
        error="usage is NaN",
    )
    monitor = Monitor(
        observed_at=T0,
        launcher_pid=10,
        runner_pid=11,
        meter=MeterState(
            blindness_sec=30, last_usage=3.0, rejected=[RejectedObservation.from_observation(rejected.to_dict())]
        ),
        stop_reason="budget_meter_unavailable",
        stop_causes=["budget_meter_unavailable", "signal_15"],
    )
    data = json.loads(monitor.to_json())
    assert data["schema"] == MONITOR_SCHEMA and data["campaign_settlement"] == "pending"
    assert data["meter"]["rejected"][0]["observed_usage"] == "nan"
    json.dumps(data, allow_nan=False)
    assert decode(monitor.to_json(), Monitor) == monitor
    with pytest.raises(RecordInvalid):
        MeterState(blindness_sec=30, last_usage=math.inf)
    with pytest.raises(RecordInvalid):
        convert({**data, "campaign_settlement": "maybe"}, Monitor)
