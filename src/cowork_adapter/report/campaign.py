"""One campaign spread over several hosts: match run roots to its host runs and merge their ledgers.

Pure logic over what was read (the database snapshot, the loaded run roots); no I/O here.

* The denominator is the campaign's selection: every task_claims row, whatever its state.
* A settled task counts once, by the run that settled it (task_claims.run_id), from that run's
  ledger row. The database's settled status is the campaign's one word on it: when the settling
  run's ledger has no such row, or says otherwise, the database's status counts and the
  difference is disclosed.
* An open or claimed task counts as not run (never dropped from the denominator).
* A run root's settled row for a task the database says another run settled (or that is not
  settled at all, or not in the selection) is disclosed and never merged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from ..campaign.records import describe, run_place
from ..errors import Refusal
from ..runroot.identity import identity_difference
from ..schemas.ledger import TaskRow
from ..schemas.multihost import CampaignClaim, CampaignRun, CampaignSnapshot
from ..vocab import ClaimState, OfficialEvalStatus, PaidActivity, TaskStatus
from .merge import STAGE, MergedRow, RunRecord, own_attempts

# reason_code of the rows this merge makes itself (no ledger row stands for them)
REASON_DB_ONLY = "settled_in_campaign_db_only"
REASON_OPEN = "open_in_campaign"
REASON_CLAIMED = "claimed_in_campaign"


@dataclass
class CampaignMerge:
    tasks: list[str]  # the denominator: the campaign's whole selection
    merged: dict[str, MergedRow]  # every task of `tasks`, each once
    claim_state: dict[str, str]  # task -> open | claimed | settled
    disagreements: list[str] = field(default_factory=list)  # one sentence each: disclosed, never merged
    image_notes: list[str] = field(default_factory=list)


def check_identities(matched: dict[str, RunRecord], runs: list[CampaignRun]) -> list[str]:
    """Refuse hosts that ran another configuration, seed or benchmark; each host builds its own
    image, so a different image ID is disclosed (sentences), not refused."""
    by_id = {r.run_id: r for r in runs}
    items = sorted(matched.items(), key=lambda kv: kv[1].root)
    if not items:
        return []
    first_id, first = items[0]
    base = first.manifest
    first_image = base.image.id if base.image else None
    notes = []
    for run_id, rec in items[1:]:
        m = rec.manifest
        image = m.image.id if m.image else None
        diff = identity_difference(
            m,
            applied_config=base.applied_config,
            seed_head=base.seed.head if base.seed else None,
            bench_commit=base.bench.commit if base.bench else None,
            image_id=image,
        )
        if diff is not None:
            raise Refusal(
                STAGE,
                f"Run root {rec.root} ({by_id[run_id].host}) differs in {diff} from {first.root} "
                f"({by_id[first_id].host}), and results of different configurations are never merged.",
            )
        if image != first_image:
            notes.append(
                f"{run_place(by_id[run_id])} used image {image}, and {run_place(by_id[first_id])} image "
                f"{first_image}: each host builds its own image from the same configuration."
            )
    return notes


def _synthetic_row(task: str, status: TaskStatus, reason: str, ts: datetime | None) -> TaskRow:
    """A row for a task no ledger row stands for (settled only in the database, or not run)."""
    return TaskRow(
        ts=(ts.isoformat() if ts else ""),
        instance_id=task,
        status=status,
        reason_code=reason,
        official_eval_status=OfficialEvalStatus.UNREPORTED,
        paid_activity=PaidActivity.UNKNOWN if status.settled else PaidActivity.NONE,
    )


def _ledger_rows(rec: RunRecord) -> dict[str, TaskRow]:
    """task -> this run's own row for it (a campaign's host runs carry no ancestors' rows)."""
    return {r.instance_id: r for r in own_attempts(rec)}


