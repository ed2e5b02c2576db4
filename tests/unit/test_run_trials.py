"""`run --trials K` without Docker: each trial's argv, the refusals before anything is written, and
`status`/`stop` over a trial set whose trials are not live."""

from __future__ import annotations

import json
from pathlib import Path

from run_flags import config_for
from test_recovery import make_run  # noqa: E402  (same directory; pytest puts it on sys.path)

from cowork_adapter.ops.trial_control import trial_set_status, trial_set_stop
from cowork_adapter.run.trials import execute_trials, trial_argv
from cowork_adapter.runroot.layout import STOP, TRIALS
from cowork_adapter.schemas.trials import TrialSet, trial_names


def test_trial_argv_replaces_the_set_flags_and_keeps_the_rest() -> None:
    argv = ["run", "--run-root", "/r", "--trials=3", "--task", "t1", "--budget-usd", "9", "--new-campaign"]
    first = trial_argv(argv, {"--run-root": "/r/trial-1", "--budget-usd": "9.000000"}, new_campaign=True)
    assert first == ["run", "--task", "t1", "--new-campaign", "--run-root", "/r/trial-1", "--budget-usd", "9.000000"]
    later = trial_argv(argv, {"--run-root": "/r/trial-2", "--resume-from": None}, new_campaign=False)
    assert later == ["run", "--task", "t1", "--run-root", "/r/trial-2"]


def test_refusals_write_nothing(tmp_path: Path, capsys) -> None:
    existing = tmp_path / "exists"
    existing.mkdir()
    cfg = config_for(run_root=existing, trials=2)
    assert execute_trials(cfg, ["cowork-adapter", "run"]) == 2
    captured = capsys.readouterr()
    assert "already exists" in captured.err + captured.out
    assert list(existing.iterdir()) == []
    other = tmp_path / "set-of-3"
    other.mkdir()
    (other / TRIALS).write_text(TrialSet(created_at="2026-01-01T00:00:00Z", k=3, run_roots=trial_names(3)).to_json())
    cfg = config_for(run_root=tmp_path / "new", trials=2, resume_from=(other,))
    assert execute_trials(cfg, ["cowork-adapter", "run"]) == 2
    assert not (tmp_path / "new").exists()


def test_status_and_stop_over_a_set_with_no_live_trial(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / TRIALS).write_text(TrialSet(created_at="2026-01-01T00:00:00Z", k=2, run_roots=trial_names(2)).to_json())
    make_run(folder / "trial-1", ["a"], {"a": "pass"})
    assert trial_set_status(folder, True) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["started"] for t in doc["trials"]] == [True, False] and doc["stop_requested"] is False
    assert trial_set_stop(folder, 5.0) == 0
    assert (folder / STOP).exists()
    assert trial_set_status(folder, False) == 0
    text = capsys.readouterr().out
    assert "2 trials, 1 started; stop requested" in text and "trial-2: not started" in text


def test_a_trial_that_never_started_takes_the_selection_of_its_started_siblings(tmp_path: Path) -> None:
    from cowork_adapter.run.trials import fresh_selection

    folder = tmp_path / "set"
    folder.mkdir()
    make_run(folder / "trial-2", ["a", "b"], {"a": "pass"})
    names = trial_names(2)
    assert fresh_selection(folder, names, ["run", "--trials", "2"]) == ["--task", "a", "--task", "b"]
    assert fresh_selection(folder, names, ["run", "--task", "c"]) == []  # the command's own selection stands
    assert fresh_selection(tmp_path / "nothing", names, ["run"]) == []
