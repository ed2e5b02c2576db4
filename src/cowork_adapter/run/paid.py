"""A run that may spend: campaign custody, the supervised runner, verified cleanup, settlement.

Order matters and is the point of this module:
  1. the startup meter reading is accepted and saved under the campaign lock (the anchor);
  2. the watchdog is started in its own session and armed (custody/watchdog.py: it fences, stops
     and cleans the run if this process dies); without it the runner never starts;
  3. custody is installed (shim, label, limits, the key in an agent-only env file);
  4. the supervisor runs the upstream runner until it ends or a stop cause ends it;
  5. exact-label cleanup is PROVEN before anything is settled; unknown state keeps active_run;
     then the watchdog is told "done" and reaped;
  6. one final reading, bounded like every other, settles the campaign and clears active_run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..campaign.budget import Spending, admission_check, stop_decision
from ..campaign.meter import KeyMeter, MeterError
from ..campaign.observe import AcceptedReading, MeterBlind, MeterObserver, Observation, judge_usage
from ..campaign.store import CampaignStore, JsonFileCampaignStore, _admit_existing, open_campaign, read_campaign
from ..config import RunConfig, not_below
from ..container.procs import start_ticks
from ..container.protocol import scrub, secret_terms
from ..custody.bash_env import TaskDumps, eval_bound_sec, install_custody
from ..custody.creations import creations_dir
from ..custody.daemon_watch import RETURN_WAIT_SEC, DaemonLoss, DaemonWatch, wait_for_answer
from ..custody.docker_ops import cleanup_run, custody_gap
from ..custody.stop_removal import log_line, remove_for_stop
from ..custody.watchdog import RUN_MARKER_ENV, WatchdogHandle, start_watchdog, write_processes
from ..errors import CampaignPersistenceError, CustodyError, Refusal
from ..runroot.events import EventLog
from ..fileio import create_exclusive
from .live import ProgressView
from .progress import RunProgress, record_event, report_write_failure
from ..host.resources import reader_for
from ..schemas.campaign import CampaignRecord, key_fingerprint
from ..schemas.custody import CustodyProcesses, ProcessIdentity
from ..runroot.manifest import write_manifest
from ..schemas.manifest import RunManifest
from ..schemas.run_config import agent_base_url, agent_short_name, model_provider
from .signals import LAUNCHER_SIGNALS
from ..schemas.monitor import Disk, MeterConfirmation, MeterState, Monitor, Progress, RejectedObservation
from ..schemas.monitor import Spending as MonitorSpending
from .supervisor import SupervisionResult, Supervisor
from ..gateway.server import FENCE_BUDGET as GATEWAY_BUDGET
from ..gateway.run import secret_file as gateway_secret_file
from ..vocab import EventKind, ExitCode, MeterPhase, RunOutcome, StopPath, StopReason

GIB = 1 << 30
# Rejected meter reads monitor.json lists one by one; older ones are only counted (rejected_dropped).
KEEP_REJECTED = 20
KEY_ENV_IN_AGENT = "COWORK_PROVIDER_KEY"
AGENT_ENTRY = "cowork_entry.py"
# A run that spends nothing (oracle, nop) has no campaign to settle: that is its settled state.
NO_CAMPAIGN = "not_applicable"
SETTLED = ("recorded", NO_CAMPAIGN)
# Variables that could carry a provider key into the runner (and from it into every container).
KEY_CARRIERS = ("LLM_API_KEY", "MODEL_API_KEY", "OPENROUTER_API_KEY", "OPENAI_API_KEY", "OPENAI_COMPATIBLE_API_KEY")


def paid_preflight(cfg: RunConfig) -> tuple[str, RunConfig]:
    """The provider key from the environment, checked against the meter before anything is written,
    and the config with its money bounds resolved (see `resolve_money`)."""
    key = os.environ.get(cfg.api_key_env, "")
    if not key.strip():
        raise Refusal("credential", f"the environment variable {cfg.api_key_env} is empty or unset; supply the provider key there.")
    if cfg.campaign_file is None and cfg.campaign_db is None:
        raise Refusal("campaign", "a paid run needs --campaign-file, the campaign's shared spending record.")
    if cfg.campaign_file is not None and not cfg.campaign_file.parent.is_dir():
        raise Refusal("campaign", f"the campaign file's directory {cfg.campaign_file.parent} does not exist.")
    meter = KeyMeter(cfg.meter_url, key, timeout=5.0)
    try:
        headroom = meter.headroom(timeout=5.0)
    except MeterError as exc:
        raise Refusal("credential", f"the key meter at {cfg.meter_url} did not give a usable answer: {exc}") from None
    effective = headroom.effective
    if effective is not None and effective < cfg.min_key_usd:
        raise Refusal("credential", f"the key has ${effective:.2f} of headroom, below --min-key-usd {cfg.min_key_usd:g}.")
    cfg = campaign_preflight(cfg, key, _startup_reading(meter))
    return key, cfg


# The money flags a run that creates a campaign must give: (RunConfig field, flag).
MONEY_FLAGS = (("campaign_budget_usd", "--campaign-budget-usd"), ("budget_usd", "--budget-usd"),
               ("budget_reserve_usd", "--budget-reserve-usd"))
# Where an existing campaign keeps each bound the run did not name.
_STORED = {"campaign_budget_usd": "ceiling_usd", "budget_usd": "run_budget_usd", "budget_reserve_usd": "reserve_usd"}


def resolve_money(cfg: RunConfig, record: CampaignRecord | None) -> RunConfig:
    """The config with all three money bounds known, or a Refusal naming what is missing.

    No amount is ever assumed. A campaign that does not exist is created only with --new-campaign
    (a new campaign is a new usage baseline: a mistyped path must not start one), and only from
    bounds given explicitly. A run on an existing campaign takes each bound it does not name from
    what the campaign stored when it was created.
    """
    path = campaign_location(cfg)
    if record is None:
        if not cfg.new_campaign:
            raise Refusal("campaign", f"the campaign {path} does not exist, and creating it would start a new "
                                      "campaign with a new usage baseline; pass --new-campaign to create it, or name "
                                      "the existing campaign file.")
        missing = [flag for name, flag in MONEY_FLAGS if getattr(cfg, name) is None]
        if missing:
            raise Refusal("campaign", f"creating the campaign {path} needs {_and(missing)} given explicitly; "
                                      "no amount is assumed.")
        return cfg
    update = {name: getattr(record, _STORED[name]) for name, _ in MONEY_FLAGS if getattr(cfg, name) is None}
    missing = [flag for name, flag in MONEY_FLAGS if name in update and update[name] is None]
    if missing:
        raise Refusal("campaign", f"the campaign {path} stores no value for {_and(missing)}; give "
                                  f"{'it' if len(missing) == 1 else 'them'} explicitly.")
    resolved = cfg.with_changes(**update)
    if not_below(resolved.budget_reserve_usd, resolved.campaign_budget_usd):
        raise Refusal("campaign", f"the reserve ${resolved.budget_reserve_usd:g} is not below the campaign's ceiling "
                                  f"${resolved.campaign_budget_usd:g}; give a smaller --budget-reserve-usd.")
    return resolved


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def campaign_store(cfg: RunConfig) -> CampaignStore:
    """The run's campaign store: PostgreSQL with --campaign-db (several hosts), else the JSON file."""
    if cfg.campaign_db is not None:
        from ..campaign.pg_store import PostgresCampaignStore  # psycopg2 only for runs that name a database

        return PostgresCampaignStore(cfg.campaign_db, cfg.campaign_name)
    return JsonFileCampaignStore(cfg.campaign_file)


