"""result_index.jsonl: gather each selected task's evidence, classify it, write the index.

Three layers, pure in the middle:

* `assess_official()` (pure) turns the claim, receipt and current eval_res.json into the
  official eval status and a verdict that is a literal bool only when a completed receipt links it;
* `classify()` (pure) is the row decision order (reference-adapter §5.7);
* `IndexContext` + `classify_task()` read one run root's files; `build_index()` does every
  selected task, `write_index()` replaces the file atomically.

progress.RunProgress keeps one `IndexContext`, refreshes it every ~2 s (and at each meter poll)
and re-classifies only the tasks that changed; the final index is a full `build_index()`.
Rows are always rebuilt from the dumps: a valid official receipt settles its task, and rows a
recovery run carries are rebuilt from the ancestors' dumps, never read from their ledgers
(`rebuild_attempts()`); `rebuild_final()` writes a dead run's final ledger.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from ..audit.scan import TaskScan, scan_events
from ..container import protocol, safefile
from ..container.procs import process_alive
from ..custody import shim as shim_program  # its reader of a dump, so both seals read alike
from ..custody.bash_env import runner_digest
from ..fileio import create_exclusive, replace_atomic
from ..runroot.events import utc_now_iso
from ..runroot.layout import ENGINE_EVENTS, RunRoot, dumps_of
from ..runroot.manifest import read_manifest
from ..schemas.dump_bounds import DumpOverBound, read_over_bound
from ..schemas.gateway import read_requests, spend_by_task
from ..schemas.ledger import (  # read_index lives with the schema (light readers import it there)
    AdapterSummaryFacts,
    EvalResultFacts,
    GatewaySpend,
    OfficialReceipt,
    RunnerRow,
    TamperFinding,
    TaskRow,
    UsageFacts,
)
from ..schemas.manifest import RunManifest
from ..schemas.multihost import read_claimed
from ..schemas.record import RecordInvalid, convert
from ..schemas.seal import EvalSeal, SealHead, SealRead, read_seals, run_seals_verdicts, seal_path
from ..vocab import (
    INFRA_RUNTIME_REASONS,
    OfficialEvalStatus,
    PaidActivity,
    ReceiptCause,
    ShimRefusal,
    TamperKind,
    TaskStatus,
)
from . import infra
from .dumpread import named_kinds, signature
from .resources import NOT_TIED, TaskResources, read_task_resources, task_runner_ids
from .taskdb import findings as taskdb_findings
from .taskdb import read_task_diff
from .unreadable import over_bound_row, unreadable_row

SUMMARY_NAME = "ouroboros_summary.json"
# Files only the adapter's agent phase creates: proof that an attempt began. The benchmark's
# pre-created dump dir and workspace, traj_log.json and eval_res.json are deliberately absent.
START_EVIDENCE_NAMES = (
    "ouroboros",
    "applied_settings.json",
    "preprocess.log",
    "mcp_proxy.log",
    "ouroboros_server.log",
)
SUMMARY_FIELDS = AdapterSummaryFacts.__struct_fields__
# The dump entries a reader takes as records: each must be a regular file (a link, FIFO, device or
# oversize file there is a flagged unsafe entry, never read). `ouroboros` must be a real folder.
RECORD_NAMES = (SUMMARY_NAME, protocol.LOG_NAME, protocol.EVAL_RES_NAME, protocol.CLAIM_NAME, "traj.json")
DUMP_NAMES = tuple(dict.fromkeys(RECORD_NAMES + START_EVIDENCE_NAMES))  # every name a row reads (score/dumpread.py)


# ================================================================ official verdict (pure)


class OfficialVerdict(NamedTuple):
    status: OfficialEvalStatus
    cause: str
    passed: bool | None  # a literal bool only when status is completed


def classify_eval_result(
    path: Path, log_path: Path | None = None
) -> tuple[OfficialEvalStatus, str, Any, int | None, str | None]:
    """(status, cause, literal pass value, bytes, sha256) of one eval_res.json, undemoted.

    protocol.py offers the byte classifier but not this file-level tuple, so it lives here.
    The pass value is the literal JSON value (disclosure only); None for a missing key.
    """
    got = safefile.read_bytes(str(path), cap=safefile.RECORD_CAP)
    if got.kind != safefile.ABSENT and not got.ok:
        return OfficialEvalStatus.UNREADABLE, f"os_error:{got.kind}", None, None, None
    data: bytes | None = got.data
    reading = protocol.classify_eval_bytes(data, None)
    if reading.cause == "pass_null_unlinked" and log_path is not None:
        # Only a null pass needs the linked log status (the gate decline); read it lazily.
        reading = protocol.classify_eval_bytes(data, protocol.read_log_status(str(log_path)))
    if data is None:
        return reading.status, reading.cause, None, None, None
    return reading.status, reading.cause, _literal_pass(data), len(data), hashlib.sha256(data).hexdigest()


def _literal_pass(data: bytes) -> Any:
    try:
        value = safefile.loads(data)  # depth, size and encoding bounded before parsing
    except ValueError:
        return None
    return value.get("pass") if isinstance(value, dict) else None


def assess_official(
    *,
    claim_state: str,
    receipt_state: str,
    receipt: Mapping[str, Any] | None,
    eval_status: OfficialEvalStatus,
    eval_cause: str,
    eval_pass: Any,
    eval_sha256: str | None,
    eval_value_matches: bool,
) -> OfficialVerdict:
    """The official status and verdict of one dump, from its attempt records and eval_res.json.

    `claim_state` / `receipt_state`: absent | invalid | present. `eval_*` describe the current
    eval_res.json as classify_eval_result() read it; `eval_value_matches` says whether its parsed
    value equals the receipt's `returned`. Only a completed receipt that ran without raising,
    returned a dict, and whose result file is the current eval_res.json (same sha, equal value)
    yields a verdict. Everything else is disclosed, never scored.
    """
    if claim_state == "absent":
        if eval_status in (OfficialEvalStatus.COMPLETED, OfficialEvalStatus.DECLINED):
            # A result without an attempt record: nothing links it to the official run.
            return OfficialVerdict(OfficialEvalStatus.UNKNOWN, "no_attempt_record", None)
        return OfficialVerdict(eval_status, eval_cause, None)
    if claim_state != "present":
        return OfficialVerdict(OfficialEvalStatus.UNKNOWN, "claim_unreadable", None)
    if receipt_state == "absent" or receipt is None:
        if receipt_state == "invalid":
            return OfficialVerdict(OfficialEvalStatus.UNKNOWN, "receipt_unreadable", None)
        return OfficialVerdict(OfficialEvalStatus.UNKNOWN, "claim_without_terminal_receipt", None)
    if receipt_state != "present":
        return OfficialVerdict(OfficialEvalStatus.UNKNOWN, "receipt_unreadable", None)
    if receipt.get("official_run") is not True:
        return OfficialVerdict(OfficialEvalStatus.NOT_RUN, str(receipt.get("cause") or "not_run")[:200], None)
    if receipt.get("raised"):
        return OfficialVerdict(OfficialEvalStatus.UNKNOWN, f"raised:{receipt.get('raised')}"[:200], None)
    if not isinstance(receipt.get("returned"), dict):
        return OfficialVerdict(OfficialEvalStatus.UNKNOWN, "returned_not_object", None)
    result_file = receipt.get("result_file")
    if not isinstance(result_file, dict) or result_file.get("state") != "present":
        # The evaluator returned without writing (e.g. its own exception path): no linked verdict.
        return OfficialVerdict(OfficialEvalStatus.UNKNOWN, "returned_without_result_file", None)
    if eval_sha256 is None or result_file.get("sha256") != eval_sha256 or not eval_value_matches:
        return OfficialVerdict(OfficialEvalStatus.UNKNOWN, "result_file_changed", None)
    if eval_status is OfficialEvalStatus.COMPLETED and isinstance(eval_pass, bool):
        return OfficialVerdict(OfficialEvalStatus.COMPLETED, eval_cause, eval_pass)
    if eval_status is OfficialEvalStatus.COMPLETED:
        return OfficialVerdict(OfficialEvalStatus.INVALID, "pass_not_boolean", None)
    return OfficialVerdict(eval_status, eval_cause, None)


# ================================================================ the host's seal (pure)


class DumpDigests(NamedTuple):
    """sha256 of the dump's official files as read now (None: absent or not a regular file)."""

    claim: str | None
    receipt: str | None
    eval_res: str | None
    summary: str | None


