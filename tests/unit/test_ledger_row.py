"""The ledger reads one task at its edge into a TaskRecord (score/ledger.py read_task), then decides its row
without I/O (score/row.py task_row): the row of a record is the row build_index writes, it is the same with
every file system call refused, and what the record says (a changed sealed file, a refused mount) decides it."""

from __future__ import annotations

import builtins
import dataclasses
import os
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)

from cowork_adapter.schemas.seal import EvalSeal, SealedFile
from cowork_adapter.score.context import IndexContext
from cowork_adapter.score.ledger import build_index, read_task
from cowork_adapter.score.row import TaskRecord, task_row
from cowork_adapter.score.verdict import DumpDigests
from cowork_adapter.vocab import OfficialEvalStatus as E
from cowork_adapter.vocab import TamperKind as K
from cowork_adapter.vocab import TaskStatus as S


def _run(root: Path) -> IndexContext:
    synth.write_manifest(root, ["won", "lost", "left"])
    for task, verdict in (("won", True), ("lost", False)):
        dump = synth.dump_dir(root, task)
        synth.write_start_evidence(dump, usage_rows=2)
        synth.write_summary(dump, synth.summary("success"))
        synth.write_traj_log(dump, "success")
        synth.write_eval(dump, {"pass": verdict, "details": "x"})
    return IndexContext.load(root)


def _no_io(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"task_row touched the file system: {args!r}")

    for name in ("open", "lstat", "stat", "scandir", "listdir"):
        monkeypatch.setattr(os, name, refused)
    monkeypatch.setattr(builtins, "open", refused)


def test_the_row_of_a_record_is_the_indexs_row_and_needs_no_file(tmp_path: Path, monkeypatch) -> None:
    ctx = _run(tmp_path / "run")
    index = {r.instance_id: r for r in build_index(ctx.run_root, live=False, interruption_cause="runner_exited")}
    records = {task: read_task(ctx, task) for task in ("won", "lost", "left")}
    _no_io(monkeypatch)
    rows = {task: task_row(rec, live=False, interruption_cause="runner_exited") for task, rec in records.items()}
    again = {task: task_row(rec, live=False, interruption_cause="runner_exited") for task, rec in records.items()}
    monkeypatch.undo()
    assert rows == again  # equal records, equal rows
    assert {t: (r.status, r.reason_code) for t, r in rows.items()} == {
        "won": (S.PASSED, "passed"),
        "lost": (S.FAILED, "verifier_failed"),
        "left": (S.NOT_ATTEMPTED, "missing_result"),
    }
    for task, row in rows.items():
        assert row.replace(ts=index[task].ts) == index[task]


def test_a_sealed_file_changed_since_its_seal_is_not_scored(tmp_path: Path) -> None:
    ctx = _run(tmp_path / "run")
    rec = read_task(ctx, "won")
    assert rec.eval_read is not None and rec.receipt_digest[1] is not None
    sha = rec.eval_read[4]
    seal = EvalSeal(
        runner_id="5-aa",
        task="won",
        entry="first",
        agent_container_state="absent",
        started_at=0.0,
        claim=SealedFile(kind="regular", sha256="c" * 64),
        receipt=SealedFile(kind="regular", sha256=rec.receipt_digest[1]),
        eval_res=SealedFile(kind="regular", sha256=sha),
    )
    now = DumpDigests(claim="c" * 64, receipt=rec.receipt_digest[1], eval_res=sha, summary=None)
    sealed = dataclasses.replace(rec, sealing=True, seal=seal, digests=now)
    assert task_row(sealed, live=False, interruption_cause="runner_exited").status is S.PASSED
    changed = dataclasses.replace(sealed, digests=now._replace(claim="d" * 64))
    row = task_row(changed, live=False, interruption_cause="runner_exited")
    assert (row.official_eval_status, row.official_receipt.cause) == (E.UNKNOWN, "sealed_file_changed")
    assert [(f.kind, f.detail) for f in row.tampering or []][0] == (K.SEALED_FILE_CHANGED, "claim")
    assert row.status is not S.PASSED


def test_a_record_without_a_dump_is_decided_from_its_run_facts_alone(tmp_path: Path) -> None:
    rec = TaskRecord(instance_id="t", ts="2026-01-01T00:00:00Z", run_root=tmp_path, refused_mounts=2)
    row = task_row(rec, live=False, interruption_cause="runner_exited")
    assert (row.status, row.reason_code, row.task_dump) == (S.NOT_ATTEMPTED, "missing_result", None)
    assert [f.kind for f in row.tampering or []] == [K.OUTSIDE_OWN_DUMP]
    blocked = task_row(dataclasses.replace(rec, blocked="mcp_server_failed:x"), live=True, interruption_cause="x")
    assert (blocked.status, blocked.reason_code) == (S.ENVIRONMENT_BLOCKED, "mcp_server_failed:x")
