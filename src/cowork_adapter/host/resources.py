"""Per-task resource use (peak memory, CPU time) and the concurrency it suggests for a host.

The numbers come from the daemon's own accounting: the docker shim reads the stats API of each
task container (`agent-`, `eval-`, `pg-<id>`) right before the runner's `rm`/`stop` destroys its
cgroup, one JSON line per read in `custody/evidence/<id>.resources.jsonl`. On this project's
cgroup v1 test bed the daemon reports the cgroup's own high-water mark (`max_usage`), so the peak
is measured, not sampled; a cgroup v2 daemon reports no peak and the task's peak stays None with
that reason. CPU time is the cgroup's cumulative `total_usage`.

Layers: `suggest_concurrency()` is pure; `measured_use()` reads ledgers; `host_suggestion()` asks the
daemon. The per-task readings the ledger records (`summarize()`, `read_task_resources()`) live in
score/resources.py, so the ledger imports nothing that talks to Docker.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..custody import shim_argv, shim_daemon, shim_io
from ..errors import Refusal
from ..runroot.layout import RunRoot
from ..schemas.ledger import TaskRow, read_index
from ..score.resources import (  # noqa: F401  (re-exported: the host's readers and tests look here)
    MEASURED_ROLES,
    METHOD_SENTENCE,
    NOT_TIED,
    READINGS_SUFFIX,
    TaskResources,
    read_task_resources,
    summarize,
    task_runner_ids,
)
from .daemon import daemon_info

# Why a container a stop removed has no reading (unread_by_stop).
STOP_UNREAD_CAUSE = "not_read_removed_by_stop"
# Share of the daemon's memory the suggestion lets tasks fill: the daemon, the page cache and
# the launcher need the rest.
MEMORY_SHARE = 0.8
# An average rate hides the bursts (PostgreSQL's start, the agent's MCP servers starting): a task
# that averages less than this much of a CPU still counts as this much, at most 4 tasks per CPU.
MIN_CPU_RATE = 0.25


# ---------------------------------------------------------------- pure


@dataclass(frozen=True)
class Suggestion:
    concurrency: int | None  # None: nothing measured yet
    sentence: str


def suggest_concurrency(
    host_cpus: int | None, host_memory_bytes: int | None, peaks: Sequence[int], cpu_rates: Sequence[float]
) -> Suggestion:
    """How many tasks this host can run at once, from measured per-task use.

    Memory bounds it by the largest measured task peak (a task above the host's memory is an
    OOM kill); CPU by the largest measured CPU rate (CPU seconds per wall-clock second), counted
    as at least MIN_CPU_RATE. The smaller wins, and never below 1.
    """
    if not peaks:
        return Suggestion(
            None,
            "no task's resource use has been measured yet (in this campaign's ledgers), so no "
            "concurrency is suggested; start at 1 and read `cowork-adapter status` "
            "after the first task",
        )
    if not host_cpus or not host_memory_bytes:
        return Suggestion(
            None,
            "the daemon did not report its CPUs and memory, so no concurrency is "
            f"suggested from the {len(peaks)} measured task(s)",
        )
    largest = max(peaks)
    by_memory = max(1, math.floor(host_memory_bytes * MEMORY_SHARE / largest))
    parts = [
        f"memory allows {by_memory} ({MEMORY_SHARE:.0%} of {_gib(host_memory_bytes)} / the largest "
        f"measured task peak {_mib(largest)} over {len(peaks)} task(s))"
    ]
    limit = by_memory
    if cpu_rates:
        largest_rate = max(cpu_rates)
        rate = max(largest_rate, MIN_CPU_RATE)
        floor = f", counted as the floor {MIN_CPU_RATE:.2f}" if largest_rate < MIN_CPU_RATE else ""
        by_cpu = max(1, math.floor(host_cpus / rate))
        parts.append(
            f"CPU allows {by_cpu} ({host_cpus} CPUs / the largest measured rate {largest_rate:.2f} CPUs "
            f"per task over {len(cpu_rates)} task(s){floor})"
        )
        limit = min(limit, by_cpu)
    else:
        parts.append("CPU not considered (no measured task has a wall-clock duration)")
    return Suggestion(
        limit,
        f"suggested concurrency {limit} for this host ({host_cpus} CPUs, "
        f"{_gib(host_memory_bytes)} per the daemon): " + "; ".join(parts),
    )


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def describe(row: TaskRow) -> str:
    """`412 MiB, 3.2 CPU s` or `unknown` for a table cell."""
    if row.peak_memory_bytes is None and row.cpu_seconds is None:
        return "unknown"
    mem = _mib(row.peak_memory_bytes) if row.peak_memory_bytes is not None else "? MiB"
    cpu = f"{row.cpu_seconds:.1f} CPU s" if row.cpu_seconds is not None else "? CPU s"
    return f"{mem}, {cpu}"


def row_samples(rows: Iterable[TaskRow]) -> tuple[list[int], list[float]]:
    """(peaks, CPU rates) of the rows that carry measurements; a rate needs the runner's duration."""
    peaks: list[int] = []
    rates: list[float] = []
    for row in rows:
        if row.peak_memory_bytes is not None:
            peaks.append(row.peak_memory_bytes)
        duration = row.runner_row.duration_s if row.runner_row else None
        if row.cpu_seconds is not None and duration and duration > 0:
            rates.append(row.cpu_seconds / duration)
    return peaks, rates