def seal_verdict(
    verdict: OfficialVerdict,
    seal: EvalSeal | None,
    now: DumpDigests,
    *,
    records_present: bool,
    head: SealHead | None = None,
) -> tuple[OfficialVerdict, list[TamperFinding]]:
    """The verdict a sealing run may score, and what the seal shows the agent tried.

    Only a verdict whose seal exists, and whose claim, receipt and eval_res.json still have the
    sealed bytes, stands; anything else in the dump is evidence (issue 27). Official records with
    no eval exec seen at all (no head) were written by the agent: flagged. With a head but no seal
    (an eval cut short by a stop, or still running) they are the eval phase's own: not scored,
    not flagged."""
    found: list[TamperFinding] = []
    if seal is None:
        if not records_present:
            return verdict, found
        if head is None:
            found.append(TamperFinding(kind=TamperKind.UNSEALED_VERDICT, detail="official records without a host seal"))
            return OfficialVerdict(OfficialEvalStatus.UNKNOWN, "unsealed_verdict", None), found
        if head.pre:
            names = ", ".join(f"{e.name}:{e.kind}" for e in head.pre)
            found.append(TamperFinding(kind=TamperKind.PLANTED_BEFORE_EVAL, detail=names[:200]))
        if verdict.passed is None:
            return verdict, found
        return OfficialVerdict(OfficialEvalStatus.UNKNOWN, "unsealed_verdict", None), found
    if seal.pre:
        names = ", ".join(f"{e.name}:{e.kind}" for e in seal.pre)
        found.append(TamperFinding(kind=TamperKind.PLANTED_BEFORE_EVAL, detail=names[:200]))
    if seal.grading_inputs_differ:
        found.append(
            TamperFinding(kind=TamperKind.GRADING_INPUTS_DIFFER, detail=", ".join(seal.grading_inputs_differ)[:200])
        )
    if seal.grading_log_rewritten:
        found.append(
            TamperFinding(kind=TamperKind.GRADING_LOG_REWRITTEN, detail=", ".join(seal.grading_log_rewritten)[:200])
        )
    refused = seal.verdict.cause if seal.verdict is not None else ""
    if refused.startswith((ReceiptCause.LOG_NOT_REGULAR.value, ReceiptCause.WORKSPACE_LINK_OUTSIDE_DUMP.value)):
        found.append(TamperFinding(kind=TamperKind.UNSAFE_ENTRY, detail=refused[:200]))
    if seal.hung or refused.startswith(ReceiptCause.EVAL_HUNG.value):
        # A late seal (the host sealed after the shim died) saw no end: ended_at is None there.
        ran = f"ended after {seal.ended_at - seal.started_at:.0f} s" if seal.ended_at is not None else "end not seen"
        found.append(TamperFinding(kind=TamperKind.EVAL_HUNG, detail=f"eval exec {ran}"))
    if seal.agent_summary_sha256 and now.summary != seal.agent_summary_sha256:
        found.append(TamperFinding(kind=TamperKind.SUMMARY_CHANGED, detail="ouroboros_summary.json"))
    sealed = (
        ("claim", seal.claim.sha256, now.claim),
        ("receipt", seal.receipt.sha256 if seal.receipt else None, now.receipt),
        ("eval_res.json", seal.eval_res.sha256, now.eval_res),
    )
    changed = [name for name, then, current in sealed if then != current]
    if changed:
        found.append(TamperFinding(kind=TamperKind.SEALED_FILE_CHANGED, detail=", ".join(changed)))
        return OfficialVerdict(OfficialEvalStatus.UNKNOWN, "sealed_file_changed", None), found
    return verdict, found


