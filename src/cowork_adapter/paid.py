"""A run that may spend: campaign custody, the supervised runner, verified cleanup, settlement.

Order matters and is the point of this module:
  1. the startup meter reading is accepted and saved under the campaign lock (the anchor);
  2. custody is installed (shim, label, limits, the key in an agent-only env file);
  3. the supervisor runs the upstream runner until it ends or a stop cause ends it;
  4. exact-label cleanup is PROVEN before anything is settled; unknown state keeps active_run;
  5. one final reading, bounded like every other, settles the campaign and clears active_run.
"""

from __future__ import annotations

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
from .progress import RunProgress, record_event
from .schemas.campaign import key_fingerprint
from .schemas.manifest import RunManifest
from .schemas.run_config import model_provider
from .schemas.monitor import Disk, MeterState, Monitor, Progress, RejectedObservation
from .schemas.monitor import Spending as MonitorSpending
from .supervisor import SupervisionResult, Supervisor
from .vocab import EventKind, ExitCode, MeterPhase, RunOutcome, StopReason, TaskStatus

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
    key: str = pre.key
    run_root = cfg.run_root
    label = manifest.run_label
    events = EventLog(run_root / "events.jsonl")
    progress = RunProgress(run_root, events)
    view = ProgressView.for_stream(sys.stdout)
    failures = progress.failures
    meter = KeyMeter(cfg.meter_url, key, timeout=5.0)
    tracker = MeterTracker(cfg.meter_blindness_sec)
    store = JsonFileCampaignStore(cfg.campaign_file)
    stop_file = run_root / "custody" / "stop"
    evidence = run_root / "custody" / "evidence"
    agent_env = run_root / "private" / "agent.env"
    record_event(events, failures, EventKind.RUN_ADMITTED, run_root=str(run_root), run_label=label,
                 selected=len(manifest.selection.task_ids), resume_generation=manifest.selection.resume_generation)

    startup = _startup_reading(meter)
    settlement = "unconfirmed"
    with open_campaign(
        store, key_fingerprint=key_fingerprint(key), ceiling=cfg.campaign_budget_usd,
        prior_spend=cfg.prior_spend_usd, startup_usage=startup.usage, create_if_missing=True,
    ) as campaign:
        rec = campaign.record
        admission_check(_spending(rec, startup.usage, startup.usage), reserve_usd=cfg.budget_reserve_usd,
                        limit_remaining=startup.limit_remaining)
        campaign.start_run(run_root=str(run_root), run_label=label, launcher_pid=os.getpid(), host=socket.gethostname())
        run_start_usage = startup.usage
        state = {"spending": _spending(campaign.record, startup.usage, run_start_usage), "runner_pid": None,
                 "causes": []}
        observer = MeterObserver(
            read=lambda timeout: meter.read_usage(timeout=timeout),
            save=lambda usage, at: campaign.record_usage(usage, at),
            last_accepted=lambda: campaign.record.last_usage,
            on_observation=lambda obs: _observation(events, failures, tracker, obs),
        )
        try:
            write_agent_env(agent_env, key)
            custody = install_custody(
                run_root, real_docker=_real_docker(), docker_host=cfg.docker_host, run_label=label,
                limits={"cpus": cfg.cpus, "memory_bytes": cfg.memory_bytes, "memory_swap_bytes": cfg.memory_swap_bytes,
                        "pids_limit": cfg.pids_limit},
                stop_file=stop_file, resource_root=cfg.resource_root, min_free_bytes=int(cfg.min_free_gib * GIB),
                evidence_dir=evidence, agent_env_file=agent_env,
            )
            manifest.bash_env = str(custody.bash_env)
            from .manifest import write_manifest

            write_manifest(run_root, manifest)

            class Meter:
                def observe(self, deadline: float):
                    reading = observer.observe(deadline, phase=MeterPhase.POLL)
                    tracker.accepted(reading)
                    spending = _spending(campaign.record, reading.usage, run_start_usage)
                    state["spending"] = spending
                    record_event(events, failures, EventKind.METER_READING, phase="poll", usage=reading.usage,
                                 run_spent_usd=spending.run_spent_usd, campaign_spent_usd=spending.spent_usd,
                                 campaign_remaining_usd=spending.remaining_usd)
                    decision = stop_decision(spending, reserve_usd=cfg.budget_reserve_usd, run_budget_usd=cfg.budget_usd,
                                             limit_remaining=reading.limit_remaining)
                    return reading.request_time, decision

            def disk_check():
                if _free(cfg.resource_root) < cfg.min_free_gib * GIB:
                    return StopReason.DISK_RESERVE
                if _free(Path("/")) < cfg.min_root_free_gib * GIB:
                    return StopReason.ROOT_DISK_RESERVE
                if state["runner_pid"] is not None:
                    try:
                        if custody_gap(cfg.docker_host, label, state["runner_pid"]).breached:
                            return StopReason.CUSTODY_BREACH
                    except CustodyError:
                        pass  # the listing failed: the next turn's meter/cleanup decide; never "clean"
                return None

            def publish(live: bool) -> None:
                try:
                    progress.refresh(live=live, interruption_cause="in_progress")
                except Exception as exc:  # noqa: BLE001 - progress never stops a run
                    from .progress import report_write_failure

                    report_write_failure(failures, "result_index.jsonl", exc)
                monitor = _monitor(cfg, progress, tracker, state, finished=False)
                progress.write_monitor(monitor)
                view.update(monitor)

            def runner_started(pid: int) -> None:
                state["runner_pid"] = pid
                campaign.set_runner_pgid(pid)

            supervisor = Supervisor(
                runner_argv=manifest.official_command, runner_env=runner_env(cfg, manifest, custody),
                runner_cwd=bench_copy, console_log=run_root / "console.log", stop_file=stop_file,
                blindness_sec=cfg.meter_blindness_sec, meter=Meter(), disk_check=disk_check, publish=publish,
                on_event=lambda kind, data: _supervisor_event(events, failures, kind, data),
                on_runner_started=runner_started,
            )
            result = supervisor.run(startup.request_time)
            state["causes"] = result.stop_causes
            record_event(events, failures, EventKind.RUNNER_EXITED, exit_code=result.runner_exit_code)
            for cause in result.stop_causes:
                record_event(events, failures, EventKind.STOP_REQUESTED, reason=cause, source="supervisor")

        except Exception as exc:  # noqa: BLE001 - after start_run every path must clean up and settle
            result = SupervisionResult(stop_reason=StopReason.SUPERVISOR_ERROR,
                                       stop_causes=[StopReason.SUPERVISOR_ERROR.value], runner_exit_code=None,
                                       supervisor_error=f"{type(exc).__name__}: {exc}")
            state["causes"] = result.stop_causes
        cleanup_error = _cleanup(cfg, label, events, failures, cfg.resource_root.resolve() / f"tmp-{label[:12]}", agent_env)
        manifest.stop_reason = result.stop_reason
        manifest.stop_causes = result.stop_causes
        manifest.runner_exit_code = result.runner_exit_code
        if result.supervisor_error:
            manifest.error = {"type": "supervisor_error", "message": scrub(result.supervisor_error, secret_terms([key]))[:4000]}
        meter_error = None
        if cleanup_error is None:
            meter_error, final_spending = _settle(cfg, observer, tracker, campaign, run_start_usage, events, failures)
            if final_spending is not None:
                state["spending"] = final_spending
            outcome = _outcome(result, progress)
            try:
                campaign.finish_run(outcome=str(outcome), stop_reason=result.stop_reason, meter_error=meter_error)
                settlement = "recorded"
            except Exception as exc:  # noqa: BLE001 - the campaign stays unsettled and says so
                meter_error = meter_error or f"campaign save failed: {type(exc).__name__}"
        manifest.campaign_settlement = settlement
        record_event(events, failures, EventKind.SETTLEMENT, settlement=settlement,
                     run_spent_usd=state["spending"].run_spent_usd if state["spending"] else None)

    cause = result.stop_reason or ("cleanup_unproven" if cleanup_error else "runner_exited")
    progress.refresh(live=False, interruption_cause=cause)
    monitor = _monitor(cfg, progress, tracker, state, finished=cleanup_error is None)
    monitor.campaign_settlement = settlement
    progress.write_monitor(monitor)
    view.update(monitor)
    view.close()
    manifest.outcome = _outcome(result, progress)
    code = _exit_code(result, progress, cleanup_error, settlement)
    record_event(events, failures, EventKind.RUN_FINISHED, outcome=str(manifest.outcome), exit_code=int(code),
                 stop_reason=result.stop_reason)
    _audit(run_root)
    _say_outcome(manifest, progress, cleanup_error, settlement)
    return code


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


