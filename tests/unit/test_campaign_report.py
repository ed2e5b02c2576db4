"""One result for a campaign spread over hosts: the pure merge (report/campaign.py) and the status
picture (ops/campaign_status.py), over synthetic run roots with real ledgers and database rows as
the PostgreSQL store returns them."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)

from cowork_adapter.campaign.records import match_runs, missing_runs, missing_sentence
from cowork_adapter.errors import Refusal
from cowork_adapter.ops.campaign_status import build_campaign_status, render_campaign_status
from cowork_adapter.ops.run_view import read_run
from cowork_adapter.report.build import build_report, row_cost
from cowork_adapter.report.campaign import (
    REASON_CLAIMED,
    REASON_DB_ONLY,
    REASON_OPEN,
    campaign_view,
    check_identities,
    merge_campaign,
    overlapping,
)
from cowork_adapter.report.merge import load_run
from cowork_adapter.report.render import to_html, to_markdown
from cowork_adapter.schemas.campaign import CampaignRecord, key_fingerprint
from cowork_adapter.schemas.campaign import RunRecord as CampaignRunRecord
from cowork_adapter.schemas.manifest import SharedRun
from cowork_adapter.schemas.multihost import CampaignClaim, CampaignRun, CampaignSnapshot

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
SELECTION = ["a1", "a2", "b1", "c", "d", "e"]


def run(run_id: str, host: str, root: Path | str, start_h: float, end_h: float | None, state: str) -> CampaignRun:
    return CampaignRun(
        run_id=run_id,
        host=host,
        run_root=str(root),
        state=state,
        started_at=T0 + timedelta(hours=start_h),
        ended_at=None if end_h is None else T0 + timedelta(hours=end_h),
        lease_expires_at=T0 + timedelta(hours=(end_h if end_h is not None else 3) + 0.01),
    )


def claim(task: str, state: str, run_id: str | None = None, status: str | None = None) -> CampaignClaim:
    return CampaignClaim(
        task_id=task,
        state=state,
        run_id=run_id,
        times_claimed=0 if state == "open" else 1,
        settled_status=status,
        receipt=None,
        settled_at=T0 + timedelta(hours=1) if status else None,
    )


def record(last_usage: float = 17.5, runs: tuple = ()) -> CampaignRecord:
    return CampaignRecord(
        fingerprint=key_fingerprint("k"),
        ceiling_usd=100.0,
        usage_baseline=10.0,
        prior_spend_usd=0.0,
        last_usage=last_usage,
        last_usage_observed_at=T0 + timedelta(hours=3),
        created_at=T0,
        runs=runs,
    )


@pytest.fixture
def campaign(tmp_path):
    """Host a ran a1 (pass), a2 (fail), b1 (pass: but the database says host b settled it) and z
    (not in the selection); host b ran b1 (pass) and d (infra, still claimed); the database says b
    settled e though b's ledger has no row for it; c is open."""
    ra = synth.ledger_run(tmp_path / "ra", SELECTION + ["z"], {"a1": "pass", "a2": "fail", "b1": "pass", "z": "pass"})
    rb = synth.ledger_run(tmp_path / "rb", SELECTION, {"b1": "pass", "d": "infra"})
    runs = [run("RA", "host-a", ra, 0, 2, "finished"), run("RB", "host-b", rb, 1, None, "live")]
    claims = [
        claim("a1", "settled", "RA", "passed"),
        claim("a2", "settled", "RA", "failed"),
        claim("b1", "settled", "RB", "passed"),
        claim("c", "open"),
        claim("d", "claimed", "RB"),
        claim("e", "settled", "RB", "passed"),
    ]
    # The record's history has host a's finished run (its spend as the launcher settled it).
    history = (
        CampaignRunRecord(
            run_root=str(ra),
            run_label="l",
            outcome="completed",
            spent_usd=4.25,
            started_at=T0,
            finished_at=T0 + timedelta(hours=2),
        ),
    )
    snap = CampaignSnapshot(
        name="c1",
        location="postgresql://pg/db campaign 'c1'",
        db_now=T0 + timedelta(hours=3),
        record=record(runs=history),
        runs=runs,
        claims=claims,
    )
    return snap, {"RA": load_run(str(ra)), "RB": load_run(str(rb))}


def given(*recs):
    return [(r.root, r.manifest) for r in recs]