def taskdb_verdict(verdict: OfficialVerdict, found: list[TamperFinding]) -> OfficialVerdict:
    """A sealed pass is not scored when the task's database held the agent's code or settings, or
    could not be reset and compared (score/taskdb.py's findings): it stands as a fail, cause named."""
    if found and verdict.passed is True:
        return OfficialVerdict(verdict.status, found[0].kind.value, False)
    return verdict


def runner_disagreement(verdict: OfficialVerdict, runner: RunnerRow | None) -> list[TamperFinding]:
    """A flag when the runner's own `Pass:` grep (summary.csv eval_pass) says otherwise than the
    scored verdict: the agent can print `Pass: True` into the log the runner greps."""
    said = runner.eval_pass if runner is not None else None
    if said not in ("True", "False"):
        return []
    scored = "True" if verdict.passed is True else "False"
    if said == scored:
        return []
    return [
        TamperFinding(
            kind=TamperKind.VERDICT_DISAGREES_RUNNER,
            detail=f"summary.csv eval_pass {said}, sealed verdict {verdict.passed}",
        )
    ]


def unsafe_entries(kinds: Mapping[str, str]) -> list[TamperFinding]:
    """Flags for record names in a dump listing that are not regular files (links, FIFOs, ...)."""
    bad = [
        f"{name}:{kind}"
        for name, kind in sorted(kinds.items())
        if (name in RECORD_NAMES or name.startswith(protocol.RECEIPT_PREFIX)) and kind != safefile.REGULAR
    ]
    if "ouroboros" in kinds and kinds["ouroboros"] != safefile.DIRECTORY:
        bad.append(f"ouroboros:{kinds['ouroboros']}")
    return [TamperFinding(kind=TamperKind.UNSAFE_ENTRY, detail=", ".join(bad)[:200])] if bad else []


# ================================================================ row classification (pure)


@dataclass(frozen=True)
class TaskFacts:
    """Everything classify() needs about one task, already read from disk."""

    instance_id: str
    runner_status: str | None = None  # summary.csv `status`, verbatim
    environment_blocked: str | None = None
    summary_state: str = "absent"  # absent | unreadable | present
    summary: Mapping[str, Any] | None = None
    start_evidence: tuple[str, ...] = ()
    official_status: OfficialEvalStatus = OfficialEvalStatus.UNREPORTED
    official_pass: bool | None = None


