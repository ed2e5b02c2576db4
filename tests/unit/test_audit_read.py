"""The audit's msgspec reading gives exactly what a plain json.loads reading of each line gives.

The reference here is the simplest correct reading: split the file on newlines, json.loads each
line, apply the counting rules record by record (TaskScan.add_usage is the per-record rule).
The scanner under test reads the same bytes through audit.read (msgspec Structs, json.loads the
arbiter) in small chunks, so blocks split everywhere. Lines are generated valid, then written
in several JSON styles and corrupted in the ways logs get corrupted.
read_rows itself and the scan's smaller pieces: test_audit_read_rows.py, test_audit_read_pieces.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cowork_adapter.audit import read as audit_read
from cowork_adapter.audit.rules import find_references, split_mcp_name
from cowork_adapter.audit.scan import USAGE_FIELDS, TaskScan, UsageRow, scan_events, scan_objects, scan_tools
from cowork_adapter.vocab import AuditGapReason

# ------------------------------------------------------------------ generated log lines

_text = st.text(
    alphabet=st.sampled_from(list('ab psql/eval_res.json groundtruth_workspace é€😀"\\\n\t\x01')), max_size=30
)
_scalar = st.none() | st.booleans() | st.integers(-5, 10**20) | st.floats(allow_nan=True, allow_infinity=True) | _text
_value = st.recursive(
    _scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3), max_leaves=8
)
_tool_name = (
    st.sampled_from(
        [
            "run_command",
            "mcp_files__read_file",
            "mcp_files__write_file",
            "mcp_pg__query",
            "mcp_terminal__run",
            "mcp_x",
            "python_execute",
            "",
        ]
    )
    | _scalar
)
_args = (
    st.fixed_dictionaries(
        {},
        optional={
            "command": st.sampled_from(
                [
                    "cat groundtruth_workspace/a.xlsx",
                    "psql -c 'select 1'",
                    "ls",
                    "cat eval_res.json",
                    "PGPASSWORD=x psql",
                    "\\u0070sql",
                ]
            )
            | _text,
            "path": _text,
            "data": _value,
        },
    )
    | _value
)
_unhashable = st.lists(_scalar, max_size=2) | st.dictionaries(_text, _scalar, max_size=1)
_tool_row = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["tool_call", "tool_call", "tool_call", "tool_result"]) | _scalar | _unhashable,
        "tool": _tool_name | _unhashable,
    },
    optional={
        "args": _args,
        "is_error": st.sampled_from([True, False, 1, 0, None, "true"]),
        "result_preview": _text,
        "ts": st.just("2026-01-01T00:00:00+00:00"),
    },
)
_count = (
    st.integers(0, 10**6)
    | st.just(0)
    | st.integers(-3, -1)
    | st.floats(0, 1e6)
    | st.sampled_from([True, None, "7", math.nan, 10**18 - 1, 10**18, 2**64])
)
_usage_fields = st.fixed_dictionaries(
    {},
    optional={
        "prompt_tokens": _count,
        "completion_tokens": _count,
        "cached_tokens": _count,
        "cost": st.floats(0, 5) | st.integers(0, 3) | st.sampled_from([None, -1.0, math.inf, "0.1", True]),
        "cost_known": st.sampled_from([True, False, None, 0]),
        "cost_estimated": st.sampled_from([True, False, None, 1]),
        "model": st.sampled_from(["m/a", "m/b", "", None, 3]) | _text,
        "provider": st.sampled_from(["p", None]),
        "response_provider": st.sampled_from(["Anthropic", None, ["x"]]),
    },
)
# Regular records (what the column-wise sums take) as often as irregular ones.
_regular_usage = st.fixed_dictionaries(
    {
        "prompt_tokens": st.integers(0, 10**6),
        "completion_tokens": st.sampled_from([0, 0, 7]),
        "cached_tokens": st.integers(0, 99),
        "cost": st.floats(0, 5) | st.integers(0, 3),
        "cost_known": st.sampled_from([True, None]),
        "cost_estimated": st.sampled_from([True, False, None]),
        "model": st.sampled_from(["m/a", "m/b", "", None]),
        "provider": st.sampled_from(["p", "q"]),
    }
)
_usage_row = st.builds(
    lambda kind, body, nested: {"type": kind, **({"usage": body} if nested else body)},
    st.sampled_from(["llm_usage", "llm_usage", "tool_omission", "capability_omission_x", "round"]),
    _regular_usage | _usage_fields,
    st.sampled_from([False, False, True]),
)
_event_row = _usage_row | st.fixed_dictionaries({"type": _scalar}, optional={"note": _text, "round": _scalar})

# How a line is written, then how it may be damaged.
_STYLES = [
    lambda row: json.dumps(row),
    lambda row: json.dumps(row, ensure_ascii=False),
    lambda row: json.dumps(row, separators=(",", ":"), ensure_ascii=False),
    lambda row: " " + json.dumps(row) + " \r",
    lambda row: json.dumps(row, indent=None, separators=(" , ", " : ")),
]
_DAMAGE = [
    lambda line: line,
    lambda line: line[: len(line) // 2],  # a crash mid-write
    lambda line: line + line,  # two records run together
    lambda line: line.replace(b'"type"', b'"t\\u0079pe"', 1),  # an escaped key: json.loads still reads it
    lambda line: line.replace(b'"type"', b'"type": 1, "type"', 1),  # a repeated key: the last one counts
    lambda line: b"\xef\xbb\xbf" + line,  # a byte-order mark
    lambda line: line.replace(b"e", b"\xff", 1),  # invalid UTF-8
    lambda line: line.replace(b"a", b"\xed\xa0\x80", 1),  # an encoded surrogate (json.loads' surrogatepass)
    lambda line: line[:-1] + b', "deep": ' + b"[" * 250 + b"]" * 250 + b"}",  # deeper than the C grammar
    lambda line: line[:-1] + b', "n": NaN}',
    lambda line: b"",  # a blank line
    lambda line: b"   ",  # a line of blanks
    lambda line: b"\r",
    lambda line: b"[1, 2]",  # JSON, not an object
    lambda line: line.replace(b"a", b"\xc0\xaf", 1),  # an overlong UTF-8 sequence
    lambda line: line.replace(b"a", b"\xf4\x90\x80\x80", 1),  # beyond U+10FFFF
    lambda line: line.replace(b"a", b"\xe2\x82", 1),  # a cut sequence
    lambda line: line.replace(b"a", b"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 1),  # valid: é € 😀
    lambda line: line.replace(b"a", b"\x1f", 1),  # a raw control character
]
# Values json.loads refuses, each spliced in as the line's last member.
_DAMAGE += [
    lambda line, bad=bad: line[:-1] + b', "v": ' + bad + b"}"
    for bad in (
        b"01",
        b"1.",
        b"1e+",
        b"-",
        b".5",
        b"+1",
        b"tru",
        b"nul",
        b"[1,]",
        b'{"a":1,}',
        b'"\\x"',
        b'"\\u12g4"',
        b"1 2",
        b'{"a" 1}',
        b"[1 2]",
    )
]
# ...and values it reads, the same way.
_DAMAGE += [
    lambda line, good=good: line[:-1] + b', "v": ' + good + b"}"
    for good in (
        b"-0",
        b"1E+2",
        b"-1.5e-3",
        b"123456789012345678901234567890",
        b'"\\ud800"',
        b'"\\/\\b"',
        b"[ ]",
        b"{ }",
        b"1e999",
    )
]


def _lines(rows: st.SearchStrategy) -> st.SearchStrategy:
    damage = st.sampled_from([_DAMAGE[0]] * len(_DAMAGE) + _DAMAGE)  # half the lines intact
    line = st.builds(lambda row, style, damage: damage(style(row).encode()), rows, st.sampled_from(_STYLES), damage)
    return st.lists(line, max_size=25).map(lambda lines: b"".join(x + b"\n" for x in lines))


# ------------------------------------------------------------------ the plain reading


def _object(line: bytes):
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _records(data: bytes):
    """(line number, record or None) for each non-empty line."""
    for number, line in enumerate(data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"), 1):
        if line and line != b"\r":
            yield number, _object(line)


def _reference_tools(data: bytes) -> dict:
    scan, index, findings = TaskScan(), 0, []
    for number, rec in _records(data):
        if rec is None:
            scan.gap(AuditGapReason.MALFORMED_LINE, "tools.jsonl", number)
            continue
        kind, tool = rec.get("type"), rec.get("tool")
        if not (kind == "tool_call" or (kind is None and isinstance(tool, str))):
            continue
        name = tool if isinstance(tool, str) else ""
        scan.tool_calls += 1
        split = split_mcp_name(name)
        if split is not None:
            failed = rec.get("is_error") is True
            scan.mcp_calls += 1
            scan.mcp_errors += failed
            server = scan.mcp_servers.setdefault(split[0], [0, 0, {}])
            server[0] += 1
            server[1] += failed
            server[2][split[1]] = server[2].get(split[1], 0) + 1
        if rec.get("args"):
            findings += [(number, index, token) for _, token, _ in find_references(rec["args"], name)]
        index += 1
    return _tools_facts(scan) | {"findings": findings}


def _tools_facts(scan: TaskScan) -> dict:
    return {
        "calls": scan.tool_calls,
        "mcp": scan.mcp_calls,
        "errors": scan.mcp_errors,
        "servers": {k: (v[0], v[1], dict(v[2])) for k, v in scan.mcp_servers.items()},
        "gaps": [(g["reason"].value, g["line"]) for g in scan.gaps],
    }


def _reference_events(data: bytes) -> TaskScan:
    scan = TaskScan()
    for number, rec in _records(data):
        if rec is None:
            scan.gap(AuditGapReason.MALFORMED_LINE, "events.jsonl", number)
            continue
        kind = rec.get("type")
        if kind == "llm_usage":
            scan.add_usage(UsageRow(**{name: rec.get(name) for name in USAGE_FIELDS}), "events.jsonl", number)
        elif isinstance(kind, str) and "omission" in kind:
            scan.add_omission("events.jsonl", number)
    return scan


def _usage_facts(scan: TaskScan) -> dict:
    return {
        "records": scan.usage_records,
        "bearing": scan.token_bearing,
        "prompt": scan.prompt_tokens,
        "completion": scan.completion_tokens,
        "cached": scan.cached_tokens,
        "unknown": scan.cost_unknown,
        "estimated": scan.cost_estimated,
        "models": list(scan.models),
        "providers": list(scan.providers),
        "response_providers": list(scan.response_providers),
        "omissions": scan.omission_refs,
        "gaps": [(g["reason"].value, g["line"], g["detail"]) for g in scan.gaps],
    }


# ------------------------------------------------------------------ the scanner, in small chunks


def _scanned(tmp_path: Path, name: str, data: bytes, scanner, chunk: int, monkeypatch) -> TaskScan:
    monkeypatch.setattr(audit_read, "CHUNK_BYTES", chunk)
    path = tmp_path / name
    path.write_bytes(data)
    scan = TaskScan()
    scanner(path, name, scan)
    return scan


_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _jsonl_text(*rows: dict) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


_CALL = {"type": "tool_call", "tool": "run_command", "args": {"command": "ls"}}
_PLANTED = {"type": "tool_call", "tool": "run_command", "args": {"command": "psql -c 'select 1'"}}
_FLAT = {
    "type": "llm_usage",
    "prompt_tokens": 5,
    "completion_tokens": 0,
    "cached_tokens": 1,
    "cost": 0.5,
    "cost_known": True,
    "cost_estimated": True,
    "model": "m",
}
_SILENT = {"type": "llm_usage", "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "cost": 0, "model": "n"}


@_SETTINGS
@example(data=_jsonl_text(_CALL, {"type": "note"}, _CALL, _PLANTED, _CALL, _PLANTED), chunk=1 << 20)
@example(data=_jsonl_text(_CALL, _PLANTED, _CALL, _PLANTED), chunk=64)
@example(
    data=_jsonl_text(_CALL, {"type": ["tool_call"], "tool": "x"}, _PLANTED, {"tool": {"a": 1}}, _PLANTED), chunk=1 << 20
)  # unhashable types and tools beside hits: the row-by-row keys
@given(data=_lines(_tool_row), chunk=st.sampled_from([7, 64, 300, 4096, 1 << 20]))
def test_tool_calls_and_findings_match_a_plain_json_reading(tmp_path, monkeypatch, data, chunk):
    scan = _scanned(tmp_path, "tools.jsonl", data, scan_tools, chunk, monkeypatch)
    got = _tools_facts(scan) | {"findings": [(f["line"], f["record_index"], f["token"]) for f in scan.findings]}
    assert got == _reference_tools(data)


@_SETTINGS
@example(data=_jsonl_text(_FLAT, _SILENT, _FLAT, {"type": "x_omission"}, _SILENT), chunk=1 << 20)
# Names keep first-seen order...
@example(
    data=_jsonl_text(dict(_FLAT, model="m/b"), dict(_FLAT, model="m/a", cost_known=False), dict(_FLAT, model="m/c")),
    chunk=1 << 20,
)
# ...and the cap on names per task (50) is reached the same way.
@example(data=_jsonl_text(*(dict(_FLAT, model=f"m/{n}", cost_known=n % 7 != 3) for n in range(70))), chunk=1 << 20)
# A block of regular records is added column-wise (the cap reached there too); one irregular
# record anywhere (a bool count, a nested usage, an int cost) sends the block row by row.
@example(data=_jsonl_text(*(dict(_FLAT, model=f"m/{n}", cost=0.1 * n) for n in range(70))), chunk=1 << 20)
@example(data=_jsonl_text(_FLAT, dict(_FLAT, prompt_tokens=True), _FLAT), chunk=1 << 20)
@example(data=_jsonl_text(_FLAT, {"type": "llm_usage", "usage": dict(_FLAT, type=None)}, _FLAT), chunk=1 << 20)
@example(data=_jsonl_text(_FLAT, dict(_FLAT, cost=1), dict(_FLAT, model=["m"])), chunk=1 << 20)
@given(data=_lines(_event_row), chunk=st.sampled_from([7, 64, 300, 4096, 1 << 20]))
def test_usage_and_omissions_match_a_plain_json_reading(tmp_path, monkeypatch, data, chunk):
    scan = _scanned(tmp_path, "events.jsonl", data, scan_events, chunk, monkeypatch)
    reference = _reference_events(data)
    got, want = _usage_facts(scan), _usage_facts(reference)
    got["gaps"], want["gaps"] = (
        sorted(got["gaps"], key=repr),
        sorted(want["gaps"], key=repr),
    )  # per block: malformed first
    assert got == want
    assert scan.cost_known_usd == reference.cost_known_usd  # the same additions in the same order


@_SETTINGS
@given(data=_lines(_event_row | _tool_row) | st.binary(max_size=200), chunk=st.sampled_from([7, 64, 1 << 20]))
def test_every_malformed_line_is_found_and_nothing_else(tmp_path, monkeypatch, data, chunk):
    scan = _scanned(tmp_path, "progress.jsonl", data, scan_objects, chunk, monkeypatch)
    assert [g["line"] for g in scan.gaps] == [n for n, rec in _records(data) if rec is None]
    assert scan.lines == len(_list_lines(data))


def _row_pairs(block, reader, rel, sink) -> list[tuple]:
    """(line index in the block, row) pairs of read_rows."""
    return list(zip(*audit_read.read_rows(block, reader, rel, sink), strict=True))


def _list_lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n") if data else []
