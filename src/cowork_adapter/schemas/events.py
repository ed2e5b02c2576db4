"""events.jsonl: the run's append-only memory, one typed record per line.

Every line carries `schema`, `ts` (UTC ISO-8601) and `kind` (vocab.EventKind) plus the fields of
that kind. Monitor, ledger refreshes and the report's spend-over-time plot are built from it.
`extra` is an escape hatch for a writer's additional facts; readers must not depend on it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ..vocab import EventKind

EVENT_SCHEMA = "cowork_adapter.event.v1"


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["cowork_adapter.event.v1"] = Field(EVENT_SCHEMA, alias="schema")
    ts: str
    extra: dict[str, Any] | None = None


class RunAdmitted(_Event):
    kind: Literal[EventKind.RUN_ADMITTED] = EventKind.RUN_ADMITTED
    run_root: str
    run_label: str | None = None
    selected: int = 0
    resume_generation: int = 0


class RunnerStarted(_Event):
    kind: Literal[EventKind.RUNNER_STARTED] = EventKind.RUNNER_STARTED
    pid: int | None = None
    command: list[str] = Field(default_factory=list)


class TaskStarted(_Event):
    kind: Literal[EventKind.TASK_STARTED] = EventKind.TASK_STARTED
    task: str
    runner_id: str | None = None


class TaskFinished(_Event):
    """The runner's summary.csv row for `task` appeared (its words, not a score)."""

    kind: Literal[EventKind.TASK_FINISHED] = EventKind.TASK_FINISHED
    task: str
    status: str
    eval_pass: str | None = None
    duration_s: float | None = None


class MeterReading(_Event):
    """An accepted and saved key-meter reading; `run_spent_usd` is what the spend plot draws."""

    kind: Literal[EventKind.METER_READING] = EventKind.METER_READING
    phase: str = "poll"
    usage: float
    run_spent_usd: float | None = None
    campaign_spent_usd: float | None = None
    campaign_remaining_usd: float | None = None


class MeterRejected(_Event):
    kind: Literal[EventKind.METER_REJECTED] = EventKind.METER_REJECTED
    phase: str = "poll"
    previous_usage: float | None = None
    observed_usage: float | str | None = None  # the repr string for a non-finite value
    error_type: str
    error: str = ""


class DiskReading(_Event):
    kind: Literal[EventKind.DISK_READING] = EventKind.DISK_READING
    free_bytes: int
    root_free_bytes: int | None = None


class StopRequested(_Event):
    kind: Literal[EventKind.STOP_REQUESTED] = EventKind.STOP_REQUESTED
    reason: str
    source: str | None = None  # supervisor, signal, stop_file, operator


class RunnerExited(_Event):
    kind: Literal[EventKind.RUNNER_EXITED] = EventKind.RUNNER_EXITED
    exit_code: int | None = None


class Cleanup(_Event):
    kind: Literal[EventKind.CLEANUP] = EventKind.CLEANUP
    removed: int = 0
    remaining: int = 0
    proven: bool = False
    error: str | None = None


class Settlement(_Event):
    kind: Literal[EventKind.SETTLEMENT] = EventKind.SETTLEMENT
    settlement: str  # recorded | unconfirmed
    run_spent_usd: float | None = None


class RunFinished(_Event):
    kind: Literal[EventKind.RUN_FINISHED] = EventKind.RUN_FINISHED
    outcome: str
    exit_code: int | None = None
    stop_reason: str | None = None


class DaemonLost(_Event):
    """The Docker daemon under the run stopped answering or restarted (custody/daemon_watch.py).

    `stage`: detected (the stop cause), returned (it answers again; cleanup can prove custody) or
    not_returned (still silent after the bounded wait: custody is unproven).
    """

    kind: Literal[EventKind.DAEMON_LOST] = EventKind.DAEMON_LOST
    stage: Literal["detected", "returned", "not_returned"] = "detected"
    reason: str | None = None  # restarted | exited | unanswered
    detail: str = ""
    before_pid: int | None = None
    before_start_ticks: int | None = None
    after_pid: int | None = None
    after_start_ticks: int | None = None
    silent_sec: float | None = None


EVENT_TYPES: tuple[type[_Event], ...] = (
    RunAdmitted,
    RunnerStarted,
    TaskStarted,
    TaskFinished,
    MeterReading,
    MeterRejected,
    DiskReading,
    StopRequested,
    RunnerExited,
    Cleanup,
    Settlement,
    RunFinished,
    DaemonLost,
)

Event = Annotated[Union[EVENT_TYPES], Field(discriminator="kind")]

EVENT_MODELS: dict[EventKind, type[_Event]] = {model.model_fields["kind"].default: model for model in EVENT_TYPES}

_EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(Event)


def parse_event(record: dict[str, Any]) -> _Event:
    """The typed event for one decoded line (raises pydantic.ValidationError if it is not one)."""
    return _EVENT_ADAPTER.validate_python(record)
