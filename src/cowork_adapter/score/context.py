"""The run-level facts every task row of one run root shares: `IndexContext`, and its readers.

`IndexContext.load()` reads the manifest; `refresh()` re-reads the cheap, growing parts (the
runner's summary.csv rows, where each task's dump is, the shim's evidence, the gateway's log,
the host's seals and facts). progress.RunProgress keeps one and refreshes it every ~2 s; the
rows themselves are read and decided per task (score/ledger.py, score/row.py).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..container import safefile
from ..runroot.custody_evidence import runner_digest
from ..runroot.layout import RunRoot, dumps_of
from ..runroot.manifest import read_manifest
from ..schemas.dump_bounds import DumpOverBound, read_over_bound
from ..schemas.gateway import read_requests, spend_by_task
from ..schemas.ledger import GatewaySpend, RunnerRow, TaskRow
from ..schemas.manifest import RunManifest
from ..schemas.multihost import read_claimed
from ..schemas.seal import SealRead, read_seals, run_seals_verdicts
from ..vocab import ShimRefusal
from . import infra
from .dumpread import SUMMARY_NAME, named_kinds
from .resources import TaskResources, read_task_resources, task_runner_ids
from .taskread import read_json

SUMMARY_CAP = 32 << 20  # a summary.csv row is ~100 bytes: 32 MiB holds hundreds of thousands of tasks


def read_runner_rows(bench: Path) -> dict[str, RunnerRow]:
    """task → its summary.csv row over every fully_parallel_* log dir (later rows win).

    Each summary.csv is read through container.safefile like every file of the bench copy the runner's
    processes write: a link is not followed, a FIFO not waited on, a file over SUMMARY_CAP not read
    (its rows are missing, as when the runner has not written them yet)."""
    rows: dict[str, RunnerRow] = {}
    for csv_path in sorted(bench.glob("benchmark_logs/fully_parallel_*/summary.csv")):
        got = safefile.read_bytes(str(csv_path), cap=SUMMARY_CAP)
        if not got.ok or got.data is None:  # (ok implies data; said again for the type checker)
            continue
        with io.StringIO(got.data.decode("utf-8", errors="replace"), newline="") as fh:
            for rec in csv.DictReader(fh):
                task = (rec.get("task") or "").strip()
                if not task:
                    continue
                try:
                    duration = float(rec.get("duration_s") or "")
                except ValueError:
                    duration = None
                if duration is not None and not math.isfinite(duration):
                    duration = None
                rows[task] = RunnerRow(
                    status=(rec.get("status") or "").strip(),
                    eval_pass=(rec.get("eval_pass") or "").strip() or None,
                    duration_s=duration,
                )
    return rows


def find_dumps(bench: Path) -> dict[str, Path]:
    """task → its dump dir under bench/dumps/<agent_short_name>/SingleUserTurn-<task>/.

    If several agent short names hold the same task, the one with an adapter summary (then
    with an ouroboros/ folder) wins.
    """
    found: dict[str, Path] = {}
    rank: dict[str, int] = {}
    dumps = dumps_of(bench)
    _, shorts = safefile.scan_dir(str(dumps))
    for short in shorts:
        if short.kind != safefile.DIRECTORY:  # a link is never followed, even to a folder
            continue
        _, entries = safefile.scan_dir(str(dumps / short.name), below=str(dumps))
        for entry in entries:
            if not entry.name.startswith("SingleUserTurn-") or entry.kind != safefile.DIRECTORY:
                continue
            task = entry.name[len("SingleUserTurn-") :]
            path = dumps / short.name / entry.name
            kinds = named_kinds(path, (SUMMARY_NAME, "ouroboros"), below=str(dumps))  # never a listing
            score = (
                2
                if kinds.get(SUMMARY_NAME) == safefile.REGULAR
                else (1 if kinds.get("ouroboros") == safefile.DIRECTORY else 0)
            )
            if task not in found or score > rank[task]:
                found[task], rank[task] = path, score
    return found


def refused_dump_mounts(run_root: Path, tasks: Iterable[str]) -> dict[str, int]:
    """task -> how many of its containers the shim refused for a mount outside its own dump
    (creations.jsonl rows with cause dump_mount_refused, named `<role>-<pid>-<md5(task)>`)."""
    by_digest = {runner_digest(task): task for task in tasks}
    got = safefile.read_bytes(str(RunRoot(run_root).creations_log), cap=safefile.LOG_JSON_CAP)
    out: dict[str, int] = {}
    for line in (got.data or b"").splitlines():
        try:
            row = safefile.loads(line)
        except ValueError:
            continue
        name = row.get("name") if isinstance(row, dict) else None
        if row.get("cause") != ShimRefusal.DUMP_MOUNT_REFUSED.value or not isinstance(name, str) or "-" not in name:
            continue
        task = by_digest.get(name.rsplit("-", 1)[1])
        if task is not None:
            out[task] = out.get(task, 0) + 1
    return out


def read_custody_tasks(run_root: Path, runner_ids: Mapping[str, str] | None = None) -> dict[str, str]:
    """task → `custody:<runner-id>.task` for every agent container the shim admitted."""
    ids = task_runner_ids(run_root) if runner_ids is None else runner_ids
    return {task: f"custody:{ident}.task" for task, ident in ids.items()}


def failed_servers(inventory: Mapping[str, Any] | None) -> dict[str, str]:
    """MCP server → why the inventory found it unusable (health `failed`), from the manifest.

    Accepts `servers` as {name: {health|status}} or [{name, health|status}]; `repaired` and
    `ok` are usable (a repair is a disclosed protocol difference, not a block).
    """
    if not isinstance(inventory, Mapping):
        return {}
    servers = inventory.get("servers")
    items: Iterable[tuple[Any, Any]]  # a name that is not a str is refused below
    if isinstance(servers, Mapping):
        items = servers.items()
    elif isinstance(servers, list):
        items = [(s.get("name"), s) for s in servers if isinstance(s, Mapping)]
    else:
        return {}
    out: dict[str, str] = {}
    for name, info in items:
        if not isinstance(name, str) or not isinstance(info, Mapping):
            continue
        health = info.get("health", info.get("status"))
        if health == "failed":
            out[name] = str(info.get("reason") or info.get("error") or "failed")[:120]
    return out


def task_config(bench: Path, task: str) -> dict[str, Any]:
    """The pinned task_config.json of `task` from a bench working copy ({} when unreadable)."""
    state, value = read_json(bench / "tasks" / "finalpool" / task / "task_config.json")
    return value if state == "present" and isinstance(value, dict) else {}


def bench_dir(run_root: Path | str, manifest: RunManifest) -> Path:
    """The run's benchmark working copy, which holds its task dumps (else <run_root>/bench)."""
    working = manifest.bench.working_copy if manifest.bench and manifest.bench.working_copy else None
    return Path(working) if working and Path(working).is_dir() else RunRoot(run_root).bench


