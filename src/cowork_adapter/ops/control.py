"""`cowork-adapter status` and `cowork-adapter stop`: the operator's view of one run root.

status (read-only, any time): progress, spending, meter, disk, whether the launcher lives,
whether cleanup is proven, campaign settlement, and why the run stopped.
  exit 0: the run root was read; 2: the directory is not a run root.

stop: SIGTERM to this run's own launcher (the same path as Ctrl-C or `kill -TERM`, so the stop
reason is signal_15), then wait for the verified cleanup. Only a process whose command line is a
cowork_adapter launcher of THIS run root is ever signalled. When the launcher is dead but the
runner's process group lives on, stop fences the run itself (writes the stop file the docker
shim refuses by) and stops that group (SIGTERM, then SIGKILL).
  exit 0: the run stopped with cleanup proven, or had already ended;
  1: cleanup not proven, the launcher did not finish within --timeout, or the launcher is gone
     while the run is unfinished (the sentence names what lives and the `cowork-adapter clear`
     line that finishes it);
  2: the directory is not a run root.

On a run whose launcher is gone both commands tell what is alive (launcher, watchdog, runner
group, from custody/processes.json or the pids the run recorded) and which objects with the
run's label the daemon still holds (a fresh listing), and name the exact command that works.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..custody.liveness import Liveness, Recorded, argv_run_root, prove, read_custody_processes
from ..custody.shim import RUN_MARKER_ENV  # stdlib only: the watchdog's copy would load docker
from ..errors import CustodyError, Refusal
from ..host.resources import summary_line as resource_summary_line
from ..run.live import eta_seconds, format_duration, progress_rows, summary_line
from ..runroot import layout
from ..runroot.events import EventLog, parse_ts, read_events
from ..runroot.layout import RunRoot
from ..schemas.admission import AdmissionState
from ..schemas.events import RunAdmitted, RunFinished, RunnerStarted, TaskFinished, TaskStarted, _Event
from ..schemas.ledger import TaskRow, read_index
from ..schemas.manifest import RunManifest
from ..schemas.monitor import Monitor, Progress
from ..schemas.record import RecordInvalid, decode
from ..score.tampering import count_tampering, counts_sentence
from ..vocab import EventKind, ExitCode
from .recorded import clear_hint, clear_key_note, recorded_docker_host

LAUNCHER_MARKERS = ("cowork_adapter", "cowork-adapter")
STOP_POLL_SEC = 0.5


def say(sentence: str, *, err: bool = False) -> None:
    print(f"cowork-adapter: {sentence}", file=sys.stderr if err else sys.stdout, flush=True)


# ---------------------------------------------------------------------------------------------
# Reading a run root
# ---------------------------------------------------------------------------------------------


@dataclass
class RunFiles:
    """What a run root holds; a file that is missing or unreadable is None (its problem noted)."""

    run_root: Path
    manifest: RunManifest | None
    monitor: Monitor | None
    events: list[_Event]  # typed: a line that is no valid event is counted in `problems`
    problems: list[str] = field(default_factory=list)
    ledger: list[TaskRow] | None = None  # result_index.jsonl's rows; None before it exists
    admission: AdmissionState | None = None  # custody/admission.json: a shared host waiting for load

    @property
    def is_run_root(self) -> bool:
        return self.manifest is not None or self.monitor is not None or bool(self.events)


def _load(path: Path, model, problems: list[str]):
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        problems.append(f"{path.name} cannot be read ({exc.strerror})")
        return None
    try:
        return decode(text, model)
    except RecordInvalid as exc:
        problems.append(f"{path.name} is not valid ({exc})")
        return None


def read_run(run_root: Path) -> RunFiles:
    problems: list[str] = []
    root = RunRoot(run_root)
    manifest = _load(root.manifest, RunManifest, problems)
    monitor = _load(root.monitor, Monitor, problems)
    events, invalid = read_events(root.events)
    if invalid:
        lines = "1 line that is" if invalid == 1 else f"{invalid} lines that are"
        problems.append(f"{layout.EVENTS} has {lines} not a valid event (skipped)")
    ledger = None
    if root.result_index.exists():
        try:
            ledger = read_index(root.result_index)
        except (OSError, ValueError) as exc:
            problems.append(
                f"{layout.RESULT_INDEX} cannot be read ({type(exc).__name__}), so resource use is not shown"
            )
    admission = _load(root.admission, AdmissionState, problems)
    return RunFiles(run_root, manifest, monitor, events, problems, ledger, admission)


# ---------------------------------------------------------------------------------------------
# Is this process the launcher of this run root?
# ---------------------------------------------------------------------------------------------


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc entry: the process is gone
    # The state follows the parenthesised command name, which may itself contain spaces.
    return stat.rsplit(")", 1)[-1].split()[:1] in (["Z"], ["X"])


def is_launcher_of(pid: int | None, run_root: Path) -> bool:
    """True when `pid` is alive (not a zombie) and its argv is a cowork_adapter `run` of `run_root`."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: its cmdline still decides (and signalling would fail anyway)
    if _zombie(pid):
        return False
    argv = _cmdline(pid)
    if not any(marker in arg for arg in argv for marker in LAUNCHER_MARKERS) or "run" not in argv:
        return False
    try:
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        cwd = None
    named = argv_run_root(argv, cwd)
    if named is None:
        return False
    try:
        return named.resolve() == run_root.resolve()
    except (OSError, RuntimeError):  # another process's run root may be a symlink loop: not ours
        return False


