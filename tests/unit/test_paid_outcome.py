"""The end of a paid run: environment-blocked rows make it incomplete (exit 1), and the final console
line accounts for every selected task."""

from __future__ import annotations

from types import SimpleNamespace

from cowork_adapter.run.ending import _exit_code, _outcome, _say_outcome
from cowork_adapter.vocab import ExitCode, RunOutcome

ZERO = dict(
    selected=0,
    done=0,
    passed=0,
    failed=0,
    agent_failed=0,
    infra_failed=0,
    not_attempted=0,
    environment_blocked=0,
    running=0,
)


class Counts:
    def __init__(self, **counts: int) -> None:
        self._counts = {**ZERO, **counts}

    def counts(self) -> dict[str, int]:
        return dict(self._counts)


CLEAN_EXIT = SimpleNamespace(stop_reason=None, runner_exit_code=0)


def test_a_run_with_only_settled_rows_completes():
    progress = Counts(selected=6, done=6, passed=4, failed=2)
    assert _outcome(CLEAN_EXIT, progress) is RunOutcome.COMPLETED
    assert _exit_code(CLEAN_EXIT, progress, None, "recorded") is ExitCode.OK


def test_environment_blocked_rows_make_the_run_incomplete_exit_1():
    progress = Counts(selected=25, done=6, passed=4, failed=2, environment_blocked=19)
    assert _outcome(CLEAN_EXIT, progress) is RunOutcome.INCOMPLETE
    assert _exit_code(CLEAN_EXIT, progress, None, "recorded") is ExitCode.FAILED


def test_the_final_line_accounts_for_every_selected_task(capsys):
    progress = Counts(selected=25, done=6, passed=4, failed=2, environment_blocked=19)
    manifest = SimpleNamespace(outcome=RunOutcome.INCOMPLETE, stop_reason=None)
    _say_outcome(manifest, progress, None, "recorded")
    line = capsys.readouterr().out.strip()
    assert line == (
        "cowork-adapter: incomplete: 4 passed, 2 failed, 0 agent_failed, 0 infra_failed, "
        "0 not_attempted, 19 environment_blocked of 25"
    )


def test_rows_not_yet_settled_are_named_rather_than_lost(capsys):
    progress = Counts(selected=5, passed=3)
    _say_outcome(SimpleNamespace(outcome=RunOutcome.INCOMPLETE, stop_reason=None), progress, None, "recorded")
    assert capsys.readouterr().out.strip().endswith("0 environment_blocked, 2 unsettled of 5")
