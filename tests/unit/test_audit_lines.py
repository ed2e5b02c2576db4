"""The audit's C line scanner gives exactly what a plain json.loads reading of each line gives.

The reference here is the simplest correct reading: split the file on newlines, json.loads each
line, apply the counting rules record by record (TaskScan.add_usage is the per-record rule).
The scanner under test reads the same bytes through audit_lines (C fast path, json.loads
fallback) in small chunks, so blocks split everywhere. Lines are generated valid, then written
in several JSON styles and corrupted in the ways logs get corrupted.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cowork_adapter import _jsonl, audit_lines
from cowork_adapter.audit_rules import PROBES, find_references, split_mcp_name
from cowork_adapter.audit_scan import USAGE_KEYS, TaskScan, UsageRow, scan_events, scan_objects, scan_tools

# ------------------------------------------------------------------ generated log lines

_text = st.text(alphabet=st.sampled_from(list("ab psql/eval_res.json groundtruth_workspace é€😀\"\\\n\t\x01")),
                max_size=30)
_scalar = st.none() | st.booleans() | st.integers(-5, 10**20) | st.floats(allow_nan=True, allow_infinity=True) | _text
_value = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                      max_leaves=8)
_tool_name = st.sampled_from(["run_command", "mcp_files__read_file", "mcp_files__write_file", "mcp_pg__query",
                              "mcp_terminal__run", "mcp_x", "python_execute", ""]) | _scalar
_args = st.fixed_dictionaries({}, optional={
    "command": st.sampled_from(["cat groundtruth_workspace/a.xlsx", "psql -c 'select 1'", "ls", "cat eval_res.json",
                                "PGPASSWORD=x psql", "\\u0070sql"]) | _text,
    "path": _text, "data": _value}) | _value
_tool_row = st.fixed_dictionaries(
    {"type": st.sampled_from(["tool_call", "tool_call", "tool_call", "tool_result"]) | _scalar, "tool": _tool_name},
    optional={"args": _args, "is_error": st.sampled_from([True, False, 1, 0, None, "true"]),
              "result_preview": _text, "ts": st.just("2026-01-01T00:00:00+00:00")},
)
_count = (st.integers(0, 10**6) | st.just(0) | st.integers(-3, -1) | st.floats(0, 1e6)
          | st.sampled_from([True, None, "7", math.nan, 10**18 - 1, 10**18, 2**64]))
_usage_fields = st.fixed_dictionaries({}, optional={
    "prompt_tokens": _count, "completion_tokens": _count, "cached_tokens": _count,
    "cost": st.floats(0, 5) | st.integers(0, 3) | st.sampled_from([None, -1.0, math.inf, "0.1", True]),
    "cost_known": st.sampled_from([True, False, None, 0]), "cost_estimated": st.sampled_from([True, False, None, 1]),
    "model": st.sampled_from(["m/a", "m/b", "", None, 3]) | _text, "provider": st.sampled_from(["p", None]),
    "response_provider": st.sampled_from(["Anthropic", None, ["x"]]),
})
# Regular records (what the column-wise sums take) as often as irregular ones.
_regular_usage = st.fixed_dictionaries({
    "prompt_tokens": st.integers(0, 10**6), "completion_tokens": st.sampled_from([0, 0, 7]),
    "cached_tokens": st.integers(0, 99), "cost": st.floats(0, 5) | st.integers(0, 3),
    "cost_known": st.sampled_from([True, None]), "cost_estimated": st.sampled_from([True, False, None]),
    "model": st.sampled_from(["m/a", "m/b", "", None]), "provider": st.sampled_from(["p", "q"]),
})
_usage_row = st.builds(lambda kind, body, nested: {"type": kind, **({"usage": body} if nested else body)},
                       st.sampled_from(["llm_usage", "llm_usage", "tool_omission", "capability_omission_x", "round"]),
                       _regular_usage | _usage_fields, st.sampled_from([False, False, True]))
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
_DAMAGE += [lambda line, bad=bad: line[:-1] + b', "v": ' + bad + b"}" for bad in
            (b"01", b"1.", b"1e+", b"-", b".5", b"+1", b"tru", b"nul", b"[1,]", b'{"a":1,}', b'"\\x"',
             b'"\\u12g4"', b"1 2", b'{"a" 1}', b"[1 2]")]
# ...and values it reads, the same way.
_DAMAGE += [lambda line, good=good: line[:-1] + b', "v": ' + good + b"}" for good in
            (b"-0", b"1E+2", b"-1.5e-3", b"123456789012345678901234567890", b'"\\ud800"', b'"\\/\\b"',
             b"[ ]", b"{ }", b"1e999")]


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
            scan.gap(audit_lines.AuditGapReason.MALFORMED_LINE, "tools.jsonl", number)
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
    return {"calls": scan.tool_calls, "mcp": scan.mcp_calls, "errors": scan.mcp_errors,
            "servers": {k: (v[0], v[1], dict(v[2])) for k, v in scan.mcp_servers.items()},
            "gaps": [(g["reason"].value, g["line"]) for g in scan.gaps]}


def _reference_events(data: bytes) -> TaskScan:
    scan = TaskScan()
    for number, rec in _records(data):
        if rec is None:
            scan.gap(audit_lines.AuditGapReason.MALFORMED_LINE, "events.jsonl", number)
            continue
        kind = rec.get("type")
        if kind == "llm_usage":
            scan.add_usage(UsageRow(*(rec.get(name) for name in UsageRow._fields)), "events.jsonl", number)
        elif isinstance(kind, str) and "omission" in kind:
            scan.add_omission("events.jsonl", number)
    return scan


def _usage_facts(scan: TaskScan) -> dict:
    return {"records": scan.usage_records, "bearing": scan.token_bearing, "prompt": scan.prompt_tokens,
            "completion": scan.completion_tokens, "cached": scan.cached_tokens, "unknown": scan.cost_unknown,
            "estimated": scan.cost_estimated, "models": list(scan.models), "providers": list(scan.providers),
            "response_providers": list(scan.response_providers), "omissions": scan.omission_refs,
            "gaps": [(g["reason"].value, g["line"], g["detail"]) for g in scan.gaps]}


# ------------------------------------------------------------------ the scanner, in small chunks


def _scanned(tmp_path: Path, name: str, data: bytes, scanner, chunk: int, monkeypatch) -> TaskScan:
    monkeypatch.setattr(audit_lines, "CHUNK_BYTES", chunk)
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
_FLAT = {"type": "llm_usage", "prompt_tokens": 5, "completion_tokens": 0, "cached_tokens": 1, "cost": 0.5,
         "cost_known": True, "cost_estimated": True, "model": "m"}
_SILENT = {"type": "llm_usage", "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "cost": 0, "model": "n"}


@_SETTINGS
@example(data=_jsonl_text(_CALL, {"type": "note"}, _CALL, _PLANTED, _CALL, _PLANTED), chunk=1 << 20)
@example(data=_jsonl_text(_CALL, _PLANTED, _CALL, _PLANTED), chunk=64)
@given(data=_lines(_tool_row), chunk=st.sampled_from([7, 64, 300, 4096, 1 << 20]))
def test_tool_calls_and_findings_match_a_plain_json_reading(tmp_path, monkeypatch, data, chunk):
    scan = _scanned(tmp_path, "tools.jsonl", data, scan_tools, chunk, monkeypatch)
    got = _tools_facts(scan) | {"findings": [(f["line"], f["record_index"], f["token"]) for f in scan.findings]}
    assert got == _reference_tools(data)


@_SETTINGS
@example(data=_jsonl_text(_FLAT, _SILENT, _FLAT, {"type": "x_omission"}, _SILENT), chunk=1 << 20)
# Names first seen in C-summed records and in records add_usage judges keep first-seen order...
@example(data=_jsonl_text(dict(_FLAT, model="m/b"), dict(_FLAT, model="m/a", cost_known=False),
                          dict(_FLAT, model="m/c")), chunk=1 << 20)
# ...and the cap on names per task (50) is reached the same way.
@example(data=_jsonl_text(*(dict(_FLAT, model=f"m/{n}", cost_known=n % 7 != 3) for n in range(70))), chunk=1 << 20)
@given(data=_lines(_event_row), chunk=st.sampled_from([7, 64, 300, 4096, 1 << 20]))
def test_usage_and_omissions_match_a_plain_json_reading(tmp_path, monkeypatch, data, chunk):
    scan = _scanned(tmp_path, "events.jsonl", data, scan_events, chunk, monkeypatch)
    reference = _reference_events(data)
    got, want = _usage_facts(scan), _usage_facts(reference)
    got["gaps"], want["gaps"] = sorted(got["gaps"], key=repr), sorted(want["gaps"], key=repr)  # per block: malformed first
    assert got == want
    assert math.isclose(scan.cost_known_usd, reference.cost_known_usd, rel_tol=1e-9, abs_tol=1e-12)


@_SETTINGS
@given(data=_lines(_event_row | _tool_row) | st.binary(max_size=200), chunk=st.sampled_from([7, 64, 1 << 20]))
def test_every_malformed_line_is_found_and_nothing_else(tmp_path, monkeypatch, data, chunk):
    scan = _scanned(tmp_path, "progress.jsonl", data, scan_objects, chunk, monkeypatch)
    assert [g["line"] for g in scan.gaps] == [n for n, rec in _records(data) if rec is None]
    assert scan.lines == len(_list_lines(data))


def _list_lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n") if data else []


# ------------------------------------------------------------------ the C entry points themselves

_KEYS = (b"type", b"tool", b"args")
_USAGE_SELECT = (b"llm_usage", b"omission")
_NAME_CAP = 2  # small, so the cap on first sightings is reached


@settings(max_examples=500, deadline=None)
@given(data=_lines(_tool_row | _event_row) | st.binary(max_size=300))
def test_c_rows_are_the_lines_json_values_or_unsure(data):
    block = data[:-1] if data.endswith(b"\n") else data
    got = _jsonl.rows(block, _KEYS, (), ())
    lines = block.split(b"\n")
    if got is None:  # unsure: then some non-empty line really is something json.loads must decide
        assert any(line and line != b"\r" and _jsonl.rows(line, _KEYS, (), ()) is None for line in lines)
        return
    count, rows = got
    assert count == len(lines)
    expected = [(i, _object(line)) for i, line in enumerate(lines) if line and line != b"\r"]
    assert [i for i, _ in expected] == [row[0] for row in rows]
    for (_, rec), row in zip(expected, rows):
        assert rec is not None  # C accepted only what json.loads reads as an object
        for key, raw in zip(_KEYS, row[1:]):
            assert json.dumps(json.loads(raw)) == json.dumps(rec.get(key.decode()))


@settings(max_examples=300, deadline=None)
@given(data=_lines(_tool_row | _event_row))
def test_c_tally_and_usage_agree_with_c_rows(data):
    block = data[:-1] if data.endswith(b"\n") else data
    rows = _jsonl.rows(block, _KEYS, (), (b"psql", b"eval"))
    tally = _jsonl.tally(block, _KEYS, (b"psql", b"eval"))
    usage = _jsonl.usage(block, USAGE_KEYS, _USAGE_SELECT, _NAME_CAP)
    assert (rows is None) == (tally is None) == (usage is None)
    if rows is None:
        return
    count, rows = rows
    counts: dict[bytes, int] = {}
    for row in rows:
        counts[b"\n".join(row[1:3])] = counts.get(b"\n".join(row[1:3]), 0) + 1
    assert tally[0] == usage[0] == count and tally[1] == counts
    assert [(h[0], h[3]) for h in tally[2]] == [(row[0], row[3]) for row in rows if row[3] is not None]
    starts = [0]
    for line in block.split(b"\n"):
        starts.append(starts[-1] + len(line) + 1)
    assert [h[1] for h in tally[2]] == [starts[h[0]] for h in tally[2]]
    _assert_usage_partitions_rows(block, usage)


def _assert_usage_partitions_rows(block: bytes, usage) -> None:
    """usage() gives back some of the kept lines as rows and sums the rest; the sums, and the
    first sightings of names, are what add_usage makes of those records, which are regular
    (add_usage notes no gap for any)."""
    _, sums, names, left = usage
    kept = _jsonl.rows(block, USAGE_KEYS, _USAGE_SELECT, ())[1]
    left_lines = {row[0] for row in left}
    assert left == [row for row in kept if row[0] in left_lines]
    summed = [row for row in kept if row[0] not in left_lines]
    reference, sighted = TaskScan(), []
    for row in summed:
        rec = UsageRow._make(json.loads(raw) for raw in row[2:])
        assert json.loads(row[1]) == "llm_usage"
        reference.add_usage(rec, "events.jsonl", row[0])
        for field, raw in enumerate(row[8:11]):
            value = json.loads(raw)
            distinct = [s for s in sighted if s[1] == field]
            if isinstance(value, str) and value and raw not in [s[2] for s in distinct] and len(distinct) < _NAME_CAP:
                sighted.append((row[0], field, raw))
    assert reference.gaps == []
    assert sums[:6] == (reference.usage_records, reference.token_bearing, reference.prompt_tokens,
                        reference.completion_tokens, reference.cached_tokens, reference.cost_estimated)
    assert math.isclose(sums[6], reference.cost_known_usd, rel_tol=1e-9, abs_tol=1e-12)
    assert names == sighted


def test_usage_sums_beyond_64_bits_stay_exact(tmp_path, monkeypatch):
    """Token counts whose sum overflows 64 bits leave the C sums for Python's ints, exactly."""
    big = dict(_FLAT, prompt_tokens=10**18 - 1, completion_tokens=10**18 - 1)
    data = _jsonl_text(*[big] * 40, dict(_FLAT, prompt_tokens=10**18))  # 19 digits: Python's at once
    block = data[:-1]
    _assert_usage_partitions_rows(block, _jsonl.usage(block, USAGE_KEYS, _USAGE_SELECT, _NAME_CAP))
    scan = _scanned(tmp_path, "events.jsonl", data, scan_events, 1 << 20, monkeypatch)
    assert scan.prompt_tokens == 40 * (10**18 - 1) + 10**18 and scan.completion_tokens == 40 * (10**18 - 1)
    assert scan.usage_records == 41 and scan.gaps == []