def peek_campaign(cfg: RunConfig) -> CampaignRecord | None:
    """The campaign record without its lock (every write is atomic: a rename, or one transaction)."""
    if cfg.campaign_db is not None:
        from ..campaign.pg_store import read_campaign_db

        return read_campaign_db(cfg.campaign_db, cfg.campaign_name)
    return read_campaign(cfg.campaign_file)


def campaign_location(cfg: RunConfig) -> str:
    """How messages name the campaign: its file, or its database and name."""
    if cfg.campaign_db is not None:
        return f"{cfg.campaign_db} campaign {cfg.campaign_name!r}"
    return str(cfg.campaign_file)


def campaign_preflight(cfg: RunConfig, key: str, reading: AcceptedReading) -> RunConfig:
    """Every refusal the campaign's admission would give, before anything is created or started.

    Reads the campaign file without its lock (writes are atomic renames, and a missing file gets
    no lock file): the key's fingerprint, the ceiling, a second --prior-spend-usd, an unsettled
    active_run, a meter below the last accepted usage, no money above the reserve. The admission
    under the lock (`open_campaign`) checks all of it again, since the file may change meanwhile.
    """
    record = peek_campaign(cfg)
    if cfg.shared_campaign and record is not None:
        from ..campaign.shared import refuse_if_stopped

        refuse_if_stopped(record, campaign_location(cfg))
    cfg = resolve_money(cfg, record)
    usage = reading.usage
    if record is None:
        spending = Spending(ceiling_usd=cfg.campaign_budget_usd, prior_spend_usd=cfg.prior_spend_usd,
                            usage_baseline=usage, usage=usage, usage_at_run_start=usage)
    else:
        if cfg.shared_campaign:  # another host may have read (and stored) the same meter after us
            usage = max(usage, record.last_usage)
        _admit_existing(record, campaign_location(cfg), key_fingerprint(key), cfg.campaign_budget_usd,
                        cfg.prior_spend_usd, usage, cfg.diagnostic_eval_on_truncation)
        spending = _spending(record, usage, usage)
    admission_check(spending, reserve_usd=cfg.budget_reserve_usd, limit_remaining=reading.limit_remaining)
    return cfg


@dataclass
class MeterTracker:
    """What monitor.json says about the meter: last acceptance, recent rejections, errors."""

    blindness_sec: float
    last_usage: float | None = None
    last_accepted_mono: float | None = None
    last_accepted_at: datetime | None = None
    rejected: list[RejectedObservation] = field(default_factory=list)
    rejected_total: int = 0
    rejected_dropped: int = 0
    pending_rejections: int = 0  # rejected since the last acceptance
    last_error: str | None = None
    confirmed_after_rejection: bool = False
    confirmation: MeterConfirmation | None = None

    def accepted(self, reading: AcceptedReading) -> None:
        self.last_usage = reading.usage
        self.last_accepted_mono = reading.request_time
        self.last_accepted_at = reading.observed_at
        self.confirmed_after_rejection = reading.attempts > 1

    def observation(self, obs: Observation) -> MeterConfirmation | None:
        """Count a rejected read (the latest KEEP_REJECTED kept, the rest counted as dropped), or
        record the acceptance that followed rejections; returns that confirmation."""
        if obs.accepted:
            self.confirmation = MeterConfirmation(
                observed_at=obs.observed_at, phase=obs.phase, attempt=obs.attempt, previous_usage=obs.previous_usage,
                usage=float(obs.observed_usage), rejections=self.pending_rejections,
            )
            self.pending_rejections = 0
            return self.confirmation
        self.rejected_total += 1
        self.pending_rejections += 1
        self.last_error = f"{obs.error_type}: {obs.error}"
        self.rejected.append(RejectedObservation(
            observed_at=obs.observed_at, phase=obs.phase, attempt=obs.attempt,
            previous_usage=obs.previous_usage, observed_usage=obs.observed_usage,
            error_type=obs.error_type or "error", error=obs.error or "",
        ))
        if len(self.rejected) > KEEP_REJECTED:
            self.rejected_dropped += len(self.rejected) - KEEP_REJECTED
            del self.rejected[:-KEEP_REJECTED]
        return None

    def state(self) -> MeterState:
        age = None if self.last_accepted_mono is None else max(0.0, time.monotonic() - self.last_accepted_mono)
        return MeterState(
            blindness_sec=self.blindness_sec, last_accepted_at=self.last_accepted_at, age_sec=age,
            last_usage=self.last_usage, rejected=list(self.rejected), rejected_total=self.rejected_total,
            rejected_dropped=self.rejected_dropped, last_error=self.last_error,
            confirmed_after_rejection=self.confirmed_after_rejection, confirmation=self.confirmation,
        )