def _scan_launchers(run_root: Path) -> list[int]:
    """Every live launcher of `run_root` (a run still in preflight has written no pid yet)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and is_launcher_of(int(entry.name), run_root):
            found.append(int(entry.name))
    return sorted(found)


def _campaign_active(files: RunFiles):
    """The campaign's active_run when it is this run root, else None (read without the lock)."""
    m = files.manifest
    if m is None or not (m.campaign_file or m.campaign_db):
        return None
    from ..campaign.store import read_campaign

    try:
        if m.campaign_db:  # PostgreSQL (libpq's PGPASSWORD or ~/.pgpass); unreachable: nothing added
            from ..campaign.pg_store import read_campaign_db

            record = read_campaign_db(m.campaign_db, m.campaign_name or "default")
        else:
            record = read_campaign(m.campaign_file)  # type: ignore[arg-type]  # a file when no database
    except Refusal:
        return None
    active = record.active_run if record else None
    if active is None or Path(active.run_root).resolve() != files.run_root.resolve():
        return None
    return active


def _runner_started_pids(files: RunFiles) -> list[int]:
    return [e.pid for e in files.events if isinstance(e, RunnerStarted) and e.pid is not None]


def run_marker(files: RunFiles) -> bytes | None:
    """The environment entry every process of the run carries (watchdog.RUN_MARKER_ENV), or None."""
    label = files.manifest.run_label if files.manifest is not None else None
    return f"{RUN_MARKER_ENV}={label}".encode() if label else None


def gather_recorded(files: RunFiles) -> Recorded:
    """Every pid the run wrote down about its custody processes (the liveness proof's input)."""
    custody, problem = read_custody_processes(files.run_root)
    if problem:
        files.problems.append(problem)
    recorded = Recorded(custody=custody, marker=run_marker(files))
    if files.monitor is not None:
        recorded.launcher_pids.append((files.monitor.launcher_pid, layout.MONITOR))
        if files.monitor.runner_pid:
            # The runner is started in its own session: its pid is its process group's id.
            recorded.runner_pgids.append((files.monitor.runner_pid, layout.MONITOR))
    active = _campaign_active(files)
    if active is not None:
        recorded.launcher_pids.append((active.launcher_pid, "the campaign's active_run"))
        if active.runner_pgid:
            recorded.runner_pgids.append((active.runner_pgid, "the campaign's active_run"))
    for pid in _runner_started_pids(files):
        recorded.runner_pgids.append((pid, layout.EVENTS))
    return recorded


def liveness_of(files: RunFiles) -> Liveness:
    return prove(files.run_root, gather_recorded(files))


@dataclass
class LabelledView:
    """A fresh listing of the run's labelled objects, or why there is none."""

    docker_host: str | None
    names: list[str] | None = None  # `container x`, `network y`, `volume z`
    counts: dict[str, int] | None = None
    error: str | None = None


