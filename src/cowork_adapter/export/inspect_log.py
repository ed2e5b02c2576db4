"""A run as an Inspect AI eval log (`.eval`), written with inspect_ai's own log API.

inspect_ai (the `inspect` extra) is imported here only, and this module only by `export` and
`report --inspect`: no other command pays for it.

The mapping (one log per group of trials, export.groups; one run root alone is a group of one trial;
each trial's recovery ancestry and shards merged as the report merges them):
- the eval: task `cowork_bench`, displayed as the run's name (also its first tag, with the engine,
  model, key route and trial count), the pinned benchmark commit as its revision and version, the
  dataset of the selected task ids, the model and engine, the manifest's facts (image ID, seed
  commit, limits, outcome), the report's pass@1 with its Wilson interval, its disclosures and the
  audit's summary as metadata (per trial, under `per_trial`, when there are several);
- the log's status and error from the runs' outcomes (export.status: a finished runner is success);
- an epoch per trial, reduced by inspect_ai's own reducers: mean (pass@1), pass_k_K and pass_at_K;
- one sample per selected task and trial (the report's denominator: not-attempted tasks included). Its score
  `official` is C only for a row whose verdict is a sealed official pass, I for everything else;
  the ledger's status, reason and official eval status are the score's metadata, so a task
  without a verdict reads as such, never as a pass; one without a verdict for a reason not the
  agent's also carries a sample error (export.status.sample_error);
- the sample's model usage is the ledger's (tokens and the report's cost of the attempt), its
  total time the report's duration, its working time the agent's own elapsed time;
- the transcript (export.transcript) as messages, and as events: one model event per model turn,
  one tool event per tool call;
- the task's audit findings and its tampering flags as sample metadata.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inspect_ai.event import InfoEvent, ModelEvent, ToolEvent
from inspect_ai.log import (
    EvalConfig,
    EvalDataset,
    EvalError,
    EvalLog,
    EvalMetric,
    EvalPlan,
    EvalPlanStep,
    EvalResults,
    EvalRevision,
    EvalSample,
    EvalSampleReductions,
    EvalSampleScore,
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
from inspect_ai.scorer import Score, ScoreReducer, mean_score, pass_at, pass_k, value_to_float
from inspect_ai.tool import ToolCall, ToolCallError

from .. import __version__
from ..schemas.ledger import TaskRow
from ..vocab import OfficialEvalStatus, TaskStatus
from .run import ExportRun, TaskExport
from .status import log_status, sample_error
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


def sample_of(task: TaskExport, model: str, created: datetime, epoch: int = 1) -> EvalSample:
    transcript = task.transcript
    input_text = next((i.text for i in transcript.items if isinstance(i, UserText)), None)
    uuid = f"{task.run_label}-{task.instance_id}"
    messages, events = _conversation(transcript, model, created, _Ids(f"{uuid}-"))
    final = transcript.final or ""
    said = sample_error(task.row)
    return EvalSample(
        id=task.instance_id,
        epoch=epoch,
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
        # No traceback: the error is a fact the host recorded, not an exception (the viewer shows this text).
        error=EvalError(message=said, traceback=said, traceback_ansi=said) if said else None,
    )


def reducers(trials: int) -> list[tuple[str, ScoreReducer]]:
    """Inspect's reducers over the epochs, with the names a log records (inspect_ai's registry names):
    `mean` is pass@1 as the mean over trials; with K > 1 trials, `pass_k_K` is pass^K (all K passed) and
    `pass_at_K` pass@K (at least one of the K passed)."""
    if trials == 1:
        return [("mean", mean_score())]
    return [("mean", mean_score()), (f"pass_k_{trials}", pass_k(trials)), (f"pass_at_{trials}", pass_at(trials))]


def _reductions(samples: list[EvalSample], sample_ids: list[str], trials: int) -> list[EvalSampleReductions]:
    """Each task's scores over its epochs reduced by inspect_ai's own reducers (as `inspect eval` would)."""
    by_task: dict[str, list[Score]] = {task: [] for task in sample_ids}
    for sample in samples:
        by_task[str(sample.id)].append(sample.scores[SCORER] if sample.scores else Score(value=INCORRECT))
    out = []
    for name, reducer in reducers(trials):
        reduced = []
        for task, scores in by_task.items():
            one = reducer(scores)
            reduced.append(EvalSampleScore(value=one.value, answer=one.answer, sample_id=task))
        out.append(EvalSampleReductions(scorer=SCORER, reducer=name, samples=reduced))
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _results(trials: list[ExportRun], reductions: list[EvalSampleReductions], samples: int) -> EvalResults:
    first = trials[0].report
    pass_at_1 = [t.report["pass_at_1"] for t in trials]
    scores = []
    for reduction in reductions:
        accuracy = _mean([float(value_to_float()(s.value)) for s in reduction.samples])
        metadata: dict[str, Any] = {"reducer": reduction.reducer, "trials": len(trials)}
        if reduction.reducer == "mean":
            metadata.update(
                pass_at_1=first["pass_at_1"] if len(trials) == 1 else accuracy,
                trial_pass_at_1=pass_at_1,
                passed=[t.report["passed"] for t in trials],
                denominator=first["denominator"],
            )
            if len(trials) == 1:
                metadata["wilson95"] = list(first["wilson95"])
        scores.append(
            EvalScore(
                name=SCORER,
                scorer=SCORER,
                reducer=reduction.reducer,
                scored_samples=len(reduction.samples),
                unscored_samples=0,
                metrics={"accuracy": EvalMetric(name="accuracy", value=accuracy)},
                metadata=metadata,
            )
        )
    return EvalResults(total_samples=samples, completed_samples=samples, scores=scores)


def route_of(run: ExportRun) -> dict[str, Any]:
    """What tells one configuration from another in the viewer's list: the engine, the model, the key's route."""
    config = run.manifest.applied_config
    return {"engine": run.manifest.engine, "model": run.model, "key_route": config.get("key_route") or "unrecorded"}


def _run_id(trials: list[ExportRun]) -> str:
    labels = [t.manifest.run_label for t in trials]
    if len(labels) == 1:
        return labels[0]
    return hashlib.sha256("\n".join(labels).encode()).hexdigest()[:32]  # stable: a log written twice reads the same


def eval_log_of(run: ExportRun | list[ExportRun], name: str | None = None) -> EvalLog:
    """The log of one run, or of the trials of one configuration (each trial an epoch), named `name`."""
    trials = [run] if isinstance(run, ExportRun) else run
    first = trials[0]
    name = name or Path(first.root).name
    created = min(_when(t.manifest.created_at, datetime.now(UTC)) for t in trials)
    model = first.model
    # The trials of one group select the same tasks; a union in first-seen order keeps a stray one all the same.
    sample_ids = list(dict.fromkeys(t.instance_id for trial in trials for t in trial.tasks))
    samples = []
    for epoch, trial in enumerate(trials, 1):
        for task in trial.tasks:
            samples.append(sample_of(task, model, created, epoch))
            task.transcript.items.clear()  # mapped: the sample holds it now (a whole run's logs weigh GiBs)
    total = ModelUsage()
    for sample in samples:
        total = total + sample.model_usage[model]
    bench_commit = first.manifest.bench.commit if first.manifest.bench else None
    route = route_of(first)
    metadata: dict[str, Any] = {"run_name": name, "route": route, "trials": len(trials)}
    if len(trials) == 1:
        metadata.update(first.eval_metadata())
    else:
        metadata["per_trial"] = [t.eval_metadata() for t in trials]
    run_id = _run_id(trials)
    spec = EvalSpec(
        run_id=run_id,
        eval_id=run_id,
        created=created.isoformat(),
        task="cowork_bench",
        task_display_name=name,
        task_version=bench_commit or "unknown",
        task_id=run_id,
        solver=first.manifest.engine,
        tags=[
            name,
            f"engine:{route['engine']}",
            f"model:{model}",
            f"route:{route['key_route']}",
            f"trials:{len(trials)}",
        ],
        dataset=EvalDataset(name="cowork_bench", location=BENCH_ORIGIN, samples=len(sample_ids), sample_ids=sample_ids),
        model=model,
        config=EvalConfig(epochs=len(trials), epochs_reducer=[name for name, _ in reducers(len(trials))]),
        revision=EvalRevision(type="git", origin=BENCH_ORIGIN, commit=bench_commit) if bench_commit else None,
        packages={"cowork-adapter": __version__},
        metadata=metadata,
    )
    reductions = _reductions(samples, sample_ids, len(trials))
    status, error = log_status(m for t in trials for m in (t.ended or [t.manifest]))
    finished = [_when(t.manifest.finished_at, created) for t in trials]
    log = EvalLog(
        status=status.value,
        eval=spec,
        plan=EvalPlan(steps=[EvalPlanStep(solver=first.manifest.engine, params={"engine": first.manifest.engine})]),
        results=_results(trials, reductions, len(samples)),
        stats=EvalStats(
            started_at=created.isoformat(),
            completed_at=max(finished).isoformat(),
            model_usage={model: total},
        ),
        error=EvalError(message=error, traceback=error, traceback_ansi=error) if error else None,
        samples=samples,
    )
    # Set after construction: EvalLog's validator, given reductions beside a built EvalResults, indexes the
    # results as a dict and raises (inspect_ai 0.3.285); the writer reads the attribute either way.
    log.reductions = reductions
    return log


def write_log(run: ExportRun | list[ExportRun], path: Path, name: str | None = None) -> Path:
    """Write the log of a run or of trials to `path`, which must not exist: written beside it under a
    temporary name, then linked to `path` (an existing file is never replaced), the temporary name removed."""
    log = eval_log_of(run, name)
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
