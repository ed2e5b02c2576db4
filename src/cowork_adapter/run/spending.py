"""A run's spending policy: what money a run may spend, and how it is metered, bounded and settled.

One `Run` (run.py) owns custody; it takes one of these policies and calls it at fixed points:
`admit` before custody (the startup reading, the campaign's admission, the run's registration),
`observe` as the supervisor's meter port, `money_stop` in every turn's stop check,
`runner_started` and `runner` when the runner starts, and `settle` after cleanup is proven.

  - NoSpending (oracle, nop): no key, no meter, no campaign; never a money stop.
  - CampaignSpending: the key's meter against one campaign record (the JSON file, or one
    PostgreSQL campaign held exclusively with --campaign-db).
  - SharedCampaignSpending (--shared-campaign): the same campaign money, plus this host's side of
    the shared campaign (shared_host.py): claims, lease, the campaign-wide stop.

The order inside `CampaignSpending.admit` matters: the startup meter reading is accepted and saved
under the campaign lock (the anchor of the blindness bound) before custody starts, and a run the
campaign could not register starts nothing (NotAdmitted).
"""

from __future__ import annotations

import os
import socket
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from ..campaign.budget import Spending, admission_check, stop_decision
from ..campaign.meter import KeyMeter, MeterError
from ..campaign.observe import AcceptedReading, MeterBlind, MeterObserver, Observation, judge_usage
from ..campaign.store import (
    Campaign,
    CampaignStore,
    JsonFileCampaignStore,
    _admit_existing,
    open_campaign,
    read_campaign,
)
from ..config import Money, RunConfig, not_below
from ..errors import CampaignPersistenceError, Refusal
from ..resolved import MoneyBounds, reached
from ..runroot.manifest import write_manifest
from ..schemas.campaign import CampaignRecord, key_fingerprint
from ..schemas.monitor import CampaignSettlement, MeterState
from ..schemas.monitor import Spending as MonitorSpending
from ..vocab import EventKind, MeterPhase, StopReason
from .meter_tracker import MeterTracker, monitor_spending

if TYPE_CHECKING:  # psycopg2 only for runs that share a campaign: shared_host is imported where it is used
    from .shared_host import SharedHost

# A run that spends nothing (oracle, nop) has no campaign to settle: that is its settled state.
NO_CAMPAIGN: CampaignSettlement = "not_applicable"
SETTLED = ("recorded", NO_CAMPAIGN)


def paid_preflight(cfg: RunConfig) -> tuple[str, RunConfig]:
    """The provider key from the environment, checked against the meter before anything is written,
    and the config with its money bounds resolved (see `resolve_money`). The flags already hold a
    campaign (config/ refuses a paid run without one)."""
    key = os.environ.get(cfg.provider.api_key_env, "")
    if not key.strip():
        raise Refusal(
            "credential",
            f"the environment variable {cfg.provider.api_key_env} is empty or unset; supply the provider key there.",
        )
    money = cfg.money
    if money.campaign_file is not None and not money.campaign_file.parent.is_dir():
        raise Refusal("campaign", f"the campaign file's directory {money.campaign_file.parent} does not exist.")
    meter = KeyMeter(money.meter_url, key, timeout=5.0)
    try:
        headroom = meter.headroom(timeout=5.0)
    except MeterError as exc:
        raise Refusal("credential", f"the key meter at {money.meter_url} did not give a usable answer: {exc}") from None
    effective = headroom.effective
    if effective is not None and effective < money.min_key_usd:
        raise Refusal(
            "credential", f"the key has ${effective:.2f} of headroom, below --min-key-usd {money.min_key_usd:g}."
        )
    cfg = campaign_preflight(cfg, key, _startup_reading(meter))
    return key, cfg


