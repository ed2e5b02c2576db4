"""One host of a campaign shared by several hosts (`run --campaign-db URL --shared-campaign`).

The exclusive store (pg_store.PostgresCampaignStore.locked) lets one launcher hold the record for a
whole run. A shared host instead:

* holds the campaign's advisory lock SHARED for its run (any number of shared hosts together; an
  exclusive launcher, `campaign reconcile` included, is refused while one lives, and a shared host
  is refused while an exclusive holder lives);
* changes the record only by read-modify-write transactions on its row (`SELECT ... FOR UPDATE`,
  the change applied to what is stored NOW, committed): another host's write is never an error.
  A meter reading only ever raises `last_usage` (every host reads the same key's meter, so the
  highest reading is the newest); the history gains this run's entry; a crossing writes `stop`;
* registers a host run with a lease (TaskClaims) that a launcher thread renews (HostLease): the
  lease dies with the launcher. With each renewal it reads the campaign's stop, and it fences
  lapsed runs of other hosts when the launcher-death rules prove them gone on THIS machine.

Settling by receipt (`settle_from_receipts`) is the one rule for the batch loop, the launcher's end
and the fencing host: a task with a settled ledger row rebuilt from the run's dumps settles; any
other result gives its claim back. The rows come from a reader the run hands in (`AttemptsReader`,
the ledger's `rebuild_attempts`): money decides on them and never imports the scoring code.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import psycopg2

from ..errors import CampaignPersistenceError, Refusal
from ..schemas.campaign import ActiveRun, CampaignRecord, CampaignStop, RunRecord
from ..vocab import StopReason, TaskStatus
from .claims import prove_fenced
from .pg_store import ClaimLost, HostRunReleased, TaskClaims, connect, hold, migrate, redacted
from .store import STAGE, _admit_existing, _money, parse_campaign_text, utc_now

# (run root, tasks) -> task -> its ledger row rebuilt from the run's dumps (needs .status and
# .official_receipt); OSError/ValueError when the run root cannot be read.
AttemptsReader = Callable[[str | Path, set[str]], dict[str, Any]]

# Crossings every host must stop for: the key's own limit, or the campaign's money down to its
# reserve. A run's own --budget-usd stops that host only.
CAMPAIGN_WIDE = frozenset({StopReason.BUDGET_EXHAUSTED.value, StopReason.CAMPAIGN_BUDGET_RESERVE.value})


def _lost(what: str, exc: Exception) -> CampaignPersistenceError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return CampaignPersistenceError(f"the campaign database failed while {what}: {first}")


class SharedCampaign:
    """The admitted campaign for one shared host: the Campaign handle's methods, over transactions."""

    def __init__(
        self, conn: Any, name: str, location: str, record: CampaignRecord, now: Callable[[], datetime]
    ) -> None:
        self._conn = conn
        self._name = name
        self.location = location
        self._record = record
        self._now = now
        self._active: ActiveRun | None = None  # in memory only: the host run is the registration

    @property
    def record(self) -> CampaignRecord:
        return self._record

    def _change(self, what: str, change: Callable[[CampaignRecord], CampaignRecord | None]) -> CampaignRecord:
        """One transaction: lock the row, apply `change` to the stored record, write it if changed."""
        try:
            with self._conn, self._conn.cursor() as cur:
                cur.execute("SELECT record::text FROM campaigns WHERE name = %s FOR UPDATE", (self._name,))
                row = cur.fetchone()
                if row is None:
                    raise CampaignPersistenceError(f"the campaign {self.location} disappeared while {what}")
                stored = parse_campaign_text(self.location, row[0])
                new = change(stored)
                if new is not None and new != stored:
                    cur.execute(
                        "UPDATE campaigns SET record = %s::jsonb, version = version + 1, updated_at = now() "
                        "WHERE name = %s",
                        (new.to_json(), self._name),
                    )
                    stored = new
        except psycopg2.Error as exc:
            raise _lost(what, exc) from exc
        except Refusal as exc:  # an unreadable stored record: nothing was written
            raise CampaignPersistenceError(exc.sentence) from None
        self._record = stored
        return stored

    def start_run(self, *, run_root: str, run_label: str, launcher_pid: int, host: str | None = None) -> ActiveRun:
        self._active = ActiveRun(
            run_root=run_root,
            run_label=run_label,
            launcher_pid=launcher_pid,
            started_at=self._now(),
            host=host or socket.gethostname(),
            usage_at_start=self._record.last_usage,
        )
        return self._active

    def set_runner_pgid(self, pgid: int) -> None:
        """Nothing to store: custody/processes.json has it, and the fence proof reads it there."""

    def record_usage(self, usage: float, observed_at: datetime | None = None) -> None:
        at = observed_at or self._now()
        # Another host may have stored a newer (higher) reading meanwhile: it stays.
        self._change(
            "saving a meter reading",
            lambda r: r.replace(last_usage=usage, last_usage_observed_at=at) if usage > r.last_usage else None,
        )

    def stop_campaign(self, reason: str, *, host: str, run_root: str) -> CampaignStop:
        """Write the campaign-wide stop (the first one stays); every host stops on reading it."""
        stop = CampaignStop(reason=str(reason), host=host, run_root=run_root, at=self._now())
        return self._change(
            "writing the campaign's stop",  # type: ignore[return-value]  # a stop stands after this write
            lambda r: r.replace(stop=stop) if r.stop is None else None,
        ).stop

    def finish_run(self, *, outcome: str, stop_reason: str | None = None, meter_error: str | None = None) -> RunRecord:
        """Append this host's run to the history. Its spend is the meter's delta since ITS start:
        with other hosts spending meanwhile it counts their spending too (an upper bound)."""
        active = self._active
        if active is None:
            raise ValueError("the shared campaign has no run of this host")
        spent = max(0.0, self._record.last_usage - active.usage_at_start)
        entry = RunRecord(
            run_root=active.run_root,
            run_label=active.run_label,
            outcome=str(outcome),
            stop_reason=None if stop_reason is None else str(stop_reason),
            spent_usd=spent,
            meter_error=meter_error,
            started_at=active.started_at,
            finished_at=self._now(),
        )
        self._change("settling the campaign", lambda r: r.replace(runs=[*r.runs, entry]))
        self._active = None
        return entry


