"""Typed rows of a campaign shared by several hosts (PostgreSQL store): host runs, fence proofs, claims.

msgspec Structs: they are decoded from database rows and JSON, never validated field by field by
hand. Times are the DATABASE's clock (`now()` on the server), so hosts with skewed clocks still
agree on whether a lease has expired.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

FENCE_PROOF_SCHEMA = "cowork_adapter.fence_proof.v1"


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


class FenceProof(msgspec.Struct, frozen=True, kw_only=True):
    """What the launcher-death rules found about a run's processes on the host where it ran."""

    schema: str = FENCE_PROOF_SCHEMA
    run_id: str
    host: str
    run_root: str
    all_gone: bool
    evidence: str  # liveness.Liveness.sentence(): every holder and whether it lives
    checked_at: datetime


class ClaimCounts(msgspec.Struct, frozen=True, kw_only=True):
    """How a campaign's selection stands across every host."""

    open: int = 0
    claimed: int = 0
    settled: int = 0

    @property
    def total(self) -> int:
        return self.open + self.claimed + self.settled