def resolve_money(money: Money, record: CampaignRecord | None) -> Money:
    """The money flags with all three bounds known, or a Refusal naming what is missing.

    No amount is ever assumed. A campaign that does not exist is created only with --new-campaign
    (a new campaign is a new usage baseline: a mistyped path must not start one), and only from
    bounds given explicitly. A run on an existing campaign takes each bound it does not name from
    what the campaign stored when it was created (its ceiling, run budget and reserve).
    """
    path = money.campaign_location()
    if record is None:
        if not money.new_campaign:
            raise Refusal(
                "campaign",
                f"the campaign {path} does not exist, and creating it would start a new "
                "campaign with a new usage baseline; pass --new-campaign to create it, or name "
                "the existing campaign file.",
            )
        missing = _missing(money)
        if missing:
            raise Refusal(
                "campaign",
                f"creating the campaign {path} needs {_and(missing)} given explicitly; no amount is assumed.",
            )
        return money
    resolved = msgspec.structs.replace(
        money,
        campaign_budget_usd=_given_or(money.campaign_budget_usd, record.ceiling_usd),
        budget_usd=_given_or(money.budget_usd, record.run_budget_usd),
        budget_reserve_usd=_given_or(money.budget_reserve_usd, record.reserve_usd),
    )
    missing = _missing(resolved)
    if missing:
        raise Refusal(
            "campaign",
            f"the campaign {path} stores no value for {_and(missing)}; give "
            f"{'it' if len(missing) == 1 else 'them'} explicitly.",
        )
    if not_below(resolved.budget_reserve_usd, resolved.campaign_budget_usd):
        raise Refusal(
            "campaign",
            f"the reserve ${resolved.budget_reserve_usd:g} is not below the campaign's ceiling "
            f"${resolved.campaign_budget_usd:g}; give a smaller --budget-reserve-usd.",
        )
    return resolved


def _given_or(given: float | None, stored: float | None) -> float | None:
    return stored if given is None else given


def _missing(money: Money) -> list[str]:
    """The money bounds still unknown, by flag, in the order a refusal names them."""
    bounds = (
        ("--campaign-budget-usd", money.campaign_budget_usd),
        ("--budget-usd", money.budget_usd),
        ("--budget-reserve-usd", money.budget_reserve_usd),
    )
    return [flag for flag, value in bounds if value is None]


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def campaign_store(money: Money) -> CampaignStore:
    """The run's campaign store: PostgreSQL with --campaign-db (several hosts), else the JSON file."""
    if money.campaign_db is not None:
        from ..campaign.pg_store import PostgresCampaignStore  # psycopg2 only for runs that name a database

        return PostgresCampaignStore(money.campaign_db, money.campaign_name)
    return JsonFileCampaignStore(reached(money.campaign_file, "--campaign-file"))


def peek_campaign(money: Money) -> CampaignRecord | None:
    """The campaign record without its lock (every write is atomic: a rename, or one transaction)."""
    if money.campaign_db is not None:
        from ..campaign.pg_store import read_campaign_db

        return read_campaign_db(money.campaign_db, money.campaign_name)
    return read_campaign(reached(money.campaign_file, "--campaign-file"))


def campaign_preflight(cfg: RunConfig, key: str, reading: AcceptedReading) -> RunConfig:
    """Every refusal the campaign's admission would give, before anything is created or started.

    Reads the campaign file without its lock (writes are atomic renames, and a missing file gets
    no lock file): the key's fingerprint, the ceiling, a second --prior-spend-usd, an unsettled
    active_run, a meter below the last accepted usage, no money above the reserve. The admission
    under the lock (`open_campaign`) checks all of it again, since the file may change meanwhile.
    """
    record = peek_campaign(cfg.money)
    shared = cfg.hosts.shared_campaign
    if shared and record is not None:
        from ..campaign.shared import refuse_if_stopped

        refuse_if_stopped(record, cfg.money.campaign_location())
    money = resolve_money(cfg.money, record)
    bounds = MoneyBounds.of(money)
    usage = reading.usage
    if record is None:
        spending = Spending(
            ceiling_usd=bounds.campaign_budget_usd,
            prior_spend_usd=money.prior_spend_usd,
            usage_baseline=usage,
            usage=usage,
            usage_at_run_start=usage,
        )
    else:
        if shared:  # another host may have read (and stored) the same meter after us
            usage = max(usage, record.last_usage)
        _admit_existing(
            record,
            money.campaign_location(),
            key_fingerprint(key),
            bounds.campaign_budget_usd,
            money.prior_spend_usd,
            usage,
            cfg.agent.diagnostic_eval_on_truncation,
        )
        spending = _spending(record, usage, usage)
    admission_check(spending, reserve_usd=bounds.budget_reserve_usd, limit_remaining=reading.limit_remaining)
    return cfg.with_changes(money=money)


def gateway_allowance(
    spending: Spending, reserve_usd: float, run_budget_usd: float | None, limit_remaining: float | None
) -> float:
    """What the gateway's sum of provider costs may reach before it fences: the smallest of the
    money above the campaign's reserve, the run's budget left, and the key's own remaining limit."""
    bounds = [spending.remaining_usd - reserve_usd]
    if run_budget_usd is not None:
        bounds.append(run_budget_usd - (spending.run_spent_usd or 0.0))
    if limit_remaining is not None:
        bounds.append(limit_remaining)
    return max(0.0, min(bounds))


