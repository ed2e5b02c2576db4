"""One task's row, decided from what was read of it: pure.

`classify()` is the row decision order (reference-adapter §5.7) over `TaskFacts`. `task_row()`
turns a `TaskRecord` (everything score/ledger.py's read_task() read of one task at the ledger's
edge: its dump's records, the host's seal and readings, its share of the run's facts) into the
TaskRow: the official verdict and the seal (score/verdict.py), the task database's findings
(score/taskdb.py), the row order, then the infra rule (score/infra.py). Nothing here reads a file,
so equal records give equal rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..container import protocol
from ..schemas.ledger import (
    AdapterSummaryFacts,
    EvalResultFacts,
    OfficialReceipt,
    RunnerRow,
    TamperFinding,
    TaskRow,
    UsageFacts,
)
from ..schemas.seal import EvalSeal, SealHead
from ..schemas.taskdb import TaskDbDiff
from ..vocab import INFRA_RUNTIME_REASONS, OfficialEvalStatus, PaidActivity, TamperKind, TaskStatus
from . import infra
from .dumpread import START_EVIDENCE_NAMES
from .resources import NOT_TIED, TaskResources
from .taskdb import findings as taskdb_findings
from .verdict import (
    DumpDigests,
    OfficialVerdict,
    assess_official,
    runner_disagreement,
    seal_verdict,
    taskdb_verdict,
    unsafe_entries,
)

SUMMARY_FIELDS = AdapterSummaryFacts.__struct_fields__
# classify_eval_result()'s answer: (status, cause, literal pass value, bytes, sha256) of eval_res.json
EvalRead = tuple[OfficialEvalStatus, str, Any, int | None, str | None]


# ================================================================ the row decision order


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


# ================================================================ a task's record to its row


@dataclass(frozen=True)
class TaskRecord:
    """What one task's row is decided from, as read at the ledger's edge (score/ledger.py's
    read_task(), bounded reads only). The dump's fields stay at their defaults when the task has
    no dump; `digests`, `seal` and `task_diff` are read for a sealing run only."""

    instance_id: str
    ts: str  # when it was read: the row's time
    run_root: Path
    dump: Path | None = None
    runner: RunnerRow | None = None  # its summary.csv row
    kinds: Mapping[str, str] = field(default_factory=dict)  # name -> kind of the dump's named entries
    summary_state: str = "absent"  # absent | unreadable | present
    summary: Any = None  # the adapter summary as read (the host's held copy when there is one)
    summary_changed: bool = False  # the dump's summary differs from the copy the host held
    eval_read: EvalRead | None = None  # eval_res.json as classify_eval_result() read it
    claim_state: str = "absent"
    receipt_state: str = "absent"
    receipt: Mapping[str, Any] | None = None
    receipt_path: Path | None = None
    receipt_digest: tuple[int | None, str | None] = (None, None)
    eval_value_matches: bool = False  # eval_res.json's value equals the receipt's `returned`
    sealing: bool = False  # the run seals its official evals (schemas/seal.py)
    seal: EvalSeal | None = None
    head: SealHead | None = None
    digests: DumpDigests | None = None
    task_diff: TaskDbDiff | None = None
    usage: UsageFacts | None = None
    custody: str | None = None  # `custody:<runner-id>.task` when the shim admitted its agent container
    blocked: str | None = None
    refused_mounts: int | None = None
    host: infra.HostFacts | None = None
    gateway: bool = False  # the run's model traffic went through the gateway
    use: TaskResources = NOT_TIED


def task_row(rec: TaskRecord, *, live: bool, interruption_cause: str) -> TaskRow:
    """The row of one task from its record (the order of the findings is the order they are seen)."""
    runner = rec.runner
    evidence: list[str] = []
    summary_state, summary = "absent", None
    verdict = OfficialVerdict(OfficialEvalStatus.UNREPORTED, "file_absent", None)
    receipt_path = rec.receipt_path
    eval_facts: EvalResultFacts | None = None
    usage = rec.usage
    tampering: list[TamperFinding] = []
    if rec.dump is not None and rec.eval_read is not None:  # (the edge reads eval_res.json of every dump)
        dump = rec.dump
        names = set(rec.kinds)
        tampering += unsafe_entries(rec.kinds)
        evidence = [n for n in START_EVIDENCE_NAMES if n in names]
        summary_state, summary = rec.summary_state, rec.summary
        if rec.summary_changed:  # the held copy (custody/shim.py) is what the agent cannot rewrite
            tampering.append(TamperFinding(kind=TamperKind.SUMMARY_CHANGED, detail="ouroboros_summary.json"))
        if summary_state == "present" and not isinstance(summary, dict):
            summary_state, summary = "unreadable", None
        eval_path = dump / protocol.EVAL_RES_NAME
        status, cause, pass_value, size, sha = rec.eval_read
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
        verdict = assess_official(
            claim_state=rec.claim_state,
            receipt_state=rec.receipt_state,
            receipt=rec.receipt,
            eval_status=status,
            eval_cause=cause,
            eval_pass=pass_value,
            eval_sha256=sha,
            eval_value_matches=rec.eval_value_matches,
        )
        if rec.sealing and rec.digests is not None:
            verdict, found = seal_verdict(
                verdict,
                rec.seal,
                rec.digests,
                head=rec.head,
                records_present=rec.claim_state != "absent" or status is not OfficialEvalStatus.UNREPORTED,
            )
            tampering += found
            # The task database between the phases (issue 36): the agent's code or settings there, or a
            # database the host could not reset and compare, keep a pass from being scored.
            db_found = taskdb_findings(rec.task_diff)
            tampering += db_found
            verdict = taskdb_verdict(verdict, db_found)
    if rec.custody is not None:
        evidence.append(rec.custody)
    facts = TaskFacts(
        instance_id=rec.instance_id,
        runner_status=runner.status if runner else None,
        environment_blocked=rec.blocked,
        summary_state=summary_state,
        summary=summary,
        start_evidence=tuple(evidence),
        official_status=verdict.status,
        official_pass=verdict.passed,
    )
    status_, reason, provisional = classify(facts, live=live, interruption_cause=interruption_cause)
    tampering += runner_disagreement(verdict, runner)
    if rec.refused_mounts:
        tampering.append(
            TamperFinding(
                kind=TamperKind.OUTSIDE_OWN_DUMP,
                detail=f"{rec.refused_mounts} container mount(s) of the dumps folder refused",
            )
        )
    # infra_failed only with a cause the host saw (score/infra.py): a claim alone is the agent's.
    host = rec.host or infra.HostFacts(recorded=rec.sealing, gateway=rec.gateway)
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
    r_bytes, r_sha = rec.receipt_digest
    truncated = summary.get("truncated") if summary else None
    truncated = truncated if isinstance(truncated, bool) else None
    use = rec.use
    return TaskRow(
        ts=rec.ts,
        instance_id=rec.instance_id,
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
        task_dump=str(rec.dump) if rec.dump is not None else None,
        attempt_run_root=str(rec.run_root) if status_ is not TaskStatus.NOT_ATTEMPTED else None,
        environment_blocked=rec.blocked,
        peak_memory_bytes=use.peak_memory_bytes,
        cpu_seconds=use.cpu_seconds,
        resource_basis=use.basis,
        resource_containers=list(use.containers),
        tampering=_once(tampering),
        infra_cause=infra_cause,
    )


# ================================================================ the row's parts


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


def _finite(value: Any) -> float | None:
    return float(value) if protocol.is_finite_number(value) else None


def _paid_activity(status: TaskStatus, usage: UsageFacts | None, summary: Mapping[str, Any] | None) -> PaidActivity:
    if usage is not None and usage.token_records > 0:
        return PaidActivity.OBSERVED
    if status is TaskStatus.NOT_ATTEMPTED:
        return PaidActivity.NONE  # the entrypoint never ran: nothing of ours could call a model
    if summary is not None and summary.get("task_submission_started") is False:
        return PaidActivity.NONE
    return PaidActivity.UNKNOWN


def _once(findings: list[TamperFinding]) -> list[TamperFinding]:
    """Each finding once, in order (the seal and the held summary copy may both see a change)."""
    seen: set[tuple[str, str]] = set()
    once = []
    for f in findings:
        if (f.kind.value, f.detail) not in seen:
            seen.add((f.kind.value, f.detail))
            once.append(f)
    return once