def list_labelled_view(files: RunFiles) -> LabelledView:
    host = recorded_docker_host(files.run_root, files.manifest)
    label = files.manifest.run_label if files.manifest is not None else None
    if not host or not label:
        return LabelledView(host, error="the run recorded no Docker host" if label else "the run recorded no label")
    try:
        from ..custody.docker_ops import list_labelled

        listed = list_labelled(host, label, timeout=10)
    except CustodyError as exc:
        return LabelledView(host, error=str(exc))
    return LabelledView(
        host,
        listed.names(),
        {"containers": len(listed.containers), "networks": len(listed.networks), "volumes": len(listed.volumes)},
    )


def next_command(files: RunFiles, liveness: Liveness) -> str:
    """What the operator runs next on a run whose launcher is gone, with every flag it needs."""
    clear = f"`{clear_hint(files.run_root, files.manifest)}`{clear_key_note(files.manifest)}"
    runners = [h for h in liveness.alive if h.role not in ("launcher", "watchdog")]
    if runners:
        return f"`cowork-adapter stop {files.run_root}` (to stop what still runs), then {clear}"
    watchdog = liveness.first("watchdog")
    if watchdog is not None and watchdog.alive:
        # It is fencing and cleaning up on its own; clearing under it would race its removals.
        return f"wait for the watchdog (pid {watchdog.pid}) to finish, then {clear}"
    return clear


def find_launcher(files: RunFiles) -> tuple[int | None, str]:
    """(pid of this run's live launcher or None, where the pid came from)."""
    candidates = []
    if files.monitor is not None:
        candidates.append((files.monitor.launcher_pid, layout.MONITOR))
    active = _campaign_active(files)
    campaign_pid = active.launcher_pid if active is not None else None
    if campaign_pid is not None:
        candidates.append((campaign_pid, "the campaign's active_run"))
    for pid, source in candidates:
        if is_launcher_of(pid, files.run_root):
            return pid, source
    scanned = _scan_launchers(files.run_root)
    if scanned:
        return scanned[0], "the process table"
    return None, candidates[0][1] if candidates else "nowhere"


# ---------------------------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------------------------


def _progress_from_events(files: RunFiles) -> Progress:
    started = {e.task for e in files.events if isinstance(e, TaskStarted)}
    finished = {e.task for e in files.events if isinstance(e, TaskFinished)}
    selected = 0
    for e in files.events:
        if isinstance(e, RunAdmitted):
            selected = e.selected
    if not selected and files.manifest is not None:
        selected = len(files.manifest.selection.task_ids)
    return Progress(selected=selected, done=len(finished), running=len(started - finished))


def _started_at(files: RunFiles) -> float | None:
    for e in files.events:
        if isinstance(e, RunAdmitted):
            return parse_ts(e.ts)
    if files.manifest is not None:
        return parse_ts(files.manifest.created_at)
    return None


def _ended_at(files: RunFiles) -> float | None:
    if files.manifest is not None and files.manifest.finished_at:
        return parse_ts(files.manifest.finished_at)
    for e in reversed(files.events):
        if isinstance(e, RunFinished):
            return parse_ts(e.ts)
    return None


def _state(files: RunFiles, alive: bool) -> str:
    ended = files.manifest is not None and files.manifest.finished_at is not None
    if alive:
        return "stopping" if files.monitor is not None and files.monitor.stop_reason else "running"
    if ended:
        return "finished"
    return "launcher_gone"


