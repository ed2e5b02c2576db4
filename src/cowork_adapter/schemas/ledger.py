"""result_index.jsonl: one row per selected task, the denominator-preserving result index.

A row says what the evidence proves about one task's attempt: its status (vocab.TaskStatus),
the official verdict only when a completed receipt links it, and where the attempt lives
(`attempt_run_root`, which differs from the index's own run for rows carried from an ancestor).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from ..runroot.layout import RESULT_INDEX
from ..vocab import InfraCause, OfficialEvalStatus, PaidActivity, TamperKind, TaskStatus
from .record import Record, RecordInvalid, decode

TASK_ROW_SCHEMA: Final = "cowork_adapter.task_result.v1"


class OfficialReceipt(Record, rename={"pass_": "pass"}):
    """The eval receipt this row's verdict rests on. `pass` is a literal bool only when completed."""

    path: str | None = None
    bytes: int | None = None
    sha256: str | None = None
    pass_: bool | None = None
    cause: str = ""


class EvalResultFacts(Record):
    """The current eval_res.json as found: disclosed always, scored only through the receipt."""

    path: str
    state: str  # absent | unreadable | present
    bytes: int | None = None
    sha256: str | None = None
    reading: str | None = None  # its own OfficialEvalStatus reading, before any demotion
    pass_value: Any = None  # the literal JSON value of `pass` (disclosure only, never coerced)


class RunnerRow(Record):
    """The upstream runner's summary.csv row, verbatim (its words are not a score)."""

    status: str
    eval_pass: str | None = None
    duration_s: float | None = None


class AdapterSummaryFacts(Record):
    """Selected fields of ouroboros_summary.json."""

    bench_status: str | None = None
    infra_failed: Any = None  # kept literal: anything but a bool is an invalid summary
    reason_code: str | None = None
    truncated: Any = None
    task_submission_started: Any = None
    model_activity_observed: Any = None
    prompt_tokens: float | None = None
    completion_tokens: float | None = None
    accounted_upper_bound_usd: float | None = None
    cost_known: Any = None
    elapsed_sec: float | None = None
    error: str | None = None


class UsageFacts(Record):
    """What the dump's ouroboros/events.jsonl llm_usage records say (a projection, not billing)."""

    records: int = 0
    token_records: int = 0  # prompt + completion tokens > 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    known_cost_usd: float = 0.0
    unknown_cost_records: int = 0
    unreadable: bool = False


class ContainerUse(Record):
    """One task container's use, as the daemon accounted it just before the container's removal."""

    container: str
    role: str
    peak_memory_bytes: int | None = None  # the cgroup's own high-water mark, never a sample
    cpu_seconds: float | None = None  # cumulative CPU time of every process in it
    cause: str | None = None  # why a value is None (not read yet or never, cgroup v2, ...)


class GatewaySpend(Record):
    """--llm-gateway: the task's requests in gateway/requests.jsonl, with the provider's own figures."""

    requests: int = 0
    forwarded: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unknown_cost_requests: int = 0  # forwarded, but the answer carried no cost figure
    assumed_cost_usd: float = 0.0  # what the gateway counted those at (its pessimistic price), not in cost_usd
    # The gateway's refusals of the task's token by cause (task_busy, task_budget, shape...): what it tried.
    refused: dict[str, int] | None = None


class TamperFinding(Record):
    """One thing the host saw the agent try (vocab.TamperKind); evidence, never a verdict."""

    kind: TamperKind
    detail: str = ""  # which file or field, at most 200 characters


class TaskRow(Record, rename={"schema_": "schema"}):
    schema_: Literal["cowork_adapter.task_result.v1"] = TASK_ROW_SCHEMA
    ts: str
    instance_id: str
    status: TaskStatus
    reason_code: str
    provisional: bool = False
    official_eval_status: OfficialEvalStatus
    official_receipt: OfficialReceipt = msgspec.field(default_factory=OfficialReceipt)
    eval_result: EvalResultFacts | None = None
    paid_activity: PaidActivity = PaidActivity.UNKNOWN
    truncated: bool | None = None
    truncation_reason: str | None = None
    runner_row: RunnerRow | None = None
    adapter_summary: AdapterSummaryFacts | None = None
    usage: UsageFacts | None = None
    start_evidence: list[str] = msgspec.field(default_factory=list)
    task_dump: str | None = None
    attempt_run_root: str | None = None
    environment_blocked: str | None = None
    # Resource use (rows written before these fields existed read as None / []). The peak is the
    # sum of the containers' own peaks: an upper bound of the task's simultaneous use, since its
    # PostgreSQL and agent containers run together. None, never 0, when any container's reading
    # is missing; `resource_basis` then says why, and otherwise how it was measured.
    peak_memory_bytes: int | None = None
    cpu_seconds: float | None = None
    resource_basis: str | None = None
    resource_containers: list[ContainerUse] = msgspec.field(default_factory=list)
    # --llm-gateway only (None otherwise): the exact per-task spend the gateway logged.
    gateway: GatewaySpend | None = None
    # What the host saw the agent try against its score, a sibling or the host. The ledger always
    # writes a list (empty: nothing seen); None only in rows written before the check existed.
    tampering: list[TamperFinding] | None = None
    # An infra_failed row's cause as the host saw it (score/infra.py), the only rows --resume-from
    # reruns; None on every other row, a live provisional one, and rows written before it existed.
    infra_cause: InfraCause | None = None


LEDGER_NAME = RESULT_INDEX  # RunRoot.result_index


def read_index(path: Path | str) -> list[TaskRow]:
    """Every row of a result_index.jsonl; raises OSError/ValueError when it cannot be trusted."""
    rows: list[TaskRow] = []
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(decode(line, TaskRow))
            except RecordInvalid as exc:
                raise ValueError(f"{path}: line {number} is not a task row ({exc})") from exc
    return rows
