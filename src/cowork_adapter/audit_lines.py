"""Log files to rows of raw JSON values: streamed, validated in C, json.loads the arbiter.

What a caller must know:
- iter_blocks reads a file in CHUNK_BYTES chunks and yields Blocks of whole lines (views of what
  was read, valid until the next block is asked for); no file is loaded whole. A line longer
  than MAX_LINE_BYTES is skipped as an `oversized_line` gap, so memory stays bounded by
  CHUNK_BYTES + MAX_LINE_BYTES whatever the file size.
- raw_rows turns a block into rows (line index in the block, raw value of each wanted top-level
  key). Every non-empty line must be one JSON object, exactly as json.loads reads it; any other
  line is a `malformed_line` gap with its 1-based line number, and the scan goes on.
- A raw value is JSON text that json.loads reads back to the line's value: the line's own bytes
  when the C scanner (_jsonl.c) read the line, json.dumps of json.loads' value when only
  json.loads could (NaN, lone surrogates, a byte-order mark, escaped keys, deep nesting).
  An absent key reads b"null", as dict.get would give None.
- With `probes`, the last key's raw value is a sieve result: kept when it contains a probe,
  else None (then no decoded string inside it holds one either: the escapes that could spell a
  probe's character are probes themselves, see audit_rules.PROBES).
- tally_rows and usage_rows are what the scanners use: counts of raw values and probe hits,
  and sums of regular usage records. Each has a C fast path and the same answer built from
  raw_rows when some line needs json.loads.
"""

from __future__ import annotations

import json
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from . import _jsonl
from .vocab import AuditGapReason

if TYPE_CHECKING:
    from .audit_scan import TaskScan

CHUNK_BYTES = 4 << 20  # most agent logs fit in one read: no line straddles two chunks
MAX_LINE_BYTES = 16 << 20


class Block:
    """Whole lines of a log without the final newline (a bytes-like view), the first one
    numbered `first` (1-based).

    The consumer sets `count` to the number of lines when it has counted them (raw_rows does);
    otherwise iter_blocks counts them itself before numbering the next block.
    """

    __slots__ = ("first", "data", "count")

    def __init__(self, first: int, data: bytes | memoryview) -> None:
        self.first = first
        self.data = data
        self.count: int | None = None


def iter_blocks(path: str | Path, scan: TaskScan, rel: str) -> Iterator[Block]:
    """Blocks of whole lines, streamed. Oversized lines are gaps, never yielded. OSError propagates.

    A block is a view of what was read, valid until the consumer asks for the next block.
    """
    lineno = 1
    carry = b""
    skipping = False  # inside an oversized line: drop bytes up to its newline
    with open(path, "rb", buffering=0) as handle:
        while True:
            chunk = handle.read(CHUNK_BYTES)
            if not chunk:
                break
            scan.bytes += len(chunk)
            if skipping:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                chunk = chunk[newline + 1:]
                skipping = False
            buf = carry + chunk if carry else chunk  # a copy only when a line straddles two reads
            cut = buf.rfind(b"\n")
            if cut < 0:
                if len(buf) > MAX_LINE_BYTES:
                    scan.gap(AuditGapReason.OVERSIZED_LINE, rel, lineno)
                    lineno += 1
                    carry, skipping = b"", True
                else:
                    carry = buf
                continue
            with memoryview(buf) as view, view[:cut] as data:
                block = Block(lineno, data)
                yield block
            lineno += _line_count(block)
            carry = buf[cut + 1:]
        if carry and not skipping:  # an oversized final line was reported when it crossed the bound
            block = Block(lineno, carry)
            yield block
            lineno += _line_count(block)
    scan.lines += lineno - 1


def _line_count(block: Block) -> int:
    return block.count if block.count is not None else bytes(block.data).count(b"\n") + 1


_SCAN_ONCE = json.JSONDecoder().scan_once  # the same configuration json.loads uses by default
_JSON_WS = json.decoder.WHITESPACE


def parse_object(line: bytes) -> dict[str, Any] | None:
    """The line as a JSON object, else None: exactly json.loads' answer, with less overhead.

    A line starting `{` with a nonzero second byte is what json.loads decodes as UTF-8
    (surrogatepass) with no leading whitespace; that case goes straight to the C scanner.
    Anything else (BOMs, UTF-16/32 guesses, leading blanks) takes json.loads itself. Nesting too
    deep for the interpreter's recursion limit is a line json.loads cannot read either.
    """
    try:
        if line[:1] == b"{" and line[1:2] != b"\x00":
            text = line.decode("utf-8", "surrogatepass")
            value, end = _SCAN_ONCE(text, 0)
            if end != len(text) and _JSON_WS.match(text, end).end() != len(text):
                return None  # extra data after the object
        else:
            value = json.loads(line)
    except (ValueError, StopIteration, RecursionError):  # ValueError includes UnicodeDecodeError
        return None
    return value if isinstance(value, dict) else None