def runner_env(cfg: RunConfig, manifest: RunManifest, custody) -> dict[str, str]:
    """The upstream runner's environment: no key anywhere, the immutable image ID, our entry."""
    # No libpq variable either: the database password (PGPASSWORD) is the launcher's, not the runner's.
    base = {k: v for k, v in os.environ.items()
            if k not in KEY_CARRIERS and k != cfg.api_key_env and not k.startswith("PG")}
    base.update(
        IMAGE=manifest.image.id,
        AGENT_ENTRY=AGENT_ENTRY,
        AGENT_PHASE_AWARE="1",
        MODEL_PROVIDER=model_provider(cfg),
        MODEL_NAME=cfg.model,
        LLM_MODEL=cfg.model,
        # The benchmark's own engines read the endpoint from these (the Ouroboros server drops them).
        MODEL_API_URL=agent_base_url(cfg),
        LLM_BASE_URL=agent_base_url(cfg),
        MAX_STEPS=str(cfg.max_steps),
        TASK_TIMEOUT=str(cfg.task_timeout),
    )
    return custody.environment(base)


def _watchdog_env(cfg: RunConfig) -> dict[str, str]:
    """The watchdog needs no key: the launcher's environment without any variable that may carry one."""
    return {k: v for k, v in os.environ.items() if k not in KEY_CARRIERS and k != cfg.api_key_env}


def write_agent_env(path: Path, key: str) -> None:
    """The key for agent containers only: 0600, outside the benchmark tree (never mounted)."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    # In place: the key is never staged under a name the watchdog and `clear` do not delete.
    create_exclusive(path, f"{KEY_ENV_IN_AGENT}={key}\n", mode=0o600, in_place=True)


def delete_agent_env(path: Path) -> None:
    """Remove the key's env file; an error is said, never raised (the way out must go on)."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        print(f"cowork-adapter: could not delete the key file {path}: {exc.strerror}", file=sys.stderr, flush=True)


def run_paid(cfg: RunConfig, pre, manifest: RunManifest, bench_copy: Path, gateway=None) -> int:
    """Run the selection under campaign custody; returns the exit code (see vocab.ExitCode).

    With `gateway` (--llm-gateway, gateway.py) no key file is written: the shim gives each agent
    container its task's token, the gateway is fenced by every stop and fences the run itself when
    its own sum of provider costs reaches the run's allowance."""
    paid = PaidRun(cfg, manifest, bench_copy, pre.key, gateway)
    try:
        return paid.run()
    finally:
        # Every way out, an exception or a signal's StopSignal included: the key leaves the disk
        # (the watchdog deletes it only when the launcher dies, and is told "done" just below).
        delete_agent_env(paid.agent_env)
        paid.end_watchdog()  # every way out of a living launcher says "done" (idempotent)


# Said at the start of every run that gives agent containers the key, and disclosed by `report`
# (report/build.py): on this path the agent under test can read it (docs/security.md, the key's path).
KEY_IN_AGENT_NOTE = ("the provider key reaches every agent container (its environment, the engine's settings file "
                     "and `docker inspect`): the agent under test can read it; --llm-gateway keeps it on the host.")


