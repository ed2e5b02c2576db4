"""Issue 27, host readers: the audit, the report, `status` and the ledger rebuilders never block on,
follow out of, or read without bound a file the agent could have written, and every such entry is
flagged; the audit, the report and `status` show the ledger rows' tampering per vocab.TamperKind.

The hostile entries are planted in synthetic run roots (tests/synthetic_run.py): a FIFO, a 10 GB
sparse file, a link to /dev/zero, and links to a host file holding a unique marker (whose text
must appear in no output). Each command runs in a subprocess with a timeout: a hang is a failure,
never a skip.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)

from cowork_adapter.audit.run import build_audit
from cowork_adapter.audit.write import audit_run
from cowork_adapter.container import protocol
from cowork_adapter.ops.run_view import read_run
from cowork_adapter.ops.status import build_status, render_status_text
from cowork_adapter.report import make_report
from cowork_adapter.report.render import to_html, to_markdown
from cowork_adapter.score.tampering import count_tampering, counts_sentence
from cowork_adapter.vocab import TamperKind

KINDS = [k.value for k in TamperKind]
COMMAND_TIMEOUT = 120  # seconds: generous for a loaded 2-core machine; a blocked reader never ends
SPARSE_BYTES = 10 << 30


def _cli(*args: str, timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess:
    """`cowork-adapter ARGS` in a subprocess (a hang fails the test through TimeoutExpired)."""
    return subprocess.run(
        [sys.executable, "-m", "cowork_adapter", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _set_tampering(root: Path, flags: dict[str, list[dict[str, str]] | None]) -> None:
    """Rewrite the ledger rows' `tampering` (None: a row written before the check)."""
    path = root / "result_index.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in rows:
        if row["instance_id"] in flags:
            row["tampering"] = flags[row["instance_id"]]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _flag(kind: str, detail: str = "") -> dict[str, str]:
    return {"kind": kind, "detail": detail}


# ---------------------------------------------------------------- counting (one rule everywhere)


def test_every_kind_is_counted_with_its_tasks_and_old_rows_are_not_checked() -> None:
    tasks = [("a", KINDS), ("b", [TamperKind.UNSAFE_ENTRY.value] * 2), ("c", []), ("d", None)]
    counts = count_tampering(tasks)
    assert counts.tasks == 4 and counts.tasks_checked == 3 and counts.tasks_not_checked == ["d"]
    assert counts.findings == len(KINDS) + 2 and counts.tasks_with_findings == ["a", "b"]
    assert counts.by_kind == {k: (3 if k == "unsafe_entry" else 1) for k in KINDS}
    assert counts.tasks_by_kind["unsafe_entry"] == ["a", "b"] and counts.tasks_by_kind["eval_hung"] == ["a"]
    sentence = counts_sentence(counts)
    assert sentence.startswith(f"The ledger flags {len(KINDS) + 2} tampering findings in 2 tasks (")
    assert "unsafe_entry 3" in sentence and sentence.endswith(
        "1 task was not checked (ledger rows written before the check)."
    )


def test_zero_findings_is_said_and_nothing_checked_is_not_called_clean() -> None:
    clean = count_tampering([("a", []), ("b", [])])
    assert clean.findings == 0 and set(clean.by_kind) == set(KINDS) and not any(clean.by_kind.values())
    assert counts_sentence(clean) == "The ledger shows zero tampering findings: none was seen in the 2 tasks checked."
    old = count_tampering([("a", None)])
    assert counts_sentence(old) == (
        "The ledger holds no task checked for tampering. 1 task was not checked (ledger rows written before the check)."
    )


# ---------------------------------------------------------------- the report and status from rows


def _flagged_run(root: Path) -> list[str]:
    """A finished run of five tasks: one with every TamperKind, one with two unsafe entries, one
    clean, one row written before the check, one never attempted (clean)."""
    tasks = ["t-all", "t-two", "t-clean", "t-old", "t-none"]
    synth.ledger_run(root, tasks, {"t-all": "pass", "t-two": "fail", "t-clean": "pass", "t-old": "fail"})
    _set_tampering(
        root,
        {
            "t-all": [_flag(k, f"detail of {k}") for k in KINDS],
            "t-two": [_flag("unsafe_entry", "eval_res.json: fifo"), _flag("unsafe_entry", "x: symlink")],
            "t-clean": [],
            "t-old": None,
            "t-none": [],
        },
    )
    return tasks


