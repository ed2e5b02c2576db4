"""A run that may spend: campaign custody, the supervised runner, verified cleanup, settlement.

Order matters and is the point of this module:
  1. the startup meter reading is accepted and saved under the campaign lock (the anchor);
  2. custody is installed (shim, label, limits, the key in an agent-only env file);
  3. the supervisor runs the upstream runner until it ends or a stop cause ends it;
  4. exact-label cleanup is PROVEN before anything is settled; unknown state keeps active_run;
  5. one final reading, bounded like every other, settles the campaign and clears active_run.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .campaign.budget import Spending, admission_check, stop_decision
from .campaign.meter import KeyMeter, MeterError
from .campaign.observe import AcceptedReading, MeterBlind, MeterObserver, Observation, judge_usage
from .campaign.store import JsonFileCampaignStore, open_campaign
from .config import RunConfig
from .container.protocol import scrub, secret_terms
from .custody.bash_env import install_custody
from .custody.docker_ops import cleanup_run, custody_gap
from .errors import CustodyError, Refusal
from .events import EventLog
from .live import ProgressView
from .progress import RunProgress, record_event, report_write_failure
from .schemas.campaign import key_fingerprint
from .manifest import write_manifest
from .schemas.manifest import RunManifest
from .schemas.run_config import agent_base_url, model_provider
from .signals import LAUNCHER_SIGNALS
from .schemas.monitor import Disk, MeterState, Monitor, Progress, RejectedObservation
from .schemas.monitor import Spending as MonitorSpending
from .supervisor import SupervisionResult, Supervisor
from .vocab import EventKind, ExitCode, MeterPhase, RunOutcome, StopReason

GIB = 1 << 30
KEY_ENV_IN_AGENT = "COWORK_PROVIDER_KEY"
AGENT_ENTRY = "cowork_entry.py"
# Variables that could carry a provider key into the runner (and from it into every container).
KEY_CARRIERS = ("LLM_API_KEY", "MODEL_API_KEY", "OPENROUTER_API_KEY", "OPENAI_API_KEY", "OPENAI_COMPATIBLE_API_KEY")


def paid_preflight(cfg: RunConfig) -> str:
    """The provider key from the environment, checked against the meter before anything is written."""
    key = os.environ.get(cfg.api_key_env, "")
    if not key.strip():
        raise Refusal("credential", f"the environment variable {cfg.api_key_env} is empty or unset; supply the provider key there.")
    if cfg.campaign_file is None:
        raise Refusal("campaign", "a paid run needs --campaign-file, the campaign's shared spending record.")
    if not cfg.campaign_file.parent.is_dir():
        raise Refusal("campaign", f"the campaign file's directory {cfg.campaign_file.parent} does not exist.")
    meter = KeyMeter(cfg.meter_url, key, timeout=5.0)
    try:
        headroom = meter.headroom(timeout=5.0)
    except MeterError as exc:
        raise Refusal("credential", f"the key meter at {cfg.meter_url} did not give a usable answer: {exc}") from None
    effective = headroom.effective
    if effective is not None and effective < cfg.min_key_usd:
        raise Refusal("credential", f"the key has ${effective:.2f} of headroom, below --min-key-usd {cfg.min_key_usd:g}.")
    return key


@dataclass
class MeterTracker:
    """What monitor.json says about the meter: last acceptance, recent rejections, errors."""

    blindness_sec: float
    last_usage: float | None = None
    last_accepted_mono: float | None = None
    last_accepted_at: datetime | None = None
    rejected: list[RejectedObservation] = field(default_factory=list)
    last_error: str | None = None
    confirmed_after_rejection: bool = False

    def accepted(self, reading: AcceptedReading) -> None:
        self.last_usage = reading.usage
        self.last_accepted_mono = reading.request_time
        self.last_accepted_at = reading.observed_at
        self.confirmed_after_rejection = reading.attempts > 1

    def observation(self, obs: Observation) -> None:
        if obs.accepted:
            return
        self.last_error = f"{obs.error_type}: {obs.error}"
        self.rejected = (self.rejected + [RejectedObservation(
            observed_at=obs.observed_at, phase=obs.phase, attempt=obs.attempt,
            previous_usage=obs.previous_usage, observed_usage=obs.observed_usage,
            error_type=obs.error_type or "error", error=obs.error or "",
        )])[-20:]

    def state(self) -> MeterState:
        age = None if self.last_accepted_mono is None else max(0.0, time.monotonic() - self.last_accepted_mono)
        return MeterState(
            blindness_sec=self.blindness_sec, last_accepted_at=self.last_accepted_at, age_sec=age,
            last_usage=self.last_usage, rejected=self.rejected, last_error=self.last_error,
            confirmed_after_rejection=self.confirmed_after_rejection,
        )


def runner_env(cfg: RunConfig, manifest: RunManifest, custody) -> dict[str, str]:
    """The upstream runner's environment: no key anywhere, the immutable image ID, our entry."""
    base = {k: v for k, v in os.environ.items() if k not in KEY_CARRIERS and k != cfg.api_key_env}
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