@pytest.mark.parametrize("scanner,name,line,gap", [
    (scan_tools, "tools.jsonl", b'{"type": "tool_call", "tool": "x", "is_error": 1%s}', "malformed_line"),
    (scan_tools, "tools.jsonl", b'{"type": "tool_call", "tool": "x", "args": {"a": 1%s, "c": "psql"}}', "malformed_line"),
    (scan_events, "events.jsonl", b'{"type": "llm_usage", "prompt_tokens": 1%s}', "malformed_line"),
    (scan_objects, "progress.jsonl", b'{"a": 1%s}', "malformed_line"),
    (scan_events, "events.jsonl", b'{"type": "llm_usage", "prompt_tokens": 1, "completion_tokens": 1, '
                                  b'"cached_tokens": 0, "cost": 1%s}', "unknown_cost"),
])
def test_integers_json_loads_refuses_or_no_float_holds_are_gaps(tmp_path, monkeypatch, scanner, name, line, gap):
    """json.loads refuses integers longer than sys.get_int_max_str_digits() (a malformed line);
    a cost integer beyond any float is an unknown cost. Neither stops the audit."""
    zeros = b"0" * (400 if gap == "unknown_cost" else 5000)
    scan = _scanned(tmp_path, name, line % zeros + b"\n" + _jsonl_text(_FLAT), scanner, 1 << 20, monkeypatch)
    assert [(g["reason"].value, g["line"]) for g in scan.gaps] == [(gap, 1)]
    assert scan.lines == 2