def test_the_report_has_a_tampering_section_counted_per_kind_from_the_rows(tmp_path: Path) -> None:
    root = tmp_path / "run"
    _flagged_run(root)
    r = make_report([root], 1)
    t = r["tampering"]
    assert t["by_kind"] == {k: (3 if k == "unsafe_entry" else 1) for k in KINDS}
    assert t["tasks_by_kind"]["unsafe_entry"] == ["t-all", "t-two"]
    assert t["tasks_with_findings"] == ["t-all", "t-two"] and t["tasks_not_checked"] == ["t-old"]
    assert t["tasks_checked"] == 4 and t["tasks"] == 5
    assert "eval_res.json: fifo" in " ".join(t["details"]["t-two"])
    assert t["audit_seen"] is None  # no audit was run
    assert any(d.startswith(t["sentence"]) for d in r["disclosures"])
    for text in (to_markdown(r), to_html(r)):
        assert "Tampering" in text and t["sentence"] in text
        for kind in KINDS:
            assert kind in text
        assert "Not checked (rows written before the check): t-old." in text
    assert "## Tampering" in to_markdown(r) and "<h2>Tampering</h2>" in to_html(r)


def test_a_clean_run_says_zero_findings_and_status_says_the_same(tmp_path: Path) -> None:
    root = tmp_path / "run"
    synth.ledger_run(root, ["a", "b"], {"a": "pass", "b": "fail"})
    _set_tampering(root, {"a": [], "b": []})
    r = make_report([root], 1)
    zero = "The ledger shows zero tampering findings: none was seen in the 2 tasks checked."
    assert r["tampering"]["sentence"] == zero and r["tampering"]["findings"] == 0
    assert zero in to_markdown(r) and zero in to_html(r)
    status = build_status(read_run(root))
    assert status["tampering"]["text"] == zero and status["tampering"]["findings"] == 0
    assert f"  tampering: {zero}" in render_status_text(status, None)


def test_status_counts_the_rows_flags_as_the_report_does(tmp_path: Path) -> None:
    root = tmp_path / "run"
    _flagged_run(root)
    status = build_status(read_run(root))
    report = make_report([root], 1)["tampering"]
    for key in ("by_kind", "tasks_by_kind", "tasks_not_checked", "findings", "tasks_with_findings"):
        assert status["tampering"][key] == report[key]
    assert status["tampering"]["text"] == report["sentence"]


# ---------------------------------------------------------------- the audit: rows and its own sightings


def test_the_audit_counts_the_rows_flags_and_keeps_each_rows_own(tmp_path: Path) -> None:
    root = tmp_path / "run"
    _flagged_run(root)
    audit = build_audit(root, workers=1)
    ledger = audit.tampering.ledger
    assert ledger.by_kind == {k: (3 if k == "unsafe_entry" else 1) for k in KINDS}
    assert ledger.tasks_not_checked == ["t-old"] and ledger.tasks_with_findings == ["t-all", "t-two"]
    by_task = {t.instance_id: t for t in audit.tasks}
    assert [f.kind for f in by_task["t-all"].ledger_tampering] == KINDS
    assert by_task["t-old"].ledger_tampering is None and by_task["t-clean"].ledger_tampering == []
    assert audit.tampering.seen.findings == 0  # nothing planted in the dumps


def _marker_file(tmp_path: Path) -> tuple[Path, str]:
    """A host file outside the run whose text must never appear in any output."""
    marker = f"HOST-SECRET-{uuid.uuid4().hex}"
    path = tmp_path / "host_file.jsonl"
    row = {"type": "tool_call", "tool": "run_command", "args": {"command": marker}, "is_error": False}
    path.write_text(json.dumps(row) + "\n" + json.dumps({"pass": True, "note": marker}) + "\n")
    return path, marker


