"""Campaign custody: one locked, durable record per provider key, and the rules for changing it.

`CampaignStore` is the small interface (a locked JSON file here; the same interface can sit over
PostgreSQL later). `open_campaign` admits a run to the campaign and yields a `Campaign` handle
that holds the lock for as long as the caller keeps it open (a launcher keeps it for its run).
Every refusal leaves the campaign file byte-for-byte unmodified.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ..errors import CampaignPersistenceError, Refusal
from ..fileio import replace_atomic
from ..schemas.campaign import CAMPAIGN_SCHEMA, ActiveRun, CampaignRecord, Reconciliation, RunRecord
from ..schemas.record import RecordInvalid
from ..vocab import RunOutcome

STAGE = "campaign"
RECONCILED_OUTCOME = RunOutcome.RECONCILED.value


def utc_now() -> datetime:
    return datetime.now(UTC)


class CampaignSession(Protocol):
    """What a store hands out while its lock is held."""

    location: str

    def load(self) -> CampaignRecord | None:
        """The stored record, None if there is none; a Refusal if it is unreadable."""

    def save(self, record: CampaignRecord) -> None:
        """Replace the record durably; raises CampaignPersistenceError on any failure."""


class CampaignStore(Protocol):
    location: str

    def locked(self) -> AbstractContextManager[CampaignSession]:
        """Take the campaign's exclusive lock or raise a Refusal at once (never wait)."""

    def refuse_if_locked(self) -> None:
        """Preflight: the Refusal `locked()` would give now, changing nothing (both stores have it)."""


class JsonFileCampaignStore:
    """The campaign as one pretty JSON file, locked by flock on `<file>.lock`, written atomically."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).absolute()
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.location = str(self.path)

    def refuse_if_locked(self) -> None:
        """Preflight: the Refusal `locked()` would give now, without creating or changing anything
        (a missing lock file is a free lock; an existing one is opened read-only and released)."""
        try:
            fd = os.open(self.lock_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise Refusal(STAGE, f"Cannot open the campaign lock file {self.lock_path}: {exc.strerror}.") from None
        try:
            self._take(fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _take(self, fd: int) -> None:
        """The campaign's exclusive lock on `fd`, non-blocking: a second launcher is told at once
        instead of hanging behind a run."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Refusal(
                STAGE,
                f"The campaign {self.path} is locked by another launcher or command; "
                "wait for it to finish (see `cowork-adapter campaign show`).",
            ) from None

    @contextmanager
    def locked(self) -> Iterator[_JsonFileSession]:
        if not self.path.parent.is_dir():
            raise Refusal(STAGE, f"The campaign directory {self.path.parent} does not exist.")
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise Refusal(STAGE, f"Cannot open the campaign lock file {self.lock_path}: {exc.strerror}.") from None
        try:
            self._take(fd)
            try:
                yield _JsonFileSession(self.path)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


class _JsonFileSession:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.location = str(path)

    def load(self) -> CampaignRecord | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise Refusal(STAGE, f"The campaign file {self.path} cannot be read ({exc}).") from None
        return parse_campaign_text(self.path, text)

    def save(self, record: CampaignRecord) -> None:
        try:
            replace_atomic(self.path, record.to_json(), mode=0o600)  # the campaign file stays private
        except OSError as exc:
            raise CampaignPersistenceError(f"cannot write the campaign file {self.path}: {exc}") from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite constant {name}")


def parse_campaign_text(path: Path | str, text: str) -> CampaignRecord:
    """Parse a campaign file's text, or raise a one-sentence Refusal naming what is wrong."""
    try:
        raw = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise Refusal(
            STAGE, f"The campaign file {path} is not valid JSON ({exc}); restore it from a copy, never recreate it."
        ) from None
    if not isinstance(raw, dict) or raw.get("schema") != CAMPAIGN_SCHEMA:
        found = raw.get("schema") if isinstance(raw, dict) else type(raw).__name__
        raise Refusal(STAGE, f"The campaign file {path} has schema {found!r}, not {CAMPAIGN_SCHEMA!r}.")
    try:
        return CampaignRecord.from_dict(raw)
    except RecordInvalid as exc:
        raise Refusal(STAGE, f"The campaign file {path} is not a valid campaign record ({exc}).") from None


