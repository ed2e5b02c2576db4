"""The audit's msgspec reading gives exactly what a plain json.loads reading of each line gives.

The reference here is the simplest correct reading: split the file on newlines, json.loads each
line, apply the counting rules record by record (TaskScan.add_usage is the per-record rule).
The scanner under test reads the same bytes through audit.read (msgspec Structs, json.loads the
arbiter) in small chunks, so blocks split everywhere. Lines are generated valid, then written
in several JSON styles and corrupted in the ways logs get corrupted.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cowork_adapter.audit import read as audit_read
from cowork_adapter.audit.rules import PROBES, find_references, probe_hits, split_mcp_name
from cowork_adapter.audit.scan import (
    USAGE_FIELDS,
    AttemptRow,
    TaskScan,
    ToolRow,
    UsageRow,
    scan_events,
    scan_objects,
    scan_tools,
)
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


# ------------------------------------------------------------------ read_rows itself

_DECODERS = [audit_read.RowReader(t) for t in (ToolRow, UsageRow, AttemptRow)]


def _expected_field(rec: dict, name: str, kind):
    value = rec.get(name)
    return json.dumps(value) if kind is msgspec.Raw else value


@settings(max_examples=500, deadline=None)
@given(data=_lines(_tool_row | _event_row) | st.binary(max_size=300), which=st.sampled_from([0, 1, 2]))
def test_rows_are_the_lines_json_loads_values(data, which):
    """Each non-empty line is a row exactly when json.loads reads it as an object, and each
    field is json.loads' value (a Raw field reads back to it)."""
    decoder = _DECODERS[which]
    block = audit_read.Block(1, data[:-1] if data.endswith(b"\n") else data)
    sink = TaskScan()
    rows = _row_pairs(block, decoder, "x.jsonl", sink)
    lines = block.data.split(b"\n")
    expected = [(i, _object(line)) for i, line in enumerate(lines) if line and line != b"\r"]
    assert [i for i, _ in rows] == [i for i, rec in expected if rec is not None]
    assert [g["line"] for g in sink.gaps] == [i + 1 for i, rec in expected if rec is None]
    kinds = [f.type for f in msgspec.structs.fields(decoder.row_type)]
    for (_, row), rec in zip(rows, [rec for _, rec in expected if rec is not None], strict=True):
        for name, kind in zip(decoder.row_type.__struct_fields__, kinds, strict=True):
            got = getattr(row, name)
            got = json.dumps(json.loads(bytes(got))) if kind is msgspec.Raw else got
            assert json.dumps(got) == json.dumps(_expected_field(rec, name, kind))


