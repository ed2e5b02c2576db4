"""One run's life under custody: the watchdog, the shim, the supervised runner, proven cleanup, settlement.

Every run that starts task containers is a `Run`; what it may spend is its spending policy
(spending.py: none for oracle/nop, a campaign, a shared campaign), so custody is written once and no
run kind inherits another's money. Order matters and is the point of this module:
  1. the policy admits the run: for a campaign, the startup meter reading is accepted and saved
     under the campaign lock (the anchor) and the run is registered;
  2. the watchdog is started in its own session and armed (custody/watchdog.py: it fences, stops
     and cleans the run if this process dies); without it the runner never starts;
  3. custody is installed (shim, label, limits, the key in an agent-only env file);
  4. the supervisor runs the upstream runner until it ends or a stop cause ends it;
  5. exact-label cleanup is PROVEN before anything is settled; unknown state keeps active_run;
     then the watchdog is told "done" and reaped;
  6. the policy settles: one final reading, bounded like every other, settles the campaign and
     clears active_run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from ..audit import audit_run
from ..config import RunConfig
from ..container import safetree
from ..container.procs import start_ticks
from ..container.protocol import scrub, secret_terms
from ..custody.bash_env import Hardening, TaskDumps, eval_bound_sec, eval_code_mounts, install_custody
from ..custody.creations import creations_dir
from ..custody.daemon_watch import RETURN_WAIT_SEC, DaemonLoss, DaemonWatch, wait_for_answer
from ..custody.docker_ops import cleanup_run, custody_gap
from ..custody.stop_removal import log_line, remove_for_stop
from ..custody.watchdog import RUN_MARKER_ENV, WatchdogHandle, start_watchdog, write_processes
from ..errors import CustodyError, Refusal
from ..fileio import create_exclusive
from ..gateway.run import secret_file as gateway_secret_file
from ..gateway.server import FENCE_BUDGET as GATEWAY_BUDGET
from ..host.disk import inodes_short
from ..host.resources import campaign_roots, host_suggestion, reader_for
from ..resolved import ResolvedConfig
from ..runroot import layout
from ..runroot.dump_meter import Bounds, DumpMeter
from ..runroot.events import EventLog
from ..runroot.layout import RunRoot, dumps_of
from ..runroot.manifest import write_manifest
from ..schemas.custody import CustodyProcesses, ProcessIdentity
from ..schemas.manifest import RunManifest
from ..schemas.monitor import CampaignSettlement, Disk, Monitor, Progress
from ..schemas.run_config import agent_short_name
from ..vocab import EventKind, RunOutcome, StopPath, StopReason
from .dump_bounds import DumpBoundStop
from .ending import _exit_code, _outcome, _say_outcome
from .live import ProgressView
from .progress import RunProgress, record_event, report_write_failure
from .runner_env import _watchdog_env, delete_agent_env, runner_env, write_agent_env
from .signals import LAUNCHER_SIGNALS
from .spending import NotAdmitted, SpendingPolicy
from .supervisor import SupervisionResult, Supervisor

GIB = 1 << 30


def run_in_custody(
    cfg: RunConfig,
    manifest: RunManifest,
    bench_copy: Path,
    spending: SpendingPolicy,
    key: str = "",
    gateway=None,
    provider=None,
) -> int:
    """Run the selection under custody, spending as `spending` allows; returns the exit code (see
    vocab.ExitCode). `key` is the provider key for agent containers ("" for a run that spends nothing).

    With `gateway` (--llm-gateway, gateway.py) no key file is written: the shim gives each agent
    container its task's token, the gateway is fenced by every stop and fences the run itself when
    its own sum of provider costs reaches the run's allowance."""
    run = Run(cfg, manifest, bench_copy, spending, key, gateway, provider)
    try:
        return run.run()
    finally:
        # Every way out, an exception or a signal's StopSignal included: the key leaves the disk
        # (the watchdog deletes it only when the launcher dies, and is told "done" just below).
        delete_agent_env(run.agent_env)
        run.end_watchdog()  # every way out of a living launcher says "done" (idempotent)