def _observation(events: EventLog, failures, tracker: MeterTracker, obs: Observation) -> None:
    tracker.observation(obs)
    if not obs.accepted:
        record_event(events, failures, EventKind.METER_REJECTED, phase=obs.phase, previous_usage=obs.previous_usage,
                     observed_usage=obs.observed_usage, error_type=obs.error_type or "error", error=obs.error or "")


def _supervisor_event(events: EventLog, failures, kind: str, data: dict) -> None:
    if kind == "runner_started":
        record_event(events, failures, EventKind.RUNNER_STARTED, pid=data.get("pid"))
    elif kind == "stop_marker_failed":
        import json

        print(json.dumps({"event": "cowork_stop_marker_failed", **data}), file=sys.stderr, flush=True)


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


def _settle(cfg, observer: MeterObserver, tracker: MeterTracker, campaign, run_start_usage: float, events, failures):
    """One final reading, bounded by the blindness interval: accounting only, never a new stop."""
    try:
        reading = observer.observe(time.monotonic() + cfg.meter_blindness_sec, phase=MeterPhase.FINAL)
    except MeterBlind as exc:
        return f"final meter reading unavailable: {exc.last_error or exc}", None
    tracker.accepted(reading)
    spending = _spending(campaign.record, reading.usage, run_start_usage)
    record_event(events, failures, EventKind.METER_READING, phase="final", usage=reading.usage,
                 run_spent_usd=spending.run_spent_usd, campaign_spent_usd=spending.spent_usd,
                 campaign_remaining_usd=spending.remaining_usd)
    return None, spending