def write_agent_env(path: Path, key: str) -> None:
    """The key for agent containers only: 0600, outside the benchmark tree (never mounted)."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{KEY_ENV_IN_AGENT}={key}\n")


def run_paid(cfg: RunConfig, pre, manifest: RunManifest, bench_copy: Path) -> int:
    """Run the selection under campaign custody; returns the exit code (see vocab.ExitCode)."""
    return PaidRun(cfg, manifest, bench_copy, pre.key).run()


class PaidRun:
    """One paid invocation. Its methods are the supervisor's ports (observe, disk_check, publish)."""

    def __init__(self, cfg: RunConfig, manifest: RunManifest, bench_copy: Path, key: str) -> None:
        self.cfg, self.manifest, self.bench_copy, self.key = cfg, manifest, bench_copy, key
        root = cfg.run_root
        self.label = manifest.run_label
        self.events = EventLog(root / "events.jsonl")
        self.progress = RunProgress(root, self.events)
        self.failures = self.progress.failures
        self.view = ProgressView.for_stream(sys.stdout)
        self.meter = KeyMeter(cfg.meter_url, key, timeout=5.0)
        self.tracker = MeterTracker(cfg.meter_blindness_sec)
        self.stop_file = root / "custody" / "stop"
        self.evidence = root / "custody" / "evidence"
        self.agent_env = root / "private" / "agent.env"
        self.tmpdir = cfg.resource_root.resolve() / f"tmp-{self.label[:12]}"  # the shim's TMPDIR
        self.runner_pid: int | None = None
        self.causes: list[str] = []
        self.spending: Spending | None = None

    def event(self, kind: EventKind, **payload) -> None:
        record_event(self.events, self.failures, kind, **payload)

    # ---------------------------------------------------------------- the run, in order

    def run(self) -> int:
        cfg = self.cfg
        self.event(EventKind.RUN_ADMITTED, run_root=str(cfg.run_root), run_label=self.label,
                   selected=len(self.manifest.selection.task_ids),
                   resume_generation=self.manifest.selection.resume_generation)
        startup = _startup_reading(self.meter)
        with open_campaign(
            JsonFileCampaignStore(cfg.campaign_file), key_fingerprint=key_fingerprint(self.key),
            ceiling=cfg.campaign_budget_usd, prior_spend=cfg.prior_spend_usd, startup_usage=startup.usage,
            create_if_missing=True,
        ) as campaign:
            self.campaign = campaign
            self.run_start_usage = startup.usage
            self.spending = _spending(campaign.record, startup.usage, startup.usage)
            admission_check(self.spending, reserve_usd=cfg.budget_reserve_usd, limit_remaining=startup.limit_remaining)
            campaign.start_run(run_root=str(cfg.run_root), run_label=self.label, launcher_pid=os.getpid(),
                               host=socket.gethostname())
            self.observer = MeterObserver(
                read=lambda timeout: self.meter.read_usage(timeout=timeout),
                save=lambda usage, at: campaign.record_usage(usage, at),
                last_accepted=lambda: campaign.record.last_usage,
                on_observation=self._observation,
            )
            result = self._supervise(startup.request_time)
            with LAUNCHER_SIGNALS.critical():  # custody and accounting always finish
                cleanup_error = _cleanup(cfg, self.label, self.events, self.failures, self.tmpdir, self.agent_env)
                self._record_result(result)
                settlement = "unconfirmed" if cleanup_error else self._settle(result)
                self.manifest.campaign_settlement = settlement
                self.event(EventKind.SETTLEMENT, settlement=settlement,
                           run_spent_usd=self.spending.run_spent_usd if self.spending else None)
        with LAUNCHER_SIGNALS.critical():
            return self._finish(result, cleanup_error, settlement)

    def _supervise(self, anchor: float) -> SupervisionResult:
        """Install custody and supervise the runner; any failure after start_run becomes a stop cause."""
        cfg = self.cfg
        try:
            write_agent_env(self.agent_env, self.key)
            custody = install_custody(
                cfg.run_root, real_docker=_real_docker(), docker_host=cfg.docker_host, run_label=self.label,
                limits={"cpus": cfg.cpus, "memory_bytes": cfg.memory_bytes,
                        "memory_swap_bytes": cfg.memory_swap_bytes, "pids_limit": cfg.pids_limit},
                stop_file=self.stop_file, resource_root=cfg.resource_root, min_free_bytes=int(cfg.min_free_gib * GIB),
                evidence_dir=self.evidence, agent_env_file=self.agent_env,
            )
            self.manifest.bash_env = str(custody.bash_env)
            write_manifest(cfg.run_root, self.manifest)
            supervisor = Supervisor(
                runner_argv=self.manifest.official_command, runner_env=runner_env(cfg, self.manifest, custody),
                runner_cwd=self.bench_copy, console_log=cfg.run_root / "console.log", stop_file=self.stop_file,
                blindness_sec=cfg.meter_blindness_sec, meter=self, disk_check=self.disk_check, publish=self.publish,
                on_event=self._supervisor_event, on_runner_started=self._runner_started,
            )
            result = supervisor.run(anchor)
        except Exception as exc:  # noqa: BLE001 - after start_run every path must clean up and settle
            result = SupervisionResult(stop_reason=StopReason.SUPERVISOR_ERROR.value,
                                       stop_causes=[StopReason.SUPERVISOR_ERROR.value], runner_exit_code=None,
                                       supervisor_error=f"{type(exc).__name__}: {exc}")
        self.causes = result.stop_causes
        self.event(EventKind.RUNNER_EXITED, exit_code=result.runner_exit_code)
        for cause in result.stop_causes:
            self.event(EventKind.STOP_REQUESTED, reason=cause, source="supervisor")
        return result

    def _record_result(self, result: SupervisionResult) -> None:
        self.manifest.stop_reason = result.stop_reason
        self.manifest.stop_causes = result.stop_causes
        self.manifest.runner_exit_code = result.runner_exit_code
        if result.supervisor_error:
            message = scrub(result.supervisor_error, secret_terms([self.key]))[:4000]
            self.manifest.error = {"type": "supervisor_error", "message": message}

    def _settle(self, result: SupervisionResult) -> str:
        """One final reading, bounded by the blindness interval: accounting only, never a new stop."""
        meter_error = None
        try:
            reading = self.observer.observe(time.monotonic() + self.cfg.meter_blindness_sec, phase=MeterPhase.FINAL)
            self._accepted(reading, phase="final")
        except MeterBlind as exc:
            meter_error = f"final meter reading unavailable: {exc.last_error or exc}"
        try:
            self.campaign.finish_run(outcome=str(_outcome(result, self.progress)), stop_reason=result.stop_reason,
                                     meter_error=meter_error)
        except Exception:  # noqa: BLE001 - the campaign keeps active_run and the run says so
            return "unconfirmed"
        return "recorded"

    def _finish(self, result: SupervisionResult, cleanup_error: str | None, settlement: str) -> int:
        cause = result.stop_reason or ("cleanup_unproven" if cleanup_error else "runner_exited")
        self.progress.refresh(live=False, interruption_cause=cause)
        monitor = self._monitor(finished=cleanup_error is None)
        monitor.campaign_settlement = settlement
        self.progress.write_monitor(monitor)
        self.view.update(monitor)
        self.view.close()
        self.manifest.outcome = _outcome(result, self.progress)
        code = _exit_code(result, self.progress, cleanup_error, settlement)
        self.event(EventKind.RUN_FINISHED, outcome=str(self.manifest.outcome), exit_code=int(code),
                   stop_reason=result.stop_reason)
        _audit(self.cfg.run_root)
        _say_outcome(self.manifest, self.progress, cleanup_error, settlement)
        return code

    # ---------------------------------------------------------------- the supervisor's ports

    def observe(self, deadline: float) -> tuple[float, StopReason | None]:
        reading = self.observer.observe(deadline, phase=MeterPhase.POLL)
        self._accepted(reading, phase="poll")
        decision = stop_decision(self.spending, reserve_usd=self.cfg.budget_reserve_usd,
                                 run_budget_usd=self.cfg.budget_usd, limit_remaining=reading.limit_remaining)
        return reading.request_time, decision

    def disk_check(self) -> StopReason | None:
        cfg = self.cfg
        if _free(cfg.resource_root) < cfg.min_free_gib * GIB:
            return StopReason.DISK_RESERVE
        if _free(Path("/")) < cfg.min_root_free_gib * GIB:
            return StopReason.ROOT_DISK_RESERVE
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
        self.tracker.observation(obs)
        if not obs.accepted:
            self.event(EventKind.METER_REJECTED, phase=obs.phase, previous_usage=obs.previous_usage,
                       observed_usage=obs.observed_usage, error_type=obs.error_type or "error", error=obs.error or "")

    def _runner_started(self, pid: int) -> None:
        self.runner_pid = pid
        self.campaign.set_runner_pgid(pid)

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
    import json

    def log(entry: dict) -> None:
        print(json.dumps({"event": "cowork_cleanup", **entry}), file=sys.stderr, flush=True)

    error = None
    try:
        report = cleanup_run(cfg.docker_host, label, log)
        record_event(events, failures, EventKind.CLEANUP,
                     removed=len(report.removed_containers) + len(report.removed_networks), remaining=0, proven=True)
    except CustodyError as exc:
        error = str(exc)
        record_event(events, failures, EventKind.CLEANUP, proven=False, error=error[:500])
    agent_env.unlink(missing_ok=True)
    shutil.rmtree(tmpdir, ignore_errors=True)  # the runner's staging copies (TMPDIR is run-scoped)
    return error


