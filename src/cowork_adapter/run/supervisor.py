"""Supervising the upstream runner: its process group, the poll loop, stop causes and signals.

The loop is deliberately plain. Each turn: honour a stop cause, read the meter within the
blindness bound, check budgets and disks, publish progress, then wait — never longer than leaves
room for one full meter read before the bound. Everything it depends on is injected, so its timing
rules are tested without Docker or money.

A stop decided outside the loop (a signal, the gateway's fence, the host's lease, the daemon watch)
does not wait for the loop's turn: the loop may be inside a meter read (up to its 5 s timeout) or a
publish on a busy disk. `stop_at_once` runs the stop in a thread of its own at once; the stop is
one step under a lock, so the loop's own stop at its end waits for that one and never repeats it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..campaign.observe import POLL_SEC, MeterBlind, MeterSchedule  # one cadence: the manifest records POLL_SEC
from ..container.procs import group_alive
from ..errors import CampaignPersistenceError
from ..fileio import create_exclusive
from ..vocab import StopPath, StopReason

# POLL_SEC (15 s) and READ_SLICE_SEC (one full meter read must always fit before the blindness
# bound) come from campaign.observe, the same constants the manifest records; the waits are
# MeterSchedule's, the one schedule class its own tests exercise.
GROUP_GRACE_SEC = 15.0


class MeterPort(Protocol):
    def observe(self, deadline: float) -> tuple[float, StopReason | None]:
        """Read, validate and save one reading before `deadline` (monotonic).

        Returns (request time of the accepted reading, budget stop decision or None). Raises
        MeterBlind when the deadline passes without an accepted reading, CampaignPersistenceError
        when the campaign file cannot be written.
        """


@dataclass
class SupervisionResult:
    stop_reason: str | None
    stop_causes: list[str]
    runner_exit_code: int | None
    supervisor_error: str | None = None


@dataclass
class Supervisor:
    runner_argv: list[str]
    runner_env: dict[str, str]
    runner_cwd: Path
    console_log: Path
    stop_file: Path
    blindness_sec: float
    meter: MeterPort
    disk_check: Callable[[], StopReason | None]
    publish: Callable[[bool], None]  # progress refresh; must not raise (it reports its own failures)
    on_event: Callable[[str, dict], None]
    on_runner_started: Callable[[int], None] = lambda pgid: None
    # The fast stop's exact-label removal (StopPath.FAST), given the stop's first cause: the run's
    # containers removed in parallel, the admitted creations waited for, proven by a fresh listing.
    # It must not raise; the launcher's final cleanup proves custody whatever it did.
    remove_labelled: Callable[[str], None] | None = None
    stop_path: StopPath = StopPath.FAST
    clock: Callable[[], float] = time.monotonic
    poll_sec: float = POLL_SEC
    group_grace_sec: float = GROUP_GRACE_SEC
    _causes: list[str] = field(default_factory=list)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stop_lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: subprocess.Popen | None = None  # the runner whose group a stop has already signalled
    proc: subprocess.Popen | None = None

    def request_stop(self, cause: str) -> None:
        """Record a stop cause (the first one wins the stop reason) and wake the loop."""
        if cause not in self._causes:
            self._causes.append(cause)
        self._wake.set()

    def stop_at_once(self, cause: str) -> None:
        """Record a stop cause and stop now, in a thread of its own, not at the loop's next look.

        For causes decided outside the loop. A thread, because the caller must not block on the
        removal (a gateway thread answers its request; a signal handler may interrupt the loop
        while it holds the stop's lock)."""
        self.request_stop(cause)
        threading.Thread(target=self._fence_and_stop_group, name="cowork-stop", daemon=True).start()

    def _on_signal(self, signum: int, _frame) -> None:
        self.request_stop(f"signal_{signum}")  # the watcher (_watch_signals) has already stopped at once

    def _watch_signals(self) -> Callable[[], None]:
        """Stop at once on SIGINT/SIGTERM, from a thread; returns the function that ends the watch.

        Python runs a signal's handler in the main thread only, and only once that thread's blocking
        call returns (a meter read waits up to its timeout) when the kernel gave the signal to
        another thread. Its C-level handler writes the signal's number to the wakeup fd at once,
        whatever the thread: a thread reading that socket starts the stop."""
        reader, writer = socket.socketpair()
        writer.setblocking(False)  # the C handler must never block
        previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

        def watch() -> None:
            while data := reader.recv(64):  # b"" once `end` closed the writer
                for signum in data:
                    if signum in (signal.SIGINT, signal.SIGTERM):
                        self.stop_at_once(f"signal_{signum}")

        watcher = threading.Thread(target=watch, name="cowork-signals", daemon=True)
        watcher.start()

        def end() -> None:
            signal.set_wakeup_fd(previous)
            writer.close()
            watcher.join(timeout=5.0)
            reader.close()

        return end

    def run(self, anchor: float) -> SupervisionResult:
        """Start the runner and supervise it until it ends or a stop cause ends it.

        `anchor` is the request time of the startup reading that admission accepted and saved.
        """
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        end_watch = self._watch_signals()
        error = None
        try:
            if self.clock() >= anchor + self.blindness_sec:
                self.request_stop(StopReason.BUDGET_METER_UNAVAILABLE)
            elif not self._causes:  # a stop asked for before the start (a signal, a lost lease) starts nothing
                self._start_runner()
                self._loop(anchor)
        except Exception as exc:  # noqa: BLE001 - an unexpected failure stops the run as such
            error = f"{type(exc).__name__}: {exc}"
            self.request_stop(StopReason.SUPERVISOR_ERROR)
        finally:
            try:
                self._fence_and_stop_group()
            finally:
                end_watch()
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        code = self.proc.returncode if self.proc is not None else None
        return SupervisionResult(
            stop_reason=self._causes[0] if self._causes else None,
            stop_causes=list(self._causes),
            runner_exit_code=code,
            supervisor_error=error,
        )

    def _start_runner(self) -> None:
        with open(self.console_log, "ab") as console:
            # Its own session: the whole runner tree is stopped as one group, and the operator's
            # Ctrl-C reaches only the launcher, which stops the runner in order. close_fds: the
            # runner inherits no descriptor of ours, above all not the watchdog pipe's write end
            # (a holder of it would keep the watchdog from seeing the launcher's death as EOF).
            self.proc = subprocess.Popen(
                self.runner_argv,
                cwd=self.runner_cwd,
                env=self.runner_env,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        self.on_event("runner_started", {"pid": self.proc.pid, "argv_len": len(self.runner_argv)})
        self.on_runner_started(self.proc.pid)
        threading.Thread(target=self._watch_runner, daemon=True).start()

    @property
    def _runner(self) -> subprocess.Popen:
        """The runner's process: every reader of it runs after `start` made it."""
        if self.proc is None:
            raise RuntimeError("the runner has not been started")
        return self.proc

    def _watch_runner(self) -> None:
        self._runner.wait()
        self._wake.set()

    def _loop(self, anchor: float) -> None:
        schedule = MeterSchedule(self.blindness_sec, anchor=anchor, poll_sec=self.poll_sec)
        while not self._causes:
            try:
                request_time, decision = self.meter.observe(schedule.deadline)
            except MeterBlind:
                self.request_stop(StopReason.BUDGET_METER_UNAVAILABLE)
                break
            except CampaignPersistenceError:
                self.request_stop(StopReason.CAMPAIGN_PERSISTENCE_FAILED)
                break
            schedule.anchor = max(schedule.anchor, request_time)  # as MeterSchedule.accept: never backwards
            if decision is not None:
                self.request_stop(decision)  # known exhaustion never waits for another poll
                break
            if self._causes:
                break  # a signal or the gateway's fence arrived during the read: no disk check or publish first
            reason = self.disk_check()
            if reason is not None:
                self.request_stop(reason)
                break
            self.publish(True)
            if self._runner.poll() is not None or self._causes:
                break
            now = self.clock()
            if schedule.expired(now):  # a slow publish used up the bound
                self.request_stop(StopReason.BUDGET_METER_UNAVAILABLE)
                break
            self._wake.wait(schedule.next_wait(now))
            self._wake.clear()

    def _fence_and_stop_group(self) -> None:
        """Fence container admission (the shim reads the stop file), then stop the runner group.

        StopPath.FAST, in this order: the fence; SIGKILL to the group (nothing of the runner
        reacts to its containers vanishing or competes for the CPU with the removal, and its EXIT
        trap, which would only remove what the next step removes, does not run); the run's
        containers removed by exact label (remove_labelled: in parallel, the admitted creations
        waited for, proven by a fresh listing); then the group proven gone. An admitted creation
        outlives the SIGKILL on purpose (its docker runs in a group of its own and holds its
        creation lock until the daemon answers), so the removal waits for it and removes what it
        made. Killed at any point of this, this process leaves the fence in place and the
        watchdog does the rest (it signals the group again, and its cleanup waits for any removal
        the daemon is still running).
        StopPath.RUNNER_TRAP (benchmarks only): SIGTERM, and the group's EXIT trap removes the
        containers one by one while the group is waited for (SIGKILL after the grace).
        """
        with self._stop_lock:  # one stop at a time: a later caller finds the group already signalled
            self._stop_once()

    def _stop_once(self) -> None:
        reason = self._causes[0] if self._causes else StopReason.RUNNER_FINISHED
        try:
            create_exclusive(self.stop_file, f"{reason}\n", durable=False)  # the shim sees it at once
        except FileExistsError:
            pass  # an earlier cause (an operator's stop file) already fenced admission
        except OSError as exc:
            # Without the marker the shim cannot refuse new containers: still stop the group.
            self.on_event("stop_marker_failed", {"error": f"{type(exc).__name__}: {exc}"})
            self.request_stop(StopReason.SUPERVISOR_ERROR)
        if self.proc is None:
            return  # no runner was started: nothing of the run can exist
        if self._stopped is self.proc:  # an earlier stop (another thread's) did the rest for this runner
            self._wait_group_gone(self.group_grace_sec)
            self.proc.poll()
            return
        self._stopped = self.proc
        # A runner that ended by itself removed its own containers: the final cleanup proves it.
        remove = self.remove_labelled if self._causes and self.stop_path is StopPath.FAST else None
        if self.proc.poll() is not None:
            if remove is not None:
                remove(str(reason))  # a stop cause raced the runner's end: do not wait for the final cleanup
            return
        self.on_event("stop_requested", {"reason": str(reason), "path": str(self.stop_path)})
        for sig in (signal.SIGKILL,) if remove is not None else (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass  # the group is gone already; its containers may not be
            if remove is not None:
                remove(str(reason))
                remove = None
            if self._wait_group_gone(self.group_grace_sec):
                break
        self.proc.poll()

    def _wait_group_gone(self, timeout: float) -> bool:
        """True once no process of the runner's group remains (its own child reaped meanwhile)."""
        deadline = time.monotonic() + timeout
        while True:
            self._runner.poll()  # reap the direct child, or its zombie keeps the group "alive"
            if not group_alive(self._runner.pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