class PaidRun:
    """One paid invocation. Its methods are the supervisor's ports (observe, disk_check, publish)."""

    gateway = None  # the run's model gateway (--llm-gateway), set by __init__ when there is one

    def __init__(self, cfg: RunConfig, manifest: RunManifest, bench_copy: Path, key: str, gateway=None) -> None:
        self.cfg, self.manifest, self.bench_copy, self.key = cfg, manifest, bench_copy, key
        self.gateway = gateway
        root = cfg.run_root
        self.label = manifest.run_label
        self.events = EventLog(root / "events.jsonl")
        self.progress = RunProgress(root, self.events)
        self.failures = self.progress.failures
        self.view = ProgressView.for_stream(sys.stdout)
        # No key, no meter: a run that spends nothing (free.py) never reads one.
        self.meter = KeyMeter(cfg.meter_url, key, timeout=5.0) if key else None
        self.tracker = MeterTracker(cfg.meter_blindness_sec)
        self.stop_file = root / "custody" / "stop"
        self.evidence = root / "custody" / "evidence"
        self.agent_env = root / "private" / "agent.env"
        self.tmpdir = cfg.resource_root.resolve() / f"tmp-{self.label[:12]}"  # the shim's TMPDIR
        self.runner_pid: int | None = None
        self.watchdog: WatchdogHandle | None = None
        self.processes: CustodyProcesses | None = None
        self.causes: list[str] = []
        self.spending: Spending | None = None
        self.persistence_error: str | None = None  # the first campaign write that failed
        self.daemon_watch: DaemonWatch | None = None
        self.stop_now: Callable[[str], None] | None = None  # the supervisor's request_stop, once it exists
        self.pending_stops: list[str] = []
        self.campaign = None  # the campaign handle, once admitted (never for a run that spends nothing)
        self.host = None  # a shared campaign's host side (SharedHost), with --shared-campaign

    def event(self, kind: EventKind, **payload) -> None:
        record_event(self.events, self.failures, kind, **payload)

    # ---------------------------------------------------------------- the run, in order

    def run(self) -> int:
        cfg = self.cfg
        self.event(EventKind.RUN_ADMITTED, run_root=str(cfg.run_root), run_label=self.label,
                   selected=len(self.manifest.selection.task_ids),
                   resume_generation=self.manifest.selection.resume_generation)
        # Advice first: its daemon and file reads must not eat into the startup reading's blindness bound.
        _say_concurrency(cfg, "before this run")
        if self.key and self.gateway is None:
            print(f"cowork-adapter: {KEY_IN_AGENT_NOTE}", flush=True)
        startup = _startup_reading(self.meter)
        with ExitStack() as held:
            try:
                opener = open_campaign
                if cfg.shared_campaign:
                    from .shared_host import shared_opener

                    opener = shared_opener(cfg)
                campaign = held.enter_context(opener(
                    campaign_store(cfg), key_fingerprint=key_fingerprint(self.key),
                    ceiling=cfg.campaign_budget_usd, prior_spend=cfg.prior_spend_usd, startup_usage=startup.usage,
                    create_if_missing=cfg.new_campaign, reserve=cfg.budget_reserve_usd, run_budget=cfg.budget_usd,
                    diagnostic=cfg.diagnostic_eval_on_truncation,
                ))
            except CampaignPersistenceError as exc:
                return self._unregistered(exc, "opening the campaign")
            self.campaign = campaign
            self.run_start_usage = startup.usage
            self.spending = _spending(campaign.record, startup.usage, startup.usage)
            admission_check(self.spending, reserve_usd=cfg.budget_reserve_usd, limit_remaining=startup.limit_remaining)
            if self.gateway is not None:
                self.gateway.on_fence = self._gateway_fenced
                self.gateway.set_allowance(gateway_allowance(self.spending, cfg.budget_reserve_usd, cfg.budget_usd,
                                                             startup.limit_remaining))
            try:
                campaign.start_run(run_root=str(cfg.run_root), run_label=self.label, launcher_pid=os.getpid(),
                                   host=socket.gethostname())
            except CampaignPersistenceError as exc:
                # Not registered: the file has no active_run for this run, and nothing was started.
                return self._unregistered(exc, "registering the run")
            if cfg.shared_campaign:
                from .shared_host import SharedHost

                try:
                    self.host = SharedHost.join(self)
                except CampaignPersistenceError as exc:
                    return self._unregistered(exc, "registering this host's run")
            self.observer = MeterObserver(
                # A shared host reads the campaign's one polled reading (campaign/shared_meter.py).
                read=lambda timeout: ((self.host and self.host.meter) or self.meter).read_usage(timeout=timeout),
                save=self._save_usage,
                last_accepted=lambda: campaign.record.last_usage,
                on_observation=self._observation,
            )
            # The ledger follows receipts, not meter polls: refreshed every ~2 s through stop and
            # cleanup, made final right after cleanup (before settlement's bounded meter wait).
            self.progress.start_refresher()
            self.daemon_watch = DaemonWatch(cfg.docker_host, self._daemon_lost).start()
            try:
                result = self._supervise(startup.request_time)
            finally:
                self.daemon_watch.stop()
            self.progress.refresh_quietly(live=True, interruption_cause="in_progress")
            with LAUNCHER_SIGNALS.critical():  # custody and accounting always finish
                result, cleanup_error = self._end_custody(result)
                if self.host is not None:
                    self.host.end_lease()  # from here only this thread talks to the claims
                settlement = "unconfirmed" if cleanup_error else self._settle(result)
                if self.persistence_error is not None:
                    result = self._with_cause(result, StopReason.CAMPAIGN_PERSISTENCE_FAILED, "campaign")
                self._record_result(result)
                self.manifest.campaign_settlement = settlement
                self.event(EventKind.SETTLEMENT, settlement=settlement,
                           run_spent_usd=self.spending.run_spent_usd if self.spending else None)
        with LAUNCHER_SIGNALS.critical():
            return self._finish(result, cleanup_error, settlement)

    def _unregistered(self, exc: CampaignPersistenceError, doing: str) -> int:
        """The campaign could not record this run, so nothing may start: prove the label empty, stop (exit 3)."""
        self._persistence_failed(exc, doing)
        result = self._with_cause(SupervisionResult(stop_reason=None, stop_causes=[], runner_exit_code=None),
                                  StopReason.CAMPAIGN_PERSISTENCE_FAILED, "campaign")
        with LAUNCHER_SIGNALS.critical():
            cleanup_error = _cleanup(self.cfg, self.label, self.events, self.failures, self.tmpdir, self.agent_env)
            self._record_result(result)
            self.manifest.campaign_settlement = "unconfirmed"
            self.event(EventKind.SETTLEMENT, settlement="unconfirmed", run_spent_usd=None)
            return self._finish(result, cleanup_error, "unconfirmed")

    def _persistence_failed(self, exc: CampaignPersistenceError, doing: str) -> None:
        """A campaign write failed: remember the first, and stop the supervisor if it is running."""
        if self.persistence_error is None:
            self.persistence_error = f"{doing}: {exc}"
        if self.stop_now is not None:
            self.stop_now(StopReason.CAMPAIGN_PERSISTENCE_FAILED)

    def _with_cause(self, result: SupervisionResult, reason: StopReason, source: str) -> SupervisionResult:
        """A stop cause found outside the supervisor loop (a failed campaign write, a daemon lost as the
        runner ended) joins the result; the first cause stays the stop reason."""
        cause = reason.value
        if cause in result.stop_causes:
            return result
        self.event(EventKind.STOP_REQUESTED, reason=cause, source=source)
        causes = [*result.stop_causes, cause]
        self.causes = causes
        return dataclasses.replace(result, stop_reason=result.stop_reason or cause, stop_causes=causes)

    def _runnable_tasks(self) -> list[str]:
        """Every task this run may hand its runner: the invocation's, and a shared campaign's whole
        selection (a host claims from it as it goes)."""
        sel = self.manifest.selection
        return sorted(set(sel.task_ids) | set(sel.selection_task_ids or []))

    def _supervise(self, anchor: float) -> SupervisionResult:
        """Install custody and supervise the runner; any failure after start_run becomes a stop cause."""
        cfg = self.cfg
        try:
            # The watchdog first, before the key file exists and long before the runner: if it cannot
            # be started or armed, this raises and the runner never starts (stop before spending).
            self.watchdog = start_watchdog(
                run_root=cfg.run_root, run_label=self.label, docker_host=cfg.docker_host, env=_watchdog_env(cfg),
                bound_sec=cfg.meter_blindness_sec, grace_sec=min(8.0, cfg.meter_blindness_sec / 3), tmpdir=self.tmpdir,
            )
            key_file = bool(self.key) and self.gateway is None  # with the gateway no container gets the key
            if key_file:  # a reference engine (oracle, nop) has no key: no env file exists at all
                write_agent_env(self.agent_env, self.key)
            launcher = ProcessIdentity(pid=os.getpid(), start_ticks=start_ticks(os.getpid()))
            custody = install_custody(
                cfg.run_root, real_docker=_real_docker(), docker_host=cfg.docker_host, run_label=self.label,
                limits={"cpus": cfg.cpus, "memory_bytes": cfg.memory_bytes,
                        "memory_swap_bytes": cfg.memory_swap_bytes, "pids_limit": cfg.pids_limit},
                stop_file=self.stop_file, resource_root=cfg.resource_root, min_free_bytes=int(cfg.min_free_gib * GIB),
                evidence_dir=self.evidence, agent_env_file=self.agent_env if key_file else None,
                launcher_pid=launcher.pid, launcher_start_ticks=launcher.start_ticks,
                gateway_secret_file=gateway_secret_file(cfg.run_root) if self.gateway is not None else None,
                dumps=TaskDumps(dumps_dir=self.bench_copy / "dumps", short=agent_short_name(cfg),
                                tasks=tuple(self._runnable_tasks()), eval_bound_sec=eval_bound_sec(os.environ)),
            )
            self.processes = CustodyProcesses(launcher=launcher, watchdog=self.watchdog.identity)
            write_processes(cfg.run_root, self.processes)
            self.event(EventKind.WATCHDOG_STARTED, pid=self.watchdog.identity.pid, launcher_pid=launcher.pid)
            self.manifest.bash_env = str(custody.bash_env)
            write_manifest(cfg.run_root, self.manifest)
            env = runner_env(cfg, self.manifest, custody)
            env[RUN_MARKER_ENV] = self.label  # lets the watchdog find every process of the run in /proc
            argv = self.manifest.official_command
            if self.host is not None:  # our batch loop is the runner; it runs run_parallel.sh per batch
                argv, env = self.host.runner(env)
            supervisor = Supervisor(
                runner_argv=argv, runner_env=env,
                runner_cwd=self.bench_copy, console_log=cfg.run_root / "console.log", stop_file=self.stop_file,
                blindness_sec=cfg.meter_blindness_sec, meter=self, disk_check=self.disk_check, publish=self.publish,
                on_event=self._supervisor_event, on_runner_started=self._runner_started,
                remove_labelled=self._stop_clear, stop_path=StopPath(cfg.stop_path),
            )
            self.stop_now = supervisor.request_stop  # daemon loss and failed campaign writes stop it at once
            for cause in self.pending_stops:  # seen by the host's lease before the supervisor existed
                supervisor.request_stop(cause)
            result = supervisor.run(anchor)
        except Exception as exc:  # noqa: BLE001 - after start_run every path must clean up and settle
            result = SupervisionResult(stop_reason=StopReason.SUPERVISOR_ERROR.value,
                                       stop_causes=[StopReason.SUPERVISOR_ERROR.value], runner_exit_code=None,
                                       supervisor_error=f"{type(exc).__name__}: {exc}")
        if self.gateway is not None:  # no model request is forwarded once the runner is done or stopping
            self.gateway.fence("runner_exited" if not result.stop_reason else result.stop_reason, notify=False)
        self.causes = result.stop_causes
        self.event(EventKind.RUNNER_EXITED, exit_code=result.runner_exit_code)
        for cause in result.stop_causes:
            self.event(EventKind.STOP_REQUESTED, reason=cause, source="supervisor")
        return result

    def _end_custody(self, result: SupervisionResult) -> tuple[SupervisionResult, str | None]:
        """After the runner: the daemon's loss folded in, exact-label cleanup, the final ledger and
        the watchdog ended. Called inside LAUNCHER_SIGNALS.critical() (custody always finishes)."""
        if self.daemon_watch.lost is None and self.daemon_watch.final_check() is not None:
            self._daemon_lost(self.daemon_watch.lost)  # the runner ended first, of the same cause
        if self.daemon_watch.lost is not None:
            result = self._with_cause(result, StopReason.DOCKER_DAEMON_LOST, "daemon_watch")
            self._await_daemon()
        cleanup_error = _cleanup(self.cfg, self.label, self.events, self.failures, self.tmpdir, self.agent_env)
        self.progress.refresh_quietly(live=False, interruption_cause=result.stop_reason or (
            "cleanup_unproven" if cleanup_error else "runner_exited"))
        self.end_watchdog()  # custody is done (proven or reported): the watchdog never outlives it
        return result, cleanup_error

    def _record_result(self, result: SupervisionResult) -> None:
        self.manifest.stop_reason = result.stop_reason
        self.manifest.stop_causes = result.stop_causes
        self.manifest.runner_exit_code = result.runner_exit_code
        if result.supervisor_error:
            message = scrub(result.supervisor_error, secret_terms([self.key]))[:4000]
            self.manifest.error = {"type": "supervisor_error", "message": message}
        elif self.persistence_error:
            message = scrub(self.persistence_error, secret_terms([self.key]))[:4000]
            self.manifest.error = {"type": StopReason.CAMPAIGN_PERSISTENCE_FAILED.value, "message": message}

    def _settle(self, result: SupervisionResult) -> str:
        """One final reading, bounded by the blindness interval: accounting only, never a new stop."""
        meter_error = None
        if self.host is not None and not self.host.release_claims():
            return "unconfirmed"  # the claims could not be settled: the host run stays live, its lease lapses
        try:
            reading = self.observer.observe(time.monotonic() + self.cfg.meter_blindness_sec, phase=MeterPhase.FINAL)
            self._accepted(reading, phase="final")
        except MeterBlind as exc:
            meter_error = f"final meter reading unavailable: {exc.last_error or exc}"
        except CampaignPersistenceError as exc:
            # The final usage is not on disk: settling now would record a stale spend. Keep active_run.
            self._persistence_failed(exc, "saving the final meter reading")
            return "unconfirmed"
        try:
            self.campaign.finish_run(outcome=str(_outcome(result, self.progress)), stop_reason=result.stop_reason,
                                     meter_error=meter_error)
        except CampaignPersistenceError as exc:
            self._persistence_failed(exc, "settling the campaign")
            return "unconfirmed"
        except Exception:  # noqa: BLE001 - the campaign keeps active_run and the run says so
            return "unconfirmed"
        return "recorded"

    def _finish(self, result: SupervisionResult, cleanup_error: str | None, settlement: str) -> int:
        cause = result.stop_reason or ("cleanup_unproven" if cleanup_error else "runner_exited")
        # The run root's disk may be as full as the campaign's: each write is tried, none may crash the end.
        try:
            self.progress.refresh(live=False, interruption_cause=cause)
        except Exception as exc:  # noqa: BLE001 - reported; run_finished and the audit still follow
            report_write_failure(self.failures, "result_index.jsonl", exc)
        monitor = self._monitor(finished=cleanup_error is None)
        monitor.campaign_settlement = settlement
        try:
            self.progress.write_monitor(monitor)
        except Exception as exc:  # noqa: BLE001
            report_write_failure(self.failures, "monitor.json", exc)
        self.view.update(monitor)
        self.view.close()
        self.manifest.outcome = _outcome(result, self.progress)
        code = _exit_code(result, self.progress, cleanup_error, settlement)
        self.event(EventKind.RUN_FINISHED, outcome=str(self.manifest.outcome), exit_code=int(code),
                   stop_reason=result.stop_reason)
        _audit(self.cfg.run_root)
        _say_outcome(self.manifest, self.progress, cleanup_error, settlement)
        _say_concurrency(self.cfg, "after this run", self.cfg.run_root)
        return code

    # ---------------------------------------------------------------- the supervisor's ports

    def observe(self, deadline: float) -> tuple[float, StopReason | None]:
        reading = self.observer.observe(deadline, phase=MeterPhase.POLL)
        self._accepted(reading, phase="poll")
        decision = stop_decision(self.spending, reserve_usd=self.cfg.budget_reserve_usd,
                                 run_budget_usd=self.cfg.budget_usd, limit_remaining=reading.limit_remaining)
        if decision is not None and self.host is not None:
            self.host.crossing(decision)  # a campaign-wide crossing stops every host
        return reading.request_time, decision

    def disk_check(self) -> StopReason | None:
        """The supervisor's per-turn stop check: disks, then a lost daemon, then custody gaps."""
        cfg = self.cfg
        if self.persistence_error is not None:
            return StopReason.CAMPAIGN_PERSISTENCE_FAILED  # e.g. the runner's pgid could not be recorded
        if _free(cfg.resource_root) < cfg.min_free_gib * GIB:
            return StopReason.DISK_RESERVE
        if _free(Path("/")) < cfg.min_root_free_gib * GIB:
            return StopReason.ROOT_DISK_RESERVE
        watch = self.daemon_watch
        if watch is not None and watch.lost is not None:
            return StopReason.DOCKER_DAEMON_LOST
        if watch is not None and not watch.answering():
            return None  # listing a silent daemon would block the loop; the watch decides within its bound
        if self.runner_pid is not None:
            try:
                if custody_gap(cfg.docker_host, self.label, self.runner_pid).breached:
                    return StopReason.CUSTODY_BREACH
            except CustodyError:
                pass  # a failed listing proves nothing either way; cleanup verifies at the end
        return None

    def publish(self, live: bool) -> None:
        try:
            self.progress.refresh(live=live, interruption_cause="in_progress")
        except Exception as exc:  # noqa: BLE001 - progress never stops a run
            report_write_failure(self.failures, "result_index.jsonl", exc)
        monitor = self._monitor(finished=False)
        self.progress.write_monitor(monitor)
        self.view.update(monitor)

    # ---------------------------------------------------------------- helpers

    def _accepted(self, reading: AcceptedReading, *, phase: str) -> None:
        self.tracker.accepted(reading)
        self.spending = _spending(self.campaign.record, reading.usage, self.run_start_usage)
        self.event(EventKind.METER_READING, phase=phase, usage=reading.usage,
                   run_spent_usd=self.spending.run_spent_usd, campaign_spent_usd=self.spending.spent_usd,
                   campaign_remaining_usd=self.spending.remaining_usd)

    def _observation(self, obs: Observation) -> None:
        confirmation = self.tracker.observation(obs)
        if confirmation is not None:
            self.event(EventKind.METER_CONFIRMED, phase=confirmation.phase, previous_usage=confirmation.previous_usage,
                       usage=confirmation.usage, rejections=confirmation.rejections)
        if not obs.accepted:
            self.event(EventKind.METER_REJECTED, phase=obs.phase, previous_usage=obs.previous_usage,
                       observed_usage=obs.observed_usage, error_type=obs.error_type or "error", error=obs.error or "")

    def _save_usage(self, usage: float, at: datetime) -> None:
        """An accepted reading reaches the campaign file, or the run stops: the failure is recorded
        as the run's error here, and the observer's caller turns it into campaign_persistence_failed."""
        try:
            self.campaign.record_usage(usage, at)
        except CampaignPersistenceError as exc:
            self._persistence_failed(exc, "saving a meter reading")
            raise

    def _runner_started(self, pid: int) -> None:
        self.runner_pid = pid
        if self.processes is not None:  # first: a later command proves this group gone by it
            self.processes = self.processes.replace(runner_pgid=pid)
            write_processes(self.cfg.run_root, self.processes)
        if self.campaign is None:
            return  # a run that spends nothing has no campaign
        try:
            self.campaign.set_runner_pgid(pid)
        except CampaignPersistenceError as exc:
            self._persistence_failed(exc, "recording the runner's process group")

    def _stop_clear(self, reason: str) -> None:
        """The fast stop's removal (Supervisor.remove_labelled; custody/stop_removal.py), recorded as
        stop_cleared. Never raises: the final cleanup (_end_custody) lists and proves again."""
        done = remove_for_stop(self.cfg.run_root, self.cfg.docker_host, self.label)
        self.event(EventKind.STOP_CLEARED, reason=reason, removed=done.removed, proven=done.proven,
                   seconds=done.seconds, error=done.error)

    def _gateway_fenced(self, reason: str) -> None:
        """From a gateway thread: its own cost sum reached the allowance. Fence admission, stop the run."""
        if reason != GATEWAY_BUDGET:
            return  # a stop the run itself caused (stop file, runner done): nothing more to do
        # The fence and the supervisor's wake first: the event's durable write (an fsync, slow on a
        # busy disk) must not delay the stop; killed before it, the stop file still tells.
        _fence(self.stop_file, StopReason.GATEWAY_BUDGET)
        if self.stop_now is not None:
            self.stop_now(StopReason.GATEWAY_BUDGET)
        self.event(EventKind.STOP_REQUESTED, reason=StopReason.GATEWAY_BUDGET.value, source="llm_gateway")

    def stop_from_outside(self, reason: str) -> None:
        """From a thread (the host's lease): fence admission now and stop the supervisor."""
        _fence(self.stop_file, reason)
        if self.stop_now is not None:
            self.stop_now(reason)
        else:
            self.pending_stops.append(reason)

    def _daemon_lost(self, loss: DaemonLoss) -> None:
        """From the watch thread: record what was seen, fence admission now, stop the supervisor."""
        before, after = loss.before, loss.after
        self.event(EventKind.DAEMON_LOST, stage="detected", reason=loss.reason, detail=loss.detail[:500],
                   before_pid=before.pid if before else None, before_start_ticks=before.start_ticks if before else None,
                   after_pid=after.pid if after else None, after_start_ticks=after.start_ticks if after else None,
                   silent_sec=round(loss.silent_sec, 1))
        _fence(self.stop_file, StopReason.DOCKER_DAEMON_LOST)
        if self.stop_now is not None:
            self.stop_now(StopReason.DOCKER_DAEMON_LOST)

    def _await_daemon(self) -> None:
        """Before cleanup, give a lost daemon a bounded time to return: only it can prove custody."""
        back = wait_for_answer(self.cfg.docker_host, RETURN_WAIT_SEC)
        if back is None:
            self.event(EventKind.DAEMON_LOST, stage="not_returned",
                       detail=f"no answer within {RETURN_WAIT_SEC:g} s after the stop; custody cannot be proven")
            return
        ident = back.identity
        self.event(EventKind.DAEMON_LOST, stage="returned", detail="the daemon answers again; cleanup relists it",
                   after_pid=ident.pid if ident else None, after_start_ticks=ident.start_ticks if ident else None)

    def end_watchdog(self) -> None:
        """Tell the watchdog the launcher is done and reap it; its exit is in events.jsonl."""
        if self.watchdog is not None:
            self.watchdog.end()

    def _supervisor_event(self, kind: str, data: dict) -> None:
        if kind == "runner_started":
            self.event(EventKind.RUNNER_STARTED, pid=data.get("pid"))
        elif kind == "stop_marker_failed":
            print(json.dumps({"event": "cowork_stop_marker_failed", **data}), file=sys.stderr, flush=True)

    def _monitor(self, *, finished: bool) -> Monitor:
        cfg, spending = self.cfg, self.spending
        return Monitor(
            observed_at=datetime.now(timezone.utc),
            launcher_pid=os.getpid(),
            runner_pid=self.runner_pid,
            finished=finished,
            progress=Progress(**self.progress.counts()),
            spending=MonitorSpending(
                campaign_spent_usd=max(0.0, spending.spent_usd) if spending else None,
                campaign_remaining_usd=max(0.0, spending.remaining_usd) if spending else None,
                run_spent_usd=max(0.0, spending.run_spent_usd or 0.0) if spending else None,
                reserve_usd=cfg.budget_reserve_usd,
                run_budget_usd=cfg.budget_usd,
            ),
            meter=self.tracker.state(),
            disk=Disk(resource_free_bytes=_free(cfg.resource_root), root_free_bytes=_free(Path("/")),
                      resource_reserve_bytes=int(cfg.min_free_gib * GIB),
                      root_reserve_bytes=int(cfg.min_root_free_gib * GIB)),
            stop_reason=self.causes[0] if self.causes else None,
            stop_causes=list(self.causes),
        )


