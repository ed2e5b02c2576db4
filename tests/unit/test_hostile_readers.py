"""Every host reader of a task dump survives any bytes (issue 37 deliverable 4).

The agent under test writes its dump. A file nested 300,000 levels deep raised RecursionError
past every `except ValueError` and stopped the ledger, `clear` and `--resume-from` for every
task of the run. Here: safefile.loads bounds depth, size and encoding before parsing (checked
against the parser on generated documents), each reader of a dump is fed generated hostile files
of every kind, and one run whose dump holds the named attack still gives every sibling its row,
its audit, its report and its export.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowork_adapter.audit import inputs as audit_inputs
from cowork_adapter.audit.run import build_audit
from cowork_adapter.container import protocol, safefile
from cowork_adapter.export import transcript
from cowork_adapter.export.run import load_export
from cowork_adapter.report.build import build_report
from cowork_adapter.report.merge import load_runs
from cowork_adapter.runroot import custody_evidence
from cowork_adapter.score import ledger, taskread
from cowork_adapter.score.dumpread import SUMMARY_NAME
from cowork_adapter.vocab import TamperKind
from cowork_adapter.vocab import TaskStatus as S

DEEP = 300_000
_SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def deep_json(depth: int, opener: str = "[") -> bytes:
    if opener == "{":
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b"[" * depth + b"]" * depth


def nesting(value) -> int:
    """The depth of a decoded JSON value, as the bound counts it (a scalar is 0)."""
    if isinstance(value, dict):
        return 1 + max((nesting(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((nesting(v) for v in value), default=0)
    return 0


# Strings full of what a bracket counter could be fooled by: brackets, quotes, backslashes.
_tricky_text = st.text(alphabet=st.sampled_from('[]{}"\\ ax\n\u00e9'), max_size=12)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _tricky_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_tricky_text, inner, max_size=4),
    max_leaves=40,
)


@_SETTINGS
@given(value=_json_values, limit=st.integers(min_value=0, max_value=8))
def test_the_depth_bound_agrees_with_the_parsed_value(value, limit):
    text = json.dumps(value)
    assert safefile.depth_over(text, limit) == (nesting(value) > limit)
    assert safefile.depth_over(text.encode(), limit) == (nesting(value) > limit)
    if nesting(value) <= limit:
        assert safefile.loads(text, limit=limit) == value
    else:
        with pytest.raises(safefile.TooDeep):
            safefile.loads(text, limit=limit)


# Hostile documents: random bytes, invalid UTF-8, and deep nesting of either kind with random
# junk around it (unbalanced, cut short, inside strings).
def hostile_bytes(deepest: int):
    """Random bytes, invalid UTF-8, and nesting of either kind up to `deepest` with random junk
    around it (unbalanced, cut short, inside strings)."""
    deep_docs = st.builds(
        lambda depth, opener, head, tail, cut: (head + deep_json(depth, opener) + tail)[: cut or None],
        st.integers(min_value=0, max_value=deepest),
        st.sampled_from("[{"),
        st.binary(max_size=8),
        st.binary(max_size=8),
        st.integers(min_value=0, max_value=2 * deepest),
    )
    return st.one_of(
        st.binary(max_size=200),
        deep_docs,
        st.builds(lambda n: b'"' + b"[" * n + b'"', st.integers(min_value=0, max_value=deepest)),  # in a string
        st.builds(lambda v: json.dumps(v).encode(), _json_values),
        st.just(b'\xff\xfe{"pass": true}'),
        st.just(deep_json(deepest, "{")),
    )


_hostile_bytes = hostile_bytes(DEEP)
# Per reader: deeper than the interpreter's recursion limit (the parsers raised RecursionError
# from about 1,000), shallow enough for hundreds of examples; the 300,000-deep file is the run test's.
_hostile_files = hostile_bytes(5_000)


@_SETTINGS
@given(data=_hostile_bytes)
def test_loads_raises_nothing_but_a_value_error_on_any_bytes(data):
    try:
        value = safefile.loads(data)
    except ValueError:
        return
    assert nesting(value) <= safefile.MAX_DEPTH


def test_loads_refuses_a_300000_deep_document_by_name_before_parsing():
    for opener in "[{":
        with pytest.raises(safefile.TooDeep, match="too_deep"):
            safefile.loads(deep_json(DEEP, opener))
    with pytest.raises(safefile.TooLarge):
        safefile.loads(b" " * 10 + b"1", max_bytes=10)
    with pytest.raises(protocol.StrictJSONError, match="too_deep"):
        protocol.strict_loads(deep_json(DEEP).decode())


# ---------------------------------------------------------------- each reader, any file


def _plant(path: Path, what: str, data: bytes) -> None:
    """Put at `path` a file of kind `what` (regular with `data`, FIFO, link, device, directory)."""
    if what == "regular":
        path.write_bytes(data)
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "link_zero":
        os.symlink("/dev/zero", path)
    elif what == "device":
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers: never ends
    elif what == "directory":
        path.mkdir()
        (path / "x").write_bytes(data)


_KINDS = st.sampled_from(
    ["regular"] * 6 + ["fifo", "link_zero", "directory"] + (["device"] if os.geteuid() == 0 else [])
)
_NAMES = (
    protocol.EVAL_RES_NAME,
    protocol.CLAIM_NAME,
    SUMMARY_NAME,
    protocol.LOG_NAME,
    protocol.RECEIPT_PREFIX + "c" * 32 + ".json",
)


def _readers(dump: Path, dumps: Path):
    """Every reader of one dump's records, each called as the host calls it."""
    return {
        "read_json_record": lambda: [protocol.read_json_record(str(dump / n)) for n in _NAMES],
        "taskread.read_json": lambda: [taskread.read_json(dump / n) for n in _NAMES],
        "classify_eval_result": lambda: taskread.classify_eval_result(
            dump / protocol.EVAL_RES_NAME, dump / protocol.LOG_NAME
        ),
        "attempt_records": lambda: taskread.attempt_records(dump),
        "shim.read_seal_inputs": lambda: custody_evidence.read_seal_inputs(safefile, str(dump), str(dumps)),
        "audit.read_small_json": lambda: [audit_inputs.read_small_json(dump / n) for n in _NAMES],
        "transcript": lambda: transcript.read_transcript(str(dump), str(dumps)),
    }


