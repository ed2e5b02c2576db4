"""`cowork-adapter status`: the operator's view of one run root (read-only, any time): progress,
spending, meter, disk, whether the launcher lives, whether cleanup is proven, campaign settlement, and
why the run stopped.
  exit 0: the run root was read; 2: the directory is not a run root.

On a run whose launcher is gone it tells what is alive (launcher, watchdog, runner group, from
custody/processes.json or the pids the run recorded) and which objects with the run's label the
daemon still holds (a fresh listing), and names the exact command that works.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import msgspec

from ..host.resources import summary_line as resource_summary_line
from ..run.live import eta_seconds, format_duration, progress_rows, summary_line
from ..runroot import layout
from ..runroot.events import parse_ts
from ..runroot.layout import RunRoot
from ..schemas.events import RunAdmitted, RunFinished, TaskFinished, TaskStarted
from ..schemas.ledger import TaskRow
from ..schemas.manifest import RunManifest
from ..schemas.monitor import Monitor, Progress
from ..score.tampering import count_tampering, counts_sentence
from ..vocab import ExitCode
from .run_view import (
    RunFiles,
    campaign_active,
    exit_word,
    find_launcher,
    list_labelled_view,
    liveness_of,
    next_command,
    not_a_run_root,
    read_run,
)


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
        or campaign_active(files) is not None
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
        lines.append(f"  exit code: {status['exit_code']} ({exit_word(status['exit_code'])})")
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


def status_command(run_root: Path, as_json: bool) -> int:
    """Print the run's status (text, or one JSON object with --json). 0 read, 2 not a run root."""
    if not run_root.is_dir():
        return not_a_run_root(run_root)
    files = read_run(run_root)
    if not files.is_run_root:
        return not_a_run_root(run_root)
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
