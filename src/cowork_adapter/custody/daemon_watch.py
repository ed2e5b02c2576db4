"""Watching the Docker daemon under a run: a lost or restarted daemon is a stop cause.

Why: custody is proven by listing the daemon. A daemon that restarts mid-run kills the run's
containers behind the runner's back, and one that stops answering leaves the runner waiting on
it for minutes; either way nothing the run does is supervised any more.

What identifies a daemon: `docker info`'s ID survives a restart, so it cannot tell one. For a
local unix socket the kernel can: SO_PEERCRED of a connection names the pid of the process that
listens (dockerd), and field 22 of /proc/<pid>/stat its start time. A new pid or start time is a
new daemon. Whether it answers is docker-py's `/_ping`, with a short timeout.

The judgement is a pure function (`judge`) over what one probe saw; `DaemonWatch` runs probes on
a thread so the supervisor loop never waits on a silent daemon, and reports the first loss.
For a tcp:// daemon there is no peer pid: only silence beyond the bound is detected there.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker

PROBE_INTERVAL_SEC = 2.0
PROBE_TIMEOUT_SEC = 3.0
# Silence longer than this is a lost daemon. With the 2 s cadence and a 3 s probe, a loss is seen
# within ~15 s, leaving the supervisor time to stop the run inside the 30 s promise.
UNANSWERED_SEC = 10.0
RETURN_WAIT_SEC = 60.0  # how long cleanup waits for a lost daemon to answer again

RESTARTED = "restarted"  # it answers, but as another process (pid or start time changed)
EXITED = "exited"  # it does not answer and the process we knew is gone
UNANSWERED = "unanswered"  # it has not answered for longer than the bound


@dataclass(frozen=True)
class DaemonIdentity:
    """Which process serves the socket: its pid and its start time in clock ticks since boot."""

    pid: int
    start_ticks: int

    def describe(self) -> str:
        return f"pid {self.pid} started at tick {self.start_ticks}"


@dataclass(frozen=True)
class Probe:
    """What one probe saw at monotonic time `at`.

    `answered`: the daemon answered /_ping. `identity`: the socket's peer process (None when it
    is unknown: no answer, or a non-unix socket). `known_alive`: whether the process of the
    baseline identity still exists as itself (None when there is no baseline to look at).
    """

    at: float
    answered: bool
    identity: DaemonIdentity | None = None
    known_alive: bool | None = None
    error: str | None = None


@dataclass(frozen=True)
class DaemonLoss:
    reason: str  # RESTARTED, EXITED or UNANSWERED
    detail: str
    before: DaemonIdentity | None
    after: DaemonIdentity | None
    silent_sec: float


def judge(baseline: DaemonIdentity | None, last_answer_at: float, probe: Probe, bound_sec: float) -> DaemonLoss | None:
    """The loss one probe proves, or None while the daemon is (still) the one we started with."""
    silent = max(0.0, probe.at - last_answer_at)
    if probe.answered:
        if baseline is not None and probe.identity is not None and probe.identity != baseline:
            return DaemonLoss(
                RESTARTED,
                f"the daemon now answers as {probe.identity.describe()}, not {baseline.describe()}",
                baseline,
                probe.identity,
                0.0,
            )
        return None
    if baseline is not None and probe.known_alive is False:
        return DaemonLoss(
            EXITED,
            f"the daemon ({baseline.describe()}) is gone and the socket does not answer ({probe.error or 'no answer'})",
            baseline,
            None,
            silent,
        )
    if silent > bound_sec:
        return DaemonLoss(
            UNANSWERED,
            f"the daemon has not answered for {silent:.1f} s ({probe.error or 'no answer'})",
            baseline,
            None,
            silent,
        )
    return None


# ---------------------------------------------------------------- reading the host


def unix_socket_path(docker_host: str) -> str | None:
    return docker_host[len("unix://") :] if docker_host.startswith("unix://") else None


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time since boot, in clock ticks); None if no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def peer_identity(path: str, timeout: float) -> DaemonIdentity | None:
    """The identity of the process listening on a unix socket, None if nobody accepts."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return None
    pid = struct.unpack("3i", raw)[0]
    ticks = process_start_ticks(pid) if pid > 0 else None
    return None if ticks is None else DaemonIdentity(pid, ticks)


