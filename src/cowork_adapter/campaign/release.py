"""`campaign release`: give a dead host's unsettled claims back when its machine is gone for good.

A lapsed host run's claims normally move only after a fence proof made on ITS machine (a shared
host started there fences it: campaign/shared.py). When that machine is lost (disk dead, VM
deleted) no such proof can ever be made, and its claims would hold the campaign forever. This
command is the operator's way out, guarded like `campaign reconcile`:

1. the run is one of the campaign's, still `live` (not finished, fenced or released), and its lease
   has lapsed by the database's clock (a lapsed run can never renew again);
2. its containers: with `--docker-host` and the daemon answering, nothing with the run's exact
   label may remain there: what remains is removed by the same exact-label cleanup as `clear`
   and proven by a fresh listing (we clean rather than refuse: a leftover agent container may still
   spend the key's money, and the label names only this run's objects); a cleanup that is not
   proven refuses the release (exit 1). Without a daemon that answers, the operator must attest
   the fence (`--confirm-fenced`), and the attestation is what the row records;
3. then ONE transaction under the run's row lock (TaskClaims.release_by_operator) checks rule 1
   again, gives its claimed tasks back to open (settled ones are never touched) and marks the run
   `released` with a HostRunRelease: the evidence, the operator (user@machine and the database
   role), the note and the database's time. `status` and `report` show it as attested or
   label-proven, never as a fence proof.

A host that comes back after its release (a suspended VM, a healed partition) finds its lease gone:
its lease thread stops it with `host_run_released`, and neither its batch loop nor its launcher
can claim or settle anything (TaskClaims refuses a run that holds no claim and has no live lease).

Each refusal is one sentence on stderr and exit 2 with nothing written; a cleanup or a database
write that fails is exit 1.
"""

from __future__ import annotations

import getpass
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from ..custody.labels import label_of_resolved_root
from ..errors import CampaignPersistenceError, CustodyError, Refusal
from ..schemas.multihost import HostRun, HostRunRelease
from ..vocab import ExitCode, ReleaseFence
from .claims import lapsed_problem
from .records import read_snapshot

STAGE = "release"

ListLabel = Callable[[str, str], list[str]]  # (docker host, label) -> what carries the label, as "kind name"
CleanLabel = Callable[[str, str], list[str]]  # the same, removing it all and proving the relist empty


@dataclass(frozen=True)
class Fence:
    """What this command found instead of a fence proof (before anything is written)."""

    fence: ReleaseFence
    evidence: str
    docker_host: str | None
    removed: list[str] = field(default_factory=list)


def label_of_registered_root(run_root: str, registered_label: str | None = None) -> str:
    """The run's Docker label: the one its launcher registered (schema v4: path and nonce, never
    recomputable here), else, for a run registered before, its run root's path-only label. That path
    was resolved on the run's own machine (config.RunConfig), so it is hashed as written, never
    resolved here (against THIS machine's symlinks)."""
    return registered_label or label_of_resolved_root(run_root)


def _docker_listing(docker_host: str, label: str) -> list[str]:
    from ..custody.docker_ops import list_labelled

    return list_labelled(docker_host, label).names()


def _docker_cleanup(docker_host: str, label: str) -> list[str]:
    from ..custody.docker_ops import cleanup_run

    return cleanup_run(docker_host, label, lambda _event: None).names()  # the relist inside proves it, or raises


