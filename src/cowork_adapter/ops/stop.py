"""`cowork-adapter stop`: SIGTERM to this run's own launcher (the same path as Ctrl-C or `kill -TERM`,
so the stop reason is signal_15), then wait for the verified cleanup. Only a process whose command line
is a cowork_adapter launcher of THIS run root is ever signalled. When the launcher is dead but the
runner's process group lives on, stop fences the run itself (writes the stop file the docker shim
refuses by) and stops that group (SIGTERM, then SIGKILL).
  exit 0: the run stopped with cleanup proven, or had already ended;
  1: cleanup not proven, the launcher did not finish within --timeout, or the launcher is gone
     while the run is unfinished (the sentence names what lives and the `cowork-adapter clear`
     line that finishes it);
  2: the directory is not a run root.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ..container.procs import group_alive, signal_marked_group
from ..custody.shim_words import RUN_MARKER_ENV  # stdlib only: the watchdog's copy would load docker
from ..fileio import create_exclusive
from ..runroot.events import EventLog
from ..runroot.layout import RunRoot
from ..vocab import EventKind, ExitCode
from .recorded import recorded_docker_host
from .run_view import (
    RunFiles,
    exit_word,
    find_launcher,
    is_launcher_of,
    list_labelled_view,
    liveness_of,
    next_command,
    not_a_run_root,
    read_run,
    say,
)

STOP_POLL_SEC = 0.5


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
        parts.append(f"exit code {m.exit_code} ({exit_word(m.exit_code)})")
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
    files = read_run(run_root)
    label = files.manifest.run_label if files.manifest is not None else None
    fenced = fence(run_root)
    if not label:
        return (
            f"{fenced}; the run recorded no label, so the runner group {pgid} cannot be proven the run's and was "
            "not signalled"
        )
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
        return not_a_run_root(run_root)
    files = read_run(run_root)
    if not files.is_run_root:
        return not_a_run_root(run_root)
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