def _hostile_run(tmp_path: Path) -> tuple[Path, str, dict[str, str]]:
    """A finished run whose dumps hold every hostile entry a reader must survive. Returns the run
    root, the marker, and (file relative to the run root -> the kind the audit must name)."""
    root = tmp_path / "run"
    tasks = ["fifo", "sparse", "devzero", "marker", "linked-dump", "planted", "clean"]
    synth.ledger_run(root, tasks, {t: "pass" for t in tasks})
    host_file, marker = _marker_file(tmp_path)
    dumps = root / "bench" / "dumps" / synth.SHORT_NAME
    d = {t: dumps / f"SingleUserTurn-{t}" for t in tasks}
    expect: dict[str, str] = {}

    def rel(path: Path) -> str:
        return str(path.relative_to(root))

    (d["fifo"] / "eval_res.json").unlink()
    os.mkfifo(d["fifo"] / "eval_res.json")
    os.mkfifo(d["fifo"] / "ouroboros" / "tools.jsonl")
    expect[rel(d["fifo"] / "eval_res.json")] = "fifo"
    expect[rel(d["fifo"] / "ouroboros" / "tools.jsonl")] = "fifo"

    with open(d["sparse"] / "ouroboros" / "events.jsonl", "wb") as fh:
        fh.truncate(SPARSE_BYTES)
    expect[rel(d["sparse"] / "ouroboros" / "events.jsonl")] = f"too_large:{SPARSE_BYTES}"

    (d["devzero"] / protocol.CLAIM_NAME).unlink()
    (d["devzero"] / protocol.CLAIM_NAME).symlink_to("/dev/zero")
    (d["devzero"] / "ouroboros" / "progress.jsonl").symlink_to("/dev/zero")
    expect[rel(d["devzero"] / protocol.CLAIM_NAME)] = "symlink"
    expect[rel(d["devzero"] / "ouroboros" / "progress.jsonl")] = "symlink"

    receipt = next(d["marker"].glob(protocol.RECEIPT_PREFIX + "*.json"))
    receipt.unlink()
    receipt.symlink_to(host_file)
    (d["marker"] / "ouroboros" / "tools.jsonl").symlink_to(host_file)
    expect[rel(receipt)] = "symlink"
    expect[rel(d["marker"] / "ouroboros" / "tools.jsonl")] = "symlink"

    elsewhere = tmp_path / "elsewhere"  # a whole dump replaced by a link to a folder of host files
    elsewhere.mkdir()
    (elsewhere / "ouroboros").mkdir()
    (elsewhere / "ouroboros" / "tools.jsonl").write_text(host_file.read_text())
    (elsewhere / "eval_res.json").write_text(host_file.read_text())
    moved = d["linked-dump"].with_name("moved-away")
    d["linked-dump"].rename(moved)
    d["linked-dump"].symlink_to(elsewhere, target_is_directory=True)
    expect[rel(d["linked-dump"])] = "symlink"
    return root, marker, expect


def _plant_records(root: Path) -> dict[str, str]:
    """Records where no evaluator writes one, and a record the eval phase set aside."""
    dumps = root / "bench" / "dumps"
    planted = dumps / synth.SHORT_NAME / "SingleUserTurn-planted"
    (planted / "planted-eval_res.json").write_text('{"pass": true}')
    (planted / "ouroboros" / "eval_res.json").write_text('{"pass": true}')
    (dumps / synth.SHORT_NAME / "eval_res.json").write_text('{"pass": true}')
    (dumps / "stray").symlink_to("/etc")
    return {
        "bench/dumps/" + synth.SHORT_NAME + "/SingleUserTurn-planted/planted-eval_res.json": "planted_before_eval",
        "bench/dumps/" + synth.SHORT_NAME + "/SingleUserTurn-planted/ouroboros/eval_res.json": "outside_own_dump",
        "bench/dumps/" + synth.SHORT_NAME + "/eval_res.json": "outside_own_dump",
        "bench/dumps/stray": "unsafe_entry",
    }


def test_the_audit_flags_every_hostile_entry_and_reads_none_in_a_subprocess(tmp_path: Path) -> None:
    root, marker, expect = _hostile_run(tmp_path)
    records = _plant_records(root)
    out = tmp_path / "audit.json"
    # A reader blocked on the FIFO or /dev/zero never ends: _cli's timeout turns that into a failure.
    done = _cli("audit", "--run-dir", str(root), "--output", str(out), "--workers", "1")
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert marker not in text and marker not in done.stdout and marker not in done.stderr
    audit = json.loads(text)
    seen = {
        t["file"]: t["detail"] for task in audit["tasks"] for t in task["tampering_seen"] if t["kind"] == "unsafe_entry"
    }
    gaps = {g["file"]: g["detail"] for task in audit["tasks"] for g in task["gaps"] if g["reason"] == "unsafe_entry"}
    for file, kind in expect.items():
        assert seen.get(file) == kind, (file, kind, seen)
        if not file.endswith("eval_res.json"):  # the audit reads no eval_res.json: a listing flag only
            assert gaps.get(file) == kind, (file, kind, gaps)
    # one flag per entry: the unsafe ones, and the planted task's set-aside and misplaced records
    assert sum(1 for task in audit["tasks"] for t in task["tampering_seen"]) == len(seen) + 2
    by_task = {t["instance_id"]: t for t in audit["tasks"]}
    planted = {t["file"]: t["kind"] for t in by_task["planted"]["tampering_seen"]}
    outside = {t["file"]: t["kind"] for t in audit["tampering"]["outside_task_dumps"]}
    for file, kind in records.items():
        assert planted.get(file, outside.get(file)) == kind, (file, kind, planted, outside)
    assert by_task["clean"]["tampering_seen"] == []
    assert by_task["marker"]["eval_attempts"]["receipts"][0]["state"] == "invalid"
    assert by_task["linked-dump"]["activity"]["tool_calls"] == 0  # the linked folder's log was never read
    seen_counts = audit["tampering"]["seen"]
    assert seen_counts["by_kind"]["unsafe_entry"] == sum(
        len([t for t in task["tampering_seen"] if t["kind"] == "unsafe_entry"]) for task in audit["tasks"]
    )
    assert seen_counts["by_kind"]["planted_before_eval"] == 1