def test_roots_match_their_host_runs_by_the_registered_run_root(campaign):
    snap, recs = campaign
    assert match_runs(snap.runs, given(recs["RB"], recs["RA"]), "c1") == {"RB": recs["RB"].root, "RA": recs["RA"].root}
    assert [r.run_id for r in missing_runs(snap.runs, {"RA": recs["RA"].root})] == ["RB"]


def test_a_root_not_of_the_campaign_is_refused(campaign, tmp_path):
    snap, recs = campaign
    stranger = load_run(str(synth.ledger_run(tmp_path / "elsewhere", ["a1"], {"a1": "pass"})))
    with pytest.raises(Refusal, match=r"elsewhere .* is not a run of campaign 'c1': no host run"):
        match_runs(snap.runs, given(recs["RA"], stranger), "c1")
    other = recs["RA"].manifest.replace(campaign_name="c2")
    with pytest.raises(Refusal, match="belongs to campaign 'c2', not 'c1'"):
        match_runs(snap.runs, [(recs["RA"].root, other)], "c1")
    unknown_id = recs["RA"].manifest.replace(shared_run=host_run_record("R-nope"))
    with pytest.raises(Refusal, match="records run R-nope, which is not a run of campaign 'c1'"):
        match_runs(snap.runs, [(recs["RA"].root, unknown_id)], "c1")


def host_run_record(run_id: str) -> SharedRun:
    """What a shared host's launcher records of its host run in its manifest."""
    return SharedRun(run_id=run_id, host="h", lease_sec=60, claim_batch=1, claimed_file="claims.jsonl")


def test_two_hosts_with_the_same_path_need_the_run_id(campaign):
    snap, recs = campaign
    twin = run("RC", "host-c", recs["RA"].manifest.run_root, 0, 1, "finished")
    runs = snap.runs + [twin]
    with pytest.raises(Refusal, match="matches run RA on host-a .* and run RC on host-c"):
        match_runs(runs, given(recs["RA"]), "c1")
    # With the run id in its manifest, the copy is matched to its own run; the same run twice is refused.
    tagged = recs["RA"].manifest.replace(shared_run=host_run_record("RC"))
    assert match_runs(runs, [("/copies/c", tagged)], "c1") == {"RC": "/copies/c"}
    with pytest.raises(Refusal, match="both run RC on host-c"):
        match_runs(runs, [("/copies/c", tagged), ("/copies/c2", tagged)], "c1")


def test_missing_roots_are_named_with_their_hosts(campaign):
    snap, _ = campaign
    text = missing_sentence(snap.runs, "c1")
    assert "2 run roots are not given" in text and "host-a:" in text and "host-b:" in text and "(run RB, live)" in text


def test_the_denominator_is_the_selection_and_each_settled_task_counts_once(campaign):
    snap, recs = campaign
    m = merge_campaign(snap.claims, snap.runs, recs)
    assert m.tasks == SELECTION and set(m.merged) == set(SELECTION)
    status = {t: m.merged[t].row.status.value for t in SELECTION}
    assert status == {
        "a1": "passed",
        "a2": "failed",
        "b1": "passed",
        "c": "not_attempted",
        "d": "infra_failed",
        "e": "passed",
    }
    # b1 counts from the run the database says settled it (host b), not host a's receipt.
    assert m.merged["b1"].provenance == recs["RB"].root and m.merged["a1"].provenance == recs["RA"].root
    assert m.merged["c"].row.reason_code == REASON_OPEN and m.merged["e"].row.reason_code == REASON_DB_ONLY
    assert m.merged["d"].provenance == recs["RB"].root  # its unsettled attempt's own words


def test_disagreements_are_disclosed_never_merged(campaign):
    snap, recs = campaign
    notes = merge_campaign(snap.claims, snap.runs, recs).disagreements
    assert len(notes) == 3, notes
    assert any(
        n.startswith("Task b1: run RA on host-a") and "says run RB settled it" in n and "not counted" in n
        for n in notes
    )
    assert any(n.startswith("Task e:") and "its ledger has no row for it" in n for n in notes)
    assert any(n.startswith("Task z:") and "not in the campaign's selection" in n for n in notes)


def test_a_settled_result_for_an_open_task_is_not_counted(campaign):
    snap, recs = campaign
    claims = [claim("a1", "open")] + [c for c in snap.claims if c.task_id != "a1"]
    m = merge_campaign(claims, snap.runs, recs)
    assert m.merged["a1"].row.status.value == "not_attempted"
    assert any("Task a1:" in n and "says it is open, not settled" in n for n in m.disagreements)
    claimed = [claim("a1", "claimed", "RA")] + claims[1:]
    assert merge_campaign(claimed, snap.runs, recs).merged["a1"].row.reason_code == REASON_CLAIMED