def build_status(
    files: RunFiles, *, now: float | None = None, launcher_pid: int | None = None, launcher_alive: bool = False
) -> dict[str, Any]:
    """The status picture as one JSON-ready object (pure: liveness is given by the caller)."""
    now = time.time() if now is None else now
    m, mon = files.manifest, files.monitor
    progress = mon.progress if mon is not None else _progress_from_events(files)
    started, ended = _started_at(files), _ended_at(files)
    elapsed = None if started is None else max(0.0, (ended or now) - started)
    state = _state(files, launcher_alive)
    eta = (
        eta_seconds(progress.done, progress.selected, elapsed, progress.environment_blocked)
        if elapsed is not None and state != "finished"
        else None
    )
    stop_reason = (m.stop_reason if m is not None and m.stop_reason else None) or (mon.stop_reason if mon else None)
    stop_causes = (m.stop_causes if m is not None and m.stop_causes else None) or (mon.stop_causes if mon else [])
    settlement = (m.campaign_settlement if m is not None and m.campaign_settlement else None) or (
        mon.campaign_settlement if mon else None
    )
    return {
        "schema": "cowork_adapter.status.v1",
        "run_root": str(files.run_root),
        "state": state,
        "outcome": m.outcome if m is not None else None,
        "stop_reason": stop_reason,
        "stop_causes": list(stop_causes or []),
        "exit_code": m.exit_code if m is not None else None,
        "finished_at": m.finished_at if m is not None else None,
        "refusal": m.refusal.to_dict() if m is not None and m.refusal else None,
        "error": m.error if m is not None else None,
        "launcher_pid": launcher_pid if launcher_pid is not None else (mon.launcher_pid if mon else None),
        "launcher_alive": launcher_alive,
        "cleanup_proven": _cleanup_proven(m, mon),
        "campaign_settlement": settlement,
        "campaign_file": m.campaign_file if m is not None else None,
        "campaign_db": (f"{m.campaign_db} campaign {m.campaign_name!r}" if m is not None and m.campaign_db else None),
        "progress": progress.to_dict(),
        "progress_source": layout.MONITOR if mon is not None else layout.EVENTS,
        "spending": mon.spending.to_dict() if mon is not None else None,
        "meter": {
            "age_sec": mon.meter.age_sec,
            "blindness_sec": mon.meter.blindness_sec,
            "last_usage": mon.meter.last_usage,
            "last_error": mon.meter.last_error,
            "rejected": len(mon.meter.rejected),
        }
        if mon is not None
        else None,
        "disk": mon.disk.to_dict() if mon is not None else None,
        "observed_at": mon.observed_at.isoformat() if mon is not None else None,
        "elapsed_sec": elapsed,
        "eta_sec": eta,
        "dry_run": m.dry_run if m is not None else None,
        "problems": list(files.problems),
        "diagnostic_write_failures": {
            k: v.to_dict() for k, v in (mon.diagnostic_write_failures if mon else {}).items()
        },
        "resource_use": _resource_use(files.ledger),
        "tampering": _tampering(files.ledger),
        "admission": files.admission.to_dict() if files.admission is not None else None,
    }


def _resource_use(rows: list[TaskRow] | None) -> dict[str, Any] | None:
    """Median and max of the measured per-task peak memory and CPU time (None without a ledger)."""
    if rows is None:
        return None
    peaks = [r.peak_memory_bytes for r in rows if r.peak_memory_bytes is not None]
    cpus = [r.cpu_seconds for r in rows if r.cpu_seconds is not None]
    return {
        "tasks_measured": len(peaks),
        "tasks_unknown": sum(
            1 for r in rows if r.resource_containers and (r.peak_memory_bytes is None or r.cpu_seconds is None)
        ),
        "peak_memory_bytes_median": int(statistics.median(peaks)) if peaks else None,
        "peak_memory_bytes_max": max(peaks) if peaks else None,
        "cpu_seconds_median": statistics.median(cpus) if cpus else None,
        "cpu_seconds_max": max(cpus) if cpus else None,
        "text": resource_summary_line(rows),
    }


def _tampering(rows: list[TaskRow] | None) -> dict[str, Any] | None:
    """The ledger rows' tampering flags counted per TamperKind, as the report counts them (None
    without a ledger)."""
    if rows is None:
        return None
    counts = count_tampering(
        (r.instance_id, None if r.tampering is None else [f.kind.value for f in r.tampering]) for r in rows
    )
    return {**msgspec.to_builtins(counts), "text": counts_sentence(counts, what="the ledger")}


def _cleanup_proven(m: RunManifest | None, mon: Monitor | None) -> bool | None:
    """The launcher's own proof (monitor.json `finished`) or `clear`'s fresh listing."""
    if m is not None and m.cleared is not None and m.cleared.label_empty:
        return True
    return bool(mon.finished) if mon is not None else None


STATE_WORDS = {
    "running": "running",
    "stopping": "stopping",
    "finished": "finished",
    "launcher_gone": "unfinished, and its launcher is gone",
}


