"""What an Inspect log says happened: its status from the runs' outcomes, and each sample's error.

No inspect_ai here (pure: manifests and ledger rows in, words out), so the rules are tested without it.

Inspect's meaning of a log's status (inspect_ai.log.EvalLog.status) is how the evaluation *process*
ended, not how the model did: `success` when it ran to its end (samples that errored are the samples'
business), `cancelled` when it was stopped, `error` when it failed (with the error), `started` while it
runs. A run whose runner finished is therefore `success` even when its outcome is `incomplete` (some
rows infra_failed or not_attempted): those are per-task facts, carried as sample errors.

A sample error (Inspect's EvalError on the sample) marks a task without an official verdict for a reason
that is not the agent's: `infra_failed`, `environment_blocked`, `not_attempted`, or no row at all. The
viewer shows it and inspect_ai's tools (samples_df's `error` column) tell it from a wrong answer. The
score is untouched: the denominator rules (METHODOLOGY.md §denominator) count such a task as not passed.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..schemas.ledger import TaskRow
from ..schemas.manifest import RunManifest
from ..vocab import InspectLogStatus, RunOutcome, TaskStatus

# Every RunOutcome a manifest can hold, and the Inspect status it means. tests/unit walks RunOutcome and
# fails on a member missing here, so a new outcome is decided here, never defaulted.
STATUS_OF_OUTCOME: dict[RunOutcome, InspectLogStatus] = {
    # The runner ran to its end (or nothing was left to run): the run finished as Inspect means it.
    RunOutcome.COMPLETED: InspectLogStatus.SUCCESS,
    RunOutcome.INCOMPLETE: InspectLogStatus.SUCCESS,
    RunOutcome.NOTHING_REMAINING: InspectLogStatus.SUCCESS,
    # Runs that by design run no task finished what they were asked to do; their samples say not_attempted.
    RunOutcome.DRY_RUN: InspectLogStatus.SUCCESS,
    RunOutcome.PROBE: InspectLogStatus.SUCCESS,
    RunOutcome.STOPPED: InspectLogStatus.CANCELLED,
    RunOutcome.CRASHED: InspectLogStatus.ERROR,
    RunOutcome.REFUSED: InspectLogStatus.ERROR,
    # The launcher has not (yet) recorded an end: the run is live, or its launcher died unrecorded.
    RunOutcome.STARTED: InspectLogStatus.STARTED,
    RunOutcome.RUNNING: InspectLogStatus.STARTED,
    # Written to a campaign's history only, never to a manifest: a manifest holding it is not a run's end.
    RunOutcome.RECONCILED: InspectLogStatus.ERROR,
}

# The worse status wins when several runs make one log (shards of a trial, the trials of a set): an error
# anywhere is the log's error, a stop anywhere makes it cancelled, a run still going keeps it started.
_PRECEDENCE = (InspectLogStatus.ERROR, InspectLogStatus.CANCELLED, InspectLogStatus.STARTED, InspectLogStatus.SUCCESS)

# Rows without an official verdict for a reason that is not the agent's (METHODOLOGY.md §statuses):
# agent_failed is the agent's own failure, scored as a wrong answer, so it carries no sample error.
NO_VERDICT_NOT_THE_AGENTS = (TaskStatus.INFRA_FAILED, TaskStatus.ENVIRONMENT_BLOCKED, TaskStatus.NOT_ATTEMPTED)
ERROR_CAP = 2000  # characters of a recorded crash message carried into the log


def run_status(manifest: RunManifest) -> tuple[InspectLogStatus, str | None]:
    """(the Inspect status of one run, the error sentence when it is `error`)."""
    try:
        outcome = RunOutcome(manifest.outcome)
    except ValueError:
        return InspectLogStatus.ERROR, f"{manifest.run_root}: the manifest's outcome {manifest.outcome!r} is unknown."
    status = STATUS_OF_OUTCOME[outcome]
    if manifest.cleared is not None and status is InspectLogStatus.STARTED:
        status = InspectLogStatus.CANCELLED  # `clear` finished a dead run: it was stopped, not running
    if status is not InspectLogStatus.ERROR:
        return status, None
    if outcome is RunOutcome.CRASHED:
        error = manifest.error or {}
        kind, message = error.get("type", "unknown error"), error.get("message", "")
        return status, f"{manifest.run_root}: the run crashed ({kind}): {message[:ERROR_CAP]}".rstrip(": ")
    if outcome is RunOutcome.REFUSED:
        refusal = manifest.refusal
        said = f" ({refusal.stage}): {refusal.sentence}" if refusal is not None else ""
        return status, f"{manifest.run_root}: the run was refused{said}"
    return status, f"{manifest.run_root}: the manifest's outcome {outcome.value!r} is not the end of a run."


def log_status(manifests: Iterable[RunManifest]) -> tuple[InspectLogStatus, str | None]:
    """The status of a log made of these runs (the worst of theirs), and the errors joined when `error`."""
    found = [run_status(m) for m in manifests]
    if not found:
        return InspectLogStatus.ERROR, "no run to export."
    worst = min((status for status, _ in found), key=_PRECEDENCE.index)
    errors = [error for status, error in found if status is worst and error]
    return worst, ("\n".join(errors) if errors else None)


def sample_error(row: TaskRow | None) -> str | None:
    """The sentence of a task's sample error, or None when the task has a verdict or failed by the agent."""
    if row is None:
        return "No ledger row for this selected task: it has no official verdict and counts as not passed."
    if row.status not in NO_VERDICT_NOT_THE_AGENTS:
        return None
    cause = f", cause {row.infra_cause.value}" if row.infra_cause is not None else ""
    blocked = f", blocked by {row.environment_blocked}" if row.environment_blocked else ""
    return (
        f"No official verdict, for a reason that is not the agent's answer: {row.status.value} "
        f"({row.reason_code}{cause}{blocked}). It counts as not passed (METHODOLOGY.md §denominator)."
    )
