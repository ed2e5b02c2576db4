"""The live ledger follows receipts, not meter polls (issue 15 item 2): RunProgress's refresher.

Functional bounds only (a receipt shows in the ledger within a few refresher ticks), never a
speed claim.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)

from cowork_adapter.run.progress import RunProgress
from cowork_adapter.runroot.events import EventLog
from cowork_adapter.schemas.ledger import LEDGER_NAME, read_index
from cowork_adapter.vocab import TaskStatus as S

TICK = 0.1


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def ledger_status(root: Path, task: str) -> S | None:
    try:
        rows = read_index(root / LEDGER_NAME)
    except (OSError, ValueError):
        return None
    return next((r.status for r in rows if r.instance_id == task), None)


def make(tmp_path: Path) -> tuple[Path, RunProgress]:
    root = tmp_path / "run"
    synth.write_manifest(root, ["a", "b"], outcome="running")
    synth.write_start_evidence(synth.dump_dir(root, "a"))
    return root, RunProgress(root, EventLog(root / "events.jsonl"))


def test_the_refresher_writes_a_ledger_at_once_and_settles_a_receipt_without_any_publish(tmp_path):
    root, progress = make(tmp_path)
    progress.start_refresher(interval=TICK)
    try:
        assert wait_until(lambda: ledger_status(root, "a") is S.INFRA_FAILED)  # provisional, in flight
        dump = synth.dump_dir(root, "a")
        synth.write_traj_log(dump, "success")
        synth.write_eval(dump, {"pass": True})
        assert wait_until(lambda: ledger_status(root, "a") is S.PASSED)
    finally:
        progress.stop_refresher()


def test_a_final_refresh_halts_the_refresher_so_no_live_row_follows_it(tmp_path):
    root, progress = make(tmp_path)
    progress.start_refresher(interval=TICK)
    assert wait_until(lambda: (root / LEDGER_NAME).exists())
    progress.refresh(live=False, interruption_cause="signal_15")
    final = (root / LEDGER_NAME).read_bytes()
    time.sleep(TICK * 5)
    assert (root / LEDGER_NAME).read_bytes() == final
    rows = read_index(root / LEDGER_NAME)
    assert [(r.reason_code, r.provisional) for r in rows] == [
        ("interrupted:signal_15", False),
        ("missing_result", False),
    ]
    assert progress._refresher is not None and wait_until(lambda: not progress._refresher.is_alive(), 5)


def test_a_failing_refresh_is_reported_and_never_raises(tmp_path, capsys):
    root, progress = make(tmp_path)
    (root / "run_manifest.json").unlink()  # the context cannot even be loaded
    progress.start_refresher(interval=TICK)
    try:
        assert wait_until(lambda: "result_index.jsonl" in progress.failures)
        assert progress._refresher.is_alive()  # it keeps trying
        progress.refresh_quietly(live=False, interruption_cause="runner_exited")  # no exception
    finally:
        progress.stop_refresher()
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert any(x["event"] == "cowork_diagnostic_write_failed" and x["artifact"] == "result_index.jsonl" for x in lines)


def test_an_unchanged_refresh_does_not_rewrite_the_ledger(tmp_path):
    root, progress = make(tmp_path)
    progress.refresh(live=True, interruption_cause="in_progress")
    inode = (root / LEDGER_NAME).stat().st_ino
    progress.refresh(live=True, interruption_cause="in_progress")
    assert (root / LEDGER_NAME).stat().st_ino == inode  # an atomic rewrite would give a new inode
    synth.write_summary(synth.dump_dir(root, "a"), synth.summary("success"))
    progress.refresh(live=True, interruption_cause="in_progress")
    assert (root / LEDGER_NAME).stat().st_ino != inode


def test_a_run_that_begins_sealing_after_its_first_refresh_scores_only_sealed_verdicts(tmp_path):
    # The launcher's first refresh comes at admission, before custody writes the shim's config: the
    # live ledger must still check seals once the run seals (issue 27), or a forged pass is scored.
    root, progress = make(tmp_path)
    progress.refresh(live=True, interruption_cause="in_progress")
    (root / "custody").mkdir(exist_ok=True)
    (root / "custody" / "shim_config.json").write_text(json.dumps({"dumps_dir": str(root / "bench" / "dumps")}))
    dump = synth.dump_dir(root, "a")
    synth.write_traj_log(dump, "success")
    synth.write_eval(dump, {"pass": True})  # a verdict no host seal covers
    rows = {r.instance_id: r for r in progress.refresh(live=True, interruption_cause="in_progress")}
    assert rows["a"].status is not S.PASSED
    assert "unsealed_verdict" in {f.kind.value for f in rows["a"].tampering or []}