def add_dead_run_truth(status: dict[str, Any], files: RunFiles) -> None:
    """With no live launcher: which custody processes and labelled objects live, and the next command."""
    liveness = liveness_of(files)
    status["processes"] = [
        {"role": h.role, "pid": h.pid, "source": h.source, "alive": h.alive, "members": list(h.members)}
        for h in liveness.holders
    ]
    status["processes_text"] = liveness.sentence()
    cleared = files.manifest.cleared if files.manifest is not None else None
    status["cleared"] = cleared.to_dict() if cleared is not None else None
    view = list_labelled_view(files)
    status["labelled"] = {
        "docker_host": view.docker_host,
        "objects": view.names,
        "counts": view.counts,
        "error": view.error,
    }
    # Unproven: the launcher died unfinished, or its own cleanup failed, and no `clear` followed.
    unproven = cleared is None and (status["state"] == "launcher_gone" or status["cleanup_proven"] is False)
    needs_clear = (
        unproven
        or not liveness.all_gone
        or bool(view.names)
        or _campaign_active(files) is not None
        or RunRoot(files.run_root).agent_env.exists()
    )
    status["next_command"] = next_command(files, liveness) if needs_clear else None


def render_status_text(status: dict[str, Any], monitor: Monitor | None) -> list[str]:
    """The human lines of `status` (the same facts as --json)."""
    lines = [
        f"run {status['run_root']}: {STATE_WORDS[status['state']]}"
        + (f" (outcome {status['outcome']})" if status["outcome"] else "")
    ]
    pid = status["launcher_pid"]
    lines.append(
        f"  launcher: pid {pid} {'alive' if status['launcher_alive'] else 'not running'}"
        if pid
        else "  launcher: no pid recorded yet"
    )
    if "processes" in status:
        lines.append(f"  processes: {status['processes_text']}")
        labelled = status["labelled"]
        if labelled["error"]:
            lines.append(f"  labelled objects: unknown ({labelled['error']})")
        else:
            found = labelled["objects"] or []
            lines.append(
                f"  labelled objects on {labelled['docker_host']}: "
                + (", ".join(found) if found else "none (a fresh listing)")
            )
        if status.get("cleared"):
            lines.append(
                f"  cleared: at {status['cleared']['at']} by `cowork-adapter clear` "
                f"(campaign {status['cleared']['campaign']}, ledger {status['cleared']['ledger']})"
            )
    if monitor is not None:
        if not status["launcher_alive"]:
            lines.append(
                f"  ({layout.MONITOR} as of {status['observed_at']}: its launcher is gone, so these numbers "
                "stopped there)"
            )
        stopped = status["state"] in ("finished", "launcher_gone")
        lines.append(f"  {summary_line(monitor, stopped)}")
        for name, value in progress_rows(monitor, status["elapsed_sec"], stopped):
            if name == "eta" and status["state"] != "finished":
                value = format_duration(status["eta_sec"])
            lines.append(f"  {name:<24} {value}")
    else:
        p = status["progress"]
        lines.append(
            f"  tasks: {p['done']}/{p['selected']} done, {p['running']} running "
            f"(from {layout.EVENTS}: no {layout.MONITOR} yet)"
        )
        lines.append(f"  elapsed {format_duration(status['elapsed_sec'])}, eta {format_duration(status['eta_sec'])}")
    admission = status.get("admission")
    if admission and admission["waiting"] and status["state"] not in ("finished", "launcher_gone"):
        lines.append(f"  {admission['sentence']} (since {admission['since']}; a wait is not a failure)")
    proven = status["cleanup_proven"]
    lines.append(
        "  cleanup: "
        + (
            "proven (nothing with the run's label remains)"
            if proven
            else "not proven yet"
            if proven is False
            else f"unknown (no {layout.MONITOR})"
        )
    )
    if status["campaign_settlement"]:
        lines.append(f"  campaign settlement: {status['campaign_settlement']}")
    if status["state"] in ("finished", "launcher_gone") or status["stop_reason"]:
        lines.append("  why it stopped: " + _why(status))
    if status["exit_code"] is not None:
        lines.append(f"  exit code: {status['exit_code']} ({_exit_word(status['exit_code'])})")
    if status.get("next_command"):
        lines.append(f"  next: {status['next_command']}")
    if status.get("resource_use"):
        lines.append(f"  {status['resource_use']['text']}")
    if status.get("tampering"):
        lines.append(f"  tampering: {status['tampering']['text']}")
    for problem in status["problems"]:
        lines.append(f"  problem: {problem}")
    return lines