def gateway_allowance(spending: Spending, reserve_usd: float, run_budget_usd: float | None,
                      limit_remaining: float | None) -> float:
    """What the gateway's sum of provider costs may reach before it fences: the smallest of the
    money above the campaign's reserve, the run's budget left, and the key's own remaining limit."""
    bounds = [spending.remaining_usd - reserve_usd]
    if run_budget_usd is not None:
        bounds.append(run_budget_usd - (spending.run_spent_usd or 0.0))
    if limit_remaining is not None:
        bounds.append(limit_remaining)
    return max(0.0, min(bounds))


def _fence(stop_file: Path, reason: str) -> None:
    """Write the stop marker (the shim refuses every new container while it exists); never replace one."""
    try:
        create_exclusive(stop_file, f"{reason}\n", durable=False)  # seen by the shim at once
    except FileExistsError:
        return
    except OSError as exc:
        print(json.dumps({"event": "cowork_stop_marker_failed", "error": f"{type(exc).__name__}: {exc}"}),
              file=sys.stderr, flush=True)


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
    return AcceptedReading(request_time=requested, usage=float(reading.usage), limit=reading.limit,
                           limit_remaining=reading.limit_remaining, attempts=1, observed_at=datetime.now(timezone.utc))


def _spending(record, usage: float, run_start_usage: float) -> Spending:
    return Spending(ceiling_usd=record.ceiling_usd, prior_spend_usd=record.prior_spend_usd,
                    usage_baseline=record.usage_baseline, usage=usage, usage_at_run_start=run_start_usage)