def merge_campaign(
    claims: list[CampaignClaim], runs: list[CampaignRun], matched: dict[str, RunRecord]
) -> CampaignMerge:
    by_id = {r.run_id: r for r in runs}
    rows = {run_id: _ledger_rows(rec) for run_id, rec in matched.items()}
    tasks = [c.task_id for c in claims]
    merged: dict[str, MergedRow] = {}
    notes: list[str] = []
    selection = set(tasks)
    for claim in claims:
        task = claim.task_id
        if claim.state == ClaimState.SETTLED and claim.run_id is not None:
            settler = by_id.get(claim.run_id)
            rec = matched.get(claim.run_id)
            db_status = TaskStatus(claim.settled_status)
            row = rows.get(claim.run_id, {}).get(task)
            if row is not None and rec is not None and row.status is db_status:  # (a row implies its run)
                merged[task] = MergedRow(row=row, provenance=rec.root)
            else:
                merged[task] = MergedRow(
                    row=_synthetic_row(task, db_status, REASON_DB_ONLY, claim.settled_at),
                    provenance=f"campaign database ({claim.run_id})",
                )
                what = (
                    f"its ledger says {row.status.value}"
                    if row is not None
                    else "its ledger has no row for it"
                    if rec is not None
                    else "its run root was not read"
                )
                who = run_place(settler) if settler else f"run {claim.run_id}"
                notes.append(
                    f"Task {task}: the campaign database says {who} settled it as {db_status.value}, but "
                    f"{what}; the database's status counts."
                )
            for other_id, other in rows.items():
                o = other.get(task)
                if other_id != claim.run_id and o is not None and o.status.settled:
                    notes.append(
                        f"Task {task}: {run_place(by_id[other_id])} has a result ({o.status.value}) for it, but "
                        f"the campaign database says run {claim.run_id} settled it; that result is not counted."
                    )
            continue
        # Open or claimed: not run. An unsettled attempt (infra_failed, ...) keeps its own words.
        reason = REASON_CLAIMED if claim.state == ClaimState.CLAIMED else REASON_OPEN
        kept: MergedRow | None = None
        for run_id, own in rows.items():
            o = own.get(task)
            if o is None:
                continue
            if o.status.settled:
                notes.append(
                    f"Task {task}: {run_place(by_id[run_id])} has a result ({o.status.value}) for it, but the "
                    f"campaign database says it is {claim.state}, not settled; that result is not counted."
                )
            elif o.status is not TaskStatus.NOT_ATTEMPTED:
                kept = MergedRow(row=o, provenance=matched[run_id].root)
        merged[task] = kept or MergedRow(
            row=_synthetic_row(task, TaskStatus.NOT_ATTEMPTED, reason, None),
            provenance=(f"campaign database ({claim.run_id})" if claim.run_id else "campaign database"),
        )
    for run_id, own in rows.items():
        for task, o in sorted(own.items()):
            if task not in selection and o.status is not TaskStatus.NOT_ATTEMPTED:
                notes.append(
                    f"Task {task}: {run_place(by_id[run_id])} has a row ({o.status.value}) for it, but it is not "
                    "in the campaign's selection; it is not counted."
                )
    return CampaignMerge(
        tasks=tasks, merged=merged, claim_state={c.task_id: c.state for c in claims}, disagreements=notes
    )


def _hours(run: CampaignRun, now: datetime) -> float:
    end = run.ended_at or now
    return max(0.0, (end - run.started_at).total_seconds()) / 3600


