"""The run's watchdog: no spending without a living launcher, even after a SIGKILL of the launcher.

The launcher starts this module as its own process, in its own session, before the runner:

    python -m cowork_adapter.custody.watchdog --run-root R --run-label L --docker-host H \\
        --launcher-pid P --launcher-start-ticks T --life-fd N --ready-fd M [...]

It holds the read end of a pipe whose write end only the launcher holds (the runner and every
other child are started with close_fds, so none inherits it), plus a pidfd of the launcher. When
the launcher ends normally it writes DONE first and the watchdog simply exits. When the pipe
reaches EOF, or the pidfd fires, without DONE, the launcher died (SIGKILL, OOM kill, a kill of its
process group) and no code of it will run again, so the watchdog does the launcher's custody work:

  1. fence: create <run_root>/custody/stop (O_EXCL, "launcher_died"), so the shim refuses every
     new container, and delete the key's env file <run_root>/private/agent.env;
  2. stop the runner: SIGTERM its process group (from custody/processes.json) and every process
     carrying the run's environment marker (COWORK_RUN_LABEL=<label>, which also covers a runner
     started just before the launcher could record its group), a bounded grace, then SIGKILL;
  3. exact-label cleanup of containers and networks, proven by a fresh listing (retried within
     the meter-blindness bound);
  4. record each step in events.jsonl, and exit. It never touches the campaign file: a dead run
     keeps its active_run until the guarded command that clears it.

The launcher-side half (start_watchdog, WatchdogHandle, write_processes) is at the end.
"""

from __future__ import annotations

import argparse
import errno
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..container import safetree
from ..container.procs import group_alive, pgid_of, pids_with_env, process_alive, start_ticks
from ..errors import CustodyError
from ..fileio import create_exclusive, replace_atomic
from ..runroot import layout
from ..runroot.events import EventLog
from ..runroot.layout import RunRoot
from ..schemas.custody import CustodyProcesses, ProcessIdentity
from ..schemas.record import decode
from ..vocab import EventKind, StopReason
from .creations import CREATION_WAIT_SEC, creations_dir
from .docker_ops import cleanup_run

DONE = b"done\n"
READY = b"ready\n"
RUN_MARKER_ENV = "COWORK_RUN_LABEL"  # set on the runner; every descendant inherits it
LIVENESS_POLL_SEC = 1.0  # a third, slow signal: /proc says the launcher is gone
READY_TIMEOUT_SEC = 60.0
DEFAULT_GRACE_SEC = 8.0
KILL_WAIT_SEC = 5.0


def custody_paths(run_root: Path) -> dict[str, Path]:
    root = RunRoot(run_root)
    return {
        "stop": root.stop_file,
        "processes": root.custody_processes,
        "agent_env": root.agent_env,
        "events": root.events,
        "log": root.watchdog_log,
    }


def read_processes(run_root: Path) -> CustodyProcesses | None:
    """custody/processes.json, or None when it is missing or unreadable."""
    try:
        return decode(custody_paths(run_root)["processes"].read_bytes(), CustodyProcesses)
    except (OSError, ValueError):
        return None


def write_processes(run_root: Path, processes: CustodyProcesses) -> None:
    """Replace custody/processes.json atomically (readers see the old or the new, never half)."""
    replace_atomic(custody_paths(run_root)["processes"], processes.to_json())


# ---------------------------------------------------------------- the watchdog process


