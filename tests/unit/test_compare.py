"""`compare` (report/compare.py) over synthetic run roots: the paired figures by hand, the refusals, the
disclosures, and the command line's two sides."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import synthetic_run as synth
from test_recovery import make_run  # noqa: E402  (same directory; pytest puts it on sys.path)

from cowork_adapter.errors import Refusal
from cowork_adapter.report.compare import make_comparison, run_compare_command, to_html, to_markdown
from cowork_adapter.score.paired import mcnemar_exact, permutation_p

TASKS = ["a-1", "a-2", "a-3", "b-1", "b-2", "b-3"]
# Side A passes a-1 a-2 a-3 b-1; side B passes a-1 b-2: both 1, only A 3, only B 1, neither 1.
A = {"a-1": "pass", "a-2": "pass", "a-3": "pass", "b-1": "pass", "b-2": "fail", "b-3": "infra"}
B = {"a-1": "pass", "a-2": "fail", "a-3": "agent", "b-1": "fail", "b-2": "pass", "b-3": "fail"}
OTHER_MODEL = {**synth.CONFIG, "model": "other/model"}


def test_one_trial_a_side_by_hand(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", TASKS, A)
    b = make_run(tmp_path / "b", TASKS, B, applied_config=OTHER_MODEL)
    c = make_comparison([a], [b])
    o = c["overall"]
    assert (o["both"], o["only_a"], o["only_b"], o["neither"]) == (1, 3, 1, 1)
    assert o["test"] == "mcnemar_exact" and o["p_value"] == pytest.approx(mcnemar_exact(3, 1)) == pytest.approx(0.625)
    assert o["difference"] == pytest.approx(4 / 6 - 2 / 6)
    assert {g["name"]: (g["only_a"], g["only_b"]) for g in c["by_domain"]} == {"a": (2, 0), "b": (1, 1)}
    assert "No difference is shown" in c["verdict"]
    assert any("model" in d and "other/model" in d for d in c["disclosures"])
    assert any("1 task-trial(s) on side A, 0 on side B" in d for d in c["disclosures"])
    assert c["sides"]["A"]["mean_cost_per_task_usd"] is not None
    assert "| a-2 | a | only_a | passed | failed |" in to_markdown(c)
    assert "<svg" in to_html(c) and "Pass rate by domain, side A and side B" in to_html(c)


def test_trials_use_the_permutation_test_and_a_clear_winner_is_named(tmp_path: Path) -> None:
    tasks = [f"a-{i}" for i in range(8)]
    a = [make_run(tmp_path / f"a{k}", tasks, dict.fromkeys(tasks, "pass")) for k in range(2)]
    b1 = make_run(tmp_path / "b1", tasks, {t: "fail" for t in tasks}, applied_config=OTHER_MODEL)
    b2 = make_run(tmp_path / "b2", tasks, {tasks[0]: "pass"}, applied_config=OTHER_MODEL)
    c = make_comparison(a, [b1, b2])
    o = c["overall"]
    assert c["sides"]["A"]["trials"] == 2 and c["sides"]["B"]["trials"] == 2
    assert o["test"] == "paired_permutation"
    assert o["p_value"] == pytest.approx(permutation_p([0.5] + [1.0] * 7)) == pytest.approx(2 / 256)
    assert o["interval95"][0] > 0
    assert c["verdict"].startswith("Side A is better")


def test_refusals(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", TASKS, A)
    other_bench = make_run(tmp_path / "ob", TASKS, B, bench_commit="f" * 40)
    with pytest.raises(Refusal, match="benchmark commit"):
        make_comparison([a], [other_bench])
    disjoint = make_run(tmp_path / "d", ["c-1"], {"c-1": "pass"})
    with pytest.raises(Refusal, match="no task in common"):
        make_comparison([a], [disjoint])
    two = make_run(tmp_path / "two", TASKS, B, image_id="sha256:" + "8" * 64)
    with pytest.raises(Refusal, match="2 configurations"):
        make_comparison([a, two], [a])
    assert run_compare_command([a], [other_bench], None, False) == 2


def test_tasks_only_one_side_selected_are_left_out_and_disclosed(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", TASKS, A)
    b = make_run(tmp_path / "b", TASKS[:3], {t: B[t] for t in TASKS[:3]})
    c = make_comparison([a], [b])
    assert c["overall"]["tasks"] == 3
    assert any("3 task(s) only side A selected" in d for d in c["disclosures"])


def test_the_command_line_splits_the_sides_at_against(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", TASKS, A)
    b = make_run(tmp_path / "b", TASKS, B, applied_config=OTHER_MODEL)
    out = tmp_path / "out"
    cli = [sys.executable, "-c", "from cowork_adapter.cli import main; main()"]
    done = subprocess.run(
        [*cli, "compare", str(a), "--against", str(b), "--output-dir", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "comparison.json").read_text())["overall"]["only_a"] == 3
    again = subprocess.run(
        [*cli, "compare", str(a), "--against", str(b), "--output-dir", str(out)], capture_output=True
    )
    assert again.returncode == 2  # never over an existing file
    missing = subprocess.run([*cli, "compare", str(a)], capture_output=True, text=True)
    assert missing.returncode == 2 and "--against" in missing.stderr