def _startup_reading(meter: KeyMeter) -> AcceptedReading:
    """The first reading, before custody: bounded at one 5 s read, and refused if it is not sane."""
    requested = time.monotonic()
    try:
        reading = meter.read_usage(timeout=5.0)
    except MeterError as exc:
        raise Refusal("meter", f"the key meter did not answer usably at start: {exc}") from None
    problem = judge_usage(reading.usage, None)
    if problem is not None:
        raise Refusal("meter", f"the key meter's starting reading was rejected: {problem[1]}.")
    return AcceptedReading(
        request_time=requested,
        usage=float(reading.usage),
        limit=reading.limit,
        limit_remaining=reading.limit_remaining,
        attempts=1,
        observed_at=datetime.now(UTC),
    )


def _spending(record, usage: float, run_start_usage: float) -> Spending:
    return Spending(
        ceiling_usd=record.ceiling_usd,
        prior_spend_usd=record.prior_spend_usd,
        usage_baseline=record.usage_baseline,
        usage=usage,
        usage_at_run_start=run_start_usage,
    )


class NotAdmitted(Exception):
    """The campaign could not record this run while `doing` something: nothing may start."""

    def __init__(self, doing: str, error: CampaignPersistenceError) -> None:
        super().__init__(f"{doing}: {error}")
        self.doing, self.error = doing, error


class SpendingPolicy(Protocol):
    """What a Run asks of its money. `run` is the Run (run.py): its event log, stop and manifest."""

    spends: bool  # False only for a run that can spend nothing (no key, meter or campaign)
    persistence_error: str | None  # the first campaign write that failed, for the manifest's error

    def admit(self, run: Any, held: ExitStack) -> None: ...
    def anchor(self) -> float: ...
    def observe(self, deadline: float) -> tuple[float, StopReason | None]: ...
    def money_stop(self) -> StopReason | None: ...
    def runner(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]: ...
    def runner_started(self, pid: int) -> None: ...
    def settle(self, result: Any, cleanup_error: str | None) -> tuple[Any, CampaignSettlement]: ...
    def monitor(self) -> tuple[MonitorSpending, MeterState]: ...