# Said at the start of every run that gives agent containers the key, and disclosed by `report`
# (report/build.py): on this path the agent under test can read it (docs/security.md, the key's path).
KEY_IN_AGENT_NOTE = (
    "the provider key reaches every agent container (its environment, the engine's settings file "
    "and `docker inspect`): the agent under test can read it; the default OpenRouter route "
    "(without --key-in-agent) and --llm-gateway keep it on the host."
)


class Run:
    """One invocation that starts task containers. Its methods are the supervisor's ports (disk_check,
    publish; the meter port is the spending policy's observe)."""

    gateway = None  # the run's model gateway (--llm-gateway), set by __init__ when there is one

    def __init__(
        self,
        cfg: RunConfig,
        manifest: RunManifest,
        bench_copy: Path,
        spending: SpendingPolicy,
        key: str = "",
        gateway=None,
        provider=None,
    ) -> None:
        self.cfg, self.manifest, self.bench_copy, self.key = cfg, manifest, bench_copy, key
        self.spending = spending
        self.gateway = gateway
        if gateway is not None:  # its own sum of provider costs reaching the allowance stops the run
            gateway.on_fence = self._gateway_fenced
        self.provider = provider  # custody.bash_env.ProviderRoute: how agent containers reach the provider's host
        root = cfg.run_root
        self.label = manifest.run_label
        self.events = EventLog(RunRoot(root).events)
        self.progress = RunProgress(root, self.events)
        disk = cfg.disk
        self.progress.meter = DumpMeter(Bounds.of(disk.dump_max_gib, disk.dump_max_entries, disk.dump_max_depth))
        self.progress.on_over = self.dump_stop = DumpBoundStop(root, cfg.docker_host, self.label)
        self.failures = self.progress.failures
        self.view = ProgressView.for_stream(sys.stdout)
        self.stop_file = RunRoot(root).stop_file
        self.evidence = RunRoot(root).evidence
        self.agent_env = RunRoot(root).agent_env
        self.built = ResolvedConfig.of(cfg)
        self.tmpdir = self.built.resource_root.resolve() / f"tmp-{self.label[:12]}"  # the shim's TMPDIR
        self.runner_pid: int | None = None
        self.watchdog: WatchdogHandle | None = None
        self.processes: CustodyProcesses | None = None
        self.causes: list[str] = []
        self.daemon_watch: DaemonWatch | None = None
        self.stop_now: Callable[[str], None] | None = None  # the supervisor's request_stop, once it exists
        self.pending_stops: list[str] = []

    def event(self, kind: EventKind, **payload) -> None:
        record_event(self.events, self.failures, kind, **payload)

    # ---------------------------------------------------------------- the run, in order

    def run(self) -> int:
        cfg = self.cfg
        self.event(
            EventKind.RUN_ADMITTED,
            run_root=str(cfg.run_root),
            run_label=self.label,
            selected=len(self.manifest.selection.task_ids),
            resume_generation=self.manifest.selection.resume_generation,
        )
        if self.spending.spends:
            # Advice first: its daemon and file reads must not eat into the startup reading's blindness bound.
            _say_concurrency(cfg, "before this run")
        if self.key and self.gateway is None:
            print(f"cowork-adapter: {KEY_IN_AGENT_NOTE}", flush=True)
        with ExitStack() as held:  # a campaign's lock, held until the run is settled
            try:
                self.spending.admit(self, held)
            except NotAdmitted:
                return self._unregistered()
            # The ledger follows receipts, not meter polls: refreshed every ~2 s through stop and
            # cleanup, made final right after cleanup (before settlement's bounded meter wait).
            self.progress.start_refresher()
            self.daemon_watch = watch = DaemonWatch(cfg.docker_host, self._daemon_lost).start()
            try:
                result = self._supervise(self.spending.anchor())
            finally:
                watch.stop()
            self.progress.refresh_quietly(live=True, interruption_cause="in_progress")
            with LAUNCHER_SIGNALS.critical():  # custody and accounting always finish
                result, cleanup_error = self._end_custody(result, watch)
                result, settlement = self.spending.settle(result, cleanup_error)
                self._record_result(result)
                self.manifest.campaign_settlement = settlement
        with LAUNCHER_SIGNALS.critical():
            return self._finish(result, cleanup_error, settlement)

    def _unregistered(self) -> int:
        """The campaign could not record this run, so nothing may start: prove the label empty, stop (exit 3)."""
        result = self.with_cause(
            SupervisionResult(stop_reason=None, stop_causes=[], runner_exit_code=None),
            StopReason.CAMPAIGN_PERSISTENCE_FAILED,
            "campaign",
        )
        with LAUNCHER_SIGNALS.critical():
            cleanup_error = _cleanup(self.cfg, self.label, self.events, self.failures, self.tmpdir, self.agent_env)
            self._record_result(result)
            self.manifest.campaign_settlement = "unconfirmed"
            self.event(EventKind.SETTLEMENT, settlement="unconfirmed", run_spent_usd=None)
            return self._finish(result, cleanup_error, "unconfirmed")

    def with_cause(self, result: SupervisionResult, reason: StopReason, source: str) -> SupervisionResult:
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
                run_root=cfg.run_root,
                run_label=self.label,
                docker_host=cfg.docker_host,
                env=_watchdog_env(cfg),
                bound_sec=cfg.money.meter_blindness_sec,
                grace_sec=min(8.0, cfg.money.meter_blindness_sec / 3),
                tmpdir=self.tmpdir,
            )
            key_file = bool(self.key) and self.gateway is None  # with the gateway no container gets the key
            if key_file:  # a reference engine (oracle, nop) has no key: no env file exists at all
                write_agent_env(self.agent_env, self.key)
            launcher = ProcessIdentity(pid=os.getpid(), start_ticks=start_ticks(os.getpid()))
            custody = install_custody(
                cfg.run_root,
                real_docker=_real_docker(),
                docker_host=cfg.docker_host,
                run_label=self.label,
                limits={
                    "cpus": cfg.limits.cpus,
                    "memory_bytes": cfg.limits.memory_bytes,
                    "memory_swap_bytes": cfg.limits.memory_swap_bytes,
                    "pids_limit": cfg.limits.pids_limit,
                },
                stop_file=self.stop_file,
                resource_root=self.built.resource_root,
                min_free_bytes=int(cfg.disk.min_free_gib * GIB),
                evidence_dir=self.evidence,
                agent_env_file=self.agent_env if key_file else None,
                launcher_pid=launcher.pid,
                launcher_start_ticks=launcher.start_ticks,
                gateway_secret_file=gateway_secret_file(cfg.run_root) if self.gateway is not None else None,
                provider=self.provider,
                dumps=TaskDumps(
                    dumps_dir=dumps_of(self.bench_copy),
                    short=agent_short_name(cfg),
                    tasks=tuple(self._runnable_tasks()),
                    eval_bound_sec=eval_bound_sec(os.environ),
                    eval_mounts=tuple(eval_code_mounts(self.bench_copy)),
                ),
                hardening=Hardening.for_run(
                    cfg.agent.task_timeout, cfg.limits.agent_output_cap_mib, cfg.limits.container_cap_add
                ),
            )
            self.processes = CustodyProcesses(launcher=launcher, watchdog=self.watchdog.identity)
            write_processes(cfg.run_root, self.processes)
            self.event(EventKind.WATCHDOG_STARTED, pid=self.watchdog.identity.pid, launcher_pid=launcher.pid)
            self.manifest.bash_env = str(custody.bash_env)
            write_manifest(cfg.run_root, self.manifest)
            env = runner_env(cfg, self.manifest, custody)
            env[RUN_MARKER_ENV] = self.label  # lets the watchdog find every process of the run in /proc
            argv, env = self.spending.runner(self.manifest.official_command, env)
            supervisor = Supervisor(
                runner_argv=argv,
                runner_env=env,
                runner_cwd=self.bench_copy,
                console_log=RunRoot(cfg.run_root).console_log,
                stop_file=self.stop_file,
                blindness_sec=cfg.money.meter_blindness_sec,
                meter=self.spending,
                disk_check=self.disk_check,
                publish=self.publish,
                on_event=self._supervisor_event,
                on_runner_started=self._runner_started,
                remove_labelled=self._stop_clear,
                stop_path=StopPath(cfg.stop_path),
            )
            self.stop_now = supervisor.stop_at_once  # the gateway, the lease, daemon loss, a failed campaign write
            for cause in self.pending_stops:  # seen by the host's lease before the supervisor existed
                supervisor.request_stop(cause)
            result = supervisor.run(anchor)
        except Exception as exc:  # noqa: BLE001 - after start_run every path must clean up and settle
            result = SupervisionResult(
                stop_reason=StopReason.SUPERVISOR_ERROR.value,
                stop_causes=[StopReason.SUPERVISOR_ERROR.value],
                runner_exit_code=None,
                supervisor_error=f"{type(exc).__name__}: {exc}",
            )
        if self.gateway is not None:  # no model request is forwarded once the runner is done or stopping
            self.gateway.fence("runner_exited" if not result.stop_reason else result.stop_reason, notify=False)
        self.causes = result.stop_causes
        self.event(EventKind.RUNNER_EXITED, exit_code=result.runner_exit_code)
        for cause in result.stop_causes:
            self.event(EventKind.STOP_REQUESTED, reason=cause, source="supervisor")
        return result

    def _end_custody(self, result: SupervisionResult, watch: DaemonWatch) -> tuple[SupervisionResult, str | None]:
        """After the runner: the daemon's loss folded in, exact-label cleanup, the final ledger and
        the watchdog ended. Called inside LAUNCHER_SIGNALS.critical() (custody always finishes)."""
        if watch.lost is None:
            loss = watch.final_check()
            if loss is not None:
                self._daemon_lost(loss)  # the runner ended first, of the same cause
        if watch.lost is not None:
            result = self.with_cause(result, StopReason.DOCKER_DAEMON_LOST, "daemon_watch")
            self._await_daemon()
        cleanup_error = _cleanup(self.cfg, self.label, self.events, self.failures, self.tmpdir, self.agent_env)
        self.dump_stop.join()  # its records before the final ledger (each stop is one daemon call)
        self.progress.refresh_quietly(
            live=False,
            interruption_cause=result.stop_reason or ("cleanup_unproven" if cleanup_error else "runner_exited"),
        )
        self.end_watchdog()  # custody is done (proven or reported): the watchdog never outlives it
        return result, cleanup_error

    def _record_result(self, result: SupervisionResult) -> None:
        self.manifest.stop_reason = result.stop_reason
        self.manifest.stop_causes = result.stop_causes
        self.manifest.runner_exit_code = result.runner_exit_code
        if result.supervisor_error:
            message = scrub(result.supervisor_error, secret_terms([self.key]))[:4000]
            self.manifest.error = {"type": "supervisor_error", "message": message}
        elif self.spending.persistence_error:
            message = scrub(self.spending.persistence_error, secret_terms([self.key]))[:4000]
            self.manifest.error = {"type": StopReason.CAMPAIGN_PERSISTENCE_FAILED.value, "message": message}

    def outcome(self, result: SupervisionResult) -> RunOutcome:
        """How the run ended, from the supervisor's result and the ledger (the campaign records it)."""
        return _outcome(result, self.progress)

    def _finish(self, result: SupervisionResult, cleanup_error: str | None, settlement: CampaignSettlement) -> int:
        cause = result.stop_reason or ("cleanup_unproven" if cleanup_error else "runner_exited")
        # The run root's disk may be as full as the campaign's: each write is tried, none may crash the end.
        try:
            self.progress.refresh(live=False, interruption_cause=cause)
        except Exception as exc:  # noqa: BLE001 - reported; run_finished and the audit still follow
            report_write_failure(self.failures, layout.RESULT_INDEX, exc)
        monitor = self._monitor(finished=cleanup_error is None)
        monitor.campaign_settlement = settlement
        try:
            self.progress.write_monitor(monitor)
        except Exception as exc:  # noqa: BLE001
            report_write_failure(self.failures, layout.MONITOR, exc)
        self.view.update(monitor)
        self.view.close()
        self.manifest.outcome = _outcome(result, self.progress)
        code = _exit_code(result, self.progress, cleanup_error, settlement)
        self.event(
            EventKind.RUN_FINISHED,
            outcome=str(self.manifest.outcome),
            exit_code=int(code),
            stop_reason=result.stop_reason,
        )
        _audit(self.cfg.run_root)
        _say_outcome(self.manifest, self.progress, cleanup_error, settlement)
        _say_concurrency(self.cfg, "after this run", self.cfg.run_root)
        return code

    # ---------------------------------------------------------------- the supervisor's ports

    def disk_check(self) -> StopReason | None:
        """The supervisor's per-turn stop check: money, disks, then a lost daemon, then custody gaps."""
        cfg = self.cfg
        money = self.spending.money_stop()
        if money is not None:
            return money
        if _free(self.built.resource_root) < cfg.disk.min_free_gib * GIB or inodes_short(self.built.resource_root):
            return StopReason.DISK_RESERVE  # bytes or inodes (host/disk.py)
        if _free(Path("/")) < cfg.disk.min_root_free_gib * GIB or inodes_short(Path("/")):
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
            report_write_failure(self.failures, layout.RESULT_INDEX, exc)
        monitor = self._monitor(finished=False)
        self.progress.write_monitor(monitor)
        self.view.update(monitor)

    # ---------------------------------------------------------------- helpers

    def _runner_started(self, pid: int) -> None:
        self.runner_pid = pid
        if self.processes is not None:  # first: a later command proves this group gone by it
            self.processes = self.processes.replace(runner_pgid=pid)
            write_processes(self.cfg.run_root, self.processes)
        self.spending.runner_started(pid)

    def _stop_clear(self, reason: str) -> None:
        """The fast stop's removal (Supervisor.remove_labelled; custody/stop_removal.py), recorded as
        stop_cleared. Never raises: the final cleanup (_end_custody) lists and proves again."""
        done = remove_for_stop(self.cfg.run_root, self.cfg.docker_host, self.label)
        self.event(
            EventKind.STOP_CLEARED,
            reason=reason,
            removed=done.removed,
            proven=done.proven,
            seconds=done.seconds,
            error=done.error,
        )

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
        self.event(
            EventKind.DAEMON_LOST,
            stage="detected",
            reason=loss.reason,
            detail=loss.detail[:500],
            before_pid=before.pid if before else None,
            before_start_ticks=before.start_ticks if before else None,
            after_pid=after.pid if after else None,
            after_start_ticks=after.start_ticks if after else None,
            silent_sec=round(loss.silent_sec, 1),
        )
        _fence(self.stop_file, StopReason.DOCKER_DAEMON_LOST)
        if self.stop_now is not None:
            self.stop_now(StopReason.DOCKER_DAEMON_LOST)

    def _await_daemon(self) -> None:
        """Before cleanup, give a lost daemon a bounded time to return: only it can prove custody."""
        back = wait_for_answer(self.cfg.docker_host, RETURN_WAIT_SEC)
        if back is None:
            self.event(
                EventKind.DAEMON_LOST,
                stage="not_returned",
                detail=f"no answer within {RETURN_WAIT_SEC:g} s after the stop; custody cannot be proven",
            )
            return
        ident = back.identity
        self.event(
            EventKind.DAEMON_LOST,
            stage="returned",
            detail="the daemon answers again; cleanup relists it",
            after_pid=ident.pid if ident else None,
            after_start_ticks=ident.start_ticks if ident else None,
        )

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
        cfg = self.cfg
        spending, meter = self.spending.monitor()
        return Monitor(
            observed_at=datetime.now(UTC),
            launcher_pid=os.getpid(),
            runner_pid=self.runner_pid,
            finished=finished,
            progress=Progress(**self.progress.counts()),
            spending=spending,
            meter=meter,
            disk=Disk(
                resource_free_bytes=_free(self.built.resource_root),
                root_free_bytes=_free(Path("/")),
                resource_reserve_bytes=int(cfg.disk.min_free_gib * GIB),
                root_reserve_bytes=int(cfg.disk.min_root_free_gib * GIB),
            ),
            stop_reason=self.causes[0] if self.causes else None,
            stop_causes=list(self.causes),
        )