def test_a_ledger_that_disagrees_on_the_status_yields_to_the_database(campaign):
    snap, recs = campaign
    claims = [claim("a2", "settled", "RA", "passed") if c.task_id == "a2" else c for c in snap.claims]
    m = merge_campaign(claims, snap.runs, recs)
    assert m.merged["a2"].row.status.value == "passed" and m.merged["a2"].row.reason_code == REASON_DB_ONLY
    assert any("Task a2:" in n and "its ledger says failed" in n for n in m.disagreements)


def test_per_host_throughput_and_spend_beside_the_campaigns_one_spend(campaign):
    snap, recs = campaign
    view = campaign_view(
        snap,
        recs,
        merge_campaign(snap.claims, snap.runs, recs),
        row_cost=row_cost,
        usage_series=[(2.0, 12.0), (1.0, 11.0)],
    )
    hosts = {h["host"]: h for h in view.section["hosts"]}
    assert (hosts["host-a"]["settled"], hosts["host-a"]["hours"]) == (2, pytest.approx(2.0))
    assert hosts["host-a"]["settled_per_hour"] == pytest.approx(1.0)
    # host b is live: its hours run to the database's now (T0+3h), from its start at T0+1h.
    assert (hosts["host-b"]["settled"], hosts["host-b"]["claimed"]) == (2, 1)
    assert hosts["host-b"]["settled_per_hour"] == pytest.approx(1.0)
    # accounted cost: every own attempt of the host's runs (synthetic summaries cost $0.50 each).
    assert hosts["host-a"]["accounted_usd"] == pytest.approx(4 * 0.5) and hosts["host-a"]["attempts"] == 4
    # meter spend: host a's from the record's history (its run root has no monitor), host b's unknown.
    assert (hosts["host-a"]["meter_spent_usd"], hosts["host-b"]["meter_spent_usd"]) == (4.25, None)
    assert view.meter_delta_usd == pytest.approx(7.5) and view.section["money"]["remaining_usd"] == pytest.approx(92.5)
    assert view.spend_series == [(1.0, 1.0), (2.0, 2.0)]
    assert any("Runs overlapped in time" in d for d in view.disclosures)
    assert any("1 run(s) were still live" in d and "run RB on host-b" in d for d in view.disclosures)

    r = build_report([recs["RA"], recs["RB"]], concurrency=2, campaign=view)
    assert (r["denominator"], r["passed"]) == (6, 3)
    assert r["counts"]["not_attempted"] == 1 and r["counts"]["infra_failed"] == 1
    assert r["cost"]["meter_run_spent_usd"] == pytest.approx(7.5)  # the campaign's delta, not a sum of runs
    assert r["projection"]["campaign_remaining_usd"] == pytest.approx(92.5)
    assert not any("recovery ancestry" in d for d in r["disclosures"])
    assert all(re.search(r"\(METHODOLOGY\.md §\w+\)$", d) for d in r["disclosures"])
    assert "## hosts" in Path(r["methodology"]).read_text()
    assert any("Task b1:" in d for d in r["disclosures"])
    md = to_markdown(r)
    assert (
        "## Campaign" in md and "4 of 6 selected tasks settled, 1 claimed, 1 open" in md and "| host-a | 1 | 2 |" in md
    )
    assert "host-b" in to_html(r)


def test_a_campaign_without_a_money_record_has_unknown_spend(campaign):
    snap, recs = campaign
    snap = CampaignSnapshot(**{**{f: getattr(snap, f) for f in snap.__struct_fields__}, "record": None})
    view = campaign_view(
        snap, recs, merge_campaign(snap.claims, snap.runs, recs), row_cost=row_cost, usage_series=[(1.0, 11.0)]
    )
    assert view.meter_delta_usd is None and view.spend_series == [] and view.section["money"] is None
    assert any("no money record" in d for d in view.disclosures)