@settings(max_examples=2000, deadline=None)
@given(data=st.binary(max_size=120), keys=st.lists(st.sampled_from([b"a", b"type", b"\xff", b"{"]), max_size=4))
def test_c_entry_points_survive_any_bytes(data, keys):
    """Arbitrary bytes: an answer or None, never a crash (the C code walks untrusted logs)."""
    keys = tuple(keys) or (b"a",)
    for got in (_jsonl.rows(data, keys, (b"a",), (b"\\",)), _jsonl.tally(data, keys, (b"{",)),
                _jsonl.usage(data, (*keys, *USAGE_KEYS)[:len(USAGE_KEYS)], (b"x",), 3)):
        assert got is None or got[0] == data.count(b"\n") + 1


def test_c_entry_points_refuse_bad_arguments():
    with pytest.raises(TypeError):
        _jsonl.rows(b"{}", ("type",), (), ())
    with pytest.raises(TypeError):
        _jsonl.rows(b"{}", (b"",), (), ())
    with pytest.raises(ValueError):
        _jsonl.rows(b"{}", tuple(bytes([65 + i]) for i in range(17)), (), ())
    with pytest.raises(ValueError):
        _jsonl.tally(b"{}", (), ())
    with pytest.raises(ValueError):
        _jsonl.usage(b"{}", USAGE_KEYS[:-1], (), 1)
    with pytest.raises(ValueError):
        _jsonl.usage(b"{}", USAGE_KEYS, (), 65)


