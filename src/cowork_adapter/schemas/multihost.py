"""Typed rows of a campaign shared by several hosts (PostgreSQL store): host runs, fence proofs, claims.

msgspec Structs: they are decoded from database rows and JSON, never validated field by field by
hand. Times are the DATABASE's clock (`now()` on the server), so hosts with skewed clocks still
agree on whether a lease has expired.
"""

from __future__ import annotations

from datetime import datetime
from os import PathLike

import msgspec

from .campaign import CampaignRecord
from .manifest import AdmissionLimitsRecord

FENCE_PROOF_SCHEMA = "cowork_adapter.fence_proof.v1"
HOST_RUN_RELEASE_SCHEMA = "cowork_adapter.host_run_release.v1"


class HostRun(msgspec.Struct, frozen=True, kw_only=True):
    """One launcher's run on one host, holding task claims while its lease is renewed."""

    run_id: str
    campaign: str
    host: str
    run_root: str
    lease_sec: float
    lease_expires_at: datetime
    state: str  # a HostRunState value
    fence_proof: str | None = None  # the FenceProof JSON that released its claims, when fenced
    release: str | None = None  # the HostRunRelease JSON, when an operator released it (schema v3)
    run_label: str | None = None  # its containers' exact Docker label (schema v4; None: registered before)


class FenceProof(msgspec.Struct, frozen=True, kw_only=True):
    """What the launcher-death rules found about a run's processes on the host where it ran."""

    schema: str = FENCE_PROOF_SCHEMA
    run_id: str
    host: str
    run_root: str
    all_gone: bool
    evidence: str  # liveness.Liveness.sentence(): every holder and whether it lives
    checked_at: datetime


class HostRunRelease(msgspec.Struct, frozen=True, kw_only=True):
    """An operator's release of a lapsed host run from another machine (`campaign release`), kept in
    its host_runs row: the evidence that stood for a fence proof, and who gave it, when.

    Not a proof that the run's processes are gone (they were never checked: their machine is out of
    reach); `fence` says what was checked instead, and report and status say so."""

    schema: str = HOST_RUN_RELEASE_SCHEMA
    run_id: str
    host: str  # the run's host, as it registered
    run_root: str
    run_label: str  # the exact Docker label of its containers (as registered; else from its run root)
    fence: str  # a ReleaseFence value
    evidence: str  # one sentence: what the daemon answered, or why none was asked
    docker_host: str | None = None
    removed: list[str] = msgspec.field(default_factory=list)  # "container NAME", ... removed by the label
    attested: bool  # the operator passed --confirm-fenced
    operator: str  # user@machine that ran the command
    db_user: str  # the database role that wrote the row (the server's word, not the command's)
    operator_note: str
    lease_expired_at: datetime
    at: datetime  # the database's clock when the row was written
    released_tasks: list[str] = msgspec.field(default_factory=list)


class ClaimCounts(msgspec.Struct, frozen=True, kw_only=True):
    """How a campaign's selection stands across every host."""

    open: int = 0
    claimed: int = 0
    settled: int = 0

    @property
    def total(self) -> int:
        return self.open + self.claimed + self.settled


class BatchRunnerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What the batch loop (run/batch_runner.py) is given, as a file in the run root: no secret
    (the database password reaches it in its environment only, and it drops it for the runner)."""

    db_url: str  # without a password
    campaign: str
    run_id: str
    run_root: str
    bench_dir: str
    claimed_file: str  # absolute
    stop_file: str  # the custody stop marker: no new batch once it exists
    concurrency: int
    claim_batch: int
    wait_for_fence_sec: float  # how long to wait for a lapsed run's claims when nothing is open
    admission: AdmissionLimitsRecord  # a batch is claimed only within these (the run's flags)
    docker_host: str  # the run's daemon, which admission pings


class ClaimedBatch(msgspec.Struct, frozen=True, kw_only=True):
    """One line of the run's claimed-tasks file, written durably before its runner starts."""

    batch: int
    tasks: list[str]
    claimed_at: datetime


def read_claimed(path: str | PathLike[str]) -> list[str]:
    """Every task the run claimed, in claim order, once each; a torn last line (a kill mid-write)
    is skipped: its batch was never handed to a runner."""
    out: list[str] = []
    try:
        with open(path, "rb") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        try:
            batch = msgspec.json.decode(line, type=ClaimedBatch)
        except msgspec.DecodeError:
            continue
        out.extend(t for t in batch.tasks if t not in out)
    return out


class CampaignRun(msgspec.Struct, frozen=True, kw_only=True):
    """A host_runs row as the campaign's report and status read it (with its span for throughput)."""

    run_id: str
    host: str
    run_root: str  # the path on its own host, as its launcher registered it
    state: str  # a HostRunState value
    started_at: datetime
    ended_at: datetime | None
    lease_expires_at: datetime
    release: HostRunRelease | None = None  # an operator's release (state released): attested or label-proven
    run_label: str | None = None  # its containers' exact Docker label (schema v4; None: registered before)


class CampaignClaim(msgspec.Struct, frozen=True, kw_only=True):
    """A task_claims row: one task of the campaign's selection and who, if anyone, settled it."""

    task_id: str
    state: str  # a ClaimState value
    run_id: str | None
    times_claimed: int
    settled_status: str | None
    receipt: str | None
    settled_at: datetime | None


class CampaignSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One campaign as one consistent read of the database (campaign/records.py), for report and status."""

    name: str
    location: str  # the database (password redacted) and the campaign's name, for sentences
    db_now: datetime  # the server's clock: leases and open spans are measured by it, never a host's
    record: CampaignRecord | None  # None: no run has saved the campaign's money record yet
    runs: list[CampaignRun]
    claims: list[CampaignClaim]
