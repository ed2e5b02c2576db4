"""Reading files the agent under test could have written: never follow a link, never block, never
read without bound.

Standard library only, Python 3.10 (copied into the task image beside protocol.py, and beside the
docker shim on the host). Every reader of a task dump, on either side, goes through here.

Why each rule:
* no link is followed at or below `below` (a directory the reader trusts, such as a run's dumps
  folder): each path component is opened with O_NOFOLLOW relative to its parent's descriptor, so
  a link anywhere in the path (`<short> -> /etc`, `eval_res.json -> /etc/hostname`) is reported as
  a link, never resolved. Without `below`, only the last component is checked.
* the kind is read from a descriptor, never from a path checked before: an O_PATH handle (which
  opens nothing) is fstat'ed, and only a regular file or directory is opened, through that very
  handle (open_at). A FIFO or a device named like a record (or swapped in while it is read)
  neither hangs the reader nor is opened (`/dev/zero` never ends; a device's open can act).
  O_NONBLOCK and O_NOCTTY on every open besides.
* a byte cap: at most `cap` bytes are read, and a larger file is reported as too large.

JSON read from such a file is parsed by `loads` (below): its nesting depth, size and encoding are
bounded before the parser sees it.

Results are `Read` tuples: `kind` says what stood at the path (one of KINDS), `data` holds the
bytes only for a regular file within the cap.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

ABSENT = "absent"
REGULAR = "regular"
DIRECTORY = "directory"
SYMLINK = "symlink"
FIFO = "fifo"
DEVICE = "device"
SOCKET = "socket"
OTHER = "other"
TOO_LARGE = "too_large"
UNREADABLE = "unreadable"
KINDS = (ABSENT, REGULAR, DIRECTORY, SYMLINK, FIFO, DEVICE, SOCKET, OTHER, TOO_LARGE, UNREADABLE)
# What a reader may find instead of the regular file it expected: each is a flagged entry.
UNSAFE_KINDS = frozenset({SYMLINK, FIFO, DEVICE, SOCKET, OTHER, TOO_LARGE})

# Caps by what is read. A record (claim, receipt, eval_res.json, summaries, configs) is small; a
# traj_log.json carries the task text and the evaluator's own summary; logs are streamed.
RECORD_CAP = 16 * 1024 * 1024
LOG_JSON_CAP = 64 * 1024 * 1024
CHUNK = 1024 * 1024

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = _OPEN_FLAGS | getattr(os, "O_DIRECTORY", 0)
# Linux: a handle that names an inode without opening it (0 where the platform has none).
_PATH_FLAGS = (os.O_PATH | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)) if hasattr(os, "O_PATH") else 0


class Read(NamedTuple):
    kind: str
    data: bytes | None
    size: int | None
    cause: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == REGULAR and self.data is not None


class Entry(NamedTuple):
    """One directory entry as lstat saw it (a link is a link, whatever it points to)."""

    name: str
    kind: str
    size: int
    mtime_ns: int


def kind_of_mode(mode: int) -> str:
    if stat.S_ISREG(mode):
        return REGULAR
    if stat.S_ISDIR(mode):
        return DIRECTORY
    if stat.S_ISLNK(mode):
        return SYMLINK
    if stat.S_ISFIFO(mode):
        return FIFO
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return DEVICE
    if stat.S_ISSOCK(mode):
        return SOCKET
    return OTHER


def _split(path: str, below: str | None) -> tuple[str, list[str]]:
    """(trusted start, components to open without following) of `path`."""
    path = os.path.abspath(path)
    if below is None:
        return os.path.dirname(path), [os.path.basename(path)]
    base = os.path.abspath(below)
    # Both are normalised absolute paths: a prefix is a cut (relpath cost as much as the opens).
    rel = (
        path[len(base) + 1 :]
        if path.startswith(base + os.sep)
        else "."
        if path == base
        else os.path.relpath(path, base)
    )
    if rel == ".":
        return base, []
    if rel.startswith(os.pardir + os.sep) or rel == os.pardir or os.path.isabs(rel):
        raise ValueError(f"{path} is not below {base}")
    return base, [part for part in rel.split(os.sep) if part]


def _classify_error(exc: OSError, parent_fd: int, name: str) -> tuple[str, str]:
    """What an open that failed found: a link (ELOOP/ENOTDIR on a link), absent, or unreadable."""
    if exc.errno == errno.ENOENT:
        return ABSENT, "file_absent"
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        try:
            return kind_of_mode(
                os.lstat(name, dir_fd=parent_fd).st_mode
            ), f"os_error:{errno.errorcode.get(exc.errno or 0, exc.errno)}"
        except OSError:
            pass
    if exc.errno == errno.ENXIO:  # a FIFO or socket opened with O_NONBLOCK and no peer
        return OTHER, "os_error:ENXIO"
    return UNREADABLE, f"os_error:{errno.errorcode.get(exc.errno or 0, exc.errno)}"


def open_at(dir_fd: int, name: str, *, directory: bool = False) -> tuple[int | None, str, str]:
    """(fd or None, kind, cause): open the entry `name` of the open directory `dir_fd` as
    open_nofollow opens each component (a link is named, never followed; a FIFO, device or
    socket is named, never opened); `directory` admits only a directory. `dir_fd` stays open.
    For a reader of many files in one folder: the folder is opened once, without following.

    Nothing checked on a path is trusted, only what a descriptor shows: the entry is first
    opened with O_PATH (a handle on the inode that opens nothing: no driver's open, no FIFO
    peer, no inotify open event), its kind read by fstat on that handle, and only a regular file
    or a directory is then opened for reading, through /proc/self/fd/<handle>: the very inode
    the handle holds, whatever was renamed into `name` meanwhile. (lstat, then open by name, then
    fstat let a swap win the race: a device node was opened in 151 of 319k reads.) A directory
    required as such is opened with O_DIRECTORY|O_NOFOLLOW, which the kernel refuses for any
    other kind before it opens anything."""
    if directory:
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=dir_fd), DIRECTORY, ""
        except OSError as exc:
            return (None, *_classify_error(exc, dir_fd, name))
    if not _PATH_FLAGS:
        return _open_at_checked(dir_fd, name)
    try:
        handle = os.open(name, _PATH_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        return (
            None,
            (ABSENT if exc.errno == errno.ENOENT else UNREADABLE),
            f"os_error:{errno.errorcode.get(exc.errno or 0, exc.errno)}",
        )
    try:
        kind = kind_of_mode(os.fstat(handle).st_mode)
        if kind not in (REGULAR, DIRECTORY):
            return None, kind, ""
        try:
            fd = os.open(f"/proc/self/fd/{handle}", (_DIR_FLAGS if kind == DIRECTORY else _OPEN_FLAGS) & ~os.O_NOFOLLOW)
        except FileNotFoundError:  # no /proc: the checked open by name below
            return _open_at_checked(dir_fd, name)
        except OSError as exc:
            return None, UNREADABLE, f"os_error:{errno.errorcode.get(exc.errno or 0, exc.errno)}"
        if kind_of_mode(os.fstat(fd).st_mode) != kind:  # cannot happen: the same inode
            os.close(fd)
            return None, UNREADABLE, "changed_while_opening"
        return fd, kind, ""
    finally:
        os.close(handle)


def _open_at_checked(dir_fd: int, name: str) -> tuple[int | None, str, str]:
    """open_at without O_PATH or /proc (not Linux): lstat, open by name without following and
    without blocking, then fstat the open descriptor. A swap between lstat and open can still
    make this open a device (never read it: the descriptor's kind decides)."""
    try:
        kind = kind_of_mode(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError as exc:
        return (
            None,
            (ABSENT if exc.errno == errno.ENOENT else UNREADABLE),
            f"os_error:{errno.errorcode.get(exc.errno or 0, exc.errno)}",
        )
    if kind not in (REGULAR, DIRECTORY):
        return None, kind, ""
    try:
        fd = os.open(name, _DIR_FLAGS if kind == DIRECTORY else _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        return (None, *_classify_error(exc, dir_fd, name))
    actual = kind_of_mode(os.fstat(fd).st_mode)
    if actual != kind:
        os.close(fd)
        return None, actual, "changed_while_opening"
    return fd, kind, ""


def kinds_at(dir_fd: int) -> dict[str, str]:
    """name -> kind of every entry of the open directory `dir_fd` (a link is a link). The kind
    comes from the directory itself (d_type) where the file system gives it, so a listing costs
    no system call per entry; an entry of unknown type is lstat'ed. `dir_fd` stays open."""
    kinds: dict[str, str] = {}
    with os.scandir(dir_fd) as entries:  # scandir lists a duplicate: `dir_fd` stays as it was
        for entry in entries:
            try:
                if entry.is_symlink():
                    kinds[entry.name] = SYMLINK
                elif entry.is_file(follow_symlinks=False):
                    kinds[entry.name] = REGULAR
                elif entry.is_dir(follow_symlinks=False):
                    kinds[entry.name] = DIRECTORY
                else:
                    kinds[entry.name] = kind_of_mode(entry.stat(follow_symlinks=False).st_mode)
            except OSError:
                continue  # vanished meanwhile
    return kinds


def open_nofollow(path: str, *, below: str | None = None) -> tuple[int | None, str, str]:
    """(fd or None, kind, cause): open `path` read-only, no link followed at or below `below`.

    The fd (caller closes it) is returned only for a regular file or a directory; anything else
    is named by its kind and left unopened (a FIFO is classified by lstat, never opened for
    reading: O_NONBLOCK makes the open itself safe, but a reader of it would see no end)."""
    start, parts = _split(path, below)
    try:
        fd = os.open(start, _DIR_FLAGS)
    except OSError as exc:
        return (
            None,
            (ABSENT if exc.errno == errno.ENOENT else UNREADABLE),
            f"os_error:{errno.errorcode.get(exc.errno or 0, exc.errno)}",
        )
    for index, name in enumerate(parts):
        child, kind, cause = open_at(fd, name, directory=index < len(parts) - 1)
        os.close(fd)
        if child is None:
            return None, kind, cause
        fd = child
    return fd, kind_of_mode(os.fstat(fd).st_mode), ""


def read_bytes(path: str, *, cap: int = RECORD_CAP, below: str | None = None) -> Read:
    """The bytes of a regular file at `path`, at most `cap` of them; anything else is named."""
    try:
        fd, kind, cause = open_nofollow(path, below=below)
    except ValueError as exc:
        return Read(UNREADABLE, None, None, f"outside:{exc}"[:200])
    return _read_opened(fd, kind, cause, cap)


def read_at(dir_fd: int, name: str, *, cap: int = RECORD_CAP) -> Read:
    """read_bytes of the entry `name` of the open directory `dir_fd` (opened as open_at opens)."""
    return _read_opened(*open_at(dir_fd, name), cap)


def _read_opened(fd: int | None, kind: str, cause: str, cap: int) -> Read:
    """The Read of what open_nofollow/open_at found (the fd, if any, is closed here)."""
    if fd is None:
        return Read(kind, None, None, cause)
    try:
        if kind != REGULAR:
            return Read(kind, None, None, cause)
        size = os.fstat(fd).st_size
        if size > cap:
            return Read(TOO_LARGE, None, size, f"over_cap:{cap}")
        chunks, total = [], 0
        while total <= cap:
            chunk = os.read(fd, min(CHUNK, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > cap:  # it grew while being read
            return Read(TOO_LARGE, None, total, f"over_cap:{cap}")
        return Read(REGULAR, b"".join(chunks), total, "")
    except OSError as exc:
        return Read(UNREADABLE, None, None, f"os_error:{errno.errorcode.get(exc.errno or 0, exc.errno)}")
    finally:
        os.close(fd)


def iter_chunks(path: str, *, cap: int, below: str | None = None, chunk: int = CHUNK) -> tuple[Read, Iterator[bytes]]:
    """(what stood at `path`, chunks of it): for streaming readers of large logs. The chunks stop
    at `cap` bytes; the Read's kind is TOO_LARGE when the file's size at open exceeds the cap (the
    first `cap` bytes are still yielded, so a reader can report a truncated log)."""
    try:
        fd, kind, cause = open_nofollow(path, below=below)
    except ValueError as exc:
        return Read(UNREADABLE, None, None, f"outside:{exc}"[:200]), iter(())
    if fd is None or kind != REGULAR:
        if fd is not None:
            os.close(fd)
        return Read(kind, None, None, cause), iter(())
    size = os.fstat(fd).st_size
    found = Read(TOO_LARGE if size > cap else REGULAR, None, size, f"over_cap:{cap}" if size > cap else "")

    def chunks() -> Iterator[bytes]:
        try:
            left = cap
            while left > 0:
                data = os.read(fd, min(chunk, left))
                if not data:
                    return
                left -= len(data)
                yield data
        finally:
            os.close(fd)

    return found, chunks()


def scan_dir(path: str, *, below: str | None = None) -> tuple[str, list[Entry]]:
    """(kind of `path`, its entries by lstat, sorted by name). Entries only for a real directory
    (not a link to one); a name that vanished meanwhile is left out."""
    try:
        fd, kind, _ = open_nofollow(path, below=below)
    except ValueError:
        return UNREADABLE, []
    if fd is None:
        return kind, []
    entries: list[Entry] = []
    try:
        if kind != DIRECTORY:
            return kind, []
        for name in sorted(os.listdir(fd)):
            try:
                st = os.lstat(name, dir_fd=fd)
            except OSError:
                continue
            entries.append(Entry(name, kind_of_mode(st.st_mode), st.st_size, st.st_mtime_ns))
    except OSError:
        return UNREADABLE, entries
    finally:
        os.close(fd)
    return DIRECTORY, entries


def kind_at(path: str, *, below: str | None = None) -> str:
    """What stands at `path` (no link followed at or below `below`), without reading it."""
    try:
        fd, kind, _ = open_nofollow(path, below=below)
    except ValueError:
        return UNREADABLE
    if fd is not None:
        os.close(fd)
    return kind


# ---------------------------------------------------------------- JSON, bounded before parsing
#
# Both json (its C scanner) and msgspec recurse once per nesting level: a file nested a few
# hundred thousand levels deep raises RecursionError, which is not a ValueError, so a reader that
# catches ValueError (as every reader of a dump did) stopped on it, and with it the ledger
# refresh, `clear`, resume and the audit for every other task. `loads` refuses a document deeper
# than MAX_DEPTH with TooDeep (a ValueError) before parsing, so one `except ValueError` covers
# every bad input; a RecursionError the parser still raises (a caller already deep in its own
# stack) becomes the same refusal. A pre-scan rather than only the catch: the refusal is the same
# whatever the caller's stack depth, and it is named (`too_deep`). The scan costs one bytes.count
# per opener kind when the document cannot reach the bound (every record this project reads);
# only a document with more openers than the bound is scanned in full, in C (regular expressions,
# bytes.translate, itertools.accumulate): about 0.6 s for 16 MB of brackets.

# Deeper than any record, log line or trajectory the benchmark or the engine writes (measured:
# under 20), and far below the interpreter's recursion limit (1000), so a reader running inside a
# few hundred frames of its own still parses a document at the bound.
MAX_DEPTH = 256
MAX_BYTES = LOG_JSON_CAP  # no reader holds more than this of one file

_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # a backslash and the byte it escapes
_NOT_KEPT = bytes(range(256)).translate(None, b'"[]{}')  # every byte but quotes and brackets
_QUOTED = re.compile(rb'"[^"]*"')  # a string, once escapes are gone and only quotes and brackets are left
_STEP = [1 if byte in b"[{" else -1 if byte in b"]}" else 0 for byte in range(256)]


class TooDeep(ValueError):
    """The document nests deeper than the bound (or than the parser could follow)."""

    def __str__(self) -> str:
        return "too_deep"


class TooLarge(ValueError):
    """The document is larger than the bound a reader may hold."""

    def __str__(self) -> str:
        return "too_large"


def depth_over(data: bytes | str, limit: int = MAX_DEPTH) -> bool:
    """True when the JSON text `data` nests deeper than `limit` (brackets inside strings do not
    count). Exact for valid JSON; for invalid JSON it may answer True where a parser would have
    refused it anyway."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # cannot reach the bound: the cheap path of every real record
    # Escapes first (an escaped quote does not end a string), then everything but quotes and
    # brackets, then the strings: what is left are the brackets outside strings.
    kept = (_ESCAPE.sub(b"", raw) if b"\\" in raw else raw).translate(None, _NOT_KEPT)
    brackets = _QUOTED.sub(b"", kept)
    if brackets.count(b"[") + brackets.count(b"{") <= limit:
        return False
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets))) > limit


def loads(
    data: bytes | str,
    *,
    limit: int = MAX_DEPTH,
    max_bytes: int = MAX_BYTES,
    parse: Callable[..., Any] | None = None,
    **kwargs: Any,
) -> Any:
    """json.loads (or `parse`) of `data`, refused with a ValueError before parsing when it is
    larger than `max_bytes` (TooLarge), nests deeper than `limit` (TooDeep) or is not UTF-8
    (UnicodeDecodeError, itself a ValueError)."""
    if len(data) > max_bytes:
        raise TooLarge()
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data).decode("utf-8")
    if depth_over(data, limit):
        raise TooDeep()
    try:
        return (parse or json.loads)(data, **kwargs)
    except RecursionError:
        raise TooDeep() from None