def _no_verdict_reason(status: OfficialEvalStatus) -> str:
    if status is OfficialEvalStatus.NOT_RUN:
        return "official_eval_not_run"
    if status is OfficialEvalStatus.UNREPORTED:
        return "missing_eval_result"
    return f"official_eval_{status.value}"


def classify(facts: TaskFacts, *, live: bool, interruption_cause: str) -> tuple[TaskStatus, str, bool]:
    """(status, reason_code, provisional) of one task: the row decision order, in one place.

    0 a verdict linked by the write-once official receipt → passed / failed, settled, whatever
    the run's state, the interruption cause or the other files say (DESIGN principle 4: the
    receipt is the truth that the task was evaluated, so it is never rerun);
    1 runner pg_fail → infra_failed; 2 environment blocked; 3 no summary → not_attempted without
    any start evidence, else infra_failed (`missing_adapter_summary`, provisional, while live;
    `interrupted:<cause>` after); 4 summary infra → infra_failed; 5 bench_status not success →
    agent_failed; 6 no literal boolean verdict → infra_failed.
    `provisional` marks rows a live run may still change.
    """
    verdict = facts.official_pass
    if facts.official_status is OfficialEvalStatus.COMPLETED and isinstance(verdict, bool):
        # assess_official() yields completed + bool only through a valid, linked receipt.
        if verdict is True:
            return TaskStatus.PASSED, "passed", False
        return TaskStatus.FAILED, "verifier_failed", False
    if facts.runner_status == "pg_fail":
        return TaskStatus.INFRA_FAILED, "pg_fail", False
    if facts.environment_blocked:
        return TaskStatus.ENVIRONMENT_BLOCKED, facts.environment_blocked, False
    summary = facts.summary
    if facts.summary_state != "present" or summary is None:
        if facts.runner_status is None and not facts.start_evidence and facts.summary_state == "absent":
            return TaskStatus.NOT_ATTEMPTED, "missing_result", live
        if live:
            return TaskStatus.INFRA_FAILED, "missing_adapter_summary", True
        if facts.summary_state == "unreadable":
            return TaskStatus.INFRA_FAILED, "adapter_summary_unreadable", False
        return TaskStatus.INFRA_FAILED, f"interrupted:{interruption_cause}", False
    reason = summary.get("reason_code")
    reason = reason if isinstance(reason, str) and reason else None
    infra = summary.get("infra_failed")
    if infra is True or reason in INFRA_RUNTIME_REASONS:
        return TaskStatus.INFRA_FAILED, reason or "infra_failed", False
    if infra is not False:
        return TaskStatus.INFRA_FAILED, "adapter_summary_invalid", False
    if summary.get("bench_status") != "success":
        return TaskStatus.AGENT_FAILED, reason or "agent_not_finished", False
    # No linked literal verdict (step 0 took those). While live the eval phase may still be
    # running: the row can still change.
    status = facts.official_status
    if status is OfficialEvalStatus.COMPLETED:
        status = OfficialEvalStatus.INVALID  # "completed" without a literal bool is not a verdict
    return TaskStatus.INFRA_FAILED, _no_verdict_reason(status), live


# ================================================================ reading one run root