def _why(status: dict[str, Any]) -> str:
    if status["refusal"]:
        return f"refused at {status['refusal']['stage']}: {status['refusal']['sentence']}"
    if status["error"]:
        return f"crashed: {status['error'].get('type')}: {status['error'].get('message', '')[:200]}"
    if status["stop_reason"]:
        causes = status["stop_causes"]
        extra = f" (all causes: {', '.join(causes)})" if len(causes) > 1 else ""
        return f"stop reason {status['stop_reason']}{extra}"
    if status["state"] == "launcher_gone":
        return "the launcher exited without finalising the run (killed or crashed)"
    return f"the runner finished by itself ({status['outcome']})"


# The names docs/exit-codes.md gives the exit codes (its "Exit codes" table), not the enum's member names.
EXIT_WORDS = {
    ExitCode.OK: "completed",
    ExitCode.FAILED: "incomplete",
    ExitCode.REFUSED: "refused",
    ExitCode.STOPPED: "stopped",
    ExitCode.SHIM_REFUSED: "container creation refused",
}


def _exit_word(code: int) -> str:
    try:
        return EXIT_WORDS[ExitCode(code)]
    except ValueError:
        return "unknown"


def _not_a_run_root(run_root: Path) -> int:
    say(f"{run_root} is not a run root (no {layout.MANIFEST}, {layout.MONITOR} or {layout.EVENTS}).", err=True)
    return int(ExitCode.REFUSED)


def status_command(run_root: Path, as_json: bool) -> int:
    """Print the run's status (text, or one JSON object with --json). 0 read, 2 not a run root."""
    if not run_root.is_dir():
        return _not_a_run_root(run_root)
    files = read_run(run_root)
    if not files.is_run_root:
        return _not_a_run_root(run_root)
    pid, _source = find_launcher(files)
    status = build_status(files, launcher_pid=pid, launcher_alive=pid is not None)
    if pid is None:
        add_dead_run_truth(status, files)
    if as_json:
        print(json.dumps(status, sort_keys=True, default=str), flush=True)
    else:
        for line in render_status_text(status, files.monitor):
            print(line, flush=True)
    return int(ExitCode.OK)


# ---------------------------------------------------------------------------------------------
# stop
# ---------------------------------------------------------------------------------------------


def _ended(files: RunFiles) -> bool:
    return files.manifest is not None and files.manifest.finished_at is not None


_AFTER_SUPERVISION = {EventKind.RUNNER_EXITED, EventKind.CLEANUP, EventKind.SETTLEMENT, EventKind.RUN_FINISHED}


def _past_supervision(files: RunFiles) -> bool:
    """True once the supervisor has returned (the launcher is cleaning up and settling)."""
    mon = files.monitor
    if mon is not None and (mon.finished or mon.stop_reason):
        return True
    return any(e.kind in _AFTER_SUPERVISION for e in files.events)


def _describe_end(files: RunFiles) -> str:
    m, mon = files.manifest, files.monitor
    parts = [f"outcome {m.outcome}" if m else "outcome unknown"]
    parts.append(f"stop reason {m.stop_reason}" if m and m.stop_reason else "no stop reason (the runner finished)")
    if m is not None and m.cleared is not None:
        parts.append(f"cleared by `cowork-adapter clear` at {m.cleared.at} (campaign {m.cleared.campaign})")
    elif mon is not None:
        parts.append("cleanup proven" if mon.finished else "cleanup NOT proven")
        parts.append(
            f"campaign settlement {m.campaign_settlement if m and m.campaign_settlement else mon.campaign_settlement}"
        )
    if m is not None and m.exit_code is not None:
        parts.append(f"exit code {m.exit_code} ({_exit_word(m.exit_code)})")
    return ", ".join(parts)


def _dead_run_truth(files: RunFiles) -> str:
    """Which processes and labelled objects of a launcher-less run are alive, and the next command."""
    liveness = liveness_of(files)
    view = list_labelled_view(files)
    if view.error:
        objects = f"its labelled objects are unknown ({view.error})"
    else:
        objects = (
            f"with its label on {view.docker_host}: {', '.join(view.names)}"
            if view.names
            else f"nothing with its label remains on {view.docker_host}"
        )
    return f"Processes: {liveness.sentence()}; {objects}. Next: {next_command(files, liveness)}."