def _cleanup(cfg: RunConfig, label: str, events: EventLog, failures, tmpdir: Path, agent_env: Path) -> str | None:
    """Exact-label cleanup, proven by a relist; then the staging dirs and the key file. None = proven."""
    error = None
    try:
        report = cleanup_run(cfg.docker_host, label, log_line,
                             before_remove=reader_for(cfg.run_root / "custody" / "evidence"),
                             creations=creations_dir(cfg.run_root))
        record_event(events, failures, EventKind.CLEANUP,
                     removed=len(report.removed_containers) + len(report.removed_networks), remaining=0, proven=True)
    except CustodyError as exc:
        error = str(exc)
        record_event(events, failures, EventKind.CLEANUP, proven=False, error=error[:500])
    finally:  # an unexpected error of the cleanup still takes the key off the disk
        delete_agent_env(agent_env)
        shutil.rmtree(tmpdir, ignore_errors=True)  # the runner's staging copies (TMPDIR is run-scoped)
    return error


def _outcome(result, progress: RunProgress) -> RunOutcome:
    if result.stop_reason:
        return RunOutcome.STOPPED
    counts = progress.counts()
    # An environment-blocked row is a task the run could not attempt: the run is incomplete (exit 1).
    if result.runner_exit_code != 0 or counts["infra_failed"] or counts["not_attempted"] or counts["environment_blocked"]:
        return RunOutcome.INCOMPLETE
    return RunOutcome.COMPLETED


