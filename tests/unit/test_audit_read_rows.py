"""The audit's read_rows gives exactly the values json.loads gives, and what it cannot give is a gap."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_audit_read import _FLAT, _event_row, _jsonl_text, _lines, _object, _row_pairs, _scanned, _tool_row

from cowork_adapter.audit import read as audit_read
from cowork_adapter.audit.scan import AttemptRow, TaskScan, ToolRow, UsageRow, scan_events, scan_objects, scan_tools

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