def test_report_and_status_over_a_hostile_run_end_and_show_the_audits_flags(tmp_path: Path) -> None:
    root, marker, expect = _hostile_run(tmp_path)
    _set_tampering(root, {"fifo": [_flag("unsafe_entry", "eval_res.json: fifo")], "clean": []})
    audit_run(root, workers=1)
    out = tmp_path / "report"
    done = _cli("report", str(root), "--output-dir", str(out))
    assert done.returncode == 0, done.stderr
    status = _cli("status", str(root), "--json")
    assert status.returncode == 0, status.stderr
    texts = [p.read_text() for p in out.iterdir()] + [done.stdout, done.stderr, status.stdout, status.stderr]
    assert all(marker not in text for text in texts)
    report = json.loads((out / "report.json").read_text())
    assert report["tampering"]["by_kind"]["unsafe_entry"] == 1 and report["tampering"]["tasks_with_findings"] == [
        "fifo"
    ]
    seen = report["tampering"]["audit_seen"]
    assert seen["by_kind"]["unsafe_entry"] == len(expect)
    assert set(seen["tasks_by_kind"]["unsafe_entry"]) == {"fifo", "sparse", "devzero", "marker", "linked-dump"}
    markdown = (out / "report.md").read_text()
    assert "## Tampering" in markdown and seen["sentence"] in markdown
    assert json.loads(status.stdout)["tampering"]["tasks_with_findings"] == ["fifo"]


def test_sigterm_ends_an_audit_while_it_reads_a_large_log(tmp_path: Path) -> None:
    """A log just under the cap (sparse, one endless line) is read to its end by design; SIGTERM
    still ends the audit at once."""
    from cowork_adapter.audit.read import LOG_CAP_BYTES

    root = tmp_path / "run"
    synth.ledger_run(root, ["big"], {"big": "pass"})
    with open(synth.dump_dir(root, "big") / "ouroboros" / "events.jsonl", "wb") as fh:
        fh.truncate(LOG_CAP_BYTES - 1)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cowork_adapter",
            "audit",
            "--run-dir",
            str(root),
            "--output",
            str(tmp_path / "audit.json"),
            "--workers",
            "1",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while _bytes_read(proc.pid) < (256 << 20) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # until the audit is inside the large log
        assert proc.poll() is None, "the audit ended before it was signalled: the test proves nothing"
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code != 0  # ended by the signal (or a handler's exit), promptly


def _bytes_read(pid: int) -> int:
    """Bytes the process has read so far (/proc/<pid>/io rchar)."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# ---------------------------------------------------------------- the ledger's readers (ledger.py is the lead's)

_REBUILD = """
import sys
from pathlib import Path
from cowork_adapter.ops.clear import rebuild_final_ledger
from cowork_adapter.run.progress import RunProgress
from cowork_adapter.runroot.events import EventLog
root = Path(sys.argv[1])
if sys.argv[2] == "clear":
    print(rebuild_final_ledger(root))
else:  # the launcher's live refresh, as its refresher thread runs it
    progress = RunProgress(root, EventLog(root / "events.jsonl"))
    print(len(progress.refresh(live=True, interruption_cause="in_progress")))