def test_a_released_run_is_disclosed_as_an_operators_release_not_a_fence_proof(campaign):
    """`campaign release` of host b's run (its machine lost): the report and status say who released
    it, on what evidence, and that an attestation is not a proof."""
    from cowork_adapter.campaign.release import Fence, release_record
    from cowork_adapter.schemas.multihost import HostRun
    from cowork_adapter.vocab import ReleaseFence

    snap, recs = campaign
    rb = snap.runs[1]
    stored = HostRun(
        run_id=rb.run_id,
        campaign="c1",
        host=rb.host,
        run_root=rb.run_root,
        lease_sec=60,
        lease_expires_at=rb.lease_expires_at,
        state="live",
    )
    fence = Fence(ReleaseFence.ATTESTED, "no Docker daemon was named", None)
    release = release_record(
        stored,
        snap.db_now,
        "postgres",
        ["d"],
        fence=fence,
        label="l",
        confirm_fenced=True,
        operator="op@desk",
        note="VM deleted",
    )
    released = CampaignRun(
        **{
            **{f: getattr(rb, f) for f in rb.__struct_fields__},
            "state": "released",
            "ended_at": snap.db_now,
            "release": release,
        }
    )
    snap = CampaignSnapshot(
        **{**{f: getattr(snap, f) for f in snap.__struct_fields__}, "runs": [snap.runs[0], released]}
    )
    view = campaign_view(snap, recs, merge_campaign(snap.claims, snap.runs, recs), row_cost=row_cost, usage_series=[])
    said = [d for d in view.disclosures if d.startswith("Host run RB on host-b")]
    assert len(said) == 1 and "released by op@desk (database role postgres)" in said[0]
    assert "operator-attested, not proven" in said[0] and "note: VM deleted" in said[0]
    item = next(h for h in view.section["hosts"] if h["host"] == "host-b")["runs"][0]
    assert item["release"]["fence"] == "operator_attested" and item["release"]["attested"] is True
    status = build_campaign_status(snap, {})
    assert "operator-attested, not proven" in next(r for r in status["runs"] if r["run_id"] == "RB")["lease"]


def test_overlap_is_seen_past_a_short_run():
    long_, short, late = (
        run("1", "h", "/a", 0, 10, "finished"),
        run("2", "h", "/b", 1, 2, "finished"),
        run("3", "h", "/c", 5, 6, "finished"),
    )
    assert overlapping([long_, short, late], T0) and overlapping([long_, late], T0)
    assert not overlapping([short, late], T0)


def test_hosts_of_another_configuration_are_refused_another_image_disclosed(campaign, tmp_path):
    snap, recs = campaign
    rc = load_run(str(synth.ledger_run(tmp_path / "rc", SELECTION, {}, image_id="sha256:" + "9" * 64)))
    runs = snap.runs + [run("RC", "host-c", rc.root, 0, 1, "finished")]
    notes = check_identities({**recs, "RC": rc}, runs)
    assert len(notes) == 1 and "run RC on host-c" in notes[0] and "builds its own image" in notes[0]
    rd = load_run(
        str(synth.ledger_run(tmp_path / "rd", SELECTION, {}, applied_config={**synth.CONFIG, "model": "other/m"}))
    )
    runs.append(run("RD", "host-d", rd.root, 0, 1, "finished"))
    with pytest.raises(Refusal, match=r"\(host-d\) differs in applied_config key 'model'"):
        check_identities({**recs, "RD": rd}, runs)


def test_status_shows_every_host_and_names_the_missing_root(campaign):
    snap, recs = campaign
    ra = Path(recs["RA"].root)
    status = build_campaign_status(snap, {"RA": read_run(ra)})
    assert status["claims"] == {"open": 1, "claimed": 1, "settled": 4} and status["selected"] == 6
    by = {r["run_id"]: r for r in status["runs"]}
    assert by["RA"]["given"]["run_root"] == str(ra) and by["RB"]["given"] is None
    assert by["RB"]["lease"].startswith("live (lease renewed; it expires in 36 s)")
    assert (
        status["missing"]
        and "host-b:" in status["missing"]
        and status["money"]["meter_delta_usd"] == pytest.approx(7.5)
    )
    text = "\n".join(render_campaign_status(status))
    assert "tasks: 4/6 settled, 1 claimed, 1 open" in text and "run root: not given here" in text
    lapsed = CampaignSnapshot(
        **{**{f: getattr(snap, f) for f in snap.__struct_fields__}, "db_now": T0 + timedelta(hours=4)}
    )
    assert "lease lapsed" in {r["run_id"]: r for r in build_campaign_status(lapsed, {})["runs"]}["RB"]["lease"]
