"""A run as an Inspect AI eval log (`.eval`), written with inspect_ai's own log API.

inspect_ai (the `inspect` extra) is imported here only, and this module only by `export` and
`report --inspect`: no other command pays for it.

The mapping (each run root one log; its recovery ancestry merged as the report merges it):
- the eval: task `cowork_bench`, the pinned benchmark commit as its revision and version, the
  dataset of the selected task ids, the model and engine, the manifest's facts (image ID, seed
  commit, limits, outcome), the report's pass@1 with its Wilson interval, its disclosures and the
  audit's summary as metadata;
- one sample per selected task (the report's denominator: not-attempted tasks included). Its score
  `official` is C only for a row whose verdict is a sealed official pass, I for everything else;
  the ledger's status, reason and official eval status are the score's metadata, so a task
  without a verdict reads as such, never as a pass;
- the sample's model usage is the ledger's (tokens and the report's cost of the attempt), its
  total time the report's duration, its working time the agent's own elapsed time;
- the transcript (export.transcript) as messages, and as events: one model event per model turn,
  one tool event per tool call;
- the task's audit findings and its tampering flags as sample metadata.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inspect_ai.event import InfoEvent, ModelEvent, ToolEvent
from inspect_ai.log import (
    EvalConfig,
    EvalDataset,
    EvalLog,
    EvalMetric,
    EvalPlan,
    EvalPlanStep,
    EvalResults,
    EvalRevision,
    EvalSample,
    EvalScore,
    EvalSpec,
    EvalStats,
    write_eval_log,
)
from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    ModelOutput,
    ModelUsage,
)
from inspect_ai.scorer import Score
from inspect_ai.tool import ToolCall, ToolCallError

from .. import __version__
from ..schemas.ledger import TaskRow
from ..vocab import OfficialEvalStatus, TaskStatus
from .run import ExportRun, TaskExport
from .transcript import TOOL_OUTPUT_CAP, Info, Transcript, Turn, UserText

BENCH_ORIGIN = "https://github.com/0717376/cowork_bench"
SCORER = "official"
CORRECT, INCORRECT = "C", "I"  # Inspect's own values for a right and a wrong answer


def _when(ts: str | None, fallback: datetime) -> datetime:
    """An aware datetime from a log's ISO timestamp, else `fallback`."""
    if ts:
        try:
            value = datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError:
            return fallback
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return fallback


def _verdict(row: TaskRow | None) -> bool:
    """True only for a sealed official pass (the ledger's rule: a completed receipt's literal True)."""
    return (
        row is not None
        and row.status is TaskStatus.PASSED
        and row.official_eval_status is OfficialEvalStatus.COMPLETED
        and row.official_receipt.pass_ is True
    )


def score_of(task: TaskExport) -> Score:
    row = task.row
    passed = _verdict(row)
    has_verdict = (
        row is not None
        and row.official_eval_status is OfficialEvalStatus.COMPLETED
        and isinstance(row.official_receipt.pass_, bool)
    )
    status = row.status.value if row else TaskStatus.NOT_ATTEMPTED.value
    reason = row.reason_code if row else "missing_row"
    if has_verdict:
        explanation = f"The official evaluator's sealed verdict: {'pass' if passed else 'fail'}."
    else:
        explanation = f"No official verdict ({status}: {reason}); it counts as not passed."
    return Score(
        value=CORRECT if passed else INCORRECT,
        answer="pass" if passed else ("fail" if has_verdict else status),
        explanation=explanation,
        metadata={
            "status": status,
            "reason_code": reason,
            "official_eval_status": row.official_eval_status.value if row else OfficialEvalStatus.UNREPORTED.value,
            "official_verdict": row.official_receipt.pass_ if has_verdict and row else None,
            "receipt_sha256": row.official_receipt.sha256 if row else None,
            "receipt_cause": row.official_receipt.cause if row else None,
        },
    )


def usage_of(task: TaskExport) -> ModelUsage:
    prompt, completion, cached = task.tokens
    return ModelUsage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=prompt + completion,
        input_tokens_cache_read=cached,
        total_cost=task.cost_usd,
    )


# ---------------------------------------------------------------- transcript to messages and events