@contextmanager
def open_shared_campaign(
    url: str,
    name: str,
    *,
    key_fingerprint: str,
    ceiling: float,
    prior_spend: float = 0.0,
    startup_usage: float,
    create_if_missing: bool,
    reserve: float | None = None,
    run_budget: float | None = None,
    diagnostic: bool | None = None,
    now: Callable[[], datetime] = utc_now,
) -> Iterator[SharedCampaign]:
    """Join (or, the first host, create) the campaign: the shared hold, then ONE transaction that
    creates the record with this host's startup reading as the baseline or admits against it."""
    _money("campaign ceiling", ceiling, positive=True)
    _money("prior spend", prior_spend)
    _money("startup meter usage", startup_usage)
    location = f"{redacted(url)} campaign {name!r}"
    conn = connect(url)
    try:
        migrate(conn)
        if not hold(conn, name, location, shared=True):
            raise Refusal(
                STAGE,
                f"The campaign {location} is held exclusively by a single-host launcher or a command "
                "(campaign reconcile); a shared host joins only when none holds it.",
            )
        record = _admit(
            conn,
            name,
            location,
            key_fingerprint=key_fingerprint,
            ceiling=ceiling,
            prior_spend=prior_spend,
            usage=startup_usage,
            create=create_if_missing,
            reserve=reserve,
            run_budget=run_budget,
            diagnostic=diagnostic,
            at=now(),
        )
        yield SharedCampaign(conn, name, location, record, now)
    finally:
        conn.close()  # the shared hold ends with the session


def refuse_if_stopped(record: CampaignRecord, location: str) -> None:
    """A campaign whose stop was written admits no host (its money, or the key's, is used up)."""
    if record.stop is not None:
        raise Refusal(
            STAGE,
            f"The campaign {location} was stopped by {record.stop.reason} (seen by "
            f"{record.stop.host}, {record.stop.run_root}); no host is admitted after it.",
        )


def _admit(
    conn: Any,
    name: str,
    location: str,
    *,
    key_fingerprint: str,
    ceiling: float,
    prior_spend: float,
    usage: float,
    create: bool,
    reserve: float | None,
    run_budget: float | None,
    diagnostic: bool | None,
    at: datetime,
) -> CampaignRecord:
    fresh = CampaignRecord(
        fingerprint=key_fingerprint,
        ceiling_usd=ceiling,
        usage_baseline=usage,
        prior_spend_usd=prior_spend,
        last_usage=usage,
        last_usage_observed_at=at,
        created_at=at,
        reserve_usd=reserve,
        run_budget_usd=run_budget,
        diagnostic_eval_on_truncation=diagnostic,
    )
    try:
        with conn, conn.cursor() as cur:
            if create:  # two first hosts at once: one INSERT wins, the other admits against its record
                cur.execute(
                    "INSERT INTO campaigns (name, record, version) VALUES (%s, %s::jsonb, 1) "
                    "ON CONFLICT (name) DO NOTHING RETURNING version",
                    (name, fresh.to_json()),
                )
                if cur.fetchone() is not None:
                    return fresh
            cur.execute("SELECT record::text FROM campaigns WHERE name = %s FOR UPDATE", (name,))
            row = cur.fetchone()
            if row is None:
                raise Refusal(
                    STAGE,
                    f"The campaign {location} does not exist; creating it would take a new usage "
                    "baseline, which needs --new-campaign.",
                )
            record = parse_campaign_text(location, row[0])
            # A reading below the stored one is not a meter going backwards: another host read the
            # same key's meter after this host did and stored it first. The stored one stays.
            _admit_existing(
                record, location, key_fingerprint, ceiling, prior_spend, max(usage, record.last_usage), diagnostic
            )
            refuse_if_stopped(record, location)
            update: dict[str, Any] = {}
            if usage > record.last_usage:
                update.update(last_usage=usage, last_usage_observed_at=at)
            if record.diagnostic_eval_on_truncation is None and diagnostic is not None:
                update["diagnostic_eval_on_truncation"] = diagnostic  # the first run that states it fixes it
            if update:
                record = record.replace(**update)
                cur.execute(
                    "UPDATE campaigns SET record = %s::jsonb, version = version + 1, updated_at = now() "
                    "WHERE name = %s",
                    (record.to_json(), name),
                )
            return record
    except psycopg2.Error as exc:
        raise _lost("admitting this host", exc) from exc