def summary_line(rows: Sequence[TaskRow]) -> str:
    """`status`'s one line: median and max over the measured tasks, and how many are unknown."""
    peaks = sorted(r.peak_memory_bytes for r in rows if r.peak_memory_bytes is not None)
    cpus = sorted(r.cpu_seconds for r in rows if r.cpu_seconds is not None)
    attempted = [r for r in rows if r.resource_containers or r.peak_memory_bytes is not None]
    if not peaks and not cpus:
        return f"resource use: none measured yet ({len(attempted)} task(s) with containers)"
    parts = []
    if peaks:
        parts.append(
            f"peak memory median {_mib(int(statistics.median(peaks)))}, max {_mib(peaks[-1])} ({len(peaks)} task(s))"
        )
    if cpus:
        parts.append(f"CPU time median {statistics.median(cpus):.1f} s, max {cpus[-1]:.1f} s ({len(cpus)} task(s))")
    unknown = sum(1 for r in attempted if r.peak_memory_bytes is None or r.cpu_seconds is None)
    if unknown:
        parts.append(f"{unknown} task(s) unknown")
    return "resource use: " + "; ".join(parts)


# ---------------------------------------------------------------- files


def reader_for(evidence_dir: Path | str) -> Callable[[Any, str, str], None]:
    """A `cleanup_run(before_remove=...)` hook: a task container the runner left behind (its
    launcher or runner was killed before `rm`) is read from the daemon the same way the shim
    reads it, into the same evidence file, before custody cleanup removes it."""

    def read(api: Any, ident: str, name: str) -> None:
        task_ident = _measured_task(name)
        if task_ident is None:
            return
        reading = _unread(name, "adapter_cleanup", None)
        try:
            data = api.stats(ident, stream=False, one_shot=True)
        except Exception as exc:  # noqa: BLE001 - recorded as the cause, like the shim does
            reading["cause"] = "stats_read_failed:" + type(exc).__name__
        else:
            peak, cpu_ns, usage, cause = shim_daemon.parse_stats(data)
            reading.update(memory_peak_bytes=peak, cpu_ns=cpu_ns, memory_usage_bytes=usage, cause=cause)
        shim_io.append_line(str(Path(evidence_dir) / (task_ident + READINGS_SUFFIX)), reading)

    return read


def unread_by_stop(evidence_dir: Path | str) -> Callable[[Any, str, str], None]:
    """The stop's `cleanup_run(before_remove=...)` hook (custody/stop_removal.py): no daemon read,
    one line saying so. The daemon answers a stats request only at its next collection round (about
    1.0 s measured on the test bed, idle or loaded), and a stop does not keep a task it interrupts
    running that long for a figure; the task's resource use then names STOP_UNREAD_CAUSE."""

    def note(_api: Any, _ident: str, name: str) -> None:
        task_ident = _measured_task(name)
        if task_ident is not None:
            shim_io.append_line(
                str(Path(evidence_dir) / (task_ident + READINGS_SUFFIX)),
                _unread(name, "adapter_stop", STOP_UNREAD_CAUSE),
            )

    return note


def _measured_task(name: str) -> str | None:
    """The runner's task id of a measured container (agent-, eval-, pg-<id>), else None."""
    role = shim_argv.role_for_name(name)
    return shim_argv.task_id(name, role) if role in MEASURED_ROLES else None


def _unread(name: str, command: str, cause: str | None) -> dict[str, Any]:
    return {
        "ts": time.time(),
        "container": name,
        "method": shim_daemon.STATS_METHOD,
        "role": shim_argv.role_for_name(name),
        "command": command,
        "memory_peak_bytes": None,
        "cpu_ns": None,
        "memory_usage_bytes": None,
        "cause": cause,
    }


def measured_use(run_roots: Iterable[Path | str]) -> tuple[list[int], list[float]]:
    """(peaks, CPU rates) from the ledgers of `run_roots`; an unreadable ledger adds nothing."""
    peaks: list[int] = []
    rates: list[float] = []
    for root in dict.fromkeys(str(r) for r in run_roots):
        try:
            rows = read_index(RunRoot(root).result_index)
        except (OSError, ValueError):
            continue
        p, r = row_samples(rows)
        peaks += p
        rates += r
    return peaks, rates


def campaign_roots(campaign_file: Path | None, resume_from: Iterable[Path | str] = ()) -> list[str]:
    """Run roots whose ledgers hold this campaign's measured use: its recorded runs and the
    run's ancestors (an unreadable campaign file adds none; its own check reports it)."""
    roots = [str(r) for r in resume_from]
    if campaign_file is not None:
        from ..campaign.store import read_campaign

        try:
            record = read_campaign(campaign_file)
        except (Refusal, OSError, ValueError):
            record = None
        if record is not None:
            roots += [run.run_root for run in record.runs]
            if record.active_run is not None:
                roots.append(record.active_run.run_root)
    return list(dict.fromkeys(roots))


def host_suggestion(docker_host: str, roots: Iterable[Path | str]) -> Suggestion:
    """The suggestion for the daemon at `docker_host` from the ledgers of `roots`. Never raises:
    a daemon that does not answer leaves the host's size unknown, which the sentence says."""
    try:
        info = daemon_info(docker_host)
        cpus, memory = int(info.get("NCPU") or 0) or None, int(info.get("MemTotal") or 0) or None
    except Exception:  # noqa: BLE001 - advice only: any failure means "host size unknown"
        cpus = memory = None
    roots = list(dict.fromkeys(str(r) for r in roots))
    peaks, rates = measured_use(roots)
    found = suggest_concurrency(cpus, memory, peaks, rates)
    where = f" (measured in {len(roots)} run root(s) of this campaign)" if peaks else ""
    return Suggestion(found.concurrency, found.sentence + where)
