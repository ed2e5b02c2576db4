"""`status` over one campaign spread over several hosts: the database's claims and host runs, with
what each given run root's monitor says. Writes nothing.

Liveness across hosts is the database's lease (renewed by the server's clock), never a process
check: the launchers of other hosts' run roots are on other machines.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from ..campaign.records import describe, match_runs, missing_runs, missing_sentence, read_snapshot
from ..errors import Refusal
from ..run.live import format_duration
from ..runroot.layout import MONITOR
from ..schemas.multihost import CampaignRun, CampaignSnapshot
from ..vocab import ClaimState, ExitCode, HostRunState
from .run_view import RunFiles, read_run

SCHEMA = "cowork_adapter.campaign_status.v1"


def _lease(run: CampaignRun, now: datetime) -> str:
    if run.release is not None:
        return describe(run.release)
    if run.state != HostRunState.LIVE:
        return f"{run.state} at {run.ended_at.isoformat() if run.ended_at else 'an unrecorded time'}"
    left = (run.lease_expires_at - now).total_seconds()
    if left > 0:
        return f"live (lease renewed; it expires in {left:.0f} s)"
    return (
        f"lease lapsed {-left:.0f} s ago: the run stopped renewing it (dead or cut off); its claims stay "
        "with it until its processes are proven gone on its host, or an operator releases it "
        "(`campaign release`) when its machine is gone"
    )


def _root_view(files: RunFiles | None) -> dict[str, Any] | None:
    if files is None:
        return None
    mon, m = files.monitor, files.manifest
    progress = mon.progress.to_dict() if mon is not None else None
    return {
        "run_root": str(files.run_root),
        "progress": progress,
        "observed_at": mon.observed_at.isoformat() if mon is not None else None,
        "run_spent_usd": mon.spending.run_spent_usd if mon is not None else None,
        "stop_reason": (m.stop_reason if m is not None and m.stop_reason else None)
        or (mon.stop_reason if mon else None),
        "outcome": m.outcome if m is not None else None,
        "problems": list(files.problems),
    }


def build_campaign_status(snap: CampaignSnapshot, files: dict[str, RunFiles]) -> dict[str, Any]:
    """The status picture (pure): `files` maps run_id to the given run root's files."""
    settled: dict[str, int] = {}
    claimed: dict[str, int] = {}
    counts = {s.value: 0 for s in ClaimState}
    for c in snap.claims:
        counts[c.state] = counts.get(c.state, 0) + 1
        if c.run_id is not None:
            bucket = settled if c.state == ClaimState.SETTLED else claimed
            bucket[c.run_id] = bucket.get(c.run_id, 0) + 1
    runs = []
    for r in snap.runs:
        hours = max(0.0, ((r.ended_at or snap.db_now) - r.started_at).total_seconds()) / 3600
        runs.append(
            {
                "run_id": r.run_id,
                "host": r.host,
                "run_root": r.run_root,
                "state": r.state,
                "lease": _lease(r, snap.db_now),
                "started_at": r.started_at.isoformat(),
                "ended_at": r.ended_at.isoformat() if r.ended_at else None,
                "hours": hours,
                "settled": settled.get(r.run_id, 0),
                "claimed": claimed.get(r.run_id, 0),
                "settled_per_hour": settled.get(r.run_id, 0) / hours if hours > 0 else None,
                "given": _root_view(files.get(r.run_id)),
            }
        )
    record = snap.record
    missing = missing_runs(snap.runs, files)
    return {
        "schema": SCHEMA,
        "campaign": snap.name,
        "location": snap.location,
        "read_at": snap.db_now.isoformat(),
        "claims": counts,
        "selected": len(snap.claims),
        "runs": runs,
        "missing_run_roots": [{"run_id": r.run_id, "host": r.host, "run_root": r.run_root} for r in missing],
        "missing": missing_sentence(missing, snap.name) if missing else None,
        "money": None
        if record is None
        else {
            "ceiling_usd": record.ceiling_usd,
            "meter_delta_usd": record.last_usage - record.usage_baseline,
            "spent_usd": record.spent_usd,
            "remaining_usd": record.remaining_usd,
            "last_usage_observed_at": record.last_usage_observed_at.isoformat(),
            "active_run": record.active_run.run_root if record.active_run else None,
        },
    }


def render_campaign_status(status: dict[str, Any]) -> list[str]:
    k = status["claims"]
    lines = [
        f"campaign {status['campaign']!r} ({status['location']}), read at {status['read_at']}",
        f"  tasks: {k['settled']}/{status['selected']} settled, {k['claimed']} claimed, {k['open']} open",
    ]
    money = status["money"]
    lines.append(
        "  spend: unknown (no money record yet)"
        if money is None
        else f"  spend: ${money['meter_delta_usd']:,.2f} (key meter's delta) of ceiling ${money['ceiling_usd']:,.2f}, "
        f"${money['remaining_usd']:,.2f} remaining (meter read {money['last_usage_observed_at']})"
    )
    for r in status["runs"]:
        rate = "n/a" if r["settled_per_hour"] is None else f"{r['settled_per_hour']:.1f}/h"
        lines.append(
            f"  host {r['host']} run {r['run_id']} ({r['run_root']}): {r['lease']}; settled {r['settled']}, "
            f"claimed {r['claimed']}, {format_duration(r['hours'] * 3600)} ({rate})"
        )
        g = r["given"]
        if g is None:
            lines.append("    run root: not given here")
            continue
        p = g["progress"]
        lines.append(
            f"    run root {g['run_root']}: "
            + (
                f"{p['done']}/{p['selected']} done, {p['running']} running ({MONITOR} as of {g['observed_at']})"
                if p
                else f"no {MONITOR} yet"
            )
            + (f", stop reason {g['stop_reason']}" if g["stop_reason"] else "")
        )
        lines += [f"    problem: {x}" for x in g["problems"]]
    if status["missing"]:
        lines.append(f"  missing: {status['missing']}")
    return lines


def campaign_status_command(url: str, name: str, roots: list[Path], as_json: bool) -> int:
    """0 read (every run root of the campaign given), 1 read but some run roots not given, 2 refused."""
    snap = read_snapshot(url, name)
    files = {}
    for root in roots:
        f = read_run(root)
        if f.manifest is None:
            raise Refusal(
                "campaign",
                f"{root} has no readable run manifest, so it cannot be matched to a run of campaign {name!r}.",
            )
        files[str(root)] = f
    matched = match_runs(snap.runs, [(root, f.manifest) for root, f in files.items() if f.manifest], name)
    status = build_campaign_status(snap, {run_id: files[root] for run_id, root in matched.items()})
    if as_json:
        print(json.dumps(status, sort_keys=True), flush=True)
    else:
        for line in render_campaign_status(status):
            print(line, flush=True)
    return int(ExitCode.FAILED if status["missing"] else ExitCode.OK)