def host_figures(
    runs: list[CampaignRun],
    claims: list[CampaignClaim],
    matched: dict[str, RunRecord],
    now: datetime,
    row_cost: Any,
    recorded: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Per host: its runs, tasks settled, hours of its runs (a live run up to the database's now),
    throughput, and spend: the meter's delta during its runs (the run's own monitor or meter
    readings, else the campaign record's history entry for its run root: `recorded`) and the
    accounted cost of its attempts."""
    settled: dict[str, int] = {}
    claimed: dict[str, int] = {}
    for c in claims:
        if c.run_id is not None:
            bucket = settled if c.state == ClaimState.SETTLED else claimed
            bucket[c.run_id] = bucket.get(c.run_id, 0) + 1
    hosts: dict[str, list[CampaignRun]] = {}
    for r in runs:
        hosts.setdefault(r.host, []).append(r)
    out = []
    for host in sorted(hosts):
        items = []
        for r in hosts[host]:
            rec = matched.get(r.run_id)
            attempts = own_attempts(rec) if rec is not None else []
            costs = [row_cost(a) for a in attempts]
            items.append(
                {
                    "run_id": r.run_id,
                    "run_root": r.run_root,
                    "given_as": rec.root if rec else None,
                    "state": r.state,
                    "started_at": r.started_at.isoformat(),
                    "ended_at": r.ended_at.isoformat() if r.ended_at else None,
                    "hours": _hours(r, now),
                    "settled": settled.get(r.run_id, 0),
                    "claimed": claimed.get(r.run_id, 0),
                    "meter_spent_usd": _run_meter(rec, (recorded or {}).get(r.run_root)),
                    "accounted_usd": sum(c for c in costs if c is not None),
                    "unknown_cost_attempts": costs.count(None),
                    "attempts": len(attempts),
                    "release": msgspec.to_builtins(r.release) if r.release is not None else None,
                }
            )
        hours = sum(i["hours"] for i in items)
        meter = [i["meter_spent_usd"] for i in items]
        n = sum(i["settled"] for i in items)
        out.append(
            {
                "host": host,
                "runs": items,
                "settled": n,
                "claimed": sum(i["claimed"] for i in items),
                "hours": hours,
                "settled_per_hour": (n / hours) if hours > 0 else None,
                "meter_spent_usd": sum(meter) if meter and all(v is not None for v in meter) else None,
                "accounted_usd": sum(i["accounted_usd"] for i in items),
                "unknown_cost_attempts": sum(i["unknown_cost_attempts"] for i in items),
                "attempts": sum(i["attempts"] for i in items),
            }
        )
    return out


def _run_meter(rec: RunRecord | None, recorded: float | None) -> float | None:
    own = rec.run_spent_usd() if rec is not None else None
    return own if own is not None else recorded


def overlapping(runs: list[CampaignRun], now: datetime) -> bool:
    """Did any two runs overlap in time? Then each run's meter delta also holds the others' spend."""
    end: datetime | None = None
    for start, stop in sorted((r.started_at, r.ended_at or now) for r in runs):
        if end is not None and start < end:
            return True
        end = stop if end is None else max(end, stop)
    return False


@dataclass
class CampaignView:
    """What `build_report` takes from a campaign instead of a resume chain."""

    merge: CampaignMerge
    section: dict[str, Any]  # the report's "campaign" key
    meter_delta_usd: float | None  # the campaign's one spend: the key meter's delta since its baseline
    remaining_usd: float | None
    location: str
    spend_series: list[tuple[float, float]]  # (unix ts, meter usage - the campaign's baseline)
    disclosures: list[str]


def campaign_view(
    snap: CampaignSnapshot,
    matched: dict[str, RunRecord],
    merge: CampaignMerge,
    *,
    row_cost: Any,
    usage_series: list[tuple[float, float]],
) -> CampaignView:
    """The campaign's section, spend and disclosures (`usage_series`: every run's (ts, meter usage))."""
    record = snap.record
    delta = (record.last_usage - record.usage_baseline) if record is not None else None
    recorded = {r.run_root: r.spent_usd for r in record.runs} if record is not None else {}
    hosts = host_figures(snap.runs, snap.claims, matched, snap.db_now, row_cost, recorded)
    counts = {s.value: 0 for s in ClaimState}
    for c in snap.claims:
        counts[c.state] = counts.get(c.state, 0) + 1
    notes = [
        f"One campaign over {len(hosts)} host(s) and {len(snap.runs)} run(s) ({snap.location}): the "
        "denominator is its whole selection and each settled task counts once, by the run the campaign "
        "database says settled it."
    ]
    if counts[ClaimState.OPEN] or counts[ClaimState.CLAIMED]:
        notes.append(
            f"{counts[ClaimState.OPEN]} task(s) open and {counts[ClaimState.CLAIMED]} claimed but unsettled "
            "count as not run (not passed)."
        )
    live = [r for r in snap.runs if r.state == "live"]
    if live:
        notes.append(
            f"{len(live)} run(s) were still live when the database was read "
            f"({', '.join(run_place(r) for r in live)}): this is a result so far."
        )
    for r in snap.runs:
        if r.release is not None:  # never a fence proof: the evidence and who gave it, as recorded
            notes.append(f"Host run {r.run_id} on {r.host} ({r.run_root}) was {describe(r.release)}.")
    if record is None:
        notes.append("The campaign has no money record in the database yet, so its spend is unknown.")
    if overlapping(snap.runs, snap.db_now):
        notes.append(
            "Runs overlapped in time on one key, so each host's meter figure also holds the other hosts' "
            "spending then; only the campaign's meter delta is its spend, and the hosts' figures do not add up to it."
        )
    notes += merge.image_notes + merge.disagreements
    section = {
        "name": snap.name,
        "location": snap.location,
        "read_at": snap.db_now.isoformat(),
        "claims": counts,
        "hosts": hosts,
        "disagreements": list(merge.disagreements),
        "money": None
        if record is None
        else {
            "ceiling_usd": record.ceiling_usd,
            "usage_baseline": record.usage_baseline,
            "last_usage": record.last_usage,
            "last_usage_observed_at": record.last_usage_observed_at.isoformat(),
            "meter_delta_usd": delta,
            "prior_spend_usd": record.prior_spend_usd,
            "spent_usd": record.spent_usd,
            "remaining_usd": record.remaining_usd,
        },
    }
    base = record.usage_baseline if record is not None else None
    series = [] if base is None else [(ts, u - base) for ts, u in sorted(usage_series)]
    return CampaignView(
        merge=merge,
        section=section,
        meter_delta_usd=delta,
        remaining_usd=record.remaining_usd if record is not None else None,
        location=snap.location,
        spend_series=series,
        disclosures=notes,
    )
