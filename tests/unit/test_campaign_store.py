"""The campaign store: admission rules, refusals that leave the file unmodified, lock, durability."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cowork_adapter.campaign.store import JsonFileCampaignStore, open_campaign, read_campaign
from cowork_adapter.errors import CampaignPersistenceError, Refusal
from cowork_adapter.schemas.campaign import CAMPAIGN_SCHEMA, key_fingerprint

KEY = "sk-or-v1-fake-test-key-0000000000"
FP = key_fingerprint(KEY)


class Ticker:
    """A wall clock that moves one minute per call, so timestamps are distinct and predictable."""

    def __init__(self) -> None:
        self.t = datetime(2025, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.t += timedelta(minutes=1)
        return self.t


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "campaign.json"


def admit(path: Path, **over):
    args = dict(
        key_fingerprint=FP, ceiling=1000.0, prior_spend=0.0, startup_usage=50.0, create_if_missing=True, now=Ticker()
    )
    args.update(over)
    return open_campaign(JsonFileCampaignStore(path), **args)


def make_campaign(path: Path, **over) -> bytes:
    with admit(path, **over):
        pass
    return path.read_bytes()


def test_fingerprint_never_contains_the_key():
    assert FP.startswith("sha256:") and len(FP) == len("sha256:") + 16
    assert KEY not in FP


def test_creation_takes_the_startup_usage_as_baseline(path):
    with admit(path, prior_spend=12.5, startup_usage=50.0) as campaign:
        record = campaign.record
    assert (record.usage_baseline, record.last_usage, record.prior_spend_usd) == (50.0, 50.0, 12.5)
    on_disk = json.loads(path.read_text())
    assert on_disk["schema"] == CAMPAIGN_SCHEMA
    assert on_disk["spent_usd"] == 12.5 and on_disk["remaining_usd"] == 987.5  # derived, for humans
    assert KEY not in path.read_text()
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_restarts_keep_one_baseline_and_count_all_spending_on_the_key(path):
    make_campaign(path, prior_spend=10.0, startup_usage=50.0)
    with admit(path, prior_spend=0.0, startup_usage=60.0) as campaign:  # $10 spent elsewhere on the key
        campaign.start_run(run_root="/runs/a", run_label="lbl-a", launcher_pid=os.getpid())
        campaign.record_usage(75.0)
        entry = campaign.finish_run(outcome="completed")
    assert entry.spent_usd == 15.0  # this run: 75 − 60
    record = read_campaign(path)
    assert record.usage_baseline == 50.0
    assert record.spent_usd == 10.0 + 75.0 - 50.0
    assert record.active_run is None and [r.run_root for r in record.runs] == ["/runs/a"]


def test_active_run_is_on_disk_while_the_run_holds_custody(path):
    make_campaign(path)
    with admit(path) as campaign:
        campaign.start_run(run_root="/runs/a", run_label="lbl-a", launcher_pid=123, host="h")
        campaign.set_runner_pgid(456)
        active = read_campaign(path).active_run
        assert (active.run_root, active.launcher_pid, active.runner_pgid, active.usage_at_start) == (
            "/runs/a",
            123,
            456,
            50.0,
        )


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"key_fingerprint": key_fingerprint("sk-or-v1-another-fake-key")}, "belongs to key"),
        ({"ceiling": 2000.0}, "ceiling"),
        ({"prior_spend": 5.0}, "Prior spend"),
        ({"startup_usage": 49.99}, "below the campaign's last accepted usage"),
    ],
)
def test_changed_admission_is_refused_and_the_file_is_unmodified(path, change, words):
    before = make_campaign(path)
    with pytest.raises(Refusal) as refused:
        with admit(path, **change):
            pytest.fail("admitted")
    assert refused.value.stage == "campaign" and words in refused.value.sentence
    assert path.read_bytes() == before


def test_unsettled_active_run_is_refused_and_the_file_is_unmodified(path):
    make_campaign(path)
    with admit(path) as campaign:
        campaign.start_run(run_root="/runs/crashed", run_label="lbl", launcher_pid=999_999)
    before = path.read_bytes()
    with pytest.raises(Refusal) as refused:
        with admit(path, startup_usage=51.0):
            pass
    assert "unsettled active run /runs/crashed" in refused.value.sentence
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        '{"schema": "ouroboros.cowork_bench.campaign.v1"}',
        '{"schema": "cowork_adapter.campaign.v1", "fingerprint": "sha256:0123456789abcdef"}',
        None,  # a valid record with a NaN constant written into it
    ],
)
def test_corrupt_or_unknown_file_is_refused_and_unmodified(path, text):
    if text is None:
        good = json.loads(make_campaign(path))
        text = json.dumps({**good, "last_usage": float("nan")})
    path.write_text(text)
    before = path.read_bytes()
    with pytest.raises(Refusal) as refused:
        with admit(path):
            pass
    assert refused.value.stage == "campaign"
    assert "\n" not in refused.value.sentence
    assert path.read_bytes() == before


def test_missing_file_without_create_is_refused_and_nothing_is_written(path):
    with pytest.raises(Refusal) as refused:
        with admit(path, create_if_missing=False):
            pass
    assert "new usage baseline" in refused.value.sentence and "--new-campaign" in refused.value.sentence
    assert not path.exists()


def test_creation_stores_the_reserve_and_run_budget_it_was_given(path):
    with admit(path, reserve=7.5, run_budget=30.0):
        pass
    stored = json.loads(path.read_text())
    assert (stored["reserve_usd"], stored["run_budget_usd"]) == (7.5, 30.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [("ceiling", 0.0), ("ceiling", float("inf")), ("prior_spend", -1.0), ("startup_usage", float("nan"))],
)
def test_bad_amounts_are_refused_before_anything_is_written(path, field, value):
    with pytest.raises(Refusal):
        with admit(path, **{field: value}):
            pass
    assert not path.exists()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 49.0])
def test_record_usage_never_saves_an_invalid_or_lower_value(path, bad):
    with admit(path) as campaign:
        before = path.read_bytes()
        with pytest.raises(ValueError):
            campaign.record_usage(bad)
        assert path.read_bytes() == before and campaign.record.last_usage == 50.0


def test_lock_is_released_after_an_exception(path):
    with pytest.raises(RuntimeError):
        with admit(path):
            raise RuntimeError("boom")
    with admit(path, startup_usage=50.0):
        pass


_HOLDER = """
import sys
from cowork_adapter.campaign.store import JsonFileCampaignStore
with JsonFileCampaignStore(sys.argv[1]).locked():
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_a_second_launcher_in_another_process_is_refused_at_once(path):
    before = make_campaign(path)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        outcome: dict = {}

        def second_launcher() -> None:
            try:
                with admit(path, startup_usage=55.0):
                    outcome["admitted"] = True
            except Refusal as exc:
                outcome["refused"] = exc

        # Refused at once, not after a wait: the holder keeps its lock until its stdin closes (below), so
        # a launcher that waited for the lock would still be waiting here; the join's 60 s is a hang guard.
        attempt = threading.Thread(target=second_launcher, daemon=True)
        attempt.start()
        attempt.join(timeout=60)
        assert not attempt.is_alive() and holder.poll() is None, "the second launcher waited for the lock"
        assert "admitted" not in outcome, "two launchers admitted"
        assert "locked by another launcher" in outcome["refused"].sentence
        assert path.read_bytes() == before
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    with admit(path, startup_usage=55.0) as campaign:  # free again once the holder exits
        assert campaign.record.last_usage == 55.0