@settings(_SETTINGS, max_examples=200)
@given(
    files=st.lists(
        st.tuples(st.sampled_from(_NAMES), _KINDS, _hostile_files), min_size=1, max_size=5, unique_by=lambda f: f[0]
    )
)
def test_every_dump_reader_survives_generated_hostile_files(tmp_path_factory, files):
    dumps = tmp_path_factory.mktemp("dumps")
    dump = dumps / synth.SHORT_NAME / "SingleUserTurn-t"
    dump.mkdir(parents=True)
    for name, what, data in files:
        _plant(dump / name, what, data)
    for read in _readers(dump, dumps).values():
        read()  # returns (never raises, never blocks on a FIFO, never reads a device)


# ---------------------------------------------------------------- one run: the named attack


def _receipted(root: Path, task: str, verdict: bool) -> None:
    dump = synth.dump_dir(root, task)
    synth.write_start_evidence(dump, usage_rows=2)
    synth.write_summary(dump, synth.summary("success"))
    synth.write_traj_log(dump, "success")
    synth.write_eval(dump, {"pass": verdict, "details": "x"})


def test_a_300000_deep_dump_stops_no_reader_and_no_sibling_row(tmp_path):
    root = tmp_path / "run"
    synth.write_manifest(root, ["hostile", "b", "c"])
    _receipted(root, "b", True)
    _receipted(root, "c", False)
    dump = synth.dump_dir(root, "hostile")
    synth.write_start_evidence(dump, usage_rows=1)
    deep = deep_json(DEEP)
    for name in (protocol.EVAL_RES_NAME, SUMMARY_NAME, protocol.LOG_NAME):
        (dump / name).write_bytes(deep)
    with open(dump / "ouroboros" / "events.jsonl", "ab") as fh:  # a usage line nested as deep
        fh.write(b'{"type": "llm_usage", "x": ' + deep + b"}\n")
    synth.write_eval(dump, None, mode="claimed_unfinished")  # a claim beside the deep eval_res.json
    (dump / protocol.CLAIM_NAME).write_bytes(b'{"attempt_id": ' + deep_json(DEEP, "{") + b"}")

    for live in (True, False):
        rows = {r.instance_id: r for r in ledger.build_index(root, live=live, interruption_cause="runner_exited")}
        assert (rows["b"].status, rows["c"].status) == (S.PASSED, S.FAILED)
        assert rows["hostile"].status not in (S.PASSED, S.FAILED)
        assert rows["hostile"].eval_result.reading == "unreadable"
    assert len(ledger.rebuild_final(root, "signal_9")) == 3  # what `clear` writes
    attempts = ledger.rebuild_attempts(root)  # what `--resume-from` carries
    assert (attempts["b"].status, attempts["c"].status) == (S.PASSED, S.FAILED)
    audit = build_audit(root, workers=1)
    assert {t.instance_id for t in audit.tasks} >= {"b", "c", "hostile"}
    report = build_report(load_runs([root]), concurrency=1)
    assert report is not None
    export = load_export(root, workers=1)
    assert export is not None


def test_a_task_whose_files_make_a_reader_raise_gets_its_own_flagged_row(tmp_path, monkeypatch):
    # A reader no bound foresaw: the row says so, and the siblings are classified as if it were not there.
    root = tmp_path / "run"
    synth.write_manifest(root, ["broken", "b"])
    _receipted(root, "b", True)
    _receipted(root, "broken", True)
    real = ledger.classify_eval_result

    def fails_on_broken(path, log_path=None):
        if "broken" in str(path):
            raise RecursionError("maximum recursion depth exceeded")
        return real(path, log_path)

    monkeypatch.setattr(ledger, "classify_eval_result", fails_on_broken)  # as read_task() calls it
    for live in (True, False):
        rows = {r.instance_id: r for r in ledger.build_index(root, live=live, interruption_cause="runner_exited")}
        broken = rows["broken"]
        # Live: provisional infra_failed (a later refresh may read it); final: agent_failed, settled (the
        # dump is the agent's, and no host fact makes it infrastructure's: no re-roll by unreadable files).
        status = S.INFRA_FAILED if live else S.AGENT_FAILED
        assert (broken.status, broken.reason_code, broken.provisional) == (status, "dump_unreadable", live)
        assert [f.kind for f in broken.tampering] == [TamperKind.UNREADABLE_DUMP]
        assert "RecursionError" in broken.tampering[0].detail
        assert rows["b"].status is S.PASSED
    assert ledger.rebuild_attempts(root)["broken"].reason_code == "dump_unreadable"