def _exit_code(result, progress: RunProgress, cleanup_error: str | None, settlement: str) -> ExitCode:
    if result.stop_reason:
        return ExitCode.STOPPED
    if cleanup_error or settlement not in SETTLED or _outcome(result, progress) is not RunOutcome.COMPLETED:
        return ExitCode.FAILED
    return ExitCode.OK


def _audit(run_root: Path) -> None:
    try:
        from ..audit import audit_run

        audit_run(run_root)
    except Exception as exc:  # noqa: BLE001 - the audit is evidence, never a verdict: report and go on
        print(f"cowork-adapter: the offline audit could not be written: {type(exc).__name__}: {exc}", file=sys.stderr)


def _say_concurrency(cfg: RunConfig, when: str, *own: Path) -> None:
    """The concurrency this host's measured per-task use suggests (advice printed, never enforced;
    the next run's operator chooses it). Never raises: it must not break a run's start or end."""
    from ..host.resources import campaign_roots, host_suggestion

    try:
        found = host_suggestion(cfg.docker_host, [*campaign_roots(cfg.campaign_file, cfg.resume_from), *own])
    except Exception as exc:  # noqa: BLE001 - advice only
        print(f"cowork-adapter: no concurrency suggestion {when} ({type(exc).__name__})", flush=True)
        return
    print(f"cowork-adapter: {when}, {found.sentence} (this run: --concurrency {cfg.concurrency}).", flush=True)