def settle_from_receipts(
    claims: TaskClaims,
    run_id: str,
    run_root: str | Path,
    tasks: Sequence[str],
    read_attempts: AttemptsReader,
    *,
    give_back: bool = True,
) -> dict[str, str]:
    """Settle each of `tasks` that `run_id` holds by the row its run root's dumps give (receipts
    first, `read_attempts`): settled statuses settle, anything else goes back to open
    (only with `give_back`: a fencing host leaves that to release_fenced, which checks the lease
    and the proof under the run's row lock). Returns task -> the claim's new state."""
    held = set(claims.held_by(run_id)) & set(tasks)
    if not held:
        return {}
    try:
        rows = read_attempts(run_root, held)
    except (OSError, ValueError):
        rows = {}
    out = {}
    for task in sorted(held):
        row = rows.get(task)
        status = row.status.value if row is not None else TaskStatus.NOT_ATTEMPTED.value
        if not give_back and not TaskStatus(status).settled:
            continue
        receipt = row.official_receipt.path if row is not None else None
        out[task] = str(claims.settle(run_id, task, status, receipt=receipt))
    return out


def fence_lapsed(
    claims: TaskClaims, own_run_id: str, host: str, read_attempts: AttemptsReader, say: Callable[[str, dict], None]
) -> list[str]:
    """Release the claims of every lapsed run of the campaign that the launcher-death rules prove
    gone on this machine (its receipts settled first); returns the tasks released."""
    released: list[str] = []
    for run in claims.expired_runs():
        if run.run_id == own_run_id:
            continue
        if run.host != host:
            continue  # only the host where it ran can prove its processes gone
        proof = prove_fenced(run, host=host)
        if not proof.all_gone:
            say("fence_unproven", {"run_id": run.run_id, "evidence": proof.evidence[:500]})
            continue
        settled = settle_from_receipts(
            claims, run.run_id, run.run_root, claims.held_by(run.run_id), read_attempts, give_back=False
        )
        done, reason, tasks = claims.release_fenced(run.run_id, proof)
        say(
            "fenced_run_released",
            {
                "run_id": run.run_id,
                "released": done,
                "reason": reason[:500],
                "tasks": tasks,
                "settled_from_receipts": settled,
            },
        )
        released.extend(tasks)
    return released


class HostLease:
    """The launcher thread that keeps this host run's lease: renewed every lease/4 (so two missed
    renewals still leave time), the campaign's stop read with each renewal, lapsed runs of other
    hosts fenced. It lives in the launcher's process: a dead launcher's lease lapses by itself."""

    def __init__(
        self,
        claims: TaskClaims,
        run_id: str,
        lease_sec: float,
        host: str,
        *,
        read_attempts: AttemptsReader,
        on_stop: Callable[[str, dict], None],
        say: Callable[[str, dict], None],
    ) -> None:
        self.claims, self.run_id, self.lease_sec, self.host = claims, run_id, lease_sec, host
        self.read_attempts = read_attempts
        self.on_stop = on_stop  # (stop reason, details): called once
        self.say = say
        self._halt = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="host-lease", daemon=True)

    def start(self) -> HostLease:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(timeout=60)

    def _stop_once(self, reason: str, details: dict) -> None:
        if not self._stopped:
            self._stopped = True
            self.on_stop(reason, details)

    def _loop(self) -> None:
        while not self._halt.wait(self.lease_sec / 4):
            try:
                _, stop = self.claims.heartbeat(self.run_id)
            except ClaimLost as exc:
                # Released by an operator while lapsed (campaign release): its claims are other hosts'
                # now; a reason of its own, so the operator sees why a host that came back stopped.
                reason = (
                    StopReason.HOST_RUN_RELEASED if isinstance(exc, HostRunReleased) else StopReason.HOST_LEASE_LOST
                )
                self._stop_once(reason.value, {"error": str(exc)[:500]})
                continue
            if stop is not None:
                self._stop_once(StopReason.CAMPAIGN_STOPPED.value, {"stop": msgspec.json.decode(stop)})
            try:
                fence_lapsed(self.claims, self.run_id, self.host, self.read_attempts, self.say)
            except Exception as exc:  # noqa: BLE001 - a fence that fails is tried again next turn; the lease goes on
                self.say("fence_failed", {"error": f"{type(exc).__name__}: {exc}"[:500]})