def read_campaign(path: str | os.PathLike[str]) -> CampaignRecord | None:
    """Read a campaign without its lock (for read-only views: writes are atomic renames)."""
    return _JsonFileSession(Path(path).absolute()).load()


class Campaign:
    """The admitted campaign while its lock is held. Every mutation is saved before it counts.

    If a save fails, CampaignPersistenceError propagates and the in-memory record stays the last
    one that reached disk.
    """

    def __init__(self, session: CampaignSession, record: CampaignRecord, now: Callable[[], datetime]) -> None:
        self._session = session
        self._record = record
        self._now = now
        self.location = session.location

    @property
    def record(self) -> CampaignRecord:
        return self._record

    def _commit(self, **update: Any) -> CampaignRecord:
        # Re-validate the whole record so a bad value can never reach the file.
        new = self._record.replace(**update)
        self._session.save(new)
        self._record = new
        return new

    def start_run(self, *, run_root: str, run_label: str, launcher_pid: int, host: str | None = None) -> ActiveRun:
        """Take custody: set active_run before the runner starts, so a crash leaves it visible."""
        if self._record.active_run is not None:
            raise Refusal(STAGE, f"The campaign already has an active run {self._record.active_run.run_root}.")
        active = ActiveRun(
            run_root=run_root,
            run_label=run_label,
            launcher_pid=launcher_pid,
            started_at=self._now(),
            host=host or socket.gethostname(),
            usage_at_start=self._record.last_usage,
        )
        self._commit(active_run=active)
        return active

    def set_runner_pgid(self, pgid: int) -> None:
        """Record the runner's process group as soon as it exists (reconcile must prove it gone)."""
        active = self._require_active()
        self._commit(active_run=active.replace(runner_pgid=pgid))

    def record_usage(self, usage: float, observed_at: datetime | None = None) -> None:
        """Save an accepted meter reading. The caller has already validated it (observe.py)."""
        _check_usage(usage, self._record.last_usage)
        self._commit(last_usage=usage, last_usage_observed_at=observed_at or self._now())

    def finish_run(self, *, outcome: str, stop_reason: str | None = None, meter_error: str | None = None) -> RunRecord:
        """Append the active run to history with its spending and release custody."""
        active = self._require_active()
        entry = RunRecord(
            run_root=active.run_root,
            run_label=active.run_label,
            outcome=str(outcome),
            stop_reason=None if stop_reason is None else str(stop_reason),
            spent_usd=self._record.spending().run_spent_usd or 0.0,
            meter_error=meter_error,
            started_at=active.started_at,
            finished_at=self._now(),
        )
        self._commit(runs=[*self._record.runs, entry], active_run=None)
        return entry

    def reconcile_active_run(self, *, usage: float, operator_note: str, checks: dict[str, Any]) -> Reconciliation:
        """Clear a stale active_run in ONE save: fresh usage, operator record, history entry.

        The baseline, ceiling, prior spend and earlier history are untouched.
        """
        active = self._require_active()
        _check_usage(usage, self._record.last_usage)
        at = self._now()
        note = Reconciliation(
            run_root=active.run_root,
            operator_note=operator_note,
            checks=checks,
            usage_at_reconcile=usage,
            at=at,
            previous_usage=self._record.last_usage,
            previous_usage_observed_at=self._record.last_usage_observed_at,
        )
        entry = RunRecord(
            run_root=active.run_root,
            run_label=active.run_label,
            outcome=RECONCILED_OUTCOME,
            stop_reason=None,
            spent_usd=self._record.spending(usage).run_spent_usd or 0.0,
            meter_error=None,
            started_at=active.started_at,
            finished_at=at,
        )
        self._commit(
            last_usage=usage,
            last_usage_observed_at=at,
            runs=[*self._record.runs, entry],
            active_run=None,
            reconciliations=[*self._record.reconciliations, note],
        )
        return note

    def _require_active(self) -> ActiveRun:
        if self._record.active_run is None:
            raise ValueError("the campaign has no active run")
        return self._record.active_run