def _read_json(path: Path) -> tuple[str, Any]:
    """(state, value): absent | unreadable | present, strict JSON (no duplicates, no NaN).

    Read without following a link, blocking or passing the record cap (container/safefile)."""
    got = safefile.read_bytes(str(path), cap=safefile.RECORD_CAP)
    if got.kind == safefile.ABSENT:
        return "absent", None
    if not got.ok or got.data is None:  # (ok implies data; said again for the type checker)
        return "unreadable", None
    try:
        return "present", protocol.strict_loads(got.data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "unreadable", None


def _finite(value: Any) -> float | None:
    return float(value) if protocol.is_finite_number(value) else None


def scan_usage(path: Path) -> UsageFacts | None:
    """Totals of the llm_usage records of one ouroboros/events.jsonl (None when absent).

    Read by the audit's own scanner, so a task's row and its audit count the same records the
    same way (malformed lines are the audit's gaps; here they count for nothing)."""
    scan = TaskScan()
    try:
        scan_events(path, path.name, scan)
    except FileNotFoundError:
        return None
    except OSError:
        return UsageFacts(unreadable=True)
    return UsageFacts(
        records=scan.usage_records,
        token_records=scan.token_bearing,
        prompt_tokens=scan.prompt_tokens,
        completion_tokens=scan.completion_tokens,
        known_cost_usd=scan.cost_known_usd,
        unknown_cost_records=scan.cost_unknown,
    )


def read_runner_rows(bench: Path) -> dict[str, RunnerRow]:
    """task → its summary.csv row over every fully_parallel_* log dir (later rows win)."""
    rows: dict[str, RunnerRow] = {}
    for csv_path in sorted(bench.glob("benchmark_logs/fully_parallel_*/summary.csv")):
        try:
            with open(csv_path, newline="", encoding="utf-8", errors="replace") as fh:
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
        except OSError:
            continue
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


def late_seal(run_root: Path, head: SealHead, dump: Path, dumps: Path) -> EvalSeal | None:
    """The host's seal of an eval exec whose shim died before sealing it (a SIGKILL of the runner's
    group mid-eval), once its receipt exists: written once beside the head, so later readers
    compare the dump with it. Sound for the same reason as the shim's own seal: the head shows the
    agent's container was gone before the exec, and no other container mounts this dump. None when
    the head cannot show that (the agent's container was present or unknown): then unsealed."""
    if head.agent_container_state != "absent":
        return None
    if head.shim_pid is not None and process_alive(head.shim_pid, head.shim_start_ticks):
        return None  # the exec may still run: its own shim seals it, or a later reading does

    # The shim is a stdlib program run as its own process, unannotated: its reader is called as it is.
    inputs = shim_program.read_seal_inputs(safefile, str(dump), str(dumps))  # type: ignore[no-untyped-call]
    planted = {entry.sha256 for entry in head.pre if entry.sha256}
    found = [
        inputs[name].get("sha256") for name in ("claim", "receipt", "eval_res") if isinstance(inputs.get(name), dict)
    ]
    if planted.intersection(found):
        return None  # a record that stood there before the exec: the agent's, never the verdict
    try:
        seal = convert(dict(msgspec.to_builtins(head), entry="late", **inputs), EvalSeal)
    except RecordInvalid:
        return None
    try:
        create_exclusive(seal_path(run_root, head.runner_id), seal.to_json())
    except OSError:  # a read-only copy of a run root: the seal holds for this reading only
        pass
    return seal


def _once(findings: list[TamperFinding]) -> list[TamperFinding]:
    """Each finding once, in order (the seal and the held summary copy may both see a change)."""
    seen: set[tuple[str, str]] = set()
    once = []
    for f in findings:
        if (f.kind.value, f.detail) not in seen:
            seen.add((f.kind.value, f.detail))
            once.append(f)
    return once


def held_summary_path(ctx: IndexContext, task: str) -> Path | None:
    runner = ctx.runner_ids.get(task) if ctx.sealing else None
    return RunRoot(ctx.run_root).held_summary(runner) if runner else None


def held_summary(ctx: IndexContext, task: str) -> tuple[str, Any] | None:
    """(state, value) of the summary copy the shim took when the task's agent exec ended, or None
    when there is none (a run from before it, or an agent exec that never ended)."""
    path = held_summary_path(ctx, task)
    if path is None:
        return None
    state, value = _read_json(path)
    return None if state == "absent" else (state, value)


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
    state, value = _read_json(bench / "tasks" / "finalpool" / task / "task_config.json")
    return value if state == "present" and isinstance(value, dict) else {}


def bench_dir(run_root: Path | str, manifest: RunManifest) -> Path:
    """The run's benchmark working copy, which holds its task dumps (else <run_root>/bench)."""
    working = manifest.bench.working_copy if manifest.bench and manifest.bench.working_copy else None
    return Path(working) if working and Path(working).is_dir() else RunRoot(run_root).bench


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


def _summary_facts(summary: Mapping[str, Any]) -> AdapterSummaryFacts:
    picked: dict[str, Any] = {}
    for name in SUMMARY_FIELDS:
        value = summary.get(name)
        if name in ("prompt_tokens", "completion_tokens", "accounted_upper_bound_usd", "elapsed_sec"):
            value = _finite(value)
        elif name in ("bench_status", "reason_code", "error"):
            value = str(value)[:2000] if value is not None else None
        elif value is not None and not isinstance(value, (bool, int, float, str)):
            value = repr(value)[:200]  # keep literal scalars; anything else only as a short repr
        picked[name] = value
    return AdapterSummaryFacts(**picked)


def _attempt_records(dump: Path) -> tuple[str, str, dict[str, Any] | None, Path | None]:
    """(claim_state, receipt_state, receipt, receipt_path) of a dump's official attempt."""
    claim, cause = protocol.read_json_record(str(dump / protocol.CLAIM_NAME))
    if claim is None and cause == "file_absent":
        return "absent", "absent", None, None
    if not protocol.valid_claim(claim):
        return "invalid", "absent", None, None
    path = Path(protocol.receipt_path(str(dump), claim["attempt_id"]))
    receipt, cause = protocol.read_json_record(str(path))
    if receipt is None and cause == "file_absent":
        return "present", "absent", None, path
    if not protocol.valid_receipt(receipt, claim):
        return "present", "invalid", None, path
    return "present", "present", receipt, path


def _canonical(value: Any) -> str | None:
    """Type-exact comparison key (`True == 1` in Python, but not in JSON)."""
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return None


def _file_digest(path: Path | None) -> tuple[int | None, str | None]:
    if path is None:
        return None, None
    got = safefile.read_bytes(str(path), cap=safefile.LOG_JSON_CAP)
    if not got.ok or got.data is None:  # (ok implies data; said again for the type checker)
        return None, None
    return got.size, hashlib.sha256(got.data).hexdigest()


def _paid_activity(status: TaskStatus, usage: UsageFacts | None, summary: Mapping[str, Any] | None) -> PaidActivity:
    if usage is not None and usage.token_records > 0:
        return PaidActivity.OBSERVED
    if status is TaskStatus.NOT_ATTEMPTED:
        return PaidActivity.NONE  # the entrypoint never ran: nothing of ours could call a model
    if summary is not None and summary.get("task_submission_started") is False:
        return PaidActivity.NONE
    return PaidActivity.UNKNOWN


def _signature(ctx: IndexContext, task: str, live: bool, cause: str) -> tuple[Any, ...]:
    """What a task's row depends on: its dump's entries (name, size, mtime), the runner row,
    custody evidence and the run state; equal signatures give equal rows."""
    dump = ctx.dumps.get(task)
    entries = signature(dump, DUMP_NAMES, below=str(dumps_of(ctx.bench))) if dump is not None else ()
    return (
        str(dump),
        entries,
        ctx.runner_rows.get(task),
        ctx.custody.get(task),
        repr(ctx.resources.get(task)),
        ctx.blocked.get(task),
        live,
        cause,
        repr(ctx.seals.get(task)),
        ctx.refused_mounts.get(task),
        ctx.host.get(task),
        ctx.over_bound.get(task),
    )


def classify_task(ctx: IndexContext, task: str, *, live: bool, interruption_cause: str) -> TaskRow:
    """The row of one task of `ctx`'s run (the incremental unit: unchanged evidence is reused)."""
    try:  # one task's files never stop the rows of the others (score/unreadable.py)
        sig = _signature(ctx, task, live, interruption_cause)
        cached = ctx.cache.get(task)
        if cached is not None and cached[0] == sig:
            return cached[1]
        row = over_bound_row(
            _classify_task_uncached(ctx, task, live=live, interruption_cause=interruption_cause),
            ctx.over_bound.get(task),
        )
    except Exception as exc:  # noqa: BLE001 - whatever the dump made a reader raise
        return unreadable_row(task, exc, live=live, dump=ctx.dumps.get(task))
    ctx.cache[task] = (sig, row)
    return row


def _classify_or_flag(ctx: IndexContext, task: str, **kw: Any) -> TaskRow:
    try:
        return over_bound_row(_classify_task_uncached(ctx, task, **kw), ctx.over_bound.get(task))
    except Exception as exc:  # noqa: BLE001 - as classify_task
        return unreadable_row(task, exc, live=kw.get("live", False), dump=ctx.dumps.get(task))


def _classify_task_uncached(
    ctx: IndexContext, task: str, *, live: bool, interruption_cause: str, with_usage: bool = True
) -> TaskRow:
    dump = ctx.dumps.get(task)
    runner = ctx.runner_rows.get(task)
    evidence: list[str] = []
    summary_state, summary = "absent", None
    verdict = OfficialVerdict(OfficialEvalStatus.UNREPORTED, "file_absent", None)
    receipt_path: Path | None = None
    eval_facts: EvalResultFacts | None = None
    usage: UsageFacts | None = None
    tampering: list[TamperFinding] = []
    if dump is not None:
        kinds = named_kinds(dump, DUMP_NAMES, below=str(dumps_of(ctx.bench)))  # the names read, not a listing
        names = set(kinds)
        tampering += unsafe_entries(kinds)
        evidence = [n for n in START_EVIDENCE_NAMES if n in names]
        held = held_summary(ctx, task)
        if held is not None:  # the summary as the agent exec left it (custody/shim.py): the agent
            summary_state, summary = held  # cannot rewrite this copy; a changed dump copy is flagged
            if _file_digest(dump / SUMMARY_NAME)[1] != _file_digest(held_summary_path(ctx, task))[1]:
                tampering.append(TamperFinding(kind=TamperKind.SUMMARY_CHANGED, detail="ouroboros_summary.json"))
        elif SUMMARY_NAME in names:
            summary_state, summary = _read_json(dump / SUMMARY_NAME)
        if summary_state == "present" and not isinstance(summary, dict):
            summary_state, summary = "unreadable", None
        eval_path = dump / protocol.EVAL_RES_NAME
        status, cause, pass_value, size, sha = classify_eval_result(eval_path, dump / protocol.LOG_NAME)
        eval_facts = EvalResultFacts(
            path=str(eval_path),
            state="absent" if status is OfficialEvalStatus.UNREPORTED else ("present" if sha else "unreadable"),
            bytes=size,
            sha256=sha,
            reading=status.value,
            pass_value=pass_value
            if isinstance(pass_value, (bool, int, float, str)) or pass_value is None
            else repr(pass_value)[:200],
        )
        claim_state, receipt_state, receipt, receipt_path = _attempt_records(dump)
        matches = False
        if receipt is not None and sha is not None:
            _, current = _read_json(eval_path)
            matches = _canonical(current) == _canonical(receipt.get("returned"))
        verdict = assess_official(
            claim_state=claim_state,
            receipt_state=receipt_state,
            receipt=receipt,
            eval_status=status,
            eval_cause=cause,
            eval_pass=pass_value,
            eval_sha256=sha,
            eval_value_matches=matches,
        )
        if ctx.sealing:
            sealed = ctx.seals.get(task)
            seal = sealed.seal if sealed else None
            if seal is None and sealed is not None and sealed.head is not None and receipt_state == "present":
                seal = late_seal(ctx.run_root, sealed.head, dump, dumps_of(ctx.bench))
            now = DumpDigests(
                claim=_file_digest(dump / protocol.CLAIM_NAME)[1],
                receipt=_file_digest(receipt_path)[1],
                eval_res=sha,
                summary=_file_digest(dump / SUMMARY_NAME)[1],
            )
            verdict, found = seal_verdict(
                verdict,
                seal,
                now,
                head=sealed.head if sealed else None,
                records_present=claim_state != "absent" or status is not OfficialEvalStatus.UNREPORTED,
            )
            tampering += found
            # The task database between the phases (issue 36): the agent's code or settings there, or a
            # database the host could not reset and compare, keep a pass from being scored.
            runner_id = ctx.runner_ids.get(task)
            db_found = taskdb_findings(read_task_diff(ctx.run_root, runner_id)) if runner_id else []
            tampering += db_found
            verdict = taskdb_verdict(verdict, db_found)
        if with_usage and "ouroboros" in names:
            usage = scan_usage(dump / "ouroboros" / ENGINE_EVENTS)
    if task in ctx.custody:
        evidence.append(ctx.custody[task])
    facts = TaskFacts(
        instance_id=task,
        runner_status=runner.status if runner else None,
        environment_blocked=ctx.blocked.get(task),
        summary_state=summary_state,
        summary=summary,
        start_evidence=tuple(evidence),
        official_status=verdict.status,
        official_pass=verdict.passed,
    )
    status_, reason, provisional = classify(facts, live=live, interruption_cause=interruption_cause)
    tampering += runner_disagreement(verdict, runner)
    if ctx.refused_mounts.get(task):
        tampering.append(
            TamperFinding(
                kind=TamperKind.OUTSIDE_OWN_DUMP,
                detail=f"{ctx.refused_mounts[task]} container mount(s) of the dumps folder refused",
            )
        )
    # infra_failed only with a cause the host saw (score/infra.py): a claim alone is the agent's.
    host = ctx.host.get(task) or infra.HostFacts(recorded=ctx.sealing, gateway=ctx.gateway is not None)
    host = dataclasses.replace(
        host,
        stop=infra.stop_of(interruption_cause),
        final=not live,
        runner_pg_fail=runner is not None and runner.status == "pg_fail",
    )
    settled = infra.settle(
        status_, reason, provisional, host=host, summary_state=summary_state, summary=summary, findings=tampering
    )
    status_, reason, infra_cause, provisional = (
        settled.status,
        settled.reason,
        settled.cause,
        provisional or settled.provisional,
    )
    tampering += settled.found
    r_bytes, r_sha = _file_digest(receipt_path)
    truncated = summary.get("truncated") if summary else None
    truncated = truncated if isinstance(truncated, bool) else None
    use = ctx.resources.get(task, NOT_TIED)
    return TaskRow(
        ts=utc_now_iso(),
        instance_id=task,
        status=status_,
        reason_code=reason,
        provisional=provisional,
        official_eval_status=verdict.status,
        official_receipt=OfficialReceipt(
            path=str(receipt_path) if r_sha else None,
            bytes=r_bytes,
            sha256=r_sha,
            pass_=verdict.passed,
            cause=verdict.cause,
        ),
        eval_result=eval_facts,
        paid_activity=_paid_activity(status_, usage, summary),
        truncated=truncated,
        truncation_reason=(summary.get("reason_code") if truncated and summary else None),
        runner_row=runner,
        adapter_summary=_summary_facts(summary) if summary is not None else None,
        usage=usage,
        start_evidence=evidence,
        task_dump=str(dump) if dump is not None else None,
        attempt_run_root=str(ctx.run_root) if status_ is not TaskStatus.NOT_ATTEMPTED else None,
        environment_blocked=ctx.blocked.get(task),
        peak_memory_bytes=use.peak_memory_bytes,
        cpu_seconds=use.cpu_seconds,
        resource_basis=use.basis,
        resource_containers=list(use.containers),
        tampering=_once(tampering),
        infra_cause=infra_cause,
    )


# ================================================================ index of a whole run


def rebuild_attempts(
    run_root: Path | str, tasks: Iterable[str] | None = None, *, with_usage: bool = True
) -> dict[str, TaskRow]:
    """Final rows of the tasks `run_root` itself handed its runner, rebuilt from its manifest and
    dumps (receipts first), never from its result_index.jsonl, which may be stale or absent.

    `tasks` narrows the rebuild (an ancestor's other tasks are not read). `with_usage=False`
    skips the usage scan of each dump's events (most of the cost): statuses do not depend on it,
    rows then carry no usage facts. Raises OSError or ValueError when the manifest is missing
    or invalid.
    """
    ctx = IndexContext.load(run_root)
    cause = ctx.manifest.stop_reason or "runner_exited"
    wanted = ctx.invoked() if tasks is None else ctx.invoked() & set(tasks)
    return {
        task: _classify_or_flag(ctx, task, live=False, interruption_cause=cause, with_usage=with_usage)
        for task in ctx.selection()
        if task in wanted
    }


def settled_attempts(run_root: Path | str, tasks: set[str]) -> dict[str, TaskRow]:
    """The campaign's settling reader (campaign.shared.AttemptsReader): statuses only, no usage scan."""
    return rebuild_attempts(run_root, tasks, with_usage=False)


def _carried_rows(ctx: IndexContext, tasks: set[str]) -> dict[str, TaskRow]:
    """Settled rows of `tasks` rebuilt from the ancestors' dumps, nearest ancestor first.

    The same view recovery planned from (recovery.resolve_ancestry), so a task it skipped as
    settled carries that attempt's row. An ancestor that cannot be rebuilt carries nothing.
    """
    out: dict[str, TaskRow] = {}
    for root in ctx.manifest.selection.resume_from:
        needed = tasks - set(out)
        if not needed:
            break
        try:
            rows = rebuild_attempts(root, needed)
        except (OSError, ValueError):
            continue
        for task, row in rows.items():
            if row.status.settled:
                out[task] = row
    return out


def build_index(
    run_root: Path | str, *, live: bool, interruption_cause: str, ctx: IndexContext | None = None
) -> list[TaskRow]:
    """One row per selected task, in selection order.

    Tasks this invocation ran are classified from their dumps. Tasks a recovery run skipped
    because an ancestor settled them carry that ancestor's row, rebuilt from its dumps (its
    `attempt_run_root`); if no ancestor can be rebuilt to a settled row any more they are
    `not_attempted/ancestor_row_unavailable`.
    """
    ctx = ctx or IndexContext.load(run_root)
    invoked = ctx.invoked()
    selection = ctx.selection()
    if ctx.carried is None:
        ctx.carried = _carried_rows(ctx, {t for t in selection if t not in invoked})
    carried = ctx.carried
    rows: list[TaskRow] = []
    for task in selection:
        if task in invoked or task in ctx.blocked:  # a blocked task is classified even when not run
            row = classify_task(ctx, task, live=live, interruption_cause=interruption_cause)
            if ctx.gateway is not None:  # the log grows on its own: never taken from the row cache
                row = row.replace(gateway=ctx.gateway.get(task, GatewaySpend()))
            rows.append(row)
        elif task in carried:
            rows.append(carried[task])
        else:
            rows.append(
                TaskRow(
                    ts=utc_now_iso(),
                    instance_id=task,
                    status=TaskStatus.NOT_ATTEMPTED,
                    reason_code="ancestor_row_unavailable",
                    official_eval_status=OfficialEvalStatus.UNREPORTED,
                    paid_activity=PaidActivity.NONE,
                )
            )
    return rows


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


def write_index(run_root: Path | str, rows: Iterable[TaskRow]) -> Path:
    """Replace <run_root>/result_index.jsonl atomically; raises OSError on a failed write."""
    path = RunRoot(run_root).result_index
    replace_atomic(path, "".join(row.to_line() for row in rows))
    return path


def rebuild_final(run_root: Path | str, cause: str) -> list[TaskRow]:
    """Rebuild a finished or dead run's final ledger from its manifest and dumps and write it.

    For commands that end a run the launcher could not (e.g. clearing a killed run): every
    task with a valid official receipt is settled from it, everything else is final under
    `interrupted:<cause>`. Raises OSError or ValueError when the manifest is missing or
    invalid, OSError when result_index.jsonl cannot be written (the old file is then intact).
    """
    rows = build_index(run_root, live=False, interruption_cause=cause)
    write_index(run_root, rows)
    return rows
