"""Reading logs: files to blocks of whole lines, lines to typed rows (msgspec), json.loads the arbiter.

What a caller must know:
- iter_blocks reads a file in CHUNK_BYTES chunks and yields Blocks of whole lines; no file is
  loaded whole. A line longer
  than MAX_LINE_BYTES is skipped as an `oversized_line` gap, so memory stays bounded by
  CHUNK_BYTES + MAX_LINE_BYTES whatever the file size. Lines are counted into `Sink.lines`,
  bytes into `Sink.bytes`.
- read_rows turns a block into its rows and their line indexes in the block, a row being an instance
  of the caller's msgspec Struct: the fields it names, `None` when absent (as dict.get gives),
  `msgspec.Raw` fields as JSON text. Every non-empty line must be one JSON object exactly as
  json.loads reads it; any other line is a `malformed_line` gap at its 1-based line number.
- msgspec is trusted only where it cannot disagree with json.loads: it does not check the UTF-8
  of values it skips, and it reads integers longer than json.loads' digit limit there, so a
  block goes through msgspec only when its bytes are valid UTF-8 and hold no run of digits that
  long. Any line msgspec refuses (NaN, a byte-order mark, lone surrogates, numbers beyond its
  range...) is asked of json.loads, whose answer stands.
- A block is first read whole, in one msgspec call (see _SEPARATOR); when that reading cannot
  stand for the lines one by one, each line is read alone.
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol, TypeVar, Union

import ahocorasick_rs
import msgspec

from ..container import safefile
from ..runroot.dumps import dumps_folder_of
from ..vocab import AuditGapReason

CHUNK_BYTES = 4 << 20  # most agent logs fit in one read: no line straddles two chunks
MAX_LINE_BYTES = 16 << 20


class Sink(Protocol):
    """What reading reports to: byte and line counts, and gaps (the scan's TaskScan)."""

    bytes: int
    lines: int

    def gap(
        self, reason: AuditGapReason, file: str | None, line: int | None = None, detail: str | None = None
    ) -> None: ...


class Block:
    """Whole lines of a log: `data` without the final newline, the first one numbered `first`
    (1-based). `count`, its number of lines, is set by read_rows (which learns it for free)
    or, when no one has, by iter_blocks before it numbers the next block.

    The lines are `buf[:end]` (all of `buf` when `end` is None); `data` is cut from the buffer
    only when asked for, since a read that ends at a newline (every small log) can be decoded
    as it is (see whole_lines)."""

    __slots__ = ("first", "buf", "end", "_data", "count")

    def __init__(self, first: int, buf: bytes, end: int | None = None) -> None:
        self.first = first
        self.buf = buf
        self.end = end
        self._data: bytes | None = None
        self.count: int | None = None

    @property
    def data(self) -> bytes:
        if self._data is None:
            self._data = self.buf if self.end is None else self.buf[: self.end]
        return self._data

    def whole_lines(self) -> tuple[bytes, bool]:
        """(the lines' bytes, whether they end with their final newline): the buffer itself
        when it ends at that newline, else `data`."""
        if self.end is not None and self.end == len(self.buf) - 1:
            return self.buf, True
        return self.data, False

    def lines(self) -> int:
        if self.count is None:
            self.count = self.buf.count(b"\n", 0, len(self.buf) if self.end is None else self.end) + 1
        return self.count


class UnsafeEntry(OSError):
    """What stood where a log was to be read is no regular file within the cap (a link, FIFO,
    device, socket, or a file over LOG_CAP_BYTES): nothing of it was read or followed. An
    OSError, so a reader that treats any unreadable log as unreadable (the ledger) does so."""

    def __init__(self, kind: str, size: int | None = None) -> None:
        super().__init__(errno.EPERM, f"not a regular file within the cap: {kind}")
        self.kind = kind
        self.size = size

    @property
    def detail(self) -> str:
        return self.kind if self.size is None else f"{self.kind}:{self.size}"


# A task's log past this size is not read at all (an unsafe entry): no honest agent writes one
# (a 496-task benchmark run of 1 GiB holds ~2 MiB per task), and a planted 10 GB sparse file
# must neither hold the audit for minutes nor count as evidence.
LOG_CAP_BYTES = 2 << 30


class Folder(NamedTuple):
    """A directory opened without following a link (container.safefile) and its entries' kinds:
    the files in it are opened relative to it, so the path above is walked once per folder."""

    fd: int
    kinds: dict[str, str]


def open_log(
    path: str | Path, below: str | Path | None = None, cap: int = LOG_CAP_BYTES, folder: Folder | None = None
) -> tuple[int, int]:
    """(fd, size) of the regular file at `path` (in `folder`, by its name, when given), opened
    without following a link at or below `below` and without blocking (container.safefile).
    FileNotFoundError when absent, IsADirectoryError for a directory, UnsafeEntry for anything
    else or a file over `cap`. Without `below`, a path in a task dump is read with no link
    followed below its `dumps` folder (dumps.dumps_folder_of), whoever asks."""
    if below is None and folder is None:
        below = dumps_folder_of(path)
    if folder is not None:
        fd, kind, cause = safefile.open_at(folder.fd, os.path.basename(path))
    else:
        fd, kind, cause = safefile.open_nofollow(os.fspath(path), below=None if below is None else os.fspath(below))
    if fd is None:
        if kind == safefile.ABSENT:
            raise FileNotFoundError(errno.ENOENT, "absent", os.fspath(path))
        if kind == safefile.UNREADABLE:
            raise PermissionError(errno.EACCES, cause or "unreadable", os.fspath(path))
        raise UnsafeEntry(kind)
    if kind != safefile.REGULAR:
        os.close(fd)
        if kind == safefile.DIRECTORY:
            raise IsADirectoryError(errno.EISDIR, "directory", os.fspath(path))
        raise UnsafeEntry(kind)
    size = os.fstat(fd).st_size
    if size > cap:
        os.close(fd)
        raise UnsafeEntry(safefile.TOO_LARGE, size)
    return fd, size


def iter_blocks(
    path: str | Path,
    sink: Sink,
    rel: str,
    *,
    below: str | Path | None = None,
    cap: int = LOG_CAP_BYTES,
    folder: Folder | None = None,
) -> Iterator[Block]:
    """Blocks of whole lines, streamed. Oversized lines are gaps, never yielded. OSError propagates,
    UnsafeEntry when `path` is no regular file within `cap` (see open_log); the open is the
    generator's first step. A file that grows past `cap` while read is read up to `cap` and the
    rest is an `unsafe_entry` gap."""
    lineno = 1
    carry = b""
    skipping = False  # inside an oversized line: drop bytes up to its newline
    fd, size = open_log(path, below, cap, folder)
    with open(fd, "rb", buffering=0) as handle:
        # A log smaller than a chunk is read in one read of its size (not into a chunk-sized buffer).
        want = min(CHUNK_BYTES, size + 1)
        left = cap
        while True:
            chunk = handle.read(min(want, left + 1))
            want = CHUNK_BYTES
            if not chunk:
                break
            if len(chunk) > left:  # grown past the cap since it was opened: stop here
                sink.gap(AuditGapReason.UNSAFE_ENTRY, rel, lineno, f"{safefile.TOO_LARGE}:grew_past:{cap}")
                break
            left -= len(chunk)
            sink.bytes += len(chunk)
            if skipping:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                chunk = chunk[newline + 1 :]
                skipping = False
            buf = carry + chunk if carry else chunk  # a copy only when a line straddles two reads
            cut = buf.rfind(b"\n")
            if cut < 0:
                if len(buf) > MAX_LINE_BYTES:
                    sink.gap(AuditGapReason.OVERSIZED_LINE, rel, lineno)
                    lineno += 1
                    carry, skipping = b"", True
                else:
                    carry = buf
                continue
            block = Block(lineno, buf, cut)
            yield block
            lineno += block.lines()
            carry = buf[cut + 1 :]
        if carry and not skipping:  # an oversized final line was reported when it crossed the bound
            block = Block(lineno, carry)
            yield block
            lineno += block.lines()
    sink.lines += lineno - 1


# json.loads refuses integers with more digits than this (int()'s limit); msgspec skips them.
_INT_DIGITS = sys.get_int_max_str_digits() or sys.maxsize
# Any run of _INT_DIGITS + 1 digits covers a whole aligned window of this many bytes.
_WINDOW = (_INT_DIGITS + 2) // 2
_DIGITS = b"0123456789"
# Each byte to 1 if it is a digit, else 0 (for the bulk test of window ends below).
_DIGIT_BITS = bytes(byte in _DIGITS for byte in range(256))


def _may_hold_long_integer(data: bytes) -> bool:
    """True when `data` may hold a number json.loads refuses for its length (a cheap, exact
    necessary condition: each aligned window is tested with isdigit, which stops at the first
    non-digit)."""
    if len(data) <= _INT_DIGITS:
        return False
    # A window is all digits only if its first and last bytes are: those are tested in bulk
    # (each end mapped to a 0/1 byte, the two maps ANDed as integers), and only the windows
    # with both ends digits are visited (a few in a hundred in digit-rich logs).
    lasts = data[_WINDOW - 1 :: _WINDOW]
    firsts = data[: len(lasts) * _WINDOW : _WINDOW]  # the windows that end inside `data`
    both = (
        int.from_bytes(firsts.translate(_DIGIT_BITS), "big") & int.from_bytes(lasts.translate(_DIGIT_BITS), "big")
    ).to_bytes(len(lasts), "big")
    k = both.find(1)
    while k >= 0:
        if data[k * _WINDOW : (k + 1) * _WINDOW].isdigit():
            return True
        k = both.find(1, k + 1)
    return False


_UTF8_PIECE = 64 << 10
_Utf8Decoder = codecs.getincrementaldecoder("utf-8")


def _is_utf8(data: bytes) -> bool:
    """Whether `data` decodes as UTF-8 (strict), as bytes.decode says. Decoded in pieces, since
    decoding a block whole built a string of its size to throw away: fresh memory the kernel
    had to map and zero for every block (measured: most of the check's time)."""
    if data.isascii():
        return True
    if len(data) <= _UTF8_PIECE:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True
    decode = _Utf8Decoder().decode  # holds a sequence cut at a piece's end until the next piece
    view = memoryview(data)
    try:
        for start in range(0, len(view), _UTF8_PIECE):
            decode(view[start : start + _UTF8_PIECE])
        decode(b"", True)  # a sequence still cut at the end is an error
    except UnicodeDecodeError:
        return False
    return True


def parse_object(line: bytes) -> dict[str, Any] | None:
    """The line as a JSON object, else None: json.loads' answer, the arbiter."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):  # ValueError includes UnicodeDecodeError
        return None
    return value if isinstance(value, dict) else None


Row = TypeVar("Row", bound=msgspec.Struct)
_DECODE_ERRORS = (msgspec.DecodeError, RecursionError)  # ValidationError is a DecodeError


# A block read whole: its lines as one stream of JSON values (Decoder.decode_lines), each newline
# replaced by a separator value, the string "\x7f" (a raw DEL, which JSON writers leave raw but no
# log text holds). Where the data holds no DEL, raw or escaped, every separator the stream yields
# is one that was put at a newline. The stream stands for the lines one by one exactly when it is
# row, separator, row, ..., row with one separator per newline: then no separator was swallowed
# inside a value (a value run on across lines), so each line's bytes are exactly one row (two
# values on a line would put two rows side by side, a blank line two separators).
_SEPARATOR_TEXT = "\x7f"
_SEPARATOR = b'"\x7f"'
_KEY_SPELLINGS = (b"\x7f", b"\\u007f", b"\\u007F")
# One vectorised pass for all spellings (bytes.__contains__ crawled over hex-rich text).
_KEY_SEARCH = ahocorasick_rs.BytesAhoCorasick(
    list(_KEY_SPELLINGS),
    matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_FIRST,
    implementation=ahocorasick_rs.Implementation.DFA,
)


class RowReader:
    """msgspec decoders of one row type: for a line, and for a block read whole (its rows and
    separators, see _SEPARATOR)."""

    def __init__(self, row_type: type[Row]) -> None:
        self.row_type = row_type
        self.one = msgspec.json.Decoder(row_type)
        # noqa UP007 below: a type built at run time from a variable
        self.block = msgspec.json.Decoder(Union[row_type, Literal[_SEPARATOR_TEXT]])  # noqa: UP007


def read_rows(block: Block, reader: RowReader, rel: str, sink: Sink) -> tuple[Sequence[int], list[Any]]:
    """(line indexes in the block, rows) of every JSON-object line, the two lists in step; a
    malformed line is a gap. The indexes are a range when every line is a row (the usual case:
    no per-row pairs to build). A Raw field is the line's own text of the value, or json.dumps
    of json.loads' value when only json.loads could read the line."""
    text, closed = block.whole_lines()  # with its final newline, a separator ends the stream too
    trusted = _is_utf8(text) and not _may_hold_long_integer(text)
    if trusted and not _KEY_SEARCH.find_matches_as_indexes(text):
        joined = text.replace(b"\n", _SEPARATOR)
        separators = (len(joined) - len(text)) // (len(_SEPARATOR) - 1)
        count = block.count = separators + (not closed)
        try:  # the common case: every line an object msgspec reads
            stream = reader.block.decode_lines(joined)
        except _DECODE_ERRORS:
            stream = None
        if (
            stream is not None
            and len(stream) == count + separators
            and stream[1::2].count(_SEPARATOR_TEXT) == separators
        ):
            return range(count), stream[::2]  # the count of separators leaves only rows in between
    data = block.data
    indexes: list[int] = []
    rows: list[Any] = []
    for index, line in enumerate(data.split(b"\n")):
        if not line or line == b"\r":
            continue
        if trusted or (_is_utf8(line) and not _may_hold_long_integer(line)):
            try:
                rows.append(reader.one.decode(line))
                indexes.append(index)
                continue
            except _DECODE_ERRORS:
                pass
        rec = parse_object(line)
        row = None if rec is None else _row_from_dict(reader.row_type, rec, rel, sink, block.first + index)
        if row is None:
            if rec is None:
                sink.gap(AuditGapReason.MALFORMED_LINE, rel, block.first + index)
            continue
        indexes.append(index)
        rows.append(row)
    return indexes, rows


def _row_from_dict(row_type: type[Row], rec: dict[str, Any], rel: str, sink: Sink, lineno: int) -> Row | None:
    """The row json.loads' reading of a line makes (Raw fields written back as JSON text)."""
    values: dict[str, Any] = {}
    for name, kind in zip(row_type.__struct_fields__, _field_types(row_type), strict=True):
        if kind is msgspec.Raw:
            try:
                values[name] = msgspec.Raw(json.dumps(rec[name]).encode() if name in rec else b"null")
            except RecursionError:  # read at the edge of the recursion limit, too deep to write back
                sink.gap(AuditGapReason.MALFORMED_LINE, rel, lineno, "nested_too_deep")
                return None
        else:
            values[name] = rec.get(name)
    return row_type(**values)


_FIELD_TYPES: dict[type, tuple[Any, ...]] = {}


def _field_types(row_type: type) -> tuple[Any, ...]:
    kinds = _FIELD_TYPES.get(row_type)
    if kinds is None:
        kinds = _FIELD_TYPES[row_type] = tuple(f.type for f in msgspec.structs.fields(row_type))
    return kinds
