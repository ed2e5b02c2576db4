"""The audit scan's pieces against their references: the probe search, a cost's reading, one read of a log, the
long-integer and UTF-8 checks, the collector.
"""

from __future__ import annotations

import json
import math
import re

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_audit_read import _PLANTED, _jsonl_text, _list_lines, _records, _row_pairs, _scanned

from cowork_adapter.audit import read as audit_read
from cowork_adapter.audit.rules import PROBES, probe_hits
from cowork_adapter.audit.scan import AttemptRow, TaskScan, ToolRow, UsageRow, scan_objects, scan_tools

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
