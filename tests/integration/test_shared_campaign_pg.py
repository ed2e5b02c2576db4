"""A shared campaign's record and claims on a REAL PostgreSQL server (campaign/shared.py).

Proves: the first host creates the record with its startup reading as the baseline and later hosts
admit against it (one transaction each); hosts' writes never conflict (read-modify-write on the row:
a reading only raises last_usage, history entries accumulate); shared hosts and an exclusive holder
refuse each other; a campaign-wide stop is seen by every host's lease renewal, ends claiming and
refuses later hosts; a run never re-claims a task it already ran.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from pg_server import PgServer, server  # noqa: F401 (a module fixture); tests/ is on sys.path (its conftest)

from cowork_adapter.campaign.pg_store import PostgresCampaignStore, TaskClaims, read_campaign_db
from cowork_adapter.campaign.shared import open_shared_campaign
from cowork_adapter.campaign.store import open_campaign
from cowork_adapter.errors import Refusal

FP = "sha256:0123456789abcdef"
MONEY = dict(key_fingerprint=FP, ceiling=50.0, reserve=5.0, run_budget=20.0)


@pytest.fixture()
def db(server: PgServer) -> str:
    return server.fresh_database("s" + uuid.uuid4().hex[:10])


def join(db: str, usage: float, *, create: bool = True):
    return open_shared_campaign(db, "c", startup_usage=usage, create_if_missing=create, **MONEY)


def test_hosts_join_one_record_and_their_writes_never_conflict(db: str) -> None:
    with pytest.raises(Refusal, match="needs --new-campaign"):
        with join(db, 1.0, create=False):
            pass
    with join(db, 10.0) as a, join(db, 10.5) as b, join(db, 10.2) as c:
        assert a.record.usage_baseline == 10.0 and b.record.usage_baseline == 10.0  # the first host's reading
        assert b.record.last_usage == 10.5
        assert c.record.last_usage == 10.5  # read before b's was stored: admitted, the newer one stays
        a.start_run(run_root="/a", run_label="la", launcher_pid=1, host="h")
        b.start_run(run_root="/b", run_label="lb", launcher_pid=2, host="h")
        b.record_usage(12.0)
        a.record_usage(11.0)  # an older reading of the same meter: kept out, never an error
        assert a.record.last_usage == 12.0
        threads = [threading.Thread(target=h.record_usage, args=(u,)) for h, u in ((a, 13.0), (b, 12.5))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        a.finish_run(outcome="completed")
        b.finish_run(outcome="completed")
    record = read_campaign_db(db, "c")
    assert record.last_usage == 13.0 and record.usage_baseline == 10.0 and record.spent_usd == 3.0
    assert sorted(r.run_root for r in record.runs) == ["/a", "/b"] and record.active_run is None


def test_shared_hosts_and_an_exclusive_holder_refuse_each_other(db: str) -> None:
    store = PostgresCampaignStore(db, "c")
    with join(db, 1.0):
        with pytest.raises(Refusal, match="held by another launcher"):
            store.refuse_if_locked()
    with open_campaign(store, key_fingerprint=FP, ceiling=50.0, startup_usage=1.0, create_if_missing=False):
        with pytest.raises(Refusal, match="held exclusively"):
            with join(db, 1.0):
                pass


def test_a_campaign_stop_reaches_every_host_and_ends_claiming(db: str) -> None:
    with join(db, 1.0) as a, TaskClaims(db, "c") as claims:
        a.start_run(run_root="/a", run_label="la", launcher_pid=1, host="h")
        claims.add_selection(["t1", "t2", "t3"])
        run_a = claims.register_run(host="h", run_root="/a", lease_sec=30)
        run_b = claims.register_run(host="h", run_root="/b", lease_sec=30)
        assert claims.claim(run_a.run_id, 1) == ["t1"]
        assert claims.heartbeat(run_b.run_id)[1] is None
        a.stop_campaign("campaign_budget_reserve", host="h", run_root="/a")
        a.stop_campaign("budget_exhausted", host="h", run_root="/a")  # the first stop stays
        _, stop = claims.heartbeat(run_b.run_id)
        assert stop is not None and "campaign_budget_reserve" in stop
        assert claims.claim(run_b.run_id, 5) == []  # nothing more is handed out anywhere
    with pytest.raises(Refusal, match="was stopped by campaign_budget_reserve"):
        with join(db, 2.0):
            pass


def test_a_run_never_reclaims_a_task_it_already_ran(db: str) -> None:
    with join(db, 1.0), TaskClaims(db, "c") as claims:
        claims.add_selection(["t1", "t2"])
        run = claims.register_run(host="h", run_root="/a", lease_sec=30)
        other = claims.register_run(host="h", run_root="/b", lease_sec=30)
        assert claims.claim(run.run_id, 1) == ["t1"]
        claims.settle(run.run_id, "t1", "infra_failed")  # unsettled: back to open, for another host
        assert claims.claim(run.run_id, 5, exclude=["t1"]) == ["t2"]
        assert claims.claim(run.run_id, 5, exclude=["t1", "t2"]) == []
        assert claims.claim(other.run_id, 5) == ["t1"]
        assert claims.held_by(other.run_id) == ["t1"] and claims.lapsed_claims() == 0