FENCE_REASON = "stop_requested"
GROUP_GRACE_SEC = 10.0


def fence(run_root: Path) -> str:
    """Write the stop file the docker shim refuses new containers by (the launcher's own fence)."""
    from ..fileio import create_exclusive  # `stop` and `clear` write; `status` only reads

    path = RunRoot(run_root).stop_file
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        create_exclusive(path, f"{FENCE_REASON}\n", durable=False)  # the shim sees it at once
        return f"fenced (wrote {path})"
    except FileExistsError:
        return f"already fenced ({path} exists)"
    except OSError as exc:
        return f"could NOT fence ({path}: {exc.strerror})"


def _group_gone(pgid: int, timeout: float, poll_sec: float) -> bool:
    from ..container.procs import group_alive  # urllib.request (~25 ms): `status` signals no group

    deadline = time.monotonic() + timeout
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_sec)
    return True


def stop_orphaned_group(
    run_root: Path, pgid: int, *, grace_sec: float, poll_sec: float, docker_host: str | None = None
) -> str:
    """The fast stop without a launcher, as the launcher's own (supervisor.py): fence, SIGKILL the
    runner's group, remove the run's labelled objects (custody/stop_removal.py: in parallel, the
    admitted creations waited for, proven by a fresh listing), then prove the group gone. Without
    a recorded Docker host nothing can be removed here: then SIGTERM first, so the group's EXIT
    trap removes its containers, SIGKILL if it lingers, and the rest is `clear`'s.

    The group is signalled only while a member carries the run's marker (COWORK_RUN_LABEL=<label>):
    a recorded group id is reused by the kernel once the run's group is gone, and may name another
    user's or another run's processes by now. The removal goes by the run's exact label, whoever
    the group is now."""
    from ..container.procs import signal_marked_group  # urllib.request (~25 ms): `status` signals no group

    files = read_run(run_root)
    label = files.manifest.run_label if files.manifest is not None else None
    fenced = fence(run_root)
    if not label:
        return f"{fenced}; the run recorded no label, so the runner group {pgid} cannot be proven the run's and was not signalled"
    events = None
    try:
        events = EventLog(RunRoot(run_root).events)
        events.append(EventKind.STOP_REQUESTED, reason=FENCE_REASON, source="operator_stop_without_launcher")
    except (OSError, ValueError):
        pass  # the fence and the signals below do not depend on the record
    removal = None if docker_host else "no Docker host recorded, so nothing was removed"
    signals = (signal.SIGKILL,) if removal is None else (signal.SIGTERM, signal.SIGKILL)
    ended = None
    for index, sig in enumerate(signals):
        try:
            if not signal_marked_group(pgid, sig, RUN_MARKER_ENV, label):  # checked again before each signal
                ended = (
                    f"the run's processes in group {pgid} ended after {signals[index - 1].name}"
                    if index
                    else f"no process of group {pgid} carries the run's marker ({RUN_MARKER_ENV}), so it is not the "
                    "run's (ended, or its id reused) and was not signalled"
                )
        except ProcessLookupError:
            ended = f"the runner group {pgid} ended"
        except PermissionError:
            return f"{fenced}; not allowed to signal the runner group {pgid} (run stop as the user who started the run)"
        if removal is None:
            removal = _remove_for_stop(run_root, docker_host, label, events)  # type: ignore[arg-type]  # resolved by the caller
        if ended is not None:
            break
        if _group_gone(pgid, grace_sec if sig == signal.SIGTERM else 5.0, poll_sec):
            ended = f"the runner group {pgid} ended after {signal.Signals(sig).name}"
            break
    return f"{fenced}; {removal}; {ended or f'the runner group {pgid} still has processes after SIGKILL'}"


def _remove_for_stop(run_root: Path, docker_host: str, label: str, events) -> str:
    from ..custody.stop_removal import remove_for_stop

    done = remove_for_stop(run_root, docker_host, label)
    if events is not None:
        try:
            events.append(
                EventKind.STOP_CLEARED,
                reason=FENCE_REASON,
                removed=done.removed,
                proven=done.proven,
                seconds=done.seconds,
                error=done.error,
            )
        except (OSError, ValueError):
            pass  # the removal is proven (or not) by its own listing, recorded or not
    return done.sentence()