# UTF-8: bytes of every class (ASCII, continuations, every lead, the edges of each range), in
# runs long enough to cross the 16- and 64-byte steps of the vectorised checks.
_utf8_piece = st.sampled_from([b"a", b"\x7f", b"\x80", b"\xbf", b"\xc0", b"\xc1", b"\xc2", b"\xdf", b"\xe0",
                               b"\xed", b"\xef", b"\xf0", b"\xf4", b"\xf5", b"\xff", b"\xa0", b"\x9f", b"\x90",
                               b"\x8f"]) | st.text(max_size=3).map(lambda t: t.encode("utf-8", "surrogatepass"))


def _strictly_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@settings(max_examples=3000, deadline=None)
@given(pieces=st.lists(_utf8_piece, max_size=80), pad=st.integers(0, 65))
def test_the_utf8_check_is_pythons_strict_decoder(pieces, pad):
    data = b"x" * pad + b"".join(pieces)
    want = _strictly_utf8(data)
    for check in _jsonl.UTF8_CHECKS:
        assert _jsonl.is_utf8(data, check) == want, check
    line = b'{"s": "' + data.replace(b'"', b"").replace(b"\\", b"").translate(None, bytes(range(32))) + b'"}'
    assert (_jsonl.rows(line, (b"s",), (), ()) is not None) == _strictly_utf8(line)