@pytest.mark.parametrize(
    "line",
    [
        b'{"type": "tool_call", "args": {"a": "\xff"}}',  # invalid UTF-8 where msgspec only skips
        b'{"type": "tool_call", "args": {"a": "\xc0\xaf"}}',  # overlong
        b'{"type": "tool_call", "x": "\xed\xa0\x80"}',  # an encoded surrogate: json.loads reads it
        b'{"type": "tool_call", "x": 1' + b"0" * 5000 + b"}",  # json.loads' integer digit limit
        b'{"type": "tool_call", "args": [' + b"7" * 4301 + b"]}",
        b'{"type": "tool_call", "args": "' + b"7" * 9000 + b'"}',  # a digit run inside a string: fine
        b'{"type": "tool_call", "args": {"n": NaN}}',  # only json.loads reads NaN
        b"\xef\xbb\xbf" + b'{"type": "tool_call"}',  # a byte-order mark
        b'{"type": "tool_call"}{"type": "tool_call"}',  # two documents on one line
        b'{"type": 1e999}',
        b'{"type": "tool_call"}, {"type": "tool_call"}',  # a line of two values, comma-separated
        b'{"type": "tool_call", "a": "x\n"}',  # a string run on across a newline...
        b'{"type": "tool_call", "a": "x\n"}\n{"type": "tool_call"},{"type": "tool_call"}',  # ...and both
        b'{"type": "tool_call", "a": [1,\n2]}',  # a value run on across a newline
        b'{"type": "tool_call"}\n\n \n\r\n{"type": "tool_call"}',  # blank lines
        # Two lines run on into one row (one row fewer) and a line holding what passes for a line
        # boundary (one more): counted alone, they would cancel out.
        b'{"type": "tool_call", "a": [{"q":[\n1]}]}\n{"type": "x"}]},{"\x7f":[{"type": "tool_call"}',
        b'{"type": "tool_call", "a": [{"q":[\n1]}]}\n{"type": "x"}]},{"\\u007f":[{"type": "tool_call"}',
        # The whole-block reading puts the value "\x7f" at each newline: a line spelling that value
        # itself (raw or escaped), a value run on across lines that swallows one (an empty array or
        # an object key), a line of two rows beside it so the counts of values could cancel out.
        b'{"type": "tool_call"} "\x7f" {"type": "tool_call"}',
        b'{"type": "tool_call"} "\\u007f" {"type": "tool_call"}',
        b'{"type": "tool_call", "a": [\n]}\n{"type": "tool_call"} {"type": "tool_call"}',
        b'{"type": "tool_call", "a": [\n]}\n{"type": "tool_call"} {"type": "tool_call"} {"type": "tool_call"}',
        b'{"type": "tool_call", "a": {\n: 1}}\n{"type": "tool_call"}{"type": "tool_call"}',
        b'"\x7f"',
        b'{"type": "tool_call"}\n"x"\n{"type": "tool_call"}',
    ],
)
def test_msgspec_leniencies_are_decided_by_json_loads(line):
    """Lines msgspec (or its whole-block reading) would read otherwise than json.loads does."""
    for block in (line, b'{"type": "x"}\n' + line + b'\n{"type": "y"}'):
        rows = _row_pairs(audit_read.Block(1, block), _DECODERS[0], "t.jsonl", TaskScan())
        lines = block.split(b"\n")
        assert [i for i, _ in rows] == [i for i, part in enumerate(lines) if _object(part) is not None], line


def test_usage_sums_beyond_64_bits_stay_exact(tmp_path, monkeypatch):
    """Token counts whose sum overflows 64 bits are summed as Python ints, exactly."""
    big = dict(_FLAT, prompt_tokens=10**18 - 1, completion_tokens=10**18 - 1)
    data = _jsonl_text(*[big] * 40, dict(_FLAT, prompt_tokens=10**18))
    scan = _scanned(tmp_path, "events.jsonl", data, scan_events, 1 << 20, monkeypatch)
    assert scan.prompt_tokens == 40 * (10**18 - 1) + 10**18 and scan.completion_tokens == 40 * (10**18 - 1)
    assert scan.usage_records == 41 and scan.gaps == []


@pytest.mark.parametrize(
    "scanner,name,line,gap",
    [
        (scan_tools, "tools.jsonl", b'{"type": "tool_call", "tool": "x", "is_error": 1%s}', "malformed_line"),
        (
            scan_tools,
            "tools.jsonl",
            b'{"type": "tool_call", "tool": "x", "args": {"a": 1%s, "c": "psql"}}',
            "malformed_line",
        ),
        (scan_events, "events.jsonl", b'{"type": "llm_usage", "prompt_tokens": 1%s}', "malformed_line"),
        (scan_objects, "progress.jsonl", b'{"a": 1%s}', "malformed_line"),
        (
            scan_events,
            "events.jsonl",
            b'{"type": "llm_usage", "prompt_tokens": 1, "completion_tokens": 1, "cached_tokens": 0, "cost": 1%s}',
            "unknown_cost",
        ),
    ],
)
def test_integers_json_loads_refuses_or_no_float_holds_are_gaps(tmp_path, monkeypatch, scanner, name, line, gap):
    """json.loads refuses integers longer than sys.get_int_max_str_digits() (a malformed line);
    a cost integer beyond any float is an unknown cost. Neither stops the audit."""
    zeros = b"0" * (400 if gap == "unknown_cost" else 5000)
    scan = _scanned(tmp_path, name, line % zeros + b"\n" + _jsonl_text(_FLAT), scanner, 1 << 20, monkeypatch)
    assert [(g["reason"].value, g["line"]) for g in scan.gaps] == [(gap, 1)]
    assert scan.lines == 2