class _Ids:
    """Ids for a sample's messages and events, given here: Inspect's default draws a random id for
    each (a third of the mapping's time), and a log written twice should read the same."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.n = 0

    def __call__(self, kind: str) -> str:
        self.n += 1
        return f"{self.prefix}{kind}{self.n}"


def _conversation(
    transcript: Transcript, model: str, started: datetime, ids: _Ids
) -> tuple[list[ChatMessage], list[Any]]:
    messages: list[ChatMessage] = []
    events: list[Any] = []
    if transcript.system:
        messages.append(ChatMessageSystem(id=ids("m"), content=transcript.system))
    for item in transcript.items:
        if isinstance(item, UserText):
            messages.append(ChatMessageUser(id=ids("m"), content=item.text))
        elif isinstance(item, Info):
            events.append(
                InfoEvent(
                    uuid=ids("e"),
                    timestamp=_when(item.ts, started),
                    working_start=0.0,
                    source=item.kind,
                    data=item.text,
                )
            )
        elif isinstance(item, Turn):
            _turn(item, model, started, messages, events, ids)
    return messages, events


def _turn(turn: Turn, model: str, started: datetime, messages: list[ChatMessage], events: list[Any], ids: _Ids) -> None:
    calls = [ToolCall(id=use.id, function=use.function, arguments=use.arguments) for use in turn.calls]
    name = turn.model or model
    reply = ChatMessageAssistant(
        id=ids("m"), content="\n\n".join(turn.text), tool_calls=calls or None, model=name, source="generate"
    )
    messages.append(reply)
    at = _when(turn.ts, started)
    usage = None
    if turn.prompt_tokens is not None or turn.completion_tokens is not None:
        p, c = turn.prompt_tokens or 0, turn.completion_tokens or 0
        usage = ModelUsage(
            input_tokens=p,
            output_tokens=c,
            total_tokens=p + c,
            input_tokens_cache_read=turn.cached_tokens,
            total_cost=turn.cost,
        )
    output = ModelOutput(
        model=name,
        usage=usage,
        choices=[ChatCompletionChoice(message=reply, stop_reason="tool_calls" if calls else "stop")],
    )
    events.append(
        ModelEvent(
            uuid=ids("e"),
            timestamp=at,
            working_start=0.0,
            model=name,
            input=[],
            tools=[],
            tool_choice="auto",
            config=GenerateConfig(),
            output=output,
        )
    )
    for use in turn.calls:
        error = ToolCallError("unknown", use.error[:TOOL_OUTPUT_CAP]) if use.error is not None else None
        messages.append(
            ChatMessageTool(id=ids("m"), content=use.result, tool_call_id=use.id, function=use.function, error=error)
        )
        events.append(
            ToolEvent(
                uuid=ids("e"),
                timestamp=_when(use.ts, at),
                working_start=0.0,
                id=use.id,
                function=use.function,
                arguments=use.arguments,
                result=use.result,
                error=error,
                truncated=(TOOL_OUTPUT_CAP + 1, TOOL_OUTPUT_CAP) if use.cut else None,
            )
        )


# ---------------------------------------------------------------- samples and the log


def sample_of(task: TaskExport, model: str, created: datetime) -> EvalSample:
    transcript = task.transcript
    input_text = next((i.text for i in transcript.items if isinstance(i, UserText)), None)
    uuid = f"{task.run_label}-{task.instance_id}"
    messages, events = _conversation(transcript, model, created, _Ids(f"{uuid}-"))
    final = transcript.final or ""
    return EvalSample(
        id=task.instance_id,
        epoch=1,
        input=input_text or f"Cowork Bench task {task.instance_id} (its text was not logged)",
        target="",  # the official evaluator checks the workspace; there is no target answer
        messages=messages,
        output=ModelOutput(model=model, completion=final) if final else ModelOutput(model=model),
        scores={SCORER: score_of(task)},
        metadata=task.metadata(),
        events=events,
        model_usage={model: usage_of(task)},
        total_time=task.duration_s,
        working_time=task.working_s,
        uuid=uuid,
    )


def eval_log_of(run: ExportRun) -> EvalLog:
    report = run.report
    created = _when(run.manifest.created_at, datetime.now(UTC))
    model = run.model
    samples = []
    for task in run.tasks:
        samples.append(sample_of(task, model, created))
        task.transcript.items.clear()  # mapped: the sample holds it now (a whole run's logs weigh GiBs)
    total = ModelUsage()
    for sample in samples:
        total = total + sample.model_usage[model]
    bench_commit = run.manifest.bench.commit if run.manifest.bench else None
    lo, hi = report["wilson95"]
    spec = EvalSpec(
        run_id=run.manifest.run_label,
        eval_id=run.manifest.run_label,
        created=created.isoformat(),
        task="cowork_bench",
        task_version=bench_commit or "unknown",
        task_id=run.manifest.run_label,
        solver=run.manifest.engine,
        dataset=EvalDataset(
            name="cowork_bench",
            location=BENCH_ORIGIN,
            samples=len(samples),
            sample_ids=[t.instance_id for t in run.tasks],
        ),
        model=model,
        config=EvalConfig(epochs=1),
        revision=EvalRevision(type="git", origin=BENCH_ORIGIN, commit=bench_commit) if bench_commit else None,
        packages={"cowork-adapter": __version__},
        metadata=run.eval_metadata(),
    )
    results = EvalResults(
        total_samples=len(samples),
        completed_samples=len(samples),
        scores=[
            EvalScore(
                name=SCORER,
                scorer=SCORER,
                scored_samples=len(samples),
                unscored_samples=0,
                metrics={"accuracy": EvalMetric(name="accuracy", value=report["pass_at_1"] or 0.0)},
                metadata={
                    "pass_at_1": report["pass_at_1"],
                    "passed": report["passed"],
                    "denominator": report["denominator"],
                    "wilson95": [lo, hi],
                },
            )
        ],
    )
    finished = run.manifest.finished_at
    return EvalLog(
        status="success" if run.manifest.outcome == "completed" else "cancelled",
        eval=spec,
        plan=EvalPlan(steps=[EvalPlanStep(solver=run.manifest.engine, params={"engine": run.manifest.engine})]),
        results=results,
        stats=EvalStats(
            started_at=created.isoformat(),
            completed_at=_when(finished, created).isoformat(),
            model_usage={model: total},
        ),
        samples=samples,
    )


def write_log(run: ExportRun, path: Path) -> Path:
    """Write the run's log to `path`, which must not exist: written beside it under a temporary name,
    then linked to `path` (an existing file is never replaced), the temporary name removed."""
    log = eval_log_of(run)
    temporary = path.with_name(f".{path.stem}.{os.getpid()}.tmp.eval")
    try:
        write_eval_log(log, str(temporary), format="eval")
        os.link(temporary, path)  # FileExistsError when `path` appeared meanwhile: nothing replaced
    finally:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
    return path