# Each class of UTF-8 error and the valid neighbours on its edges, at every offset in a 64-byte step.
_UTF8_EDGES = [
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\x9f\xbf",  # surrogates; U+D7FF
    b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xe0\xa0\x80",  # overlong 3-byte; U+0800
    b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf0\x90\x80\x80",  # overlong 4-byte; U+10000
    b"\xf4\x90\x80\x80", b"\xf4\x8f\xbf\xbf", b"\xf5\x80\x80\x80", b"\xff",  # beyond U+10FFFF; U+10FFFF
    b"\xc0\x80", b"\xc1\xbf", b"\xc2\x80", b"\xdf\xbf",  # overlong 2-byte; U+0080, U+07FF
    b"\x80", b"\xc2\x80\x80", b"\xe2\x82\xac\x80",  # continuations too many
    b"\xc2", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc2a", b"\xe2a\xac", b"\xf0\x9f\x98a",  # too few
    b"\xe2\x82\xac", b"\xf0\x9f\x98\x80",  # fine: euro sign, an emoji
]


@pytest.mark.parametrize("piece", _UTF8_EDGES)
def test_the_utf8_check_on_each_error_class_at_each_offset(piece):
    for pad in range(66):
        for tail in (b"", b"z" * 70, b"\xc3\xa9"):
            data = b"y" * pad + piece + tail
            want = _strictly_utf8(data)
            for check in _jsonl.UTF8_CHECKS:
                assert _jsonl.is_utf8(data, check) == want, (check, data)


def test_this_cpu_runs_the_vectorised_utf8_checks():
    """x86-64 machines here have SSSE3 and AVX2: the checks above must not have run the scalar one alone."""
    import platform

    if platform.machine() == "x86_64":
        assert {"ssse3", "avx2"} <= set(_jsonl.UTF8_CHECKS)
    assert _jsonl.UTF8_CHECKS[0] == "scalar"
    with pytest.raises(ValueError):
        _jsonl.is_utf8(b"", "sse9")


@pytest.fixture(scope="module")
def portable(tmp_path_factory):
    """_jsonl.c built without SIMD (the code machines without SSE2 run), loaded beside this one."""
    import importlib.util
    import shutil
    import subprocess
    import sysconfig

    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler, "a C compiler builds this project; none was found"
    source = Path(_jsonl.__file__).with_name("_jsonl.c")
    target = tmp_path_factory.mktemp("portable") / ("_jsonl" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-std=c11", "-DJSONL_NO_SIMD",
                    f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(target)], check=True)
    spec = importlib.util.spec_from_file_location("_jsonl", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_STRING_EDGES = [b'{"a": "' + b"x" * k + bad + b"y" * 20 + b'"}' for k in range(17)
                 for bad in (b"\x1f", b"\n", b'"', b"\\", b"\\u0041", b"\xc3\xa9", b"\xff")]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_lines(_tool_row | _event_row) | st.binary(max_size=300) | st.sampled_from(_STRING_EDGES))