def find_fence(
    run_id: str,
    label: str,
    docker_host: str | None,
    confirm_fenced: bool,
    *,
    listing: ListLabel = _docker_listing,
    cleanup: CleanLabel = _docker_cleanup,
) -> Fence:
    """The evidence for the release, or a Refusal (nothing written). Raises CustodyError when the
    daemon answered but the label's objects could not all be removed."""
    if docker_host is None:
        if not confirm_fenced:
            raise Refusal(
                STAGE,
                f"Nothing proves run {run_id}'s containers gone: name its Docker daemon with "
                "--docker-host, or attest that its machine is gone with --confirm-fenced.",
            )
        return Fence(
            ReleaseFence.ATTESTED,
            "no Docker daemon was named; the operator attests that the run's "
            "machine, its processes and its containers are gone",
            None,
        )
    try:
        remaining = listing(docker_host, label)
    except CustodyError as exc:  # unknown is never empty
        if not confirm_fenced:
            raise Refusal(
                STAGE,
                f"The Docker daemon at {docker_host} did not answer for run {run_id}'s label {label} "
                f"({exc}); if its machine is gone, attest it with --confirm-fenced.",
            ) from None
        return Fence(
            ReleaseFence.ATTESTED,
            f"the Docker daemon at {docker_host} did not answer ({exc}); the operator "
            "attests that the run's machine, its processes and its containers are gone",
            docker_host,
        )
    if not remaining:
        return Fence(
            ReleaseFence.LABEL_EMPTY,
            f"the Docker daemon at {docker_host} holds nothing with the run's "
            f"label {label}; the run's processes were not checked (its machine "
            "is out of reach)",
            docker_host,
        )
    removed = cleanup(docker_host, label)
    return Fence(
        ReleaseFence.LABEL_CLEANED,
        f"the Docker daemon at {docker_host} held {len(remaining)} object(s) "
        f"with the run's label {label}, removed by that label and a fresh "
        "listing found none; the run's processes were not checked (its "
        "machine is out of reach)",
        docker_host,
        removed,
    )


def release_record(
    run: HostRun,
    db_now: datetime,
    db_user: str,
    tasks: list[str],
    *,
    fence: Fence,
    label: str,
    confirm_fenced: bool,
    operator: str,
    note: str,
) -> HostRunRelease:
    return HostRunRelease(
        run_id=run.run_id,
        host=run.host,
        run_root=run.run_root,
        run_label=label,
        fence=fence.fence.value,
        evidence=fence.evidence,
        docker_host=fence.docker_host,
        removed=fence.removed,
        attested=confirm_fenced,
        operator=operator,
        db_user=db_user,
        operator_note=note,
        lease_expired_at=run.lease_expires_at,
        at=db_now,
        released_tasks=tasks,
    )


def release_command(
    url: str,
    campaign: str,
    run_id: str,
    operator_note: str,
    docker_host: str | None,
    confirm_fenced: bool,
    *,
    listing: ListLabel = _docker_listing,
    cleanup: CleanLabel = _docker_cleanup,
    operator: str | None = None,
) -> int:
    """0 released; 1 a cleanup not proven or the database write failed (nothing released); 2 refused."""
    from .commands import _refused
    from .pg_store import TaskClaims

    operator = operator or f"{getpass.getuser()}@{socket.gethostname()}"
    try:
        # The guards first on one read-only snapshot (no schema created or upgraded by a refusal).
        snap = read_snapshot(url, campaign)
        run = next((r for r in snap.runs if r.run_id == run_id), None)
        if run is None:
            raise Refusal(
                STAGE,
                f"The campaign {snap.location} has no host run {run_id} "
                "(`cowork-adapter status --campaign-db ...` lists its runs).",
            )
        problem = lapsed_problem(run, snap.db_now)
        if problem is not None:
            raise Refusal(STAGE, problem[0].upper() + problem[1:])
        label = label_of_registered_root(run.run_root, run.run_label)
        try:
            fence = find_fence(run_id, label, docker_host, confirm_fenced, listing=listing, cleanup=cleanup)
        except CustodyError as exc:
            print(
                f"cowork-adapter: release failed: run {run_id}'s label {label} is not proven empty on "
                f"{docker_host} ({exc}); nothing was released.",
                file=sys.stderr,
            )
            return int(ExitCode.FAILED)

        def make(stored: HostRun, db_now: datetime, db_user: str, tasks: list[str]) -> HostRunRelease:
            return release_record(
                stored,
                db_now,
                db_user,
                tasks,
                fence=fence,
                label=label,
                confirm_fenced=confirm_fenced,
                operator=operator,
                note=operator_note,
            )

        try:
            with TaskClaims(url, campaign) as claims:
                release, tasks = claims.release_by_operator(run_id, make)
        except CampaignPersistenceError as exc:
            print(f"cowork-adapter: release failed: {exc}; nothing was released.", file=sys.stderr)
            return int(ExitCode.FAILED)
    except Refusal as exc:
        return _refused(exc)
    print(
        f"Released run {run_id} on {release.host} ({release.fence}): {len(tasks)} unsettled claim(s) back to open"
        + (f" ({', '.join(tasks)})" if tasks else "")
        + f"; recorded by {release.operator} as {release.db_user} "
        f"at {release.at.isoformat()}."
    )
    return int(ExitCode.OK)