@dataclass
class Watch:
    run_root: Path
    run_label: str
    docker_host: str
    launcher_pid: int
    launcher_ticks: int | None
    grace_sec: float
    bound_sec: float
    tmpdir: Path | None
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self.paths = custody_paths(self.run_root)
        self.events = EventLog(self.paths["events"])

    def say(self, text: str) -> None:
        print(f"cowork-adapter watchdog[{os.getpid()}]: {text}", file=sys.stderr, flush=True)

    def record(self, kind: EventKind, **payload) -> None:
        try:
            self.events.append(kind, **payload)
        except (OSError, ValueError) as exc:  # the actions matter more than their record
            self.say(f"could not append {kind} to {layout.EVENTS}: {type(exc).__name__}: {exc}")

    def wait_for_launcher(self, life_fd: int, pidfd: int | None) -> str | None:
        """Block until the launcher says DONE (returns None) or is gone (returns what said so)."""
        os.set_blocking(life_fd, False)
        poller = select.poll()
        poller.register(life_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        if pidfd is not None:
            poller.register(pidfd, select.POLLIN)
        received = b""
        while True:
            ready = {fd for fd, _ in poller.poll(int(LIVENESS_POLL_SEC * 1000))}
            # Drain the pipe first: a launcher that wrote DONE and then exited fires both at once.
            eof = False
            while True:
                try:
                    chunk = os.read(life_fd, 64)
                except BlockingIOError:
                    break
                if not chunk:
                    eof = True
                    break
                received += chunk
            if DONE in received:
                return None
            if eof:
                return "pipe_eof"
            if pidfd is not None and pidfd in ready:
                return "pidfd"
            if not ready and not process_alive(self.launcher_pid, self.launcher_ticks):
                return "not_alive"

    def contain(self, seen_by: str) -> bool:
        """The launcher died: fence, delete the key, stop the runner, clean up. True when proven."""
        started = self.clock()
        deadline = started + self.bound_sec
        self.say(f"the launcher {self.launcher_pid} is gone ({seen_by}): fencing the run")
        already, error = self.fence()
        key_deleted = self.delete_key()
        self.record(
            EventKind.WATCHDOG_FENCED,
            reason=StopReason.LAUNCHER_DIED.value,
            seen_by=seen_by,
            already_fenced=already,
            key_deleted=key_deleted,
            error=error,
        )
        self.stop_runner()
        proven = self.cleanup(deadline)
        if self.tmpdir is not None:
            safetree.remove_tree(str(self.tmpdir))  # the runner's staging copies (any depth, no recursion)
        return proven

    def fence(self) -> tuple[bool, str | None]:
        """Create the stop file; (already fenced, error)."""
        try:
            create_exclusive(self.paths["stop"], f"{StopReason.LAUNCHER_DIED.value}\n", durable=False)
        except FileExistsError:
            return True, None  # an earlier cause fenced admission; its reason is kept
        except OSError as exc:
            # No custody directory means no shim was installed yet: nothing can be admitted.
            self.say(f"could not create the stop file: {exc}")
            return False, f"{type(exc).__name__}: {exc}"[:500]
        return False, None

    def delete_key(self) -> bool:
        try:
            self.paths["agent_env"].unlink(missing_ok=True)
            # A gateway's secret, the task token files and the default route's TLS key (gateway/tls.py):
            # useless once the gateway died with the launcher.
            private = self.paths["agent_env"].parent
            for path in [
                private / layout.GATEWAY_SECRET,
                private / layout.PROVIDER_LEAF_KEY,
                *private.glob("agent-*.env"),
            ]:
                path.unlink(missing_ok=True)
        except OSError as exc:
            self.say(f"could not delete the key file: {exc}")
        return not self.paths["agent_env"].exists()

    def targets(self) -> tuple[set[int], set[int]]:
        """(process groups, single pids) of the run: every group with a member carrying the run's
        marker, the recorded runner group among them while it lives. A recorded group id alone is
        never signalled: once the run's group is gone the kernel may give that id to anyone."""
        own = os.getpgid(0)
        groups: set[int] = set()
        marked = set(pids_with_env(RUN_MARKER_ENV, self.run_label)) - {os.getpid()}
        for pid in marked:
            pgid = pgid_of(pid)
            if pgid is not None:
                groups.add(pgid)
        return {g for g in groups if g > 1 and g != own}, marked

    def _signal(self, sig: int, groups: set[int], pids: set[int]) -> None:
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in pids:  # a marked process that left the group (setsid) is signalled alone
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _alive(self, groups: set[int], pids: set[int]) -> bool:
        return any(group_alive(g) for g in groups) or any(process_alive(p, None) for p in pids)

    def stop_runner(self) -> None:
        groups, pids = self.targets()
        all_groups, all_pids, killed = set(groups), set(pids), False
        for sig, wait in ((signal.SIGTERM, self.grace_sec), (signal.SIGKILL, KILL_WAIT_SEC)):
            self._signal(sig, groups, pids)
            end = self.clock() + wait
            while True:
                # Rescan: a process forked meanwhile carries the marker too.
                more_groups, more_pids = self.targets()
                fresh_groups, fresh_pids = more_groups - all_groups, more_pids - all_pids
                if fresh_groups or fresh_pids:
                    self._signal(sig, fresh_groups, fresh_pids)
                all_groups |= more_groups
                all_pids |= more_pids
                groups, pids = all_groups, all_pids
                if not self._alive(groups, pids) or self.clock() >= end:
                    break
                time.sleep(0.1)
            if not self._alive(groups, pids):
                break
            killed = True
        gone = not self._alive(all_groups, all_pids)
        self.say(
            f"runner groups {sorted(all_groups)} and marked pids {len(all_pids)}: "
            f"{'gone' if gone else 'STILL ALIVE'}{' after SIGKILL' if killed else ''}"
        )
        self.record(
            EventKind.WATCHDOG_RUNNER_STOPPED,
            pgids=sorted(all_groups),
            marked_pids=sorted(all_pids),
            killed=killed,
            gone=gone,
        )

    def cleanup(self, deadline: float) -> bool:
        """Exact-label cleanup proven by a relist; retried (a removal racing the runner's own trap
        can fail once) until the bound."""
        attempts, removed, error = 0, 0, None
        while True:
            attempts += 1
            try:
                report = cleanup_run(
                    self.docker_host,
                    self.run_label,
                    self._log,
                    timeout=10,
                    creations=creations_dir(self.run_root),
                    creation_wait_sec=max(1.0, min(CREATION_WAIT_SEC, deadline - self.clock())),
                )
                removed += len(report.removed_containers) + len(report.removed_networks)
                self.record(EventKind.WATCHDOG_CLEANUP, removed=removed, proven=True, attempts=attempts)
                return True
            except CustodyError as exc:
                error = str(exc)[:500]
            if self.clock() >= deadline:
                break
            time.sleep(1.0)
        self.say(f"cleanup NOT proven: {error}")
        self.record(EventKind.WATCHDOG_CLEANUP, removed=removed, proven=False, attempts=attempts, error=error)
        return False

    def _log(self, entry: dict) -> None:
        self.say(f"cleanup: {entry}")


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel, or the launcher already gone
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cowork_adapter.custody.watchdog")
    parser.add_argument("--run-root", type=Path, required=True)
    parser.add_argument("--run-label", required=True)
    parser.add_argument("--docker-host", required=True)
    parser.add_argument("--launcher-pid", type=int, required=True)
    parser.add_argument("--launcher-start-ticks", type=int, default=None)
    parser.add_argument("--life-fd", type=int, required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--grace-sec", type=float, default=DEFAULT_GRACE_SEC)
    parser.add_argument("--bound-sec", type=float, default=30.0)
    parser.add_argument("--tmpdir", type=Path, default=None)
    args = parser.parse_args(argv)
    watch = Watch(
        args.run_root.resolve(),
        args.run_label,
        args.docker_host,
        args.launcher_pid,
        args.launcher_start_ticks,
        args.grace_sec,
        args.bound_sec,
        args.tmpdir,
    )
    # Its own session already (the launcher's Popen); a terminal's Ctrl-C or hang-up is not for us.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    pidfd = _pidfd(args.launcher_pid)
    # The pidfd names the launcher only if the process behind the pid is still the same one.
    seen_by = None if process_alive(args.launcher_pid, args.launcher_start_ticks) else "not_alive"
    try:
        os.write(args.ready_fd, READY)
    except OSError:
        pass  # the launcher gave up waiting; the pipe will say whether it lives
    os.close(args.ready_fd)
    if seen_by is None:
        seen_by = watch.wait_for_launcher(args.life_fd, pidfd)
    if seen_by is None:
        watch.record(EventKind.WATCHDOG_EXITED, reason="launcher_done", pid=os.getpid())
        return 0
    proven = watch.contain(seen_by)
    watch.record(
        EventKind.WATCHDOG_EXITED, reason="custody_finished" if proven else "custody_unproven", pid=os.getpid()
    )
    return 0 if proven else 1


# ---------------------------------------------------------------- the launcher's side


class WatchdogError(Exception):
    """The watchdog could not be started or did not arm in time: the runner must not start."""


@dataclass
class WatchdogHandle:
    proc: subprocess.Popen
    life_fd: int | None  # the pipe's only write end; closing it without DONE means "launcher died"
    identity: ProcessIdentity

    def end(self, timeout: float = 10.0) -> int | None:
        """Say DONE, close the pipe and reap the watchdog (killed if it lingers). Idempotent."""
        if self.life_fd is not None:
            try:
                os.write(self.life_fd, DONE)
            except OSError:
                pass  # it is already gone: reaped below
            os.close(self.life_fd)
            self.life_fd = None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def start_watchdog(
    *,
    run_root: Path,
    run_label: str,
    docker_host: str,
    env: dict[str, str],
    bound_sec: float,
    grace_sec: float = DEFAULT_GRACE_SEC,
    tmpdir: Path | None = None,
    python: str = sys.executable,
    ready_timeout: float = READY_TIMEOUT_SEC,
) -> WatchdogHandle:
    """Spawn the watchdog in its own session and wait until it is armed. Raises WatchdogError."""
    launcher = os.getpid()
    life_r, life_w = os.pipe()  # both ends non-inheritable: only pass_fds hands the read end over
    ready_r, ready_w = os.pipe()
    argv = [
        python,
        "-m",
        "cowork_adapter.custody.watchdog",
        "--run-root",
        str(run_root),
        "--run-label",
        run_label,
        "--docker-host",
        docker_host,
        "--launcher-pid",
        str(launcher),
        "--life-fd",
        str(life_r),
        "--ready-fd",
        str(ready_w),
        "--grace-sec",
        str(grace_sec),
        "--bound-sec",
        str(bound_sec),
    ]
    ticks = start_ticks(launcher)
    if ticks is not None:
        argv += ["--launcher-start-ticks", str(ticks)]
    if tmpdir is not None:
        argv += ["--tmpdir", str(tmpdir)]
    try:
        with open(custody_paths(run_root)["log"], "ab") as log:
            # Its own session: a kill of the launcher's process group does not reach it.
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(life_r, ready_w),
                start_new_session=True,
            )
    except OSError as exc:
        for fd in (life_r, life_w, ready_r, ready_w):
            os.close(fd)
        raise WatchdogError(f"the watchdog could not be started: {exc}") from None
    os.close(life_r)
    os.close(ready_w)
    handle = WatchdogHandle(proc, life_w, ProcessIdentity(pid=proc.pid, start_ticks=start_ticks(proc.pid)))
    try:
        answer = _read_ready(ready_r, ready_timeout)
    except BaseException:  # a signal's StopSignal while waiting: no orphaned watchdog left behind
        handle.end(timeout=5.0)
        raise
    finally:
        os.close(ready_r)
    if answer != READY:
        handle.end(timeout=5.0)
        why = "exited" if proc.poll() is not None else "did not arm"
        raise WatchdogError(f"the watchdog {why} within {ready_timeout:g} s (see {custody_paths(run_root)['log']})")
    return handle


def _read_ready(fd: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    got = b""
    while READY not in got:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            break
        try:
            chunk = os.read(fd, 64)
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            break
        if not chunk:
            break
        got += chunk
    return READY if READY in got else got


if __name__ == "__main__":
    sys.exit(main())
