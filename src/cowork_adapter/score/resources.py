"""Per-task resource use as the ledger records it: the shim's readings of each task container,
read from the run root's `custody/evidence/` and summed per task.

Split from host/resources.py (which advises a host's concurrency and reads the daemon) so that the
ledger reads these files without importing anything that talks to Docker. `summarize()` is pure;
`task_runner_ids()` and `read_task_resources()` read files. `evidence_lines()` is the one reader of the
shim's JSON-lines evidence for the whole ledger (score/infra.py reads the host's facts through it too).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..container import safefile
from ..runroot.layout import CREATIONS_LOG, RunRoot
from ..schemas.ledger import ContainerUse

READINGS_SUFFIX = ".resources.jsonl"
EVIDENCE_CAP = 1 << 20  # one task's exec record or resource readings: a few hundred bytes a line
MEASURED_ROLES = ("pg", "agent", "eval")  # the shim's MEASURED_ROLES
METHOD_SENTENCE = (
    "daemon stats API read before each container's removal (cgroup max_usage and "
    "cpu total_usage), summed over the task's containers"
)


@dataclass(frozen=True)
class TaskResources:
    peak_memory_bytes: int | None
    cpu_seconds: float | None
    basis: str
    containers: tuple[ContainerUse, ...] = ()


NOT_TIED = TaskResources(
    None, None, "no agent container of this task has run in this run, so no container's accounting can be tied to it"
)


def _best(readings: Iterable[Mapping[str, Any]], key: str) -> int | None:
    """The largest valid value of `key` among one container's readings (a read after `stop`
    finds the cgroup gone; the earlier read is the true one, and both values only grow)."""
    values = [r.get(key) for r in readings]
    valid = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return max(valid) if valid else None


def summarize(containers: Sequence[tuple[str, str]], readings: Sequence[Mapping[str, Any]]) -> TaskResources:
    """A task's use from its admitted containers [(name, role)] and the shim's readings.

    Any container without a valid reading makes that total None (never a partial sum passed
    off as the whole), with the causes named.
    """
    uses: list[ContainerUse] = []
    for name, role in containers:
        mine = [r for r in readings if r.get("container") == name]
        peak, cpu_ns = _best(mine, "memory_peak_bytes"), _best(mine, "cpu_ns")
        cause = None
        if peak is None or cpu_ns is None:
            causes = sorted({str(r.get("cause")) for r in mine if r.get("cause")})
            cause = ",".join(causes) if causes else "no reading (one is taken when the container is removed)"
        uses.append(
            ContainerUse(
                container=name,
                role=role,
                peak_memory_bytes=peak,
                cpu_seconds=round(cpu_ns / 1e9, 3) if cpu_ns is not None else None,
                cause=cause,
            )
        )
    if not uses:
        return NOT_TIED
    missing_peak = [u for u in uses if u.peak_memory_bytes is None]
    missing_cpu = [u for u in uses if u.cpu_seconds is None]
    peak = None if missing_peak else sum(u.peak_memory_bytes or 0 for u in uses)  # (none is None here)
    cpu = None if missing_cpu else round(sum(u.cpu_seconds or 0.0 for u in uses), 3)
    if not missing_peak and not missing_cpu:
        basis = METHOD_SENTENCE
    else:
        gaps = {u.container: u.cause for u in missing_peak + missing_cpu}
        basis = "unknown: " + "; ".join(f"{name}: {cause}" for name, cause in sorted(gaps.items()))
    return TaskResources(peak, cpu, basis, tuple(uses))


def evidence_lines(path: Path, cap: int = EVIDENCE_CAP) -> list[dict[str, Any]]:
    """The JSON objects of one of the shim's evidence files, line by line: read through
    container/safefile.py (no link followed, no FIFO or device opened, at most `cap` bytes, nothing
    when it is over), so the ledger's refresh costs the same whatever stands there; [] when unreadable."""
    got = safefile.read_bytes(str(path), cap=cap)
    out = []
    for line in (got.data or b"").splitlines() if got.ok else ():
        try:
            value = json.loads(line)
        except ValueError:
            continue  # a torn last line (the shim killed mid-write) loses only itself
        if isinstance(value, dict):
            out.append(value)
    return out


def task_runner_ids(run_root: Path | str) -> dict[str, str]:
    """task → the runner id of its agent container, from the shim's `<id>.task` files (the agent
    exec's --task_dir). The first id of a task in name order wins, so every reader agrees."""
    folder = RunRoot(run_root).evidence
    try:
        names = sorted(entry.name for entry in os.scandir(folder) if entry.name.endswith(".task"))
    except OSError:
        return {}
    out: dict[str, str] = {}
    for file_name in names:
        got = safefile.read_bytes(str(folder / file_name), cap=EVIDENCE_CAP)
        if not got.ok or got.data is None:  # (ok implies data; said again for the type checker)
            continue
        task = Path(got.data.decode("utf-8", errors="replace").strip()).name
        if task:
            out.setdefault(task, file_name[: -len(".task")])
    return out


def read_task_resources(run_root: Path | str, runner_ids: Mapping[str, str] | None = None) -> dict[str, TaskResources]:
    """task → its resource use, from the shim's evidence of `run_root`.

    `runner_ids` (task → runner id, as `task_runner_ids` gives) saves a second scan when the caller
    has it. A task's containers are the admitted creations named `<role>-<id>`.
    """
    folder = RunRoot(run_root).evidence
    if runner_ids is None:
        runner_ids = task_runner_ids(run_root)
    admitted: dict[str, list[tuple[str, str]]] = {}
    # the run's whole creation log, under the cap its other reader (score/context.py) gives it
    for rec in evidence_lines(folder / CREATIONS_LOG, safefile.LOG_JSON_CAP) if runner_ids else ():
        name, role = rec.get("name"), rec.get("role")
        if rec.get("admitted") is True and role in MEASURED_ROLES and isinstance(name, str):
            admitted.setdefault(name[len(role) + 1 :], []).append((name, role))
    out: dict[str, TaskResources] = {}
    for task, ident in runner_ids.items():
        containers = list(dict.fromkeys(admitted.get(ident) or [(f"agent-{ident}", "agent")]))
        out[task] = summarize(containers, evidence_lines(folder / (ident + READINGS_SUFFIX)))
    return out