def gateway_spend(run_root: Path, runner_ids: dict[str, str]) -> dict[str, GatewaySpend]:
    """task -> its spend in the gateway log (rows carry the runner's id the token was minted for)."""
    by_runner = spend_by_task(read_requests(run_root))
    out = {}
    for task, runner in runner_ids.items():
        spend = by_runner.get(runner)
        if spend is not None:
            out[task] = GatewaySpend(
                requests=spend.requests,
                forwarded=spend.forwarded,
                prompt_tokens=spend.prompt_tokens,
                completion_tokens=spend.completion_tokens,
                cost_usd=round(spend.cost_usd, 10),
                unknown_cost_requests=spend.unknown_cost,
                assumed_cost_usd=round(spend.assumed_cost_usd, 10),
                refused=dict(spend.refused) or None,
            )
    return out


@dataclass
class IndexContext:
    """Run-level facts shared by every task row; `refresh()` re-reads the cheap, growing parts."""

    run_root: Path
    manifest: RunManifest
    bench: Path
    runner_rows: dict[str, RunnerRow] = field(default_factory=dict)
    dumps: dict[str, Path] = field(default_factory=dict)
    custody: dict[str, str] = field(default_factory=dict)
    resources: dict[str, TaskResources] = field(default_factory=dict)
    gateway: dict[str, GatewaySpend] | None = None  # --llm-gateway runs only, by task
    blocked: dict[str, str] = field(default_factory=dict)
    # A host of a shared campaign answers only for the tasks it claimed (claims.jsonl), not the
    # campaign's whole selection: None for every other run.
    claimed: list[str] | None = None
    # task -> (evidence signature, row): a refresh re-reads only dumps whose files changed.
    cache: dict[str, tuple[tuple[Any, ...], TaskRow]] = field(default_factory=dict)
    # Rows carried from the ancestry, rebuilt once per context: the recovery plan settled them
    # at launch and their receipts are write-once, so a live refresh need not re-read them.
    carried: dict[str, TaskRow] | None = None
    # The host's seals of the official evals (schemas/seal.py), and whether this run seals at all
    # (a run from before the seal keeps its receipts' verdicts, disclosed as unsealed).
    seals: dict[str, SealRead] = field(default_factory=dict)
    sealing: bool = False
    # task -> the dump mounts the shim refused for its containers (a mount outside its own dump).
    refused_mounts: dict[str, int] = field(default_factory=dict)
    # task -> its runner id (the shim's `<id>.task` evidence), for the host-held summary copy.
    runner_ids: dict[str, str] = field(default_factory=dict)
    # task -> what the host saw of its attempt (score/infra.py), for the infra rule.
    host: dict[str, infra.HostFacts] = field(default_factory=dict)
    # task -> the run's record of its dump over a bound (runroot/dump_meter.py), flagged on its row.
    over_bound: dict[str, DumpOverBound] = field(default_factory=dict)

    @classmethod
    def load(cls, run_root: Path | str) -> IndexContext:
        """Read the manifest (raises OSError/ValueError when it is missing or invalid)."""
        root = Path(run_root)
        manifest = read_manifest(root)
        ctx = cls(run_root=root, manifest=manifest, bench=bench_dir(root, manifest))
        ctx.sealing = run_seals_verdicts(root)
        ctx.blocked = ctx._blocked_tasks()
        ctx.refresh()
        return ctx

    def refresh(self) -> None:
        shared = getattr(self.manifest, "shared_run", None)  # a bare context (tests) has no manifest
        if shared is not None:  # a shared campaign's host: its selection is what it claimed so far
            self.claimed = read_claimed(self.run_root / shared.claimed_file)
        self.runner_rows = read_runner_rows(self.bench)
        self.dumps = find_dumps(self.bench)
        self.over_bound = read_over_bound(RunRoot(self.run_root).dump_bounds_log)
        runner_ids = task_runner_ids(self.run_root)  # one scan of the evidence serves both
        self.runner_ids = runner_ids
        self.custody = read_custody_tasks(self.run_root, runner_ids)
        self.resources = read_task_resources(self.run_root, runner_ids)
        if getattr(self.manifest, "llm_gateway", None) is not None:  # a bare context (tests) has no manifest
            self.gateway = gateway_spend(self.run_root, runner_ids)
        if not self.sealing and run_seals_verdicts(self.run_root):
            # A live context is loaded at admission, before custody writes the shim's config: from the
            # refresh that first sees it, the run seals, and rows read before are read again.
            self.sealing = True
            self.cache.clear()
        if self.sealing:
            self.seals = read_seals(self.run_root)
            self.refused_mounts = refused_dump_mounts(self.run_root, self.selection())
            self.host = infra.read_host_facts(
                self.run_root,
                runner_ids,
                recorded=True,
                gateway=self.gateway is not None,
                engine=getattr(self.manifest, "engine", None),
            )

    def _blocked_tasks(self) -> dict[str, str]:
        inventory = self.manifest.inventory if isinstance(self.manifest.inventory, Mapping) else {}
        explicit = inventory.get("blocked_tasks")
        out = {str(k): str(v) for k, v in explicit.items()} if isinstance(explicit, Mapping) else {}
        broken = failed_servers(inventory)
        if broken:
            for task in self.selection():
                needed = task_config(self.bench, task).get("needed_mcp_servers") or []
                hit = sorted(s for s in needed if isinstance(s, str) and s in broken)
                if hit and task not in out:
                    out[task] = "mcp_server_failed:" + ",".join(hit)
        return out

    def selection(self) -> list[str]:
        if self.claimed is not None:
            return list(self.claimed)
        sel = self.manifest.selection
        return list(sel.selection_task_ids or sel.task_ids)

    def invoked(self) -> set[str]:
        """Tasks this invocation handed the runner (the rest were settled in an ancestor)."""
        if self.claimed is not None:
            return set(self.claimed)
        sel = self.manifest.selection
        if sel.resume_from:
            return set(sel.task_ids)
        return set(sel.task_ids or sel.selection_task_ids)
