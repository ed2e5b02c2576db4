"""events.jsonl: the run's append-only memory, one typed record per line.

Every line carries `schema`, `ts` (UTC ISO-8601) and `kind` (vocab.EventKind) plus the fields of
that kind. Monitor, ledger refreshes and the report's spend-over-time plot are built from it.
`extra` is an escape hatch for a writer's additional facts; readers must not depend on it.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from ..vocab import EventKind
from .record import Record, RecordInvalid, convert

EVENT_SCHEMA: Final = "cowork_adapter.event.v1"


class _Event(Record, rename={"schema_": "schema"}):
    schema_: Literal["cowork_adapter.event.v1"] = EVENT_SCHEMA
    ts: str
    extra: dict[str, Any] | None = None
    kind: EventKind  # each kind's class sets its own as the default; no other value is accepted

    def _check(self) -> None:
        if self.kind is not EVENT_KIND_OF[type(self)]:
            raise ValueError(f"kind {self.kind.value!r} is not {EVENT_KIND_OF[type(self)].value!r}")

    def to_line(self) -> str:
        """One line of events.jsonl: the fields that hold a value (None is left out)."""
        fields = {k: v for k, v in self.to_dict().items() if v is not None}
        return msgspec.json.encode(fields).decode("utf-8") + "\n"


class RunAdmitted(_Event):
    kind: EventKind = EventKind.RUN_ADMITTED
    run_root: str
    run_label: str | None = None
    selected: int = 0
    resume_generation: int = 0


class RunnerStarted(_Event):
    kind: EventKind = EventKind.RUNNER_STARTED
    pid: int | None = None
    command: list[str] = msgspec.field(default_factory=list)


class TaskStarted(_Event):
    kind: EventKind = EventKind.TASK_STARTED
    task: str
    runner_id: str | None = None


class TaskFinished(_Event):
    """The runner's summary.csv row for `task` appeared (its words, not a score)."""

    kind: EventKind = EventKind.TASK_FINISHED
    task: str
    status: str
    eval_pass: str | None = None
    duration_s: float | None = None


class MeterReading(_Event):
    """An accepted and saved key-meter reading; `run_spent_usd` is what the spend plot draws."""

    kind: EventKind = EventKind.METER_READING
    phase: str = "poll"
    usage: float
    run_spent_usd: float | None = None
    campaign_spent_usd: float | None = None
    campaign_remaining_usd: float | None = None


class MeterRejected(_Event):
    kind: EventKind = EventKind.METER_REJECTED
    phase: str = "poll"
    previous_usage: float | None = None
    observed_usage: float | str | None = None  # the repr string for a non-finite value
    error_type: str
    error: str = ""


class MeterConfirmed(_Event):
    """The accepted reading that followed rejected ones: it ties the acceptance to the
    `meter_rejected` events before it (`rejections` of them, since the previous acceptance)."""

    kind: EventKind = EventKind.METER_CONFIRMED
    phase: str = "poll"
    previous_usage: float | None = None
    usage: float
    rejections: int


class DiskReading(_Event):
    kind: EventKind = EventKind.DISK_READING
    free_bytes: int
    root_free_bytes: int | None = None


class StopRequested(_Event):
    kind: EventKind = EventKind.STOP_REQUESTED
    reason: str
    source: str | None = None  # supervisor, signal, stop_file, operator


class RunnerExited(_Event):
    kind: EventKind = EventKind.RUNNER_EXITED
    exit_code: int | None = None


class Cleanup(_Event):
    kind: EventKind = EventKind.CLEANUP
    removed: int = 0
    remaining: int = 0
    proven: bool = False
    error: str | None = None


class StopCleared(_Event):
    """A stop's own exact-label removal (StopPath.FAST), before the runner group is waited for."""

    kind: EventKind = EventKind.STOP_CLEARED
    reason: str  # the stop's first cause
    removed: int = 0  # containers, networks and volumes this removal took away
    proven: bool = False  # a fresh listing found nothing with the run's label, no creation in flight
    seconds: float | None = None  # stop decided (the fence) -> proven, on this process's clock
    error: str | None = None


class Settlement(_Event):
    kind: EventKind = EventKind.SETTLEMENT
    settlement: str  # recorded | unconfirmed
    run_spent_usd: float | None = None


