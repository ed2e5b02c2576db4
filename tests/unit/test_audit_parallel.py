"""The audit's parallel scan and its argument fast path give exactly the sequential answer."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cowork_adapter.audit import build_audit, run_audit_command
from cowork_adapter.audit import inputs as audit_inputs
from cowork_adapter.audit import rules as audit_rules
from cowork_adapter.audit import run as audit
from cowork_adapter.audit.rules import PROBES, args_may_match, find_references

TS = "2026-01-01T00:00:00+00:00"
TASKS = 24
WORDS = [
    "total",
    "region",
    "north",
    "Zürich",
    "café",
    "invoice",
    "sheet",
    "eval",
    "groundtruth",
    "psql",
    "\\u00e9",
    "a/b",
]


def _tool(rng: random.Random, n: int) -> dict:
    kind = n % 6
    if kind == 0:
        return {"tool": "run_command", "args": {"command": f"wc -l /workspace/{n}.csv"}}
    if kind == 1:
        return {"tool": "mcp_files__read_file", "args": {"path": " ".join(rng.choices(WORDS, k=3))}}
    if kind == 2:
        return {"tool": "mcp_excel__write", "args": {"data": [[rng.choice(WORDS)] * 2] * 2}}
    if kind == 3:
        return {"tool": "python_execute", "args": {"code": json.dumps({"c": rng.choice(WORDS)})}}
    if kind == 4:
        return {"tool": "mcp_files__write_file", "args": {"path": "n.md", "content": "plain words only"}}
    return {"tool": "mcp_pg__query", "args": {"sql": "select 1"}}


def _synthetic_run(root: Path) -> None:
    """TASKS tasks with mixed rows, planted references, malformed lines, missing logs and dumps."""
    rng = random.Random(11)
    (root / "run_manifest.json").write_text(
        json.dumps({"schema": "cowork_adapter.run_manifest.v1", "applied_config": {}})
    )
    (root / "monitor.json").write_text(json.dumps({"finished": True}))
    rows = []
    for n in range(TASKS):
        task = f"task-{n:02d}"
        dump = root / "bench" / "dumps" / "abc" / f"SingleUserTurn-{task}"
        rows.append(
            {
                "instance_id": task,
                "status": "passed",
                "official_eval_status": "completed",
                "official_receipt": {"pass": n % 3 != 0},
            }
        )
        if n == 5:
            continue  # a task without a dump: a gap
        logs = dump / "ouroboros"
        logs.mkdir(parents=True)
        tools = []
        for i in range(40 + n):
            call = _tool(rng, i + n)
            tools.append(
                json.dumps(
                    {
                        "ts": TS,
                        "type": "tool_call",
                        **call,
                        "is_error": i % 7 == 0,
                        "result_preview": " ".join(rng.choices(WORDS, k=30)),
                    }
                )
            )
        if n % 4 == 0:
            tools.insert(
                3,
                json.dumps(
                    {
                        "ts": TS,
                        "type": "tool_call",
                        "tool": "run_command",
                        "args": {"command": "psql -h pg -c 'select 1' && cat groundtruth_workspace/a"},
                    }
                ),
            )
        if n % 6 == 1:
            tools.insert(7, '{"broken": ')
        events = [
            json.dumps(
                {
                    "ts": TS,
                    "type": "llm_usage",
                    "prompt_tokens": 10 + i,
                    "completion_tokens": 2,
                    "cached_tokens": 0,
                    "cost": 0.001 * i,
                    "cost_known": i % 9 != 0,
                    "model": "m/x",
                    "provider": "p",
                }
            )
            for i in range(20)
        ]
        files = {
            "tools.jsonl": tools,
            "events.jsonl": events,
            "progress.jsonl": ['{"text": "x"}'] * 5,
            "chat.jsonl": ['{"text": "y"}'] * 3,
            "supervisor.jsonl": ['{"type": "ready"}'],
        }
        if n == 9:
            del files["events.jsonl"]
        for name, lines in files.items():
            (logs / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        rows[-1]["task_dump"] = os.path.relpath(dump, root)
    (root / "result_index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _comparable(report) -> dict:
    data = json.loads(report.to_json())
    data.pop("generated_at")
    return data


_RECORD: dict[str, object] = {}


def _recording_batch(job):
    """Stands in for audit._audit_batch in the forked workers: notes who scanned which task."""
    with open(_RECORD["path"], "a") as handle:
        handle.writelines(f"{os.getpid()} {row['instance_id']}\n" for row in job[0])
    return _RECORD["batch"](job)


def test_two_workers_give_the_same_report_as_one(tmp_path, monkeypatch):
    root = tmp_path / "run"
    root.mkdir()
    _synthetic_run(root)
    sequential = _comparable(build_audit(root, workers=1))
    assert sequential["totals"]["findings"] > 0 and sequential["totals"]["gaps"] > 0  # a rich input

    monkeypatch.setattr(audit, "PARALLEL_MIN_BYTES", 0)  # this run is small: force the pool
    scanned_by = tmp_path / "scanned_by"
    monkeypatch.setitem(_RECORD, "path", scanned_by)
    monkeypatch.setitem(_RECORD, "batch", audit._audit_batch)
    monkeypatch.setattr(audit, "_audit_batch", _recording_batch)  # the forked workers inherit it
    parallel = _comparable(build_audit(root, workers=2))
    records = [line.split() for line in scanned_by.read_text().splitlines()]
    assert sorted(t for _, t in records) == [f"task-{n:02d}" for n in range(TASKS)]  # each once
    assert str(os.getpid()) not in {pid for pid, _ in records}  # all in worker processes
    assert parallel == sequential
    assert [t["instance_id"] for t in parallel["tasks"]] == [f"task-{n:02d}" for n in range(TASKS)]


@pytest.mark.parametrize("count,workers", [(0, 2), (1, 2), (7, 2), (496, 2), (496, 8), (5000, 4)])
def test_handoffs_cover_every_row_in_order_in_shrinking_batches(count, workers):
    batches = list(audit._handoffs(list(range(count)), workers))
    assert [row for batch in batches for row in batch] == list(range(count))
    sizes = [len(batch) for batch in batches]
    assert sizes == sorted(sizes, reverse=True) and all(size >= 1 for size in sizes)
    if count >= 2 * workers:
        assert sizes[0] == count // (2 * workers) and sizes[-1] == 1  # large first, single rows last
        assert len(batches) <= 2 * workers * (count.bit_length() + 1)  # few messages: logarithmic


def test_a_small_run_stays_in_process(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    _synthetic_run(root)
    assert audit._effective_workers(2, audit_inputs.dump_index(root)) == 1
    assert audit._effective_workers(None, {}) == 1


def test_a_threaded_process_scans_in_process(tmp_path, monkeypatch):
    import threading

    root = tmp_path / "run"
    root.mkdir()
    _synthetic_run(root)
    monkeypatch.setattr(audit, "PARALLEL_MIN_BYTES", 0)
    dumps = audit_inputs.dump_index(root)
    assert audit._effective_workers(2, dumps) == 2
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:  # like the end-of-run audit inside `run`: forking now could copy a held lock
        assert audit._effective_workers(2, dumps) == 1
    finally:
        stop.set()
        other.join()


def test_workers_below_one_are_refused(tmp_path, capsys):
    assert run_audit_command(tmp_path, None, workers=0) == 2
    assert "--workers" in capsys.readouterr().err


# Leaves mixing the rule tokens, their probes and JSON/shell escaping.
_leaf = st.text(
    alphabet=st.sampled_from(list("abpsqlgroundtruth_workspaceval/\\\"' .:u07{}[]é\n")), max_size=40
) | st.sampled_from(
    [
        "psql -c x",
        "eval_res.json",
        "groundtruth_workspace",
        "postgres:\\/\\/u:p@h",
        "\\u0070sql",
        json.dumps({"c": "cat groundtruth_workspace/x"}),
        "evaluation/main.py",
        '{"c": "\\u0070sql -c 1"}',
        '["cat groundtruth\\u005fworkspace/a"]',
    ]
)
_args = st.recursive(
    _leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_leaf, inner, max_size=4), max_leaves=12
)


@settings(max_examples=600, deadline=None)
@given(args=_args, tool=st.sampled_from(["run_command", "mcp_files__read_file", "mcp_terminal__run_command"]))
def test_the_probes_never_hide_a_finding(args, tool):
    """With every string unwrapped and matched (no probe sieve at all), the findings are the same,
    and any arguments with a finding pass both sieves: the decoded one and the raw-bytes one."""
    found = find_references(args, tool)
    with mock.patch.object(audit_rules, "has_probe", lambda text: True):
        unsieved = find_references(args, tool)
    assert found == unsieved
    if unsieved:
        assert args_may_match(args)
        for ascii_only in (True, False):  # the raw sieve, on the bytes either JSON writer leaves
            raw = json.dumps(args, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
            assert any(probe in raw for probe in PROBES), raw


def _reference_parse(line: bytes):
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


_json_lines = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
).map(lambda v: json.dumps(v, ensure_ascii=False).encode())
_noise = st.sampled_from([b"", b" ", b"\r", b"\t", b"}", b"x", b"\x00", b"\xff", b"\xef\xbb\xbf", b"{\x00"])


@settings(max_examples=500, deadline=None)
@given(body=_json_lines | st.binary(max_size=12), head=_noise, tail=_noise)
def test_the_line_reader_answers_exactly_like_json_loads(body, head, tail):
    """A line is a row (msgspec, else json.loads) exactly when json.loads reads an object."""
    from cowork_adapter.audit.read import Block, read_rows
    from cowork_adapter.audit.scan import _TOOL_ROWS, TaskScan

    for line in (body, head + body, body + tail, head + body + tail):
        if not line or line == b"\r" or b"\n" in line:
            continue
        rows = list(zip(*read_rows(Block(1, line), _TOOL_ROWS, "t", TaskScan()), strict=True))
        want = _reference_parse(line)
        assert bool(rows) == (want is not None), line
        if rows:
            assert rows[0][1].type == want.get("type") or (rows[0][1].type != rows[0][1].type)  # NaN


def test_the_fast_path_skips_plain_arguments():
    assert not args_may_match({"path": "notes/Zürich café.md", "rows": [["a", 1]]})
    assert args_may_match({"command": "cat groundtruth_workspace/x"})
