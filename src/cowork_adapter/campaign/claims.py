"""Task claims of a campaign shared by several hosts: the pure rules (the SQL is in pg_store.py).

A task is open, claimed by exactly one live host run, or settled by its receipt (then never run
again). A host run whose lease is no longer renewed may still have a runner working; its claims go
back to open only when BOTH its lease has expired (by the database's clock) AND the launcher-death
rules (custody/liveness.py) prove every process of that run gone on the host where it ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..custody.liveness import Recorded, prove, read_custody_processes
from ..runroot.layout import CUSTODY_PROCESSES_FILE
from ..schemas.multihost import CampaignRun, FenceProof, HostRun, HostRunRelease
from ..vocab import ClaimState, HostRunState, ReleaseFence, TaskStatus

SETTLED_STATUSES = frozenset(s.value for s in TaskStatus if s.settled)


@dataclass(frozen=True)
class ReleaseDecision:
    release: bool
    reason: str  # one sentence: why the claims go back, or why they stay


def decide_release(run: HostRun, db_now: datetime, proof: FenceProof | None) -> ReleaseDecision:
    """May `run`'s unsettled claims go back to open? Only after its lease expired AND a fence proof
    from its own host, about its own run root, shows every process gone."""
    if run.state != HostRunState.LIVE:
        return ReleaseDecision(False, f"run {run.run_id} is already {run.state}; it holds no claims.")
    if run.lease_expires_at > db_now:
        left = (run.lease_expires_at - db_now).total_seconds()
        return ReleaseDecision(
            False,
            f"run {run.run_id} on {run.host} still renews its lease "
            f"(it expires in {left:.0f} s); its claims stay with it.",
        )
    if proof is None:
        return ReleaseDecision(
            False,
            f"run {run.run_id} on {run.host} stopped renewing its lease, but nothing "
            "proves its processes gone; prove it on that host before its claims move.",
        )
    if proof.run_id != run.run_id or proof.host != run.host or proof.run_root != run.run_root:
        return ReleaseDecision(
            False,
            f"the fence proof is about run {proof.run_id} at {proof.host}:{proof.run_root}, "
            f"not run {run.run_id} at {run.host}:{run.run_root}.",
        )
    if not proof.all_gone:
        return ReleaseDecision(False, f"run {run.run_id} on {run.host} is not fenced: {proof.evidence}.")
    return ReleaseDecision(True, f"run {run.run_id} on {run.host}: lease expired and {proof.evidence}.")


def lapsed_problem(run: HostRun | CampaignRun, db_now: datetime) -> str | None:
    """Why an operator may NOT release `run` from another machine (one sentence), or None: it must
    be live (nothing else holds claims) and its lease lapsed by the database's clock (a run that
    lapsed can never renew again: `TaskClaims.renew` requires an unexpired lease)."""
    if run.state != HostRunState.LIVE:
        return f"run {run.run_id} on {run.host} is already {run.state}; it holds no claims to release."
    if run.lease_expires_at > db_now:
        left = (run.lease_expires_at - db_now).total_seconds()
        return (
            f"run {run.run_id} on {run.host} still renews its lease (it expires in {left:.0f} s); the claims "
            "of a live host are never released."
        )
    return None


def decide_operator_release(run: HostRun, db_now: datetime, release: HostRunRelease) -> ReleaseDecision:
    """May an operator's `campaign release` give `run`'s unsettled claims back? Its lease must have
    lapsed, and the release must carry evidence about THIS run: its daemon's answer for its exact
    label (empty, or emptied and relisted), or the operator's attestation when no daemon answered."""
    problem = lapsed_problem(run, db_now)
    if problem is not None:
        return ReleaseDecision(False, problem)
    if (release.run_id, release.host, release.run_root) != (run.run_id, run.host, run.run_root):
        return ReleaseDecision(
            False,
            f"the release is about run {release.run_id} at {release.host}:{release.run_root}, "
            f"not run {run.run_id} at {run.host}:{run.run_root}.",
        )
    if release.fence == ReleaseFence.ATTESTED and not release.attested:
        return ReleaseDecision(
            False,
            f"no Docker daemon proved run {run.run_id}'s label empty and the operator did not "
            "attest its fence (--confirm-fenced).",
        )
    if release.fence not in ReleaseFence.values():
        return ReleaseDecision(False, f"the release's fence {release.fence!r} is not one of {ReleaseFence.values()}.")
    lapsed = (db_now - run.lease_expires_at).total_seconds()
    return ReleaseDecision(
        True, f"run {run.run_id} on {run.host}: lease lapsed {lapsed:.0f} s ago and {release.fence}: {release.evidence}"
    )


@dataclass(frozen=True)
class SettleDecision:
    write: bool  # change the row
    new_state: ClaimState | None
    problem: str | None  # a sentence when the settle is refused


def decide_settle(state: str, holder: str | None, run_id: str, status: str) -> SettleDecision:
    """What a host's result for a task does to the task's row.

    A settled status settles a task this run holds; an unsettled one (infra_failed, ...) gives the
    claim back so any host may try again. Settling twice by the same run is a no-op; a run that does
    not hold the task (never claimed, or released after it was fenced) is refused, so a result can
    never settle a task twice or overwrite another host's receipt.
    """
    if state == ClaimState.SETTLED:
        if holder == run_id:
            return SettleDecision(False, None, None)
        return SettleDecision(False, None, f"the task was already settled by run {holder}.")
    if state != ClaimState.CLAIMED or holder != run_id:
        return SettleDecision(
            False,
            None,
            f"run {run_id} does not hold the task's claim (it is {state}"
            + (f", held by {holder})." if holder else ")."),
        )
    if status in SETTLED_STATUSES:
        return SettleDecision(True, ClaimState.SETTLED, None)
    return SettleDecision(True, ClaimState.OPEN, None)


def prove_fenced(run: HostRun, *, host: str, now: datetime | None = None) -> FenceProof:
    """The launcher-death rules applied on THIS host to `run`'s run root: every custody process
    it recorded (custody/processes.json: launcher, watchdog, runner group) and any process of ours
    naming the run root. Refused by `decide_release` when run on another host."""
    root = Path(run.run_root)
    custody, problem = read_custody_processes(root)
    runner = [(custody.runner_pgid, CUSTODY_PROCESSES_FILE)] if custody and custody.runner_pgid else []
    live = prove(root, Recorded(custody=custody, runner_pgids=runner))
    evidence = live.sentence() if problem is None else f"{live.sentence()}; {problem}"
    # An unreadable custody record proves nothing: the runner group it names might still live.
    return FenceProof(
        run_id=run.run_id,
        host=host,
        run_root=run.run_root,
        all_gone=live.all_gone and problem is None,
        evidence=evidence,
        checked_at=now or datetime.now(UTC),
    )
