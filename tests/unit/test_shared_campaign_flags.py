"""--shared-campaign: one host of a campaign several hosts run (flags, the claimed file, the runner's env).

The database side (admission, read-modify-write, the campaign's stop, claims) is tested on a real
PostgreSQL in tests/integration/test_shared_campaign_pg.py and test_shared_campaign_run.py.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest
from test_campaign_db_flags import base, refused  # noqa: F401 (its fixture); same directory, on sys.path

from cowork_adapter.config import RunConfig
from cowork_adapter.demo.env import wait_for
from cowork_adapter.run.batch_runner import append_batch, runner_env
from cowork_adapter.run.shared_host import wait_for_fence_sec
from cowork_adapter.schemas.campaign import CampaignRecord, CampaignStop
from cowork_adapter.schemas.multihost import ClaimedBatch, read_claimed
from cowork_adapter.score.context import IndexContext

DB = "postgresql://db.example:5432/campaigns"


def test_a_shared_host_names_its_database_batch_and_lease(base) -> None:
    cfg = RunConfig.from_flags(**base, campaign_db=DB, shared_campaign=True, claim_batch=3, host_lease_sec=20)
    assert cfg.hosts.shared_campaign and cfg.hosts.claim_batch == 3 and cfg.hosts.host_lease_sec == 20
    assert "shared_campaign" not in cfg.applied_config()  # where a task ran is not how it ran


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"shared_campaign": True}, "needs --campaign-db"),
        ({"shared_campaign": True, "campaign_file": "/tmp/c.json"}, "needs --campaign-db"),
        ({"campaign_db": DB, "claim_batch": 5}, "only meaningful with --shared-campaign"),
        ({"campaign_db": DB, "host_lease_sec": 30}, "only meaningful with --shared-campaign"),
        ({"campaign_db": DB, "shared_campaign": True, "claim_batch": 0}, "--claim-batch must be 1 to 1000"),
        ({"campaign_db": DB, "shared_campaign": True, "host_lease_sec": 2}, "--host-lease-sec must be 8 to 3600"),
        ({"campaign_db": DB, "shared_campaign": True, "host_lease_sec": float("nan")}, "--host-lease-sec must be"),
        ({"campaign_db": DB, "shared_campaign": True, "resume_from": ["/tmp/old-run"]}, "--resume-from does not apply"),
    ],
)
def test_bad_shared_flags_are_one_sentence(base, extra: dict, words: str) -> None:
    assert words in refused({**base, **extra})


def test_the_claimed_file_lists_each_task_once_and_skips_a_torn_line(tmp_path) -> None:
    path = tmp_path / "claims.jsonl"
    assert read_claimed(path) == []  # nothing claimed yet
    at = datetime.now(UTC)
    append_batch(path, ClaimedBatch(batch=1, tasks=["b", "a"], claimed_at=at))
    append_batch(path, ClaimedBatch(batch=2, tasks=["a", "c"], claimed_at=at))
    with open(path, "ab") as out:
        out.write(msgspec.json.encode(ClaimedBatch(batch=3, tasks=["d"], claimed_at=at))[:-7])  # killed mid-write
    assert read_claimed(path) == ["b", "a", "c"]


def test_a_shared_hosts_ledger_answers_only_for_what_it_claimed(tmp_path) -> None:
    import synthetic_run as synth  # tests/synthetic_run.py (tests/ is on sys.path)

    from cowork_adapter.schemas.manifest import SharedRun

    root = tmp_path / "run"
    synth.write_manifest(root, ["t1", "t2", "t3"])
    ctx = IndexContext.load(root)
    assert ctx.selection() == ["t1", "t2", "t3"] and ctx.claimed is None
    ctx.manifest.shared_run = SharedRun(run_id="r1", host="h", lease_sec=60, claim_batch=1, claimed_file="claims.jsonl")
    ctx.refresh()
    assert ctx.selection() == [] and ctx.invoked() == set()  # a host that claimed nothing answers for nothing
    append_batch(root / "claims.jsonl", ClaimedBatch(batch=1, tasks=["t2"], claimed_at=datetime.now(UTC)))
    ctx.refresh()
    assert ctx.selection() == ["t2"] and ctx.invoked() == {"t2"}


def test_no_database_variable_reaches_run_parallel(monkeypatch) -> None:
    env = runner_env({"PGPASSWORD": "pw", "PGPASSFILE": "/x", "PATH": "/bin", "IMAGE": "sha256:1"})
    assert env == {"PATH": "/bin", "IMAGE": "sha256:1"}


def test_a_campaign_stop_round_trips_in_the_record() -> None:
    at = datetime.now(UTC)
    record = CampaignRecord(
        fingerprint="sha256:" + "0" * 16,
        ceiling_usd=10,
        usage_baseline=1,
        prior_spend_usd=0,
        last_usage=1,
        last_usage_observed_at=at,
        created_at=at,
    )
    assert record.stop is None
    stopped = record.replace(stop=CampaignStop(reason="campaign_budget_reserve", host="h", run_root="/r", at=at))
    again = CampaignRecord.from_dict(msgspec.json.decode(stopped.to_json()))
    assert again.stop == stopped.stop


def test_the_loop_waits_for_a_fence_longer_than_the_lease() -> None:
    assert wait_for_fence_sec(10) > 10 and wait_for_fence_sec(60) > wait_for_fence_sec(10)


def test_the_launcher_gives_run_parallel_no_database_password(base, monkeypatch) -> None:
    from types import SimpleNamespace

    from cowork_adapter.run.runner_env import runner_env as launcher_runner_env

    monkeypatch.setenv("PGPASSWORD", "hunter2")
    monkeypatch.setenv("PGUSER", "postgres")
    cfg = RunConfig.from_flags(**base, campaign_db=DB)
    manifest = SimpleNamespace(image=SimpleNamespace(id="sha256:" + "1" * 64))
    env = launcher_runner_env(cfg, manifest, SimpleNamespace(environment=lambda e: e))
    assert "hunter2" not in env.values() and not any(k.startswith("PG") for k in env)
    assert env["IMAGE"].startswith("sha256:")


class FakeClaims:
    """The two calls HostLease makes, scripted: heartbeat results, then lapsed runs to fence."""

    def __init__(self, beats: list) -> None:
        self.beats = beats
        self.calls = 0

    def heartbeat(self, run_id: str):
        self.calls += 1
        beat = self.beats[min(self.calls, len(self.beats)) - 1]
        if isinstance(beat, Exception):
            raise beat
        return datetime.now(UTC), beat

    def expired_runs(self):
        raise OSError("a fence that fails")  # must not end the lease thread


def test_the_lease_thread_stops_the_host_once_and_outlives_a_failed_fence() -> None:

    from cowork_adapter.campaign.pg_store import ClaimLost
    from cowork_adapter.campaign.shared import HostLease

    stop = '{"reason": "campaign_budget_reserve", "host": "h", "run_root": "/r", "at": "2026-01-01T00:00:00Z"}'
    for beats, reason in (([None, stop], "campaign_stopped"), ([None, ClaimLost("lapsed")], "host_lease_lost")):
        claims, stops, said = FakeClaims(beats), [], []
        lease = HostLease(
            claims,
            "r1",
            0.08,
            "h",
            read_attempts=lambda root, tasks: {},
            on_stop=lambda r, d, stops=stops: stops.append(r),
            say=lambda action, detail, said=said: said.append(action),
        ).start()
        # Until the thread has done what is asserted (a fixed 0.5 s, about 25 turns, could pass with
        # the thread barely started on a loaded machine): stopping it sooner would prove nothing.
        wait_for(
            lambda stops=stops, claims=claims, said=said: bool(stops) and claims.calls >= 4 and "fence_failed" in said,
            30,
            0.02,
        )
        lease.stop()
        assert stops == [reason] and claims.calls >= 4  # once, and still renewing after it
        assert "fence_failed" in said