def _say_outcome(manifest: RunManifest, progress: RunProgress, cleanup_error: str | None, settlement: str) -> None:
    counts = progress.counts()
    line = (f"cowork-adapter: {manifest.outcome}: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['agent_failed']} agent_failed, {counts['infra_failed']} infra_failed, "
            f"{counts['not_attempted']} not_attempted, {counts['environment_blocked']} environment_blocked"
            f"{_unsettled(counts)} of {counts['selected']}")
    if manifest.stop_reason:
        line += f"; stopped: {manifest.stop_reason}"
    print(line, flush=True)
    if cleanup_error:
        print(f"cowork-adapter: custody NOT proven ({cleanup_error}); the campaign keeps this run as its active_run "
              "until `cowork-adapter campaign reconcile`.", file=sys.stderr)
    elif settlement not in SETTLED:
        print("cowork-adapter: the campaign settlement was not recorded; active_run stays set.", file=sys.stderr)


def _unsettled(counts: dict[str, int]) -> str:
    """`, N unsettled` when the named counts do not add up to the selection (e.g. a provisional row)."""
    named = ("passed", "failed", "agent_failed", "infra_failed", "not_attempted", "environment_blocked")
    rest = counts["selected"] - sum(counts[name] for name in named)
    return f", {rest} unsettled" if rest > 0 else ""


def _real_docker() -> str:
    found = shutil.which("docker")
    if not found:
        raise Refusal("custody", "no docker client is on PATH.")
    return found


def _free(path: Path) -> int:
    return shutil.disk_usage(path).free