def _selected(raw: bytes, select: tuple[bytes, ...]) -> bool:
    """The C scanner's row filter, for rows json.loads decoded."""
    return not select or b"\\" in raw or any(s in raw for s in select)


def _sieved(raws: tuple[bytes, ...], probes: tuple[bytes, ...]) -> tuple[Any, ...]:
    """The C scanner's probe sieve on the last value, for rows json.loads decoded."""
    if not probes or any(p in raws[-1] for p in probes):
        return raws
    return (*raws[:-1], None)


def raw_rows(block: Block, keys: tuple[bytes, ...], select: tuple[bytes, ...], rel: str,
             scan: TaskScan, probes: tuple[bytes, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows (line index in the block, raw value per key) of the block's JSON-object lines.

    With `select`, only rows whose keys[0] raw value contains one of its byte strings (or a
    backslash) are returned; every line is still validated. With `probes`, the last value is
    sieved (see above). Malformed lines are gaps.
    """
    got = _jsonl.rows(block.data, keys, select, probes)
    if got is not None:
        block.count, rows = got
        return rows
    # Some line needs json.loads: take the block line by line, each through C first.
    lines = bytes(block.data).split(b"\n")
    block.count = len(lines)
    names = [key.decode() for key in keys]
    out: list[tuple[Any, ...]] = []
    for index, line in enumerate(lines):
        if not line or line == b"\r":
            continue
        got = _jsonl.rows(line, keys, select, probes)
        if got is not None:
            out.extend((index, *row[1:]) for row in got[1])
            continue
        rec = parse_object(line)
        if rec is None:
            scan.gap(AuditGapReason.MALFORMED_LINE, rel, block.first + index)
            continue
        try:
            raws = tuple(json.dumps(rec[name]).encode() if name in rec else b"null" for name in names)
        except RecursionError:  # read at the edge of the recursion limit, too deep to write back
            scan.gap(AuditGapReason.MALFORMED_LINE, rel, block.first + index, "nested_too_deep")
            continue
        if raws and _selected(raws[0], select):
            out.append((index, *_sieved(raws, probes)))
    return out


def tally_rows(block: Block, keys: tuple[bytes, ...], probes: tuple[bytes, ...], rel: str,
               scan: TaskScan) -> tuple[dict[bytes, int], list[tuple[int, int, bytes, bytes]]]:
    """({joined raw values of keys[:-1]: lines}, [(line index, byte offset, joined, raw last)]).

    The list holds the lines whose last key's raw value contains a probe. Malformed lines are
    gaps; `joined` is the raw values joined by a newline (no raw value holds one).
    """
    got = _jsonl.tally(block.data, keys, probes)
    if got is not None:
        block.count, counts, hits = got
        return counts, hits
    rows = raw_rows(block, keys, (), rel, scan, probes)
    tallied: dict[bytes, int] = {}
    found = []
    starts: list[int] | None = None
    for row in rows:
        joined = b"\n".join(row[1:-1])
        tallied[joined] = tallied.get(joined, 0) + 1
        if row[-1] is not None:
            if starts is None:  # byte offset of each line: only wanted for a hit
                lengths = [len(line) + 1 for line in bytes(block.data).split(b"\n")]
                starts = [0, *accumulate(lengths)]
            found.append((row[0], starts[row[0]], joined, row[-1]))
    return tallied, found


def usage_rows(block: Block, keys: tuple[bytes, ...], select: tuple[bytes, ...], name_cap: int, rel: str,
               scan: TaskScan) -> tuple[tuple[Any, ...] | None, list[tuple[int, int, bytes]], list[tuple[Any, ...]]]:
    """(sums of the regular llm_usage records, first sightings of their names, rows of the
    other lines `select` keeps): see _jsonl.usage. When some line needs json.loads, no record
    is summed: sums is None and every kept line is a row."""
    got = _jsonl.usage(block.data, keys, select, name_cap)
    if got is not None:
        block.count, sums, names, rows = got
        return sums, names, rows
    return None, [], raw_rows(block, keys, select, rel, scan)


_REMEMBERED: dict[bytes, Any] = {}
_REMEMBER_LIMIT = 4096  # entries of at most _REMEMBER_BYTES each: about a megabyte at most
_REMEMBER_BYTES = 256


def decode_raw(raw: bytes) -> Any:
    """json.loads of one raw value, remembered: a log repeats a few types, tools and flags.

    Callers only read the value (it may be shared)."""
    value = _REMEMBERED.get(raw, _REMEMBERED)
    if value is not _REMEMBERED:
        return value
    value = json.loads(raw)
    if len(raw) <= _REMEMBER_BYTES:
        if len(_REMEMBERED) >= _REMEMBER_LIMIT:
            _REMEMBERED.clear()
        _REMEMBERED[raw] = value
    return value