def test_a_value_json_loads_read_but_cannot_write_back_is_a_gap(tmp_path, monkeypatch):
    """A line nested to the edge of the recursion limit: read, but too deep to re-encode."""

    def too_deep(value, *args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    data = b'{"type": "tool_call", "tool": "run_command", "args": {"n": NaN}}\n'  # NaN: only json.loads reads it
    monkeypatch.setattr(audit_read.json, "dumps", too_deep)
    scan = _scanned(tmp_path, "tools.jsonl", data, scan_tools, 1 << 20, monkeypatch)
    assert [(g["reason"].value, g["line"], g["detail"]) for g in scan.gaps] == [
        ("malformed_line", 1, "nested_too_deep")
    ]
    assert scan.tool_calls == 0 and scan.lines == 1


# The probe search: any probe set, any value text: hits exactly when some probe occurs in the raw
# value (the library is ahocorasick-rs; this pins the property the scan relies on).
_probe = st.binary(min_size=1, max_size=7).map(lambda b: bytes(c % 6 + 97 for c in b))  # a..f: many near hits


@settings(max_examples=1500, deadline=None)
@given(text=st.text(alphabet="abcdef \u00e9\\/\x01psqlevalu0", max_size=90))
def test_probe_hits_are_empty_exactly_when_no_probe_occurs(text):
    for raw in (json.dumps(text).encode(), json.dumps(text, ensure_ascii=False).encode()):
        assert bool(probe_hits(raw)) == any(probe in raw for probe in PROBES), raw
        assert bool(probe_hits(msgspec.Raw(raw))) == bool(probe_hits(raw))


def test_a_probe_only_in_another_field_of_the_line_is_not_a_finding(tmp_path, monkeypatch):
    """The block-wide probe search narrows to lines; arguments are still probed on their own."""
    data = _jsonl_text(
        {
            "type": "tool_call",
            "tool": "run_command",
            "args": {"command": "ls"},
            "result_preview": "psql groundtruth_workspace eval_res.json",
        },
        _PLANTED,
    )
    scan = _scanned(tmp_path, "tools.jsonl", data, scan_tools, 1 << 20, monkeypatch)
    assert [(f["line"], f["record_index"], f["token"]) for f in scan.findings] == [(2, 1, "psql")]


# A cost is exactly float() of its text, as json.loads reads it.
_digits = st.text(alphabet="0123456789", min_size=1, max_size=20)
_cost_text = (
    st.floats(0, 1e30, allow_nan=False, allow_infinity=False).map(repr)
    | st.builds(
        lambda i, f, e: i.lstrip("0").rjust(1, "0") + ("." + f if f else "") + e,
        _digits,
        st.text(alphabet="0123456789", max_size=20),
        st.sampled_from(["", "e5", "E-7", "e+22", "e-22", "e23", "e-23", "e-30", "e300", "e-330"]),
    )
    | st.sampled_from(
        [
            "0",
            "0.0",
            "0e999",
            "9007199254740993",
            "123456789012345",
            "1234567890123456",
            "0.1",
            "0.0123",
            "1e22",
            "1e-22",
            "4.35",
            "17976931348623157e292",
            "1e999",
        ]
    )
)


@settings(max_examples=3000, deadline=None)
@given(text=_cost_text)
def test_a_cost_is_floats_reading_of_its_text(text):
    line = (
        b'{"type": "llm_usage", "prompt_tokens": 1, "completion_tokens": 1, "cached_tokens": 0, "cost": '
        + text.encode()
        + b"}"
    )
    scan = TaskScan()
    rows = _row_pairs(audit_read.Block(1, line), audit_read.RowReader(UsageRow), "e", scan)
    ((_, row),) = rows
    assert repr(row.cost) == repr(json.loads(text))
    scan.add_usage(row, "e", 1)
    want = float(text)
    if math.isfinite(want):
        assert scan.cost_known_usd == want and scan.gaps == []
    else:
        assert scan.cost_unknown == 1


@pytest.mark.parametrize(
    "data",
    [
        b"\n",
        b"\n\n",
        b"{}\n\n",
        b"\n{}\n",
        b"{}\n{}",
        b"{}\n \n",
        b"{}\r\n{}\r\n",
        b'{}\n"\x7f"\n',
        b'{}\n{} "\x7f"\n',
        b'{"a": [\n]}\n{} {}\n',
        b"{}\n{}\n",
        b"{}",
    ],
)
def test_a_log_read_in_one_read_ends_at_its_last_newline_or_not(tmp_path, monkeypatch, data):
    """A small log is decoded as read, final newline included (its separator ends the stream):
    the lines, rows and gaps are those of the plain reading either way."""
    scan = _scanned(tmp_path, "progress.jsonl", data, scan_objects, 1 << 20, monkeypatch)
    assert [g["line"] for g in scan.gaps] == [n for n, rec in _records(data) if rec is None]
    assert scan.lines == len(_list_lines(data))
    numbers = []
    for block in audit_read.iter_blocks(tmp_path / "progress.jsonl", TaskScan(), "p"):
        lines, rows = audit_read.read_rows(block, audit_read.RowReader(ToolRow), "p", TaskScan())
        assert len(rows) == len(lines)
        numbers += [block.first + line for line in lines]
    assert numbers == [n for n, rec in _records(data) if rec is not None]


def test_no_probe_holds_a_newline_so_joined_arguments_keep_hits_apart():
    """scan_tools searches a block's arguments joined by newlines: no hit may span two calls."""
    assert all(b"\n" not in probe for probe in PROBES)


@settings(max_examples=400, deadline=None)
@given(runs=st.lists(st.tuples(st.sampled_from([b"7", b"x", b"1a", b"05"]), st.integers(1, 6000)), max_size=12))
def test_the_long_integer_test_finds_every_aligned_window_of_digits(runs):
    """_may_hold_long_integer is True exactly when some aligned window is all digits (in data
    longer than the digit limit), so any run of digits json.loads refuses is found."""
    data = b"".join(piece * count for piece, count in runs)
    window, limit = audit_read._WINDOW, audit_read._INT_DIGITS
    expected = len(data) > limit and any(
        data[k * window : (k + 1) * window].isdigit() for k in range(len(data) // window)
    )
    assert audit_read._may_hold_long_integer(data) == expected
    if any(len(run) > limit for run in re.findall(rb"\d+", data)):
        assert expected


_UTF8_BITS = [
    b"a",
    b"\xc3\xa9",
    b"\xe2\x82\xac",
    b"\xf0\x9f\x98\x80",
    b"\xff",
    b"\xed\xa0\x80",
    b"\xc0\xaf",
    b"\xe2\x82",
    b"\x80",
    b"\xf4\x90\x80\x80",
]


@settings(max_examples=600, deadline=None)
@given(bits=st.lists(st.sampled_from(_UTF8_BITS), max_size=40), piece=st.sampled_from([1, 2, 3, 5, 64 << 10]))
def test_the_utf8_check_in_pieces_is_bytes_decode(bits, piece):
    """Sequences cut at any piece boundary, valid or not, are judged as one strict decode judges."""
    data = b"".join(bits)
    try:
        data.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    original = audit_read._UTF8_PIECE
    audit_read._UTF8_PIECE = piece
    try:
        assert audit_read._is_utf8(data) == valid
    finally:
        audit_read._UTF8_PIECE = original


def test_rows_are_untracked_by_the_collector():
    """gc=False is sound only for values that cannot form a cycle: decoded JSON rows."""
    import gc

    for row_type in (ToolRow, UsageRow, AttemptRow):
        row = msgspec.json.decode(b'{"type": "x", "usage": {"a": [1]}, "args": {"b": 2}}', type=row_type)
        assert not gc.is_tracked(row)
