"""Receipts settle tasks in every build of the ledger (issue 15 item 2, DESIGN principle 4).

From real dump files: a task whose dump holds a valid official receipt linking a literal
verdict is settled in the live build, after a stop, in the final rebuild of a dead run and in
the rows a recovery run carries, whatever its ancestors' result_index.jsonl says or lacks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)

from cowork_adapter.schemas.ledger import LEDGER_NAME, TaskRow, read_index
from cowork_adapter.score.context import IndexContext
from cowork_adapter.score.ledger import (
    build_index,
    classify_task,
    rebuild_attempts,
    rebuild_final,
    write_index,
)
from cowork_adapter.vocab import OfficialEvalStatus as E
from cowork_adapter.vocab import TaskStatus as S


def receipted(root: Path, task: str, verdict: bool, *, summary: bool = True) -> Path:
    """A dump whose eval phase wrote a claim, eval_res.json and a completed receipt."""
    dump = synth.dump_dir(root, task)
    synth.write_start_evidence(dump, usage_rows=2)
    if summary:
        synth.write_summary(dump, synth.summary("success"))
    synth.write_traj_log(dump, "success")
    synth.write_eval(dump, {"pass": verdict, "details": "x"})
    return dump


def started(root: Path, task: str) -> Path:
    dump = synth.dump_dir(root, task)
    synth.write_start_evidence(dump, usage_rows=1)
    return dump


def stale_row(task: str, root: Path, status: S = S.INFRA_FAILED, reason: str = "missing_adapter_summary") -> TaskRow:
    """A row as a live refresh wrote it before the task's receipt existed."""
    return TaskRow(
        ts="2026-01-01T00:00:00Z",
        instance_id=task,
        status=status,
        reason_code=reason,
        provisional=True,
        official_eval_status=E.UNREPORTED,
        attempt_run_root=str(root),
    )


@pytest.mark.parametrize(
    "live,cause",
    [(True, "in_progress"), (False, "signal_15"), (False, "signal_9"), (False, "budget_meter_unavailable")],
)
def test_a_receipt_settles_its_task_even_without_the_adapter_summary(tmp_path, live, cause):
    # The summary can be missing (a torn disk, a write that failed): the receipt still proves the verdict.
    root = tmp_path / "run"
    synth.write_manifest(root, ["a", "b"])
    receipted(root, "a", True, summary=False)
    receipted(root, "b", False, summary=False)
    rows = {r.instance_id: r for r in build_index(root, live=live, interruption_cause=cause)}
    assert (rows["a"].status, rows["a"].provisional, rows["a"].official_receipt.pass_) == (S.PASSED, False, True)
    assert (rows["b"].status, rows["b"].reason_code, rows["b"].provisional) == (S.FAILED, "verifier_failed", False)


def test_a_live_incremental_refresh_settles_a_task_the_moment_its_receipt_appears(tmp_path):
    root = tmp_path / "run"
    synth.write_manifest(root, ["a"])
    started(root, "a")
    ctx = IndexContext.load(root)
    assert classify_task(ctx, "a", live=True, interruption_cause="in_progress").provisional
    dump = synth.dump_dir(root, "a")
    synth.write_traj_log(dump, "success")
    synth.write_eval(dump, {"pass": True})  # the eval container writes; the summary is still absent
    ctx.refresh()
    row = classify_task(ctx, "a", live=True, interruption_cause="in_progress")
    assert (row.status, row.provisional) == (S.PASSED, False)


def test_rebuild_final_settles_receipts_and_replaces_a_stale_ledger_atomically(tmp_path):
    root = tmp_path / "run"
    synth.write_manifest(root, ["a", "b", "c"], outcome="running")
    receipted(root, "a", True)
    started(root, "b")
    write_index(root, [stale_row(t, root) for t in ("a", "b", "c")])
    rows = rebuild_final(root, "launcher_died")
    on_disk = {r.instance_id: r for r in read_index(root / LEDGER_NAME)}
    assert rows == [on_disk[t] for t in ("a", "b", "c")]
    assert (on_disk["a"].status, on_disk["a"].provisional) == (S.PASSED, False)
    assert (on_disk["b"].status, on_disk["b"].reason_code) == (S.INFRA_FAILED, "interrupted:launcher_died")
    assert on_disk["c"].status is S.NOT_ATTEMPTED and not on_disk["c"].provisional
    assert not list(root.glob(f".{LEDGER_NAME}.*"))