def _check_usage(usage: float, last: float) -> None:
    if isinstance(usage, bool) or not isinstance(usage, (int, float)) or not math.isfinite(usage) or usage < 0:
        raise ValueError(f"meter usage must be finite and non-negative, got {usage!r}")
    if usage < last:
        raise ValueError(f"meter usage {usage!r} is below the last accepted {last!r}")


def _money(name: str, value: float, *, positive: bool = False) -> None:
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    if bad or value < 0 or (positive and value == 0):
        rule = "a finite amount above zero" if positive else "a finite, non-negative amount"
        raise Refusal(STAGE, f"The {name} must be {rule}, not {value!r}.")


@contextmanager
def open_campaign(
    store: CampaignStore,
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
) -> Iterator[Campaign]:
    """Lock the campaign, admit this key and ceiling, save the startup usage, yield the handle.

    A new campaign (only with `create_if_missing`) takes baseline = startup usage (prior spend is
    accepted only here) and keeps the reserve and run budget it was created with. An
    existing one must match fingerprint and ceiling, have no unsettled active_run, and its
    counter must not have gone down. Refusals leave the file unmodified; the lock is released
    when the block exits, however it exits.
    """
    _money("campaign ceiling", ceiling, positive=True)
    _money("prior spend", prior_spend)
    _money("startup meter usage", startup_usage)
    with store.locked() as session:
        record = session.load()
        if record is None:
            if not create_if_missing:
                raise Refusal(
                    STAGE,
                    f"The campaign file {store.location} does not exist; creating it would take a new "
                    "usage baseline, which needs --new-campaign.",
                )
            at = now()
            record = CampaignRecord(
                fingerprint=key_fingerprint,
                ceiling_usd=ceiling,
                usage_baseline=startup_usage,
                prior_spend_usd=prior_spend,
                last_usage=startup_usage,
                last_usage_observed_at=at,
                created_at=at,
                reserve_usd=reserve,
                run_budget_usd=run_budget,
                diagnostic_eval_on_truncation=diagnostic,
            )
            session.save(record)
            yield Campaign(session, record, now)
            return
        _admit_existing(record, store.location, key_fingerprint, ceiling, prior_spend, startup_usage, diagnostic)
        campaign = Campaign(session, record, now)
        if record.diagnostic_eval_on_truncation is None and diagnostic is not None:
            campaign._commit(diagnostic_eval_on_truncation=diagnostic)  # first run that states it fixes it
        campaign.record_usage(startup_usage)
        yield campaign


def _on_off(value: bool) -> str:
    return "on" if value else "off"


def _admit_existing(
    record: CampaignRecord,
    location: str,
    fingerprint: str,
    ceiling: float,
    prior_spend: float,
    usage: float,
    diagnostic: bool | None = None,
) -> None:
    if record.fingerprint != fingerprint:
        raise Refusal(
            STAGE,
            f"The campaign {location} belongs to key {record.fingerprint}, not to the key in use ({fingerprint}).",
        )
    if record.ceiling_usd != ceiling:
        raise Refusal(
            STAGE,
            f"The campaign {location} has a ceiling of ${record.ceiling_usd:g}, not ${ceiling:g}; "
            "a ceiling cannot change.",
        )
    stored = record.diagnostic_eval_on_truncation
    if diagnostic is not None and stored is not None and diagnostic != stored:
        raise Refusal(
            STAGE,
            f"The campaign {location} runs with the residual diagnostic {_on_off(stored)} "
            f"(--diagnostic-eval-on-truncation), and this run asks for it {_on_off(diagnostic)}; "
            "every run of a campaign uses the same setting.",
        )
    if prior_spend != 0:
        raise Refusal(
            STAGE, f"Prior spend can be declared only when a campaign is created, and {location} already exists."
        )
    if record.active_run is not None:
        raise Refusal(
            STAGE,
            f"The campaign {location} has an unsettled active run {record.active_run.run_root}; "
            "prove it ended with `cowork-adapter campaign reconcile`.",
        )
    if usage < record.last_usage:
        raise Refusal(
            STAGE, f"The key meter reads {usage!r}, below the campaign's last accepted usage {record.last_usage!r}."
        )
