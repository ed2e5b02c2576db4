"""How a run ended: its outcome from the supervisor's result and the ledger, its exit code, and the
closing lines it says. Pure but for the printing; apart from run.py, which owns custody's order."""

from __future__ import annotations

import sys

from ..schemas.manifest import RunManifest
from ..vocab import ExitCode, RunOutcome
from .progress import RunProgress
from .spending import SETTLED


def _outcome(result, progress: RunProgress) -> RunOutcome:
    if result.stop_reason:
        return RunOutcome.STOPPED
    counts = progress.counts()
    # An environment-blocked row is a task the run could not attempt: the run is incomplete (exit 1).
    if (
        result.runner_exit_code != 0
        or counts["infra_failed"]
        or counts["not_attempted"]
        or counts["environment_blocked"]
    ):
        return RunOutcome.INCOMPLETE
    return RunOutcome.COMPLETED


def _exit_code(result, progress: RunProgress, cleanup_error: str | None, settlement: str) -> ExitCode:
    if result.stop_reason:
        return ExitCode.STOPPED
    if cleanup_error or settlement not in SETTLED or _outcome(result, progress) is not RunOutcome.COMPLETED:
        return ExitCode.FAILED
    return ExitCode.OK


def _say_outcome(manifest: RunManifest, progress: RunProgress, cleanup_error: str | None, settlement: str) -> None:
    counts = progress.counts()
    line = (
        f"cowork-adapter: {manifest.outcome}: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['agent_failed']} agent_failed, {counts['infra_failed']} infra_failed, "
        f"{counts['not_attempted']} not_attempted, {counts['environment_blocked']} environment_blocked"
        f"{_unsettled(counts)} of {counts['selected']}"
    )
    if manifest.stop_reason:
        line += f"; stopped: {manifest.stop_reason}"
    print(line, flush=True)
    if cleanup_error:
        print(
            f"cowork-adapter: custody NOT proven ({cleanup_error}); the campaign keeps this run as its active_run "
            "until `cowork-adapter campaign reconcile`.",
            file=sys.stderr,
        )
    elif settlement not in SETTLED:
        print("cowork-adapter: the campaign settlement was not recorded; active_run stays set.", file=sys.stderr)


def _unsettled(counts: dict[str, int]) -> str:
    """`, N unsettled` when the named counts do not add up to the selection (e.g. a provisional row)."""
    named = ("passed", "failed", "agent_failed", "infra_failed", "not_attempted", "environment_blocked")
    rest = counts["selected"] - sum(counts[name] for name in named)
    return f", {rest} unsettled" if rest > 0 else ""
