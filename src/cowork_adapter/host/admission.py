"""Admission by load: may this host start one more task now? (issue 20, deliverable 4)

Pure decision (`decide`) over one reading of the host (`HostLoad`): the 1-minute load average per
CPU, MemAvailable, and the time the Docker daemon takes to answer a ping. A task is started only
while every reading is within its limit; otherwise the host WAITS (it is never a failure, and the
task stays claimed or queued). `read_host_load` is the thin I/O that takes the reading.

Wired into a shared host's batch loop (run/batch_runner.py): it waits before each claim.

Defaults (docs/several-hosts.md, "Admission by load"), from what was measured on this project's 2-CPU test bed
(2026-12-02):
* Load average per CPU at most 7.0, measured by benchmarks/bench_admission_load.py on the real
  benchmark's images: a task's start-up (its PostgreSQL ready as the runner checks it, bound 300 s;
  the agent container; the five MCP servers of kulinar-workshop-materials, word and pptx among them,
  started one at a time as mcp-proxy starts them for the Ouroboros engine, bound: the adapter's
  300 s start wait) repeated under busy processes added per CPU. Rule: the highest background load
  per CPU (runnable count read just before each start-up) at which the slowest start-up took at
  most half of its bound, at every lighter level too (benchmarks/admission_threshold.py), rounded
  down to 0.5. Worst start-up / bound, 2 or 3 samples a level: 0.03 at 1.1 per CPU, 0.14 at 3.5,
  0.26 at 3.8, 0.11 at 3.9, 0.23 at 6.2, 0.33 at 7.4 (MCP all up in 98 s), 0.66 at 9.9 (197 s;
  PostgreSQL up to 77 s): limit 7.4, so 7.0 (nothing was measured between 7.4 and 9.9). The MCP
  start-up is the binding one; it grows about linearly with load (word alone: 3.8 s median at 1.1
  per CPU, 74 s at 9.9). The half left over is for what one start-up measured alone does not show:
  a batch's tasks starting together, and the real database seed (the test bed's PostgreSQL and
  seed are stand-ins; the real seed, over 4 MiB, loads longer).
  Not protected by any load limit here: the benchmark's own CAMEL engine (`--engine upstream:...`)
  gives word and pptx 10 s per connect attempt (2 attempts, 4 servers at once); that took 0.43 of
  it at 1.1 per CPU and over the 10 s from 3.5 per CPU on. Such a run on a host this size wants
  `--max-load-per-cpu 1`.
* MemAvailable at least 2 GiB: the largest per-task peak the ledger recorded here is about 1.1 GiB
  (PostgreSQL + agent + eval containers summed), so one more task never starts without room for
  the largest one seen and as much again for the host. The start-up above peaked at 0.31-0.32 GiB in
  the agent container (its cgroup's record, page cache included) at every load; MemAvailable never
  fell under 21 GiB of 23.5 during it.
* Daemon ping at most 2 s: the ping took 0.002 s median / 0.011 s p99 at a load of 1.6 per CPU and
  0.009 / 0.091 s at 5.4 per CPU (benchmarks/bench_admission.py, the unit suite in 4 workers
  beside it), and at most 0.076 s at 7.4 per CPU and 0.057 s at 9.9 during the start-ups above;
  2 s is some 20 times the worst seen, for a daemon that is really struggling, and well inside the
  10 s after which the launcher's daemon watch calls the daemon lost.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# The limits and their defaults live in defaults.py (config and the command line read them without this
# module's readers of the host); re-exported here beside `decide`, which applies them.
from ..defaults import (  # noqa: F401
    DEFAULT_MAX_DAEMON_PING_SEC,
    DEFAULT_MAX_LOAD_PER_CPU,
    DEFAULT_MIN_MEM_AVAILABLE_BYTES,
    GIB,
    AdmissionLimits,
)


@dataclass(frozen=True)
class HostLoad:
    """One reading of the host. None: the reading is unknown (why in `problems`)."""

    load1: float | None
    cpus: int
    mem_available_bytes: int | None
    daemon_ping_sec: float | None  # None: the daemon did not answer at all
    problems: tuple[str, ...] = ()

    @property
    def load_per_cpu(self) -> float | None:
        return None if self.load1 is None else self.load1 / max(1, self.cpus)


@dataclass(frozen=True)
class Admission:
    admit: bool
    waits: list[str] = field(default_factory=list)  # one sentence per reading over its limit
    notes: list[str] = field(default_factory=list)  # readings unknown but not blocking

    def sentence(self) -> str:
        if self.admit:
            return "admitting: load, memory and daemon within limits" + (
                f" ({'; '.join(self.notes)})" if self.notes else ""
            )
        return "waiting for load: " + "; ".join(self.waits)


def decide(load: HostLoad, limits: AdmissionLimits) -> Admission:
    """Admit one more task only when every known reading is within its limit.

    A daemon that does not answer blocks (no task could start on it); an unknown load or memory
    reading (no /proc here) does not, and is said, so a host without /proc is not stuck forever."""
    waits: list[str] = []
    notes = list(load.problems)
    per_cpu = load.load_per_cpu
    if per_cpu is None:
        notes.append("load average unknown")
    elif per_cpu > limits.max_load_per_cpu:
        waits.append(
            f"load average {load.load1:.1f} on {load.cpus} CPU(s) is {per_cpu:.2f} per CPU, over "
            f"{limits.max_load_per_cpu:g}"
        )
    if load.mem_available_bytes is None:
        notes.append("MemAvailable unknown")
    elif load.mem_available_bytes < limits.min_mem_available_bytes:
        waits.append(
            f"MemAvailable {load.mem_available_bytes / GIB:.2f} GiB is under "
            f"{limits.min_mem_available_bytes / GIB:.2f} GiB"
        )
    if load.daemon_ping_sec is None:
        waits.append("the Docker daemon did not answer its ping")
    elif load.daemon_ping_sec > limits.max_daemon_ping_sec:
        waits.append(
            f"the Docker daemon took {load.daemon_ping_sec:.2f} s to answer its ping, over "
            f"{limits.max_daemon_ping_sec:g} s"
        )
    return Admission(admit=not waits, waits=waits, notes=notes)


def parse_loadavg(text: str) -> float:
    """The 1-minute figure of /proc/loadavg ("0.52 0.58 0.59 1/123 4567"); ValueError otherwise."""
    value = float(text.split()[0])
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"not a load average: {value}")
    return value


def parse_mem_available(text: str) -> int:
    """MemAvailable of /proc/meminfo, in bytes; ValueError when the line is absent (kernels < 3.14)."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            parts = line.split()
            if len(parts) >= 3 and parts[2] != "kB":
                raise ValueError(f"MemAvailable in unit {parts[2]!r}, not kB")
            return int(parts[1]) * 1024
    raise ValueError("no MemAvailable line")