def test_rebuild_final_without_a_manifest_raises(tmp_path):
    with pytest.raises(OSError):
        rebuild_final(tmp_path / "nothing", "launcher_died")


def _parent_and_child(tmp_path: Path, parent_ledger: str) -> tuple[Path, Path]:
    parent = tmp_path / "p"
    synth.write_manifest(parent, ["a", "b", "c"], outcome="running")
    receipted(parent, "a", True)
    receipted(parent, "b", False)
    started(parent, "c")
    if parent_ledger == "stale":
        write_index(parent, [stale_row(t, parent) for t in ("a", "b", "c")])
    elif parent_ledger == "torn":
        (parent / LEDGER_NAME).write_text('{"schema": "cowork_adapter.task_result.v1", "instance_')
    child = tmp_path / "c"
    synth.write_manifest(child, ["a", "b", "c"], task_ids=["c"], resume_from=[str(parent)], generation=1)
    return parent, child


@pytest.mark.parametrize("parent_ledger", ["stale", "absent", "torn"])
def test_a_recovery_run_carries_rows_rebuilt_from_the_ancestors_receipts(tmp_path, parent_ledger):
    parent, child = _parent_and_child(tmp_path, parent_ledger)
    rows = {r.instance_id: r for r in build_index(child, live=False, interruption_cause="runner_exited")}
    assert (rows["a"].status, rows["a"].attempt_run_root) == (S.PASSED, str(parent))
    assert (rows["b"].status, rows["b"].attempt_run_root) == (S.FAILED, str(parent))
    assert rows["a"].usage is not None and rows["a"].usage.records == 2  # carried rows keep their usage facts
    assert rows["c"].status is S.NOT_ATTEMPTED and rows["c"].attempt_run_root is None  # the child's own attempt


def test_an_ancestor_that_cannot_be_rebuilt_carries_nothing_not_its_ledger(tmp_path):
    parent, child = _parent_and_child(tmp_path, "absent")
    write_index(parent, build_index(parent, live=False, interruption_cause="runner_exited"))
    (parent / "run_manifest.json").unlink()
    rows = {r.instance_id: r for r in build_index(child, live=False, interruption_cause="runner_exited")}
    assert rows["a"].reason_code == "ancestor_row_unavailable" and rows["a"].status is S.NOT_ATTEMPTED


def test_a_carried_row_comes_from_the_nearest_ancestor_that_settled_it(tmp_path):
    r0 = tmp_path / "r0"
    synth.write_manifest(r0, ["a", "b"], outcome="running")
    started(r0, "a")
    receipted(r0, "b", True)
    r1 = tmp_path / "r1"
    synth.write_manifest(r1, ["a", "b"], task_ids=["a"], resume_from=[str(r0)], generation=1)
    receipted(r1, "a", False)
    r2 = tmp_path / "r2"
    synth.write_manifest(r2, ["a", "b"], task_ids=[], resume_from=[str(r1), str(r0)], generation=1)
    rows = {r.instance_id: r for r in build_index(r2, live=False, interruption_cause="nothing_remaining")}
    assert (rows["a"].status, rows["a"].attempt_run_root) == (S.FAILED, str(r1))
    assert (rows["b"].status, rows["b"].attempt_run_root) == (S.PASSED, str(r0))


def test_carried_rows_are_rebuilt_once_per_context(tmp_path):
    parent, child = _parent_and_child(tmp_path, "absent")
    ctx = IndexContext.load(child)
    first = build_index(child, live=True, interruption_cause="in_progress", ctx=ctx)
    receipt = next(synth.dump_dir(parent, "a").glob("ouroboros_eval_receipt-*.json"))
    receipt.unlink()  # a later rebuild would no longer settle a; the live context keeps its plan's rows
    ctx.refresh()
    second = build_index(child, live=True, interruption_cause="in_progress", ctx=ctx)
    assert second[0] is first[0] and second[0].status is S.PASSED


def test_rebuild_attempts_reads_only_the_runs_own_attempts_and_can_skip_usage(tmp_path):
    parent, child = _parent_and_child(tmp_path, "absent")
    receipted(child, "c", True)
    own = rebuild_attempts(child)
    assert set(own) == {"c"} and own["c"].status is S.PASSED
    light = rebuild_attempts(parent, with_usage=False)
    assert {t: r.status for t, r in light.items()} == {"a": S.PASSED, "b": S.FAILED, "c": S.INFRA_FAILED}
    assert light["a"].usage is None
    assert json.loads((parent / "run_manifest.json").read_text())["outcome"] == "running"