"""


@pytest.mark.parametrize("reader", ["clear", "progress"])
def test_the_ledger_rebuild_of_clear_and_the_launchers_refresh_end_and_flag(tmp_path: Path, reader: str) -> None:
    root, marker, _ = _hostile_run(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", _REBUILD, str(root), reader],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    ledger = (root / "result_index.jsonl").read_text()
    assert marker not in ledger and marker not in done.stdout and marker not in done.stderr
    rows = {row["instance_id"]: row for row in map(json.loads, ledger.splitlines())}
    for task in ("fifo", "devzero", "marker"):
        assert rows[task]["status"] != "passed", task
        assert any(f["kind"] == "unsafe_entry" for f in rows[task]["tampering"] or []), (task, rows[task]["tampering"])


# ---------------------------------------------------------------- qualify: the receipt the row names


def test_qualify_reads_the_receipt_it_names_without_following_a_link_or_blocking(tmp_path: Path) -> None:
    from cowork_adapter.run.qualify import _returned
    from cowork_adapter.schemas.ledger import OfficialReceipt, TaskRow

    host_file, marker = _marker_file(tmp_path)
    dump = tmp_path / "bench" / "dumps" / "short" / "SingleUserTurn-t"
    dump.mkdir(parents=True)

    def row(receipt: Path) -> TaskRow:
        return TaskRow(
            ts="2026-01-01T00:00:00Z",
            instance_id="t",
            status="failed",
            reason_code="r",
            official_eval_status="completed",
            official_receipt=OfficialReceipt(path=str(receipt), pass_=False),
        )

    honest = dump / "receipt-honest.json"
    honest.write_text(json.dumps({"returned": {"pass": False, "failure": "[FAIL] x"}}))
    assert _returned(row(honest)) == {"pass": False, "failure": "[FAIL] x"}
    linked = dump / "receipt-linked.json"
    linked.write_text(json.dumps({"returned": {"pass": True, "note": marker}}))  # as the host file says
    linked.unlink()
    linked.symlink_to(host_file)
    assert _returned(row(linked)) is None
    fifo = dump / "receipt-fifo.json"
    os.mkfifo(fifo)
    assert _returned(row(fifo)) is None  # returns at once: a blocking open would hang the test run
    # A link above the receipt, in place of the task's dump: not followed either.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "receipt.json").write_text(json.dumps({"returned": {"note": marker}}))
    (dump.parent / "SingleUserTurn-u").symlink_to(elsewhere, target_is_directory=True)
    assert _returned(row(dump.parent / "SingleUserTurn-u" / "receipt.json")) is None


def test_the_audit_names_records_as_the_eval_phase_and_the_protocol_do() -> None:
    from cowork_adapter.audit import inputs, task
    from cowork_adapter.container import evalphase

    assert task.PLANTED_PREFIX == evalphase.PLANTED_PREFIX
    assert {protocol.EVAL_RES_NAME, protocol.CLAIM_NAME} <= inputs.RECORD_NAMES
    assert protocol.RECEIPT_PREFIX in inputs.RECORD_PREFIXES


def test_an_audit_written_before_it_looked_for_tampering_is_not_checked_never_clean(tmp_path: Path) -> None:
    from cowork_adapter.schemas.audit import launcher_audit_path

    root = tmp_path / "run"
    _flagged_run(root)
    audit_run(root, workers=1)
    path = launcher_audit_path(root)
    old = json.loads(path.read_text())
    del old["tampering"]
    for task in old["tasks"]:
        for key in ("ledger_tampering", "tampering_seen", "tampering_seen_by_kind"):
            del task[key]
    path.write_text(json.dumps(old))
    seen = make_report([root], 1)["tampering"]["audit_seen"]
    assert seen["findings"] == 0 and seen["tasks_checked"] == 0 and len(seen["tasks_not_checked"]) == 5
    assert seen["sentence"] == (
        "The audit of the dumps holds no task checked for tampering. 5 tasks were not "
        "checked (audited before the audit looked for tampering)."
    )


@pytest.mark.parametrize(
    "path, folder",
    [
        ("/r/bench/dumps/s/SingleUserTurn-x/ouroboros/events.jsonl", "/r/bench/dumps"),
        ("/r/dumps/bench/dumps/s/SingleUserTurn-x", "/r/dumps/bench/dumps"),  # the nearest one
        ("/r/bench/dumps", None),
        ("/r/result_index.jsonl", None),
        ("dumps/s/x", "dumps"),
    ],
)
def test_the_trusted_folder_of_a_dump_path_is_its_nearest_dumps_folder(path: str, folder: str | None) -> None:
    from cowork_adapter.runroot.dumps import dumps_folder_of

    assert dumps_folder_of(path) == folder