class RunFinished(_Event):
    kind: EventKind = EventKind.RUN_FINISHED
    outcome: str
    exit_code: int | None = None
    stop_reason: str | None = None


class DeadRunCleared(_Event):
    """`cowork-adapter clear` finished the custody of a run whose processes were proven gone."""

    kind: EventKind = EventKind.DEAD_RUN_CLEARED
    removed_containers: int = 0
    removed_networks: int = 0
    removed_volumes: int = 0
    label_empty: bool = True
    agent_env_removed: bool = False
    campaign: str
    ledger: str
    operator_note: str


class WatchdogStarted(_Event):
    """The launcher spawned its watchdog (own session) and the watchdog said it is armed."""

    kind: EventKind = EventKind.WATCHDOG_STARTED
    pid: int
    launcher_pid: int


class WatchdogFenced(_Event):
    """The launcher died without saying "done": the watchdog created the stop file."""

    kind: EventKind = EventKind.WATCHDOG_FENCED
    reason: str  # StopReason.LAUNCHER_DIED
    seen_by: str  # pipe_eof | pidfd | not_alive (what told the watchdog)
    already_fenced: bool = False  # a stop file existed (an earlier cause kept)
    key_deleted: bool = False
    error: str | None = None


class WatchdogRunnerStopped(_Event):
    kind: EventKind = EventKind.WATCHDOG_RUNNER_STOPPED
    pgids: list[int] = msgspec.field(default_factory=list)  # process groups signalled
    marked_pids: list[int] = msgspec.field(default_factory=list)  # processes found by the run's env marker
    killed: bool = False  # SIGKILL was needed after the grace
    gone: bool = False  # no process of the run is left


class WatchdogCleanup(_Event):
    kind: EventKind = EventKind.WATCHDOG_CLEANUP
    removed: int = 0
    proven: bool = False
    attempts: int = 0
    error: str | None = None


class WatchdogExited(_Event):
    kind: EventKind = EventKind.WATCHDOG_EXITED
    reason: str  # launcher_done | custody_finished | custody_unproven
    pid: int | None = None


class DaemonLost(_Event):
    """The Docker daemon under the run stopped answering or restarted (custody/daemon_watch.py).

    `stage`: detected (the stop cause), returned (it answers again; cleanup can prove custody) or
    not_returned (still silent after the bounded wait: custody is unproven).
    """

    kind: EventKind = EventKind.DAEMON_LOST
    stage: Literal["detected", "returned", "not_returned"] = "detected"
    reason: str | None = None  # restarted | exited | unanswered
    detail: str = ""
    before_pid: int | None = None
    before_start_ticks: int | None = None
    after_pid: int | None = None
    after_start_ticks: int | None = None
    silent_sec: float | None = None


class SharedHost(_Event):
    """A host of a shared campaign (campaign/shared.py): what it did in the campaign's database."""

    kind: EventKind = EventKind.SHARED_HOST
    action: str  # registered | claims_settled | claims_released | campaign_stop_written | fenced_run_released | ...
    detail: dict[str, Any] = msgspec.field(default_factory=dict)


EVENT_TYPES: tuple[type[_Event], ...] = (
    SharedHost,
    RunAdmitted,
    RunnerStarted,
    TaskStarted,
    TaskFinished,
    MeterReading,
    MeterRejected,
    MeterConfirmed,
    DiskReading,
    StopRequested,
    RunnerExited,
    Cleanup,
    StopCleared,
    Settlement,
    RunFinished,
    DeadRunCleared,
    WatchdogStarted,
    WatchdogFenced,
    WatchdogRunnerStopped,
    WatchdogCleanup,
    WatchdogExited,
    DaemonLost,
)

EVENT_KIND_OF: dict[type[_Event], EventKind] = {
    model: next(f.default for f in msgspec.structs.fields(model) if f.name == "kind") for model in EVENT_TYPES
}
EVENT_MODELS: dict[EventKind, type[_Event]] = {kind: model for model, kind in EVENT_KIND_OF.items()}


def parse_event(record: dict[str, Any]) -> _Event:
    """The typed event for one decoded line (raises RecordInvalid if it is not one)."""
    try:
        model = EVENT_MODELS[EventKind(record.get("kind"))]
    except (ValueError, TypeError, AttributeError):
        raise RecordInvalid(
            f"not an event: kind {record.get('kind') if isinstance(record, dict) else record!r} is unknown"
        ) from None
    return convert(record, model)