class NoSpending:
    """oracle / nop: no key is read, no meter, no campaign file. The supervisor's meter port answers at
    once with "no stop": its blindness bound then only paces the loop."""

    spends = False
    persistence_error: str | None = None

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.tracker = MeterTracker(cfg.money.meter_blindness_sec)  # never fed: monitor.json's meter stays empty

    def admit(self, run: Any, held: ExitStack) -> None:
        write_manifest(run.cfg.run_root, run.manifest)

    def anchor(self) -> float:
        return time.monotonic()

    def observe(self, deadline: float) -> tuple[float, StopReason | None]:
        """No meter: nothing is spent, so there is nothing to read and never a money stop."""
        return time.monotonic(), None

    def money_stop(self) -> StopReason | None:
        return None

    def runner(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        return argv, env

    def runner_started(self, pid: int) -> None:
        return  # a run that spends nothing has no campaign

    def settle(self, result: Any, cleanup_error: str | None) -> tuple[Any, CampaignSettlement]:
        return result, NO_CAMPAIGN

    def monitor(self) -> tuple[MonitorSpending, MeterState]:
        return monitor_spending(None, self.cfg), self.tracker.state()


class CampaignSpending:
    """The key's meter against one campaign record: admission, polls and stops, final settlement."""

    spends = True

    def __init__(self, cfg: RunConfig, key: str) -> None:
        self.cfg, self.key = cfg, key
        self.meter = KeyMeter(cfg.money.meter_url, key, timeout=5.0)
        self.tracker = MeterTracker(cfg.money.meter_blindness_sec)
        self.bounds = MoneyBounds.of(cfg.money)  # a paid run's config has its bounds resolved (paid_preflight)
        self.spending: Spending | None = None
        self.persistence_error: str | None = None  # the first campaign write that failed
        self.campaign: Campaign | None = None  # the campaign handle, once admitted
        self.run: Any = None  # the Run, from admit on

    @property
    def admitted(self) -> Campaign:
        """The campaign handle: every caller runs after `admit` set it."""
        return reached(self.campaign, "the campaign handle (admit)")

    def _opener(self):
        return open_campaign

    def _join(self) -> None:
        """After the campaign registered the run (a shared host registers its own run here)."""

    def _meter(self):
        return self.meter

    def admit(self, run: Any, held: ExitStack) -> None:
        """The startup reading, the campaign's admission under its lock (held until `held` closes),
        the money checks, then the run registered; raises NotAdmitted when a campaign write fails."""
        self.run = run
        cfg = self.cfg
        startup = _startup_reading(self.meter)
        try:
            campaign = held.enter_context(
                self._opener()(
                    campaign_store(cfg.money),
                    key_fingerprint=key_fingerprint(self.key),
                    ceiling=cfg.money.campaign_budget_usd,
                    prior_spend=cfg.money.prior_spend_usd,
                    startup_usage=startup.usage,
                    create_if_missing=cfg.money.new_campaign,
                    reserve=self.bounds.budget_reserve_usd,
                    run_budget=self.bounds.budget_usd,
                    diagnostic=cfg.agent.diagnostic_eval_on_truncation,
                )
            )
        except CampaignPersistenceError as exc:
            raise self._not_admitted(exc, "opening the campaign") from None
        self.campaign = campaign
        self.startup = startup
        self.run_start_usage = startup.usage
        self.spending = _spending(campaign.record, startup.usage, startup.usage)
        admission_check(
            self.spending, reserve_usd=self.bounds.budget_reserve_usd, limit_remaining=startup.limit_remaining
        )
        if run.gateway is not None:
            run.gateway.set_allowance(
                gateway_allowance(
                    self.spending, self.bounds.budget_reserve_usd, self.bounds.budget_usd, startup.limit_remaining
                )
            )
        try:
            campaign.start_run(
                run_root=str(cfg.run_root), run_label=run.label, launcher_pid=os.getpid(), host=socket.gethostname()
            )
        except CampaignPersistenceError as exc:
            # Not registered: the file has no active_run for this run, and nothing was started.
            raise self._not_admitted(exc, "registering the run") from None
        self._join()
        self.observer = MeterObserver(
            read=lambda timeout: self._meter().read_usage(timeout=timeout),
            save=self._save_usage,
            last_accepted=lambda: campaign.record.last_usage,
            on_observation=self._observation,
        )

    def _not_admitted(self, exc: CampaignPersistenceError, doing: str) -> NotAdmitted:
        self._persistence_failed(exc, doing)
        return NotAdmitted(doing, exc)

    def anchor(self) -> float:
        """The blindness bound counts from the startup reading's request."""
        return self.startup.request_time

    def observe(self, deadline: float) -> tuple[float, StopReason | None]:
        reading = self.observer.observe(deadline, phase=MeterPhase.POLL)
        self._accepted(reading, phase="poll")
        decision = stop_decision(
            reached(self.spending, "the campaign's spending (admit)"),
            reserve_usd=self.bounds.budget_reserve_usd,
            run_budget_usd=self.bounds.budget_usd,
            limit_remaining=reading.limit_remaining,
        )
        if decision is not None:
            self._crossing(decision)
        return reading.request_time, decision

    def _crossing(self, reason: StopReason) -> None:
        """This run's meter crossed a bound (a shared host tells the other hosts here)."""

    def money_stop(self) -> StopReason | None:
        if self.persistence_error is not None:
            return StopReason.CAMPAIGN_PERSISTENCE_FAILED  # e.g. the runner's pgid could not be recorded
        return None

    def runner(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        return argv, env

    def runner_started(self, pid: int) -> None:
        try:
            self.admitted.set_runner_pgid(pid)
        except CampaignPersistenceError as exc:
            self._persistence_failed(exc, "recording the runner's process group")

    def settle(self, result: Any, cleanup_error: str | None) -> tuple[Any, CampaignSettlement]:
        """After custody: the settlement (unconfirmed while cleanup is unproven), a failed campaign
        write joined to the stop causes, and the settlement event."""
        settlement = "unconfirmed" if cleanup_error else self._settle(result)
        if self.persistence_error is not None:
            result = self.run.with_cause(result, StopReason.CAMPAIGN_PERSISTENCE_FAILED, "campaign")
        self.run.event(
            EventKind.SETTLEMENT,
            settlement=settlement,
            run_spent_usd=self.spending.run_spent_usd if self.spending else None,
        )
        return result, settlement

    def _settle(self, result: Any) -> CampaignSettlement:
        """One final reading, bounded by the blindness interval: accounting only, never a new stop."""
        meter_error = None
        try:
            reading = self.observer.observe(
                time.monotonic() + self.cfg.money.meter_blindness_sec, phase=MeterPhase.FINAL
            )
            self._accepted(reading, phase="final")
        except MeterBlind as exc:
            meter_error = f"final meter reading unavailable: {exc.last_error or exc}"
        except CampaignPersistenceError as exc:
            # The final usage is not on disk: settling now would record a stale spend. Keep active_run.
            self._persistence_failed(exc, "saving the final meter reading")
            return "unconfirmed"
        try:
            self.admitted.finish_run(
                outcome=str(self.run.outcome(result)), stop_reason=result.stop_reason, meter_error=meter_error
            )
        except CampaignPersistenceError as exc:
            self._persistence_failed(exc, "settling the campaign")
            return "unconfirmed"
        except Exception:  # noqa: BLE001 - the campaign keeps active_run and the run says so
            return "unconfirmed"
        return "recorded"

    def monitor(self) -> tuple[MonitorSpending, MeterState]:
        return monitor_spending(self.spending, self.cfg), self.tracker.state()

    def _persistence_failed(self, exc: CampaignPersistenceError, doing: str) -> None:
        """A campaign write failed: remember the first, and stop the supervisor if it is running."""
        if self.persistence_error is None:
            self.persistence_error = f"{doing}: {exc}"
        if self.run is not None and self.run.stop_now is not None:
            self.run.stop_now(StopReason.CAMPAIGN_PERSISTENCE_FAILED)

    def _accepted(self, reading: AcceptedReading, *, phase: str) -> None:
        self.tracker.accepted(reading)
        self.spending = _spending(self.admitted.record, reading.usage, self.run_start_usage)
        self.run.event(
            EventKind.METER_READING,
            phase=phase,
            usage=reading.usage,
            run_spent_usd=self.spending.run_spent_usd,
            campaign_spent_usd=self.spending.spent_usd,
            campaign_remaining_usd=self.spending.remaining_usd,
        )

    def _observation(self, obs: Observation) -> None:
        confirmation = self.tracker.observation(obs)
        if confirmation is not None:
            self.run.event(
                EventKind.METER_CONFIRMED,
                phase=confirmation.phase,
                previous_usage=confirmation.previous_usage,
                usage=confirmation.usage,
                rejections=confirmation.rejections,
            )
        if not obs.accepted:
            self.run.event(
                EventKind.METER_REJECTED,
                phase=obs.phase,
                previous_usage=obs.previous_usage,
                observed_usage=obs.observed_usage,
                error_type=obs.error_type or "error",
                error=obs.error or "",
            )

    def _save_usage(self, usage: float, at: datetime) -> None:
        """An accepted reading reaches the campaign file, or the run stops: the failure is recorded
        as the run's error here, and the observer's caller turns it into campaign_persistence_failed."""
        try:
            self.admitted.record_usage(usage, at)
        except CampaignPersistenceError as exc:
            self._persistence_failed(exc, "saving a meter reading")
            raise


class SharedCampaignSpending(CampaignSpending):
    """--shared-campaign: the campaign's money as CampaignSpending keeps it, admitted through the
    shared hold, plus this host's side (shared_host.SharedHost): its run and claims registered after
    the campaign's, the campaign's one polled meter read, a campaign-wide crossing written for every
    host, and the claims released before the final reading."""

    def __init__(self, cfg: RunConfig, key: str) -> None:
        super().__init__(cfg, key)
        self.host: SharedHost | None = None  # this host's side, once joined

    @property
    def joined(self) -> SharedHost:
        """This host's side: every caller runs after `_join` (inside `admit`) set it."""
        return reached(self.host, "this host's side of the shared campaign (admit)")

    def _opener(self):
        from .shared_host import shared_opener

        return shared_opener(self.cfg)

    def _join(self) -> None:
        from .shared_host import SharedHost

        try:
            self.host = SharedHost.join(self.run, self.meter)
        except CampaignPersistenceError as exc:
            raise self._not_admitted(exc, "registering this host's run") from None

    def _meter(self):
        # A shared host reads the campaign's one polled reading (campaign/shared_meter.py).
        return self.joined.meter or self.meter

    def _crossing(self, reason: StopReason) -> None:
        self.joined.crossing(reason, self.admitted)  # a campaign-wide crossing stops every host

    def runner(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        return self.joined.runner(env)  # our batch loop is the runner; it runs run_parallel.sh per batch

    def settle(self, result: Any, cleanup_error: str | None) -> tuple[Any, CampaignSettlement]:
        self.joined.end_lease()  # from here only this thread talks to the claims
        return super().settle(result, cleanup_error)

    def _settle(self, result: Any) -> CampaignSettlement:
        if not self.joined.release_claims():
            return "unconfirmed"  # the claims could not be settled: the host run stays live, its lease lapses
        return super()._settle(result)