def timed_ping(ping: Callable[[], object], clock: Callable[[], float] = time.monotonic) -> float | None:
    """Seconds `ping` took, or None when it raised (the daemon did not answer)."""
    start = clock()
    try:
        ping()
    except Exception:  # any failure to answer is the same fact for admission: no answer
        return None
    return clock() - start


def read_host_load(ping: Callable[[], object], *, proc: Path = Path("/proc"), cpus: int | None = None) -> HostLoad:
    """One reading of this host: /proc/loadavg, /proc/meminfo and a timed daemon ping."""
    problems: list[str] = []
    load1: float | None = None
    mem: int | None = None
    try:
        load1 = parse_loadavg((proc / "loadavg").read_text())
    except (OSError, ValueError, IndexError) as exc:
        problems.append(f"{proc / 'loadavg'} unreadable ({exc})")
    try:
        mem = parse_mem_available((proc / "meminfo").read_text())
    except (OSError, ValueError) as exc:
        problems.append(f"{proc / 'meminfo'} unreadable ({exc})")
    # The load average counts runnable tasks of the whole host, so it is divided by all its CPUs
    # (not this process's affinity set).
    n = cpus if cpus is not None else (os.cpu_count() or 1)
    return HostLoad(
        load1=load1, cpus=n, mem_available_bytes=mem, daemon_ping_sec=timed_ping(ping), problems=tuple(problems)
    )
