"""The launcher's side of `run --shared-campaign`: this run as one host of a campaign in PostgreSQL.

spending.SharedCampaignSpending drives it at four points: `join` after admission (register the host run, put the
selection in the claims, start the lease thread), `runner` when the supervisor starts the runner
(our batch loop instead of one run_parallel.sh), `crossing` when this host's meter reading crosses
a campaign-wide bound (the campaign's stop, written for every host), and at the end `end_lease`
then `release_claims` (only after cleanup is proven: receipts settle, the rest goes back to open).
The rules themselves are in campaign/shared.py; the batch loop in run/batch_runner.py.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import Any

import msgspec

from ..campaign.pg_store import TaskClaims
from ..campaign.shared import CAMPAIGN_WIDE, HostLease, open_shared_campaign, settle_from_receipts
from ..campaign.shared_meter import SharedMeter
from ..errors import CampaignPersistenceError, Refusal
from ..fileio import replace_atomic
from ..runroot import layout
from ..runroot.layout import RunRoot
from ..runroot.manifest import write_manifest
from ..schemas.manifest import AdmissionLimitsRecord, SharedRun
from ..schemas.multihost import BatchRunnerConfig
from ..score.ledger import settled_attempts
from ..vocab import EventKind

CLAIMED_FILE = layout.CLAIMED


def shared_opener(cfg: Any) -> Callable[..., AbstractContextManager[Any]]:
    """open_campaign's signature over the shared admission (the store argument is not used: a
    shared host never takes the exclusive hold)."""

    def opener(_store: Any, **kwargs: Any) -> AbstractContextManager[Any]:
        return open_shared_campaign(cfg.money.campaign_db, cfg.money.campaign_name, **kwargs)

    return opener


def wait_for_fence_sec(lease_sec: float) -> float:
    """How long the batch loop waits, with nothing open, for a lapsed run's claims: its lease, the
    watchdog's bounded stop of that run (well under 30 s) and two of our renewal turns."""
    return 2 * lease_sec + 30.0


class SharedHost:
    def __init__(self, run: Any, claims: TaskClaims, run_id: str, host: str) -> None:
        self.run, self.claims, self.run_id, self.host = run, claims, run_id, host
        self.lease: HostLease | None = None
        # The campaign's one meter stream for this host's polls (None after release_claims: the final
        # reading is this host's own, from the provider, so its spend ends on the meter's delta).
        self.meter: SharedMeter | None = None

    @classmethod
    def join(cls, run: Any, meter: Any) -> SharedHost:
        """Register this host's run (`run`, a run.Run) with its lease and the selection, its polls
        shared through `meter` (the key's); raises CampaignPersistenceError."""
        cfg = run.cfg
        host = socket.gethostname()
        try:
            claims = TaskClaims(cfg.money.campaign_db, cfg.money.campaign_name)
        except Refusal as exc:
            raise CampaignPersistenceError(exc.sentence) from None
        try:
            registered = claims.register_run(
                host=host, run_root=str(cfg.run_root), lease_sec=cfg.hosts.host_lease_sec, run_label=run.label
            )
            added = claims.add_selection(run.manifest.selection.task_ids)
        except BaseException:
            claims.close()
            raise
        self = cls(run, claims, registered.run_id, host)
        self.meter = SharedMeter(meter, cfg.money.campaign_db, cfg.money.campaign_name, poller=registered.run_id)
        # The runner's command is per batch: run_parallel.sh with the tasks of each claim (claims.jsonl).
        run.manifest.official_command = [
            "bash",
            "run_parallel.sh",
            str(cfg.selection.concurrency),
            "<each claimed batch>",
        ]
        # shared_run.run_id is also how the campaign's report matches a copied run root to its host run.
        run.manifest.shared_run = SharedRun(
            run_id=registered.run_id,
            host=host,
            lease_sec=cfg.hosts.host_lease_sec,
            claim_batch=cfg.hosts.claim_batch,
            claimed_file=CLAIMED_FILE,
        )
        write_manifest(cfg.run_root, run.manifest)
        self._say(
            "registered",
            {
                "run_id": registered.run_id,
                "host": host,
                "lease_sec": cfg.hosts.host_lease_sec,
                "selection": len(run.manifest.selection.task_ids),
                "added_to_claims": added,
            },
        )
        self.lease = HostLease(
            claims,
            registered.run_id,
            cfg.hosts.host_lease_sec,
            host,
            read_attempts=settled_attempts,
            on_stop=self._on_stop,
            say=self._say,
        ).start()
        return self

    def _say(self, action: str, detail: dict) -> None:
        self.run.event(EventKind.SHARED_HOST, action=action, detail=detail)

    def _on_stop(self, reason: str, detail: dict) -> None:
        self._say("stop_seen", {"reason": reason, **detail})
        self.run.stop_from_outside(reason)

    def runner(self, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """The batch loop's argv and environment (the runner's, plus libpq's variables, which the
        loop alone uses and drops for run_parallel.sh)."""
        cfg = self.run.cfg
        root = cfg.run_root
        config = BatchRunnerConfig(
            db_url=cfg.money.campaign_db,
            campaign=cfg.money.campaign_name,
            run_id=self.run_id,
            run_root=str(root),
            bench_dir=str(self.run.bench_copy),
            claimed_file=str(RunRoot(root).claimed),
            stop_file=str(self.run.stop_file),
            concurrency=cfg.selection.concurrency,
            claim_batch=cfg.hosts.claim_batch,
            wait_for_fence_sec=wait_for_fence_sec(cfg.hosts.host_lease_sec),
            admission=AdmissionLimitsRecord(**asdict(cfg.hosts.admission_limits())),
            docker_host=cfg.docker_host,
        )
        replace_atomic(RunRoot(root).shared_runner, msgspec.json.encode(config).decode())
        env = {**env, **{k: v for k, v in os.environ.items() if k.startswith("PG")}}
        return [sys.executable, "-m", "cowork_adapter.run.batch_runner", str(RunRoot(root).shared_runner)], env

    def crossing(self, reason: str, campaign: Any) -> None:
        """This host's meter crossed a bound: a campaign-wide one is written for every host (through
        `campaign`, the admitted shared campaign)."""
        if str(reason) not in CAMPAIGN_WIDE:
            return
        try:
            stop = campaign.stop_campaign(str(reason), host=self.host, run_root=str(self.run.cfg.run_root))
        except CampaignPersistenceError as exc:  # this host stops anyway; the others see the meter too
            self._say("campaign_stop_failed", {"reason": str(reason), "error": str(exc)[:500]})
            return
        self._say("campaign_stop_written", {"reason": stop.reason, "by_host": stop.host, "by_run": stop.run_root})

    def end_lease(self) -> None:
        if self.lease is not None:
            self.lease.stop()
            self.lease = None

    def end_meter(self) -> None:
        """Give up polling for the campaign (another host takes the meter lock at its next poll)."""
        if self.meter is not None:
            self.meter.close()
            self.meter = None

    def release_claims(self) -> bool:
        """After proven cleanup: settle by receipts, give the rest back, end the host run."""
        try:
            settled = settle_from_receipts(
                self.claims, self.run_id, self.run.cfg.run_root, self.claims.held_by(self.run_id), settled_attempts
            )
            released = self.claims.finish_run(self.run_id)
        except CampaignPersistenceError as exc:
            self._say("claims_not_released", {"error": str(exc)[:500]})
            return False
        finally:
            self.claims.close()
            self.end_meter()
        self._say("claims_released", {"settled_from_receipts": settled, "released": released})
        return True
