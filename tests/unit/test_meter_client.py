"""KeyMeter against the local meter stand-in over real HTTP on loopback."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import types

import httpx
import pytest

from cowork_adapter.campaign import meter as meter_module
from cowork_adapter.campaign.meter import KeyMeter, MeterError
from cowork_adapter.campaign.observe import MeterObserver, SystemClock
from cowork_adapter.campaign.store import JsonFileCampaignStore, open_campaign, read_campaign
from cowork_adapter.demo.meter_standin import MeterStandin
from cowork_adapter.schemas.campaign import key_fingerprint

KEY = "sk-or-v1-fake-meter-test-key-123456"


@pytest.fixture
def standin():
    with MeterStandin(KEY, usage=12.5, limit=100.0, max_delay_sec=5.0) as server:
        yield server


@pytest.fixture
def meter(standin):
    return KeyMeter(standin.base_url, KEY, timeout=2.0)


def test_reads_usage_and_limits_with_the_data_wrapper(standin, meter):
    reading = meter.read_usage()
    assert (reading.usage, reading.limit, reading.limit_remaining) == (12.5, 100.0, 87.5)
    assert reading.key_headroom == 87.5
    assert standin.requests[-1]["no_cache"] == "no-cache"


def test_reads_a_body_without_the_data_wrapper(standin, meter):
    standin.apply({"wrap": False, "set_usage": 3.25})
    assert meter.read_usage().usage == 3.25


def test_usage_climbs_with_a_spending_rate(standin, meter):
    standin.set_rate(50.0)
    first = meter.read_usage().usage
    time.sleep(0.05)
    assert meter.read_usage().usage > first


@pytest.mark.parametrize("raw", [math.nan, math.inf, -4.0])
def test_non_finite_or_negative_values_reach_the_observer_unjudged(standin, meter, raw):
    standin.push({"usage": raw})
    got = meter.read_usage().usage
    assert math.isnan(got) if math.isnan(raw) else got == raw


def test_non_numeric_usage_is_an_error_carrying_the_raw_value(standin, meter):
    standin.push({"usage": "abc"})
    with pytest.raises(MeterError) as err:
        meter.read_usage()
    assert err.value.error_type == "non_numeric" and err.value.observed == "abc"


def test_malformed_body_is_an_error(standin, meter):
    standin.push({"body": "<html>gateway</html>"})
    with pytest.raises(MeterError) as err:
        meter.read_usage()
    assert err.value.error_type == "malformed"


def test_http_errors_are_typed(standin, meter):
    standin.fail(503, count=1)
    with pytest.raises(MeterError) as err:
        meter.read_usage()
    assert err.value.error_type == "http_503"
    assert meter.read_usage().usage == 12.5  # the scripted failure was one request long


def _all_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc)


def test_a_wrong_key_gets_401_and_no_error_ever_contains_a_key(standin):
    other = "sk-or-v1-wrong-fake-key-987654321"
    with pytest.raises(MeterError) as err:
        KeyMeter(standin.base_url, other, timeout=2.0).read_usage()
    assert err.value.error_type == "http_401"
    assert other not in _all_text(err.value)
    # A server that echoes the key back in its error text: the key is redacted.
    standin.push({"status": 500, "body": f"upstream rejected Bearer {KEY}"})
    with pytest.raises(MeterError) as err:
        KeyMeter(standin.base_url, KEY, timeout=2.0).read_usage()
    assert KEY not in _all_text(err.value) and "[redacted-key]" in str(err.value)


def test_transport_errors_are_redacted_and_unchained(standin):
    port = standin.port
    standin.stop()
    with pytest.raises(MeterError) as err:
        KeyMeter(f"http://127.0.0.1:{port}/api/v1", KEY, timeout=1.0).read_usage()
    assert err.value.error_type == "transport"
    assert err.value.__cause__ is None and err.value.__suppress_context__


class _WatchedRead(threading.Thread):
    """The meter's read thread, recorded: how long the caller waited for it (its join's bound) and
    whether it was still waiting on the meter when the caller gave up. The slice is seen at work
    through these events, not through a wall-time bound a loaded machine could break."""

    made: list[_WatchedRead] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.joined_with: list[float | None] = []
        _WatchedRead.made.append(self)

    def join(self, timeout: float | None = None) -> None:
        self.joined_with.append(timeout)
        super().join(timeout)


@pytest.fixture
def watched_reads(monkeypatch):
    _WatchedRead.made = []
    monkeypatch.setattr(meter_module, "threading", types.SimpleNamespace(Thread=_WatchedRead))
    return _WatchedRead.made


def _cut_by_the_slice(reads: list[_WatchedRead], slice_sec: float) -> None:
    """One read, waited for no longer than the slice, still unanswered when the caller went on."""
    assert len(reads) == 1 and reads[0].joined_with == [slice_sec], [r.joined_with for r in reads]
    assert reads[0].is_alive()  # the meter had not answered: the slice ended the wait, not the answer


def test_a_silent_meter_costs_only_the_read_slice(standin, meter, watched_reads):
    standin.silence(True)
    with pytest.raises(MeterError) as err:
        meter.read_usage(timeout=0.5)
    assert err.value.error_type == "timeout"
    _cut_by_the_slice(watched_reads, 0.5)  # the slice asked for, not the meter's own 2 s


def test_a_delay_within_the_slice_is_fine_and_beyond_it_is_a_timeout(standin, meter, watched_reads):
    # Generous margins: the suite runs in parallel workers on 2 shared cores, where a 0.2 s answer
    # can take over a second to be read; the point is the slice, not the machine's speed.
    standin.set_delay(0.2)
    assert meter.read_usage(timeout=5.0).usage == 12.5
    watched_reads.clear()
    standin.set_delay(8.0)
    with pytest.raises(MeterError) as err:
        meter.read_usage(timeout=0.5)
    assert err.value.error_type == "timeout"
    _cut_by_the_slice(watched_reads, 0.5)  # before the 8 s answer: the slice cut it


def test_headroom_is_the_smaller_of_key_limit_and_credits(standin, meter):
    standin.apply({"total_credits": 50.0})
    room = meter.headroom()
    assert room.key_remaining == 87.5 and room.credits_remaining == 37.5 and room.effective == 37.5
    standin.apply({"limit": None})
    room = meter.headroom()
    assert room.key_remaining is None and room.effective == 37.5  # uncapped key: credits bound


def test_a_credits_refusal_is_reported_not_fatal(standin, meter):
    standin.apply({"credits": "forbidden"})
    room = meter.headroom()
    assert room.credits_remaining is None and "http_403" in room.credits_unavailable_reason
    assert room.effective == 87.5


def test_control_route_over_http(standin):
    control = f"http://127.0.0.1:{standin.port}/control"
    state = httpx.post(control, json={"set_usage": 40.0, "push": [{"usage": -1}]}, timeout=5).json()
    assert state["usage"] == 40.0 and state["queued"] == 1
    assert httpx.post(control, json={"no_such_field": 1}, timeout=5).status_code == 400
    assert httpx.get(control, timeout=5).json()["queued"] == 1


def test_observer_over_real_http_rejects_nan_then_accepts_and_saves(standin, meter, tmp_path):
    path = tmp_path / "campaign.json"
    with open_campaign(
        JsonFileCampaignStore(path),
        key_fingerprint=key_fingerprint(KEY),
        ceiling=500.0,
        startup_usage=meter.read_usage().usage,
        create_if_missing=True,
    ) as campaign:
        standin.push({"usage": math.nan}, {"usage": 5.0})  # NaN, then a decrease, then the real value
        standin.set_usage(20.0)
        seen = []
        obs = MeterObserver(
            read=meter.read_usage,
            save=campaign.record_usage,
            last_accepted=lambda: campaign.record.last_usage,
            clock=SystemClock(),
            on_observation=seen.append,
            retry_sec=0.05,
        )
        clock = SystemClock()
        reading = obs.observe(clock.monotonic() + 10.0)
    assert reading.usage == 20.0 and reading.attempts == 3
    assert [o.error_type for o in seen] == ["nan", "decreased", None]
    assert read_campaign(path).last_usage == 20.0


def test_module_entry_serves_the_key_from_an_environment_variable():
    env = {**os.environ, "FAKE_STANDIN_KEY": KEY}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cowork_adapter.demo.meter_standin",
            "--port",
            "0",
            "--key-env",
            "FAKE_STANDIN_KEY",
            "--usage",
            "7",
        ],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        announced = json.loads(proc.stdout.readline())
        assert KEY not in " ".join(proc.args)
        assert KeyMeter(announced["meter_standin"], KEY, timeout=2.0).read_usage().usage == 7.0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
