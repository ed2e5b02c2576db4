"""The Inspect log says what happened: its status from the run's outcome, a sample error on a task without
a verdict for a reason not the agent's, the run's name and route, and trials as epochs with reducers that
match pass@1 (the mean) and pass^k (all passed). Synthetic run roots (tests/synthetic_run.py), read back
with inspect_ai itself (read_eval_log, evals_df, samples_df)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import inspect_ai.log as inspect_log
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic_run import CONFIG, ledger_run, write_manifest

from cowork_adapter.cli import main
from cowork_adapter.errors import Refusal
from cowork_adapter.export import export_inspect, inspect_log_names, write_groups
from cowork_adapter.export.groups import ExportGroup, export_groups
from cowork_adapter.export.inspect_log import reducers
from cowork_adapter.export.status import STATUS_OF_OUTCOME, log_status, run_status, sample_error
from cowork_adapter.report import make_report
from cowork_adapter.runroot.manifest import read_manifest
from cowork_adapter.schemas.ledger import read_index
from cowork_adapter.vocab import InspectLogStatus, RunOutcome, TaskStatus

SELECTION = ["t-pass", "t-flaky", "t-fail", "t-infra", "t-never"]
# Trial 1 passes t-flaky, trial 2 fails it: per task means 1, .5, 0, 0, 0 -> pass@1 0.3; pass^2 (both
# trials passed) 1 of 5; pass@2 (at least one passed) 2 of 5. Each trial's own pass@1: 2/5 and 1/5.
TRIAL_1 = {"t-pass": "pass", "t-flaky": "pass", "t-fail": "fail", "t-infra": "infra"}
TRIAL_2 = {**TRIAL_1, "t-flaky": "fail"}
NO_VERDICT = {"t-infra", "t-never"}  # infra_failed and not_attempted: sample errors


def _trial_set(base: Path, outcome: str = "incomplete") -> list[Path]:
    """Two trials of one configuration over the same tasks, as TRIALS lays them out (R/trial-1, R/trial-2);
    a runner that finished with infra_failed rows is `incomplete`."""
    return [
        ledger_run(base / "set" / f"trial-{i}", SELECTION, outcomes, outcome=outcome)
        for i, outcomes in ((1, TRIAL_1), (2, TRIAL_2))
    ]


def _export(roots: list[Path], out: Path) -> list[Path]:
    with pytest.raises(SystemExit) as done:
        main(["export", *map(str, roots), "--format", "inspect", "--output-dir", str(out)])
    assert done.value.code == 0
    return sorted(out.glob("*.eval"))


def test_every_run_outcome_has_an_inspect_status_and_the_brief_ones_are_inspects_own() -> None:
    assert set(STATUS_OF_OUTCOME) == set(RunOutcome)
    assert STATUS_OF_OUTCOME[RunOutcome.COMPLETED] is InspectLogStatus.SUCCESS
    assert STATUS_OF_OUTCOME[RunOutcome.INCOMPLETE] is InspectLogStatus.SUCCESS  # the runner finished
    assert STATUS_OF_OUTCOME[RunOutcome.STOPPED] is InspectLogStatus.CANCELLED
    assert STATUS_OF_OUTCOME[RunOutcome.CRASHED] is InspectLogStatus.ERROR
    # Inspect's own words: the log's status field accepts each of ours.
    assert set(InspectLogStatus.values()) == {"started", "success", "cancelled", "error"}


def test_the_worst_run_makes_the_logs_status_and_a_crash_says_its_error(tmp_path: Path) -> None:
    done = write_manifest(tmp_path / "a", ["t"], outcome="incomplete")
    stopped = write_manifest(tmp_path / "b", ["t"], outcome="stopped")
    crashed = write_manifest(tmp_path / "c", ["t"], outcome="crashed")
    crashed.error = {"type": "RuntimeError", "message": "the supervisor lost its pipe"}
    live = write_manifest(tmp_path / "d", ["t"], outcome="running")
    assert log_status([done]) == (InspectLogStatus.SUCCESS, None)
    assert log_status([done, stopped]) == (InspectLogStatus.CANCELLED, None)
    assert log_status([done, live]) == (InspectLogStatus.STARTED, None)
    status, error = log_status([stopped, crashed, done])
    assert status is InspectLogStatus.ERROR and "RuntimeError" in error and "lost its pipe" in error
    odd = write_manifest(tmp_path / "e", ["t"], outcome="half-done")
    assert run_status(odd)[0] is InspectLogStatus.ERROR and "'half-done' is unknown" in run_status(odd)[1]


def test_a_sample_error_marks_only_rows_without_a_verdict_that_are_not_the_agents(tmp_path: Path) -> None:
    root = ledger_run(tmp_path / "r", ["p", "f", "a", "i", "n"], {"p": "pass", "f": "fail", "a": "agent", "i": "infra"})
    errors = {row.instance_id: sample_error(row) for row in read_index(root / "result_index.jsonl")}
    assert {task for task, error in errors.items() if error} == {"i", "n"}
    assert "infra_failed" in errors["i"] and "not_attempted" in errors["n"]
    assert sample_error(None) is not None  # a selected task without a row
    assert {s.value for s in TaskStatus} - {"passed", "failed", "agent_failed"} == {
        "infra_failed",
        "environment_blocked",
        "not_attempted",
    }


@pytest.mark.parametrize(
    "outcome, status", [("incomplete", "success"), ("completed", "success"), ("stopped", "cancelled")]
)
def test_the_logs_status_follows_the_runs_outcome(tmp_path: Path, outcome: str, status: str) -> None:
    root = ledger_run(tmp_path / "run", SELECTION, TRIAL_1, outcome=outcome)
    (path,) = _export([root], tmp_path / "out")
    log = inspect_log.read_eval_log(str(path), header_only=True)
    assert log.status == status and log.error is None


def test_a_crashed_run_is_an_error_log_carrying_the_crash(tmp_path: Path) -> None:
    root = ledger_run(tmp_path / "run", SELECTION, TRIAL_1, outcome="crashed")
    manifest = json.loads((root / "run_manifest.json").read_text())
    manifest["error"] = {"type": "OSError", "message": "No space left on device"}
    (root / "run_manifest.json").write_text(json.dumps(manifest))
    (path,) = _export([root], tmp_path / "out")
    log = inspect_log.read_eval_log(str(path), header_only=True)
    assert log.status == "error" and "OSError" in log.error.message and "No space left" in log.error.message


def test_a_trial_set_is_one_log_with_an_epoch_per_trial_and_reducers_matching_the_report(tmp_path: Path) -> None:
    from inspect_ai.analysis import evals_df, samples_df

    trials = _trial_set(tmp_path)
    (path,) = _export(trials, tmp_path / "out")
    log = inspect_log.read_eval_log(str(path))
    assert log.status == "success"  # both runners finished (some rows infra_failed: per sample)
    assert log.eval.config.epochs == 2 and log.eval.config.epochs_reducer == ["mean", "pass_k_2", "pass_at_2"]
    assert sorted((s.id, s.epoch) for s in log.samples) == sorted((t, e) for t in SELECTION for e in (1, 2))
    flaky = {s.epoch: s.scores["official"].value for s in log.samples if s.id == "t-flaky"}
    assert flaky == {1: "C", 2: "I"}
    metrics = {s.reducer: s.metrics["accuracy"].value for s in log.results.scores}
    per_trial = [make_report([root], 1)["pass_at_1"] for root in trials]
    assert per_trial == [pytest.approx(0.4), pytest.approx(0.2)]
    assert metrics["mean"] == pytest.approx(sum(per_trial) / 2) == pytest.approx(0.3)
    assert metrics["pass_k_2"] == pytest.approx(1 / 5) and metrics["pass_at_2"] == pytest.approx(2 / 5)
    reduced = {r.reducer: {s.sample_id: s.value for s in r.samples} for r in log.reductions}
    assert reduced["mean"]["t-flaky"] == pytest.approx(0.5) and reduced["pass_k_2"]["t-flaky"] == 0
    # The run's name (the trial set's folder) and route tell it apart in the viewer's list.
    assert log.eval.task == "cowork_bench" and log.eval.task_display_name == "set"
    assert {"set", "engine:ouroboros", "model:test/model", "trials:2"} <= set(log.eval.tags)
    assert log.eval.metadata["route"]["model"] == "test/model" and log.eval.metadata["trials"] == 2
    # inspect_ai.analysis reads the export: one eval row, a sample row per task and trial, the errors apart.
    evals = evals_df(str(path))
    assert len(evals) == 1 and evals["status"].iloc[0] == "success"
    assert evals["task_display_name"].iloc[0] == "set"
    samples = samples_df(str(path))
    assert len(samples) == len(SELECTION) * 2
    errored = samples[samples["error"].fillna("").astype(bool)]
    assert sorted(set(errored["id"])) == sorted(NO_VERDICT) and len(errored) == 2 * len(NO_VERDICT)
    assert (samples["score_official"] == "C").mean() == pytest.approx(0.3)  # the errored count as not passed


def test_export_groups_are_the_trial_readers_groups(tmp_path: Path) -> None:
    """export groups run roots by runroot/trials.py's rules, as report and compare do: another configuration
    is another log; a named ancestor is followed from its descendant, never a trial of its own; a root over
    an overlapping task set is merged into the same trial, as the report merges it."""
    trials = _trial_set(tmp_path)
    other = ledger_run(tmp_path / "other", SELECTION, TRIAL_1, applied_config={**CONFIG, "model": "other/model"})
    fewer = ledger_run(tmp_path / "fewer", SELECTION[:2], {"t-pass": "pass"})
    resumed = ledger_run(tmp_path / "resumed", SELECTION, TRIAL_1, resume_from=(trials[0],), generation=1)
    groups = export_groups([*trials, other, resumed])
    assert len(groups) == 2 and groups[1].trials == ((other,),) and groups[1].name == "other"
    # The two trials of the first configuration, in the order their runs were created.
    assert set(groups[0].trials) == {(trials[1],), (resumed,)} and len(groups[0].trials) == 2
    assert set(groups[0].name.split("+")) == {"trial-2", "resumed"}
    merged = export_groups([trials[0], fewer])
    assert [g.trials for g in merged] == [((trials[0], fewer),)]
    # One run root alone keeps its log's name; the names are decided before anything is read or written.
    names = inspect_log_names([other, *trials])
    assert names[0].startswith("other-") and names[1].startswith("set-") and len(set(names)) == 2
    written = export_inspect([*trials, other], tmp_path / "out", workers=1)
    headers = [inspect_log.read_eval_log(str(p), header_only=True) for p in written]
    assert [h.eval.config.epochs for h in headers] == [2, 1]
    assert [h.eval.model for h in headers] == ["test/model", "other/model"]
    assert read_manifest(trials[0]).outcome == "incomplete"


def test_reducer_names_are_inspects_own() -> None:
    from inspect_ai.scorer._reducer import reducer_log_name

    for k in (1, 2, 5):
        assert [name for name, _ in reducers(k)] == [reducer_log_name(r) for _, r in reducers(k)]


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(RunOutcome.values()), st.text(max_size=12)), min_size=1, max_size=6))
def test_a_log_is_success_only_when_every_run_finished_and_error_when_any_did_not_end(outcomes: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        base = write_manifest(Path(folder) / "r", ["t"])
    manifests = [msgspec.structs.replace(base, run_root=f"/r{i}", outcome=o) for i, o in enumerate(outcomes)]
    status, error = log_status(manifests)
    each = [run_status(m)[0] for m in manifests]
    assert (status is InspectLogStatus.SUCCESS) == all(s is InspectLogStatus.SUCCESS for s in each)
    assert (status is InspectLogStatus.ERROR) == any(s is InspectLogStatus.ERROR for s in each)
    assert (error is not None) == (status is InspectLogStatus.ERROR)
    if RunOutcome.STOPPED.value in outcomes and status is not InspectLogStatus.ERROR:
        assert status is InspectLogStatus.CANCELLED


def test_a_trial_made_of_shards_is_one_epoch_over_their_tasks(tmp_path: Path) -> None:
    """What runroot/trials.py's groups will hand the export: each trial's run roots over disjoint tasks."""
    shards = [
        (
            ledger_run(tmp_path / f"t{i}" / "a", ["t-pass", "t-fail"], {"t-pass": "pass", "t-fail": "fail"}),
            ledger_run(tmp_path / f"t{i}" / "b", ["t-infra"], {"t-infra": "infra"}, outcome="stopped"),
        )
        for i in (1, 2)
    ]
    (path,) = write_groups([ExportGroup(name="sharded", trials=tuple(shards))], tmp_path / "out", workers=1)
    log = inspect_log.read_eval_log(str(path))
    assert path.name.startswith("sharded-") and log.eval.config.epochs == 2
    assert sorted((s.id, s.epoch) for s in log.samples) == sorted(
        (t, e) for t in ("t-pass", "t-fail", "t-infra") for e in (1, 2)
    )
    assert log.status == "cancelled"  # one shard of each trial was stopped
    assert {s.id for s in log.samples if s.error is not None} == {"t-infra"}
    assert log.results.scores[0].metrics["accuracy"].value == pytest.approx(1 / 3)


def test_two_logs_that_would_share_a_file_name_are_refused_before_anything_is_written(tmp_path: Path, capsys) -> None:
    # Two configurations in folders of one name whose run labels start alike (synthetic labels are the path's).
    a = ledger_run(tmp_path / "a" / "run", SELECTION, TRIAL_1)
    b = ledger_run(tmp_path / "b" / "run", SELECTION, TRIAL_1, applied_config={**CONFIG, "model": "other/model"})
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as done:
        main(["export", str(a), str(b), "--format", "inspect", "--output-dir", str(out)])
    assert done.value.code == 2 and "export it apart" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
    with pytest.raises(SystemExit) as done:
        main(["export", str(a), str(a), "--format", "inspect", "--output-dir", str(out)])
    assert done.value.code == 2 and "given twice" in capsys.readouterr().err


def test_a_trial_not_started_yet_is_an_epoch_of_tasks_not_attempted(tmp_path: Path) -> None:
    """runroot/trials.py hands a trial set's trial with no run root yet as a trial without shards."""
    (first,) = _trial_set(tmp_path)[:1]
    (path,) = write_groups([ExportGroup(name="set", trials=((first,), ()))], tmp_path / "out", workers=1)
    log = inspect_log.read_eval_log(str(path))
    assert log.eval.config.epochs == 2 and log.status == "success"
    second = [s for s in log.samples if s.epoch == 2]
    assert sorted(s.id for s in second) == sorted(SELECTION)
    assert all(s.scores["official"].value == "I" and s.error is not None for s in second)
    assert log.eval.metadata["per_trial"][1]["started"] is False
    means = {s.reducer: s.metrics["accuracy"].value for s in log.results.scores}
    assert means["mean"] == pytest.approx(0.4 / 2)  # trial 1's 2 of 5, trial 2's none
    with pytest.raises(Refusal):
        write_groups([ExportGroup(name="set", trials=((), ()))], tmp_path / "out2", workers=1)