def _fence(stop_file: Path, reason: str) -> None:
    """Write the stop marker (the shim refuses every new container while it exists); never replace one."""
    try:
        create_exclusive(stop_file, f"{reason}\n", durable=False)  # seen by the shim at once
    except FileExistsError:
        return
    except OSError as exc:
        print(
            json.dumps({"event": "cowork_stop_marker_failed", "error": f"{type(exc).__name__}: {exc}"}),
            file=sys.stderr,
            flush=True,
        )


def _cleanup(cfg: RunConfig, label: str, events: EventLog, failures, tmpdir: Path, agent_env: Path) -> str | None:
    """Exact-label cleanup, proven by a relist; then the staging dirs and the key file. None = proven."""
    error = None
    try:
        report = cleanup_run(
            cfg.docker_host,
            label,
            log_line,
            before_remove=reader_for(RunRoot(cfg.run_root).evidence),
            creations=creations_dir(cfg.run_root),
        )
        record_event(
            events,
            failures,
            EventKind.CLEANUP,
            removed=len(report.removed_containers) + len(report.removed_networks),
            remaining=0,
            proven=True,
        )
    except CustodyError as exc:
        error = str(exc)
        record_event(events, failures, EventKind.CLEANUP, proven=False, error=error[:500])
    finally:  # an unexpected error of the cleanup still takes the key off the disk
        delete_agent_env(agent_env)
        safetree.remove_tree(str(tmpdir))  # the runner's staging copies (TMPDIR is run-scoped; any depth)
        safetree.remove_hazards(str(RunRoot(cfg.run_root).dumps))  # no device node or set-id file stays
    return error


def _audit(run_root: Path) -> None:
    try:
        audit_run(run_root)
    except Exception as exc:  # noqa: BLE001 - the audit is evidence, never a verdict: report and go on
        print(f"cowork-adapter: the offline audit could not be written: {type(exc).__name__}: {exc}", file=sys.stderr)


def _say_concurrency(cfg: RunConfig, when: str, *own: Path) -> None:
    """The concurrency this host's measured per-task use suggests (advice printed, never enforced;
    the next run's operator chooses it). Never raises: it must not break a run's start or end."""

    try:
        found = host_suggestion(
            cfg.docker_host, [*campaign_roots(cfg.money.campaign_file, cfg.selection.resume_from), *own]
        )
    except Exception as exc:  # noqa: BLE001 - advice only
        print(f"cowork-adapter: no concurrency suggestion {when} ({type(exc).__name__})", flush=True)
        return
    print(
        f"cowork-adapter: {when}, {found.sentence} (this run: --concurrency {cfg.selection.concurrency}).", flush=True
    )


def _real_docker() -> str:
    found = shutil.which("docker")
    if not found:
        raise Refusal("custody", "no docker client is on PATH.")
    return found


def _free(path: Path) -> int:
    return shutil.disk_usage(path).free