@contextmanager
def read_only(directory: Path):
    """Make a directory unwritable, also for root (chattr +i), and restore it afterwards."""
    if os.geteuid() == 0:
        made = subprocess.run(["chattr", "+i", str(directory)], capture_output=True)
        if made.returncode != 0:
            pytest.skip(f"cannot make a directory read-only as root here: {made.stderr!r}")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
    else:
        directory.chmod(0o555)
        try:
            yield
        finally:
            directory.chmod(0o755)


def test_read_only_directory_raises_persistence_error_and_keeps_the_last_good_record(path):
    with admit(path) as campaign:
        before = path.read_bytes()
        with read_only(path.parent):
            with pytest.raises(CampaignPersistenceError):
                campaign.record_usage(60.0)
            with pytest.raises(CampaignPersistenceError):
                campaign.start_run(run_root="/runs/a", run_label="l", launcher_pid=1)
        assert path.read_bytes() == before
        assert campaign.record.last_usage == 50.0 and campaign.record.active_run is None
        campaign.record_usage(60.0)  # writable again: the same handle saves
    assert read_campaign(path).last_usage == 60.0


def test_the_first_run_fixes_the_diagnostic_setting_and_another_is_refused_untouched(path):
    with admit(path, diagnostic=True):
        pass
    assert json.loads(path.read_text())["diagnostic_eval_on_truncation"] is True
    before = path.read_bytes()
    with pytest.raises(Refusal) as refused:
        with admit(path, startup_usage=60.0, diagnostic=False):
            pass
    assert "same setting" in refused.value.sentence
    assert path.read_bytes() == before
    with admit(path, startup_usage=60.0, diagnostic=True):
        pass


def test_a_campaign_without_a_recorded_setting_takes_the_next_runs(path):
    make_campaign(path)  # no setting stated (a file from before it was stored)
    assert json.loads(path.read_text())["diagnostic_eval_on_truncation"] is None
    with admit(path, startup_usage=60.0, diagnostic=False):
        pass
    assert json.loads(path.read_text())["diagnostic_eval_on_truncation"] is False
