"""Trials in the report: runroot/trials.py's grouping of run-root arguments, and the Trials section
(report/trials.py) over synthetic run roots with outcomes chosen so that every figure is known by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_recovery import make_run  # noqa: E402  (same directory; pytest puts it on sys.path)

from cowork_adapter.errors import Refusal
from cowork_adapter.report import make_report, run_report_command
from cowork_adapter.report.render import to_html, to_markdown
from cowork_adapter.runroot.layout import TRIALS
from cowork_adapter.runroot.trials import expand_run_roots
from cowork_adapter.schemas.trials import TrialSet, read_trial_set, trial_names

TASKS = ["a-1", "a-2", "b-1", "b-2"]
# a-1 passes twice, a-2 once, b-1 never, b-2 passes then fails for infrastructure (as test_trial_estimators).
TRIAL_1 = {"a-1": "pass", "a-2": "pass", "b-1": "fail", "b-2": "pass"}
TRIAL_2 = {"a-1": "pass", "a-2": "fail", "b-1": "agent", "b-2": "infra"}


def _trial_set(folder: Path, k: int, started: list[dict[str, str]]) -> Path:
    folder.mkdir()
    record = TrialSet(created_at="2026-01-01T00:00:00Z", k=k, run_roots=trial_names(k), campaign=None)
    (folder / TRIALS).write_text(record.to_json(), encoding="utf-8")
    for name, outcomes in zip(trial_names(k), started, strict=False):
        make_run(folder / name, TASKS, outcomes)
    return folder


def _check_figures(section: dict) -> None:
    assert section["k"] == 2 and section["tasks"] == 4
    assert section["pass_at_1"] == pytest.approx(0.5)
    assert section["effective_n"] == pytest.approx(6.0)
    assert section["interval95"] == pytest.approx([0.1876, 0.8124], abs=1e-4)
    assert section["pass_hat_k"] == pytest.approx([0.5, 0.25])
    assert section["pass_at_k"] == pytest.approx([0.5, 0.75])
    assert section["changed"] == ["a-2", "b-2"] and section["changed_by_infra"] == ["b-2"]
    assert section["infra_failed_task_trials"] == 1
    assert [t["passed"] for t in section["trials"]] == [3, 1]


def test_plain_run_roots_over_the_same_tasks_are_trials(tmp_path: Path) -> None:
    r1 = make_run(tmp_path / "r1", TASKS, TRIAL_1)
    r2 = make_run(tmp_path / "r2", TASKS, TRIAL_2)
    groups = expand_run_roots([r1, r2])
    assert len(groups) == 1 and groups[0].k == 2 and groups[0].trial_set is None
    report = make_report([r1, r2], 1)
    _check_figures(report["trials"])
    assert report["passed"] == 3  # the body is trial 1's own report
    assert any("§trials" in d and "1 task-trial ended infra_failed" in d for d in report["disclosures"])


def test_a_trial_set_folder_and_a_trial_not_started(tmp_path: Path) -> None:
    folder = _trial_set(tmp_path / "set", 2, [TRIAL_1, TRIAL_2])
    assert read_trial_set(folder).k == 2
    report = make_report([folder], 1)
    _check_figures(report["trials"])
    assert report["trials"]["trial_set"] == str(folder.resolve())
    money = report["trials"]["money"]
    assert money["projection"]["tasks"] == 2 * 496 and money["projection"]["cost_samples"] >= 6
    partial = make_report([_trial_set(tmp_path / "partial", 3, [TRIAL_1, TRIAL_2])], 1)["trials"]
    assert partial["not_started"] == ["trial-3"] and partial["k"] == 3
    assert partial["pass_at_1"] == pytest.approx(4 / 12)  # trial 3 answers for its tasks: none passed
    assert [t["started"] for t in partial["trials"]] == [True, True, False]


def test_shards_ancestry_and_uneven_shards(tmp_path: Path) -> None:
    a1 = make_run(tmp_path / "a1", ["a-1", "a-2"], {"a-1": "pass"})
    b1 = make_run(tmp_path / "b1", ["b-1", "b-2"], {"b-1": "pass"})
    (group,) = expand_run_roots([a1, b1])
    assert group.k == 1 and set(group.trials[0].shards) == {a1.resolve(), b1.resolve()}
    a2 = make_run(tmp_path / "a2", ["a-1", "a-2"], {"a-2": "pass"})
    b2 = make_run(tmp_path / "b2", ["b-1", "b-2"], {})
    (group,) = expand_run_roots([a1, b1, a2, b2])
    assert group.k == 2 and [set(t.shards) for t in group.trials] == [
        {a1.resolve(), b1.resolve()},
        {a2.resolve(), b2.resolve()},
    ]
    with pytest.raises(Refusal, match="unevenly"):
        expand_run_roots([a1, b1, a2])
    child = make_run(tmp_path / "c", ["a-1", "a-2"], {"a-2": "pass"}, task_ids=["a-2"], resume_from=[a1], generation=1)
    (group,) = expand_run_roots([a1, child])  # a named ancestor is the child's ancestry, not a trial
    assert group.k == 1 and group.trials[0].shards == (child.resolve(),)


def test_runs_of_two_configurations_form_two_groups_and_the_report_refuses(tmp_path: Path) -> None:
    r1 = make_run(tmp_path / "r1", TASKS, TRIAL_1)
    r2 = make_run(tmp_path / "r2", TASKS, TRIAL_2, image_id="sha256:" + "9" * 64)
    assert len(expand_run_roots([r1, r2])) == 2
    assert run_report_command([r1, r2], tmp_path / "out", 1, False) == 2


def test_a_hand_edited_trials_json_is_refused(tmp_path: Path) -> None:
    folder = _trial_set(tmp_path / "set", 2, [TRIAL_1, TRIAL_2])
    record = json.loads((folder / TRIALS).read_text())
    record["run_roots"] = ["../elsewhere", "trial-2"]
    (folder / TRIALS).write_text(json.dumps(record))
    with pytest.raises(Refusal, match="not a trial set"):
        expand_run_roots([folder])


def test_markdown_and_html_show_the_trials_section(tmp_path: Path) -> None:
    report = make_report([_trial_set(tmp_path / "set", 2, [TRIAL_1, TRIAL_2])], 1)
    md = to_markdown(report)
    assert "**pass@1 over 2 trials = 50.0 % (95 % interval 18.8 % – 81.2 %, 4 tasks)**" in md
    assert (
        "| 2 | 25.0 % | 75.0 % |" in md
        and "All 2 trials: key-meter spend" in md
        and "| b-2 | passed infra_failed | 50.0 % |" in md
    )
    html = to_html(report)
    assert "<h2>Trials</h2>" in html and "pass^k and pass@k by k" in html
    out = tmp_path / "out"
    assert run_report_command([tmp_path / "set"], out, 1, False) == 0
    assert json.loads((out / "report.json").read_text())["trials"]["k"] == 2