def stop_command(run_root: Path, timeout: float, *, poll_sec: float = STOP_POLL_SEC) -> int:
    """SIGTERM this run's launcher and wait up to `timeout` s for it to exit with cleanup proven."""
    if not run_root.is_dir():
        return _not_a_run_root(run_root)
    files = read_run(run_root)
    if not files.is_run_root:
        return _not_a_run_root(run_root)
    pid, source = find_launcher(files)
    if pid is None:
        if _ended(files):
            m, mon = files.manifest, files.monitor
            unproven = m.cleared is None and mon is not None and not mon.finished  # type: ignore[union-attr]  # an ended run has a manifest
            say(f"the run already ended: {_describe_end(files)}." + (f" {_dead_run_truth(files)}" if unproven else ""))
            return int(ExitCode.OK)
        group = liveness_of(files).live_group()
        if group is not None:
            done = stop_orphaned_group(
                run_root,
                group.pid,
                grace_sec=min(timeout, GROUP_GRACE_SEC),
                poll_sec=min(poll_sec, 0.2),
                docker_host=recorded_docker_host(run_root, files.manifest),
            )
            say(
                f"the run {run_root} is unfinished and its launcher is gone, but its runner group {group.pid} was "
                f"still running: {done}.",
                err=True,
            )
            files = read_run(run_root)
        signalled = "" if group is not None else "; nothing was signalled"
        say(
            f"the run {run_root} is unfinished and no launcher of it is running (pid from {source}){signalled}. "
            f"{_dead_run_truth(files)}",
            err=True,
        )
        return int(ExitCode.FAILED)
    if _past_supervision(files):
        # It is already stopping or cleaning up: a second signal could only interrupt that.
        say(f"the launcher (pid {pid}) is already stopping; not signalling it again. Waiting up to {timeout:g}s.")
    else:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass  # it ended between the check and the signal: the wait below reads how it ended
        except PermissionError:
            say(
                f"not allowed to signal the launcher (pid {pid}); run `stop` as the user who started the run.", err=True
            )
            return int(ExitCode.FAILED)
        # Admission is fenced now, not when the launcher's loop next turns (it may be mid meter
        # read); the launcher then finds the run fenced, removes its containers and proves it.
        # Only once its custody exists: before that no container can be made, and the launcher
        # makes that directory itself.
        fenced = f"; {fence(run_root)}" if RunRoot(run_root).custody.is_dir() else ""
        say(
            f"sent SIGTERM to the launcher (pid {pid}, from {source}){fenced}; waiting up to {timeout:g}s for its "
            "verified cleanup."
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = read_run(run_root)
        if not is_launcher_of(pid, run_root):
            break
        time.sleep(poll_sec)
    files = read_run(run_root)
    if is_launcher_of(pid, run_root):
        mon = files.monitor
        say(
            f"the launcher (pid {pid}) is still running after {timeout:g}s"
            + (
                f" (stop reason {mon.stop_reason}, cleanup {'proven' if mon.finished else 'not proven yet'})"
                if mon
                else ""
            )
            + "; it may still be cleaning up. Check again with `cowork-adapter status`, and never remove its "
            "containers by hand.",
            err=True,
        )
        return int(ExitCode.FAILED)
    if not _ended(files):
        say(f"the launcher (pid {pid}) exited without finalising the run record. {_dead_run_truth(files)}", err=True)
        return int(ExitCode.FAILED)
    proven = files.monitor is not None and files.monitor.finished
    if files.monitor is not None and not proven:
        say(
            f"the run stopped but its cleanup is NOT proven: {_describe_end(files)}. {_dead_run_truth(files)}", err=True
        )
        return int(ExitCode.FAILED)
    say(f"the run stopped: {_describe_end(files)}.")
    return int(ExitCode.OK)


__all__ = [
    "status_command",
    "stop_command",
    "build_status",
    "read_run",
    "is_launcher_of",
    "find_launcher",
    "gather_recorded",
    "liveness_of",
    "next_command",
]