def _monitor(cfg: RunConfig, progress: RunProgress, tracker: MeterTracker, state: dict, *, finished: bool) -> Monitor:
    spending: Spending | None = state["spending"]
    causes = list(state["causes"])
    return Monitor(
        observed_at=datetime.now(timezone.utc),
        launcher_pid=os.getpid(),
        runner_pid=state["runner_pid"],
        finished=finished,
        progress=Progress(**progress.counts()),
        spending=MonitorSpending(
            campaign_spent_usd=max(0.0, spending.spent_usd) if spending else None,
            campaign_remaining_usd=max(0.0, spending.remaining_usd) if spending else None,
            run_spent_usd=max(0.0, spending.run_spent_usd or 0.0) if spending else None,
            reserve_usd=cfg.budget_reserve_usd,
            run_budget_usd=cfg.budget_usd,
        ),
        meter=tracker.state(),
        disk=Disk(resource_free_bytes=_free(cfg.resource_root), root_free_bytes=_free(Path("/")),
                  resource_reserve_bytes=int(cfg.min_free_gib * GIB), root_reserve_bytes=int(cfg.min_root_free_gib * GIB)),
        stop_reason=causes[0] if causes else None,
        stop_causes=causes,
    )


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


__all__ = ["paid_preflight", "run_paid", "TaskStatus"]