class DaemonProber:
    """Takes probes of one daemon; keeps one docker-py client (it reconnects by itself)."""

    def __init__(
        self, docker_host: str, timeout: float = PROBE_TIMEOUT_SEC, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.docker_host = docker_host
        self.path = unix_socket_path(docker_host)
        self.timeout = timeout
        self.clock = clock
        self._api: docker.APIClient | None = None

    def probe(self, baseline: DaemonIdentity | None) -> Probe:
        at = self.clock()
        error = None
        try:
            if self._api is None:
                self._api = docker.APIClient(base_url=self.docker_host, timeout=self.timeout)  # type: ignore[arg-type]  # a float: see host/daemon.py
            answered = self._api.ping() is True
        except Exception as exc:  # noqa: BLE001 - any failure to answer is "no answer"
            answered, error = False, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            self.close()  # a fresh connection next time: the old one may point at a dead daemon
        identity = peer_identity(self.path, self.timeout) if self.path else None
        known_alive = None
        if baseline is not None:
            known_alive = process_start_ticks(baseline.pid) == baseline.start_ticks
        return Probe(at=at, answered=answered, identity=identity, known_alive=known_alive, error=error)

    def close(self) -> None:
        if self._api is not None:
            try:
                self._api.close()
            except Exception:  # noqa: BLE001 - closing a broken client is best effort
                pass
            self._api = None


class DaemonWatch:
    """Probes the daemon every `interval` on a daemon thread; `lost` is the first loss seen.

    `on_lost(loss)` is called once, from the watch thread, when the loss is found.
    """

    def __init__(
        self,
        docker_host: str,
        on_lost: Callable[[DaemonLoss], None] = lambda _loss: None,
        *,
        interval: float = PROBE_INTERVAL_SEC,
        bound_sec: float = UNANSWERED_SEC,
        prober: DaemonProber | None = None,
    ) -> None:
        self.prober = prober or DaemonProber(docker_host)
        self.on_lost = on_lost
        self.interval = interval
        self.bound_sec = bound_sec
        self.baseline: DaemonIdentity | None = None
        self.last_answer_at = self.prober.clock()
        self.lost: DaemonLoss | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> DaemonWatch:
        """Take the baseline now (synchronously), then watch on a thread."""
        first = self.prober.probe(None)
        if first.answered:
            self.baseline = first.identity
            self.last_answer_at = first.at
        self._thread = threading.Thread(target=self._follow, name="daemon-watch", daemon=True)
        self._thread.start()
        return self

    def answering(self) -> bool:
        """Whether the daemon answered within the last two probe intervals (no I/O here)."""
        return (
            self.lost is None and self.prober.clock() - self.last_answer_at <= 2 * self.interval + self.prober.timeout
        )

    def step(self) -> DaemonLoss | None:
        """One probe and its judgement (the thread's body; callable directly in tests)."""
        probe = self.prober.probe(self.baseline)
        loss = judge(self.baseline, self.last_answer_at, probe, self.bound_sec)
        if loss is None and probe.answered:
            self.last_answer_at = probe.at
            if self.baseline is None:
                self.baseline = probe.identity
        return loss

    def _follow(self) -> None:
        while not self._stop.wait(self.interval):
            loss = self.step()
            if self._stop.is_set():
                return  # stopping: final_check() takes the last look, so a loss is reported once
            if loss is not None:
                self.lost = loss
                self.on_lost(loss)
                return

    def final_check(self) -> DaemonLoss | None:
        """After the thread is stopped: one more probe, where any silence is a loss (cleanup needs the
        daemon now). The runner often ends first when its daemon goes away, before the bound passes."""
        if self.lost is None:
            probe = self.prober.probe(self.baseline)
            self.lost = judge(self.baseline, self.last_answer_at, probe, 0.0)
        return self.lost

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self.prober.timeout + 1)
        self.prober.close()


def wait_for_answer(docker_host: str, timeout: float, *, interval: float = 1.0) -> Probe | None:
    """Probe until the daemon answers (the answering probe) or `timeout` passes (None)."""
    prober = DaemonProber(docker_host)
    deadline = time.monotonic() + timeout
    try:
        while True:
            probe = prober.probe(None)
            if probe.answered:
                return probe
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
    finally:
        prober.close()