def test_the_portable_build_answers_like_this_one(portable, data):
    block = data[:-1] if data.endswith(b"\n") else data
    assert portable.rows(block, _KEYS, (), (b"psql",)) == _jsonl.rows(block, _KEYS, (), (b"psql",))
    assert portable.tally(block, _KEYS, PROBES) == _jsonl.tally(block, _KEYS, PROBES)
    assert portable.usage(block, USAGE_KEYS, _USAGE_SELECT, 3) == _jsonl.usage(block, USAGE_KEYS, _USAGE_SELECT, 3)
    assert portable.is_utf8(block, "scalar") == _jsonl.is_utf8(block, _jsonl.UTF8_CHECKS[-1])
    assert portable.UTF8_CHECKS == ("scalar",)


@pytest.mark.parametrize("line", _STRING_EDGES)
def test_both_builds_read_each_string_edge_as_json_loads_does(portable, line):
    """A byte that ends or breaks a string, at every offset of an 8- and a 16-byte step."""
    want = _object(line) is not None
    for module in (portable, _jsonl):
        got = module.rows(line, (b"a",), (), ())
        assert (got is not None) == want, (module, line)


def test_a_value_json_loads_read_but_cannot_write_back_is_a_gap(tmp_path, monkeypatch):
    """A line nested to the edge of the recursion limit: read, but too deep to re-encode."""
    def too_deep(value, *args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    data = b'{"type": "tool_call", "tool": "run_command", "n": NaN}\n'  # NaN: only json.loads reads it
    monkeypatch.setattr(audit_lines.json, "dumps", too_deep)
    scan = _scanned(tmp_path, "tools.jsonl", data, scan_tools, 1 << 20, monkeypatch)
    assert [(g["reason"].value, g["line"], g["detail"]) for g in scan.gaps] == [("malformed_line", 1, "nested_too_deep")]
    assert scan.tool_calls == 0 and scan.lines == 1


# The probe sieve: any probe set (up to the 32 the C code takes, short ones and ones sharing a
# fingerprint), any value text, at every offset of a 32-byte step: kept exactly when some probe
# occurs in the raw value, in both builds.
_probe = st.binary(min_size=1, max_size=7).map(lambda b: bytes(c % 6 + 97 for c in b))  # a..f: many near hits


@settings(max_examples=1500, deadline=None)
@given(probes=st.lists(_probe, min_size=1, max_size=32), text=st.text(alphabet="abcdef \u00e9", max_size=90),
       pad=st.integers(0, 33))
def test_the_probe_sieve_keeps_a_value_exactly_when_it_holds_a_probe(portable, probes, text, pad):
    raw = json.dumps(" " * pad + text, ensure_ascii=False).encode()
    line = b'{"a": ' + raw + b"}"
    want = any(probe in raw for probe in probes)
    for module in (portable, _jsonl):
        (_, row), = module.rows(line, (b"a",), (), tuple(probes))[1]
        assert (row is not None) == want, (module, probes, raw)
        assert (row == raw) if want else True


# A regular record's cost, read in C, is exactly float() of its text: one IEEE operation when
# the text allows it (few digits, a small power of ten), strtod otherwise.
_digits = st.text(alphabet="0123456789", min_size=1, max_size=20)
_cost_text = (st.floats(0, 1e30, allow_nan=False, allow_infinity=False).map(repr)
              | st.builds(lambda i, f, e: i.lstrip("0").rjust(1, "0") + ("." + f if f else "") + e,
                          _digits, st.text(alphabet="0123456789", max_size=20),
                          st.sampled_from(["", "e5", "E-7", "e+22", "e-22", "e23", "e-23", "e-30", "e300", "e-330"]))
              | st.sampled_from(["0", "0.0", "0e999", "9007199254740993", "123456789012345", "1234567890123456",
                                 "0.1", "0.0123", "1e22", "1e-22", "4.35", "17976931348623157e292"]))


@settings(max_examples=3000, deadline=None)
@given(text=_cost_text)
def test_a_regular_cost_is_floats_reading_of_its_text(text):
    line = b'{"type": "llm_usage", "prompt_tokens": 1, "completion_tokens": 1, "cached_tokens": 0, "cost": ' + text.encode() + b"}"
    got = _jsonl.usage(line, USAGE_KEYS, _USAGE_SELECT, 1)
    want = float(text)
    if not math.isfinite(want):
        assert got[1][0] == 0 and len(got[3]) == 1  # not summed: add_usage notes the unknown cost
    else:
        assert got[1][0] == 1 and got[1][6] == want and math.copysign(1, got[1][6]) == 1, (text, got[1][6], want)