def _outcome(result, progress: RunProgress) -> RunOutcome:
    if result.stop_reason:
        return RunOutcome.STOPPED
    counts = progress.counts()
    if result.runner_exit_code != 0 or counts["infra_failed"] or counts["not_attempted"]:
        return RunOutcome.INCOMPLETE
    return RunOutcome.COMPLETED


def _exit_code(result, progress: RunProgress, cleanup_error: str | None, settlement: str) -> ExitCode:
    if result.stop_reason:
        return ExitCode.STOPPED
    if cleanup_error or settlement != "recorded" or _outcome(result, progress) is not RunOutcome.COMPLETED:
        return ExitCode.FAILED
    return ExitCode.OK


def _audit(run_root: Path) -> None:
    try:
        from .audit import audit_run

        audit_run(run_root)
    except Exception as exc:  # noqa: BLE001 - the audit is evidence, never a verdict: report and go on
        print(f"cowork-adapter: the offline audit could not be written: {type(exc).__name__}: {exc}", file=sys.stderr)


def _say_outcome(manifest: RunManifest, progress: RunProgress, cleanup_error: str | None, settlement: str) -> None:
    counts = progress.counts()
    line = (f"cowork-adapter: {manifest.outcome}: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['agent_failed']} agent_failed, {counts['infra_failed']} infra_failed, "
            f"{counts['not_attempted']} not_attempted of {counts['selected']}")
    if manifest.stop_reason:
        line += f"; stopped: {manifest.stop_reason}"
    print(line, flush=True)
    if cleanup_error:
        print(f"cowork-adapter: custody NOT proven ({cleanup_error}); the campaign keeps this run as its active_run "
              "until `cowork-adapter campaign reconcile`.", file=sys.stderr)
    elif settlement != "recorded":
        print("cowork-adapter: the campaign settlement was not recorded; active_run stays set.", file=sys.stderr)


def _real_docker() -> str:
    found = shutil.which("docker")
    if not found:
        raise Refusal("custody", "no docker client is on PATH.")
    return found


def _free(path: Path) -> int:
    return shutil.disk_usage(path).free

