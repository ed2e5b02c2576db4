"""Walking and removing trees the agent under test could have made: never recursing, never
following a link, never opening anything but a directory.

Standard library only, Python 3.10 (copied into the task image with the rest of container/).

Why not shutil.rmtree: on Python 3.10-3.12 its fd-based walk recurses once per directory level,
so a dump or staging copy nested a few thousand folders deep raises RecursionError, and
`ignore_errors=True` does not catch it: the launcher's critical cleanup, `clear` and the watchdog
stopped there. Here the walk is a loop over an explicit stack.

Why one open descriptor at a time: a 10,000-deep tree cannot hold a descriptor per level (the
process limit is often 1024). The walk holds the current directory only; it climbs back by
opening ".." of it and checks that this is the directory it came from (device and inode
recorded on the way down). If a directory was moved meanwhile (only a process still writing
the tree could), the walk stops there and reports it rather than remove in a place it did not
choose. Each entry is classified by lstat relative to its directory's descriptor and only a
directory is ever opened (O_DIRECTORY|O_NOFOLLOW: a link, FIFO or device swapped in is refused by
the open itself, never opened).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import NamedTuple

_DIR_FLAGS = (
    os.O_RDONLY
    | os.O_DIRECTORY
    | os.O_NOFOLLOW
    | os.O_NONBLOCK
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
# The set-id bits an agent could leave on a file the host keeps (with the executable bits a
# setgid file without group execute is mandatory locking, not privilege: still removed).
SETID = stat.S_ISUID | stat.S_ISGID
MAX_ERRORS = 20  # the first errors are kept for the report; the rest only counted


class Outcome(NamedTuple):
    """What a walk did: entries removed, entries left by error, the first errors (one line each)."""

    removed: int
    failed: int
    errors: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.failed == 0


class _Tally:
    def __init__(self) -> None:
        self.removed = 0
        self.failed = 0
        self.errors: list[str] = []

    def error(self, where: str, exc: BaseException) -> None:
        self.failed += 1
        if len(self.errors) < MAX_ERRORS:
            code = errno.errorcode.get(getattr(exc, "errno", None) or 0, type(exc).__name__)
            self.errors.append(f"{where}: {code}")

    def outcome(self) -> Outcome:
        return Outcome(self.removed, self.failed, tuple(self.errors))


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _open_dir(name: str, dir_fd: int | None) -> int:
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _walk(path: str, visit: Callable[[int, str, os.stat_result, _Tally], bool], remove_dirs: bool) -> Outcome:
    """Walk the tree at `path` (a directory, never followed if a link) without recursion.

    `visit(dir_fd, name, lstat, tally)` is called for every entry that is not a directory and
    returns True when it removed it; with `remove_dirs` every directory is removed once emptied
    (the root too). Errors are tallied, never raised."""
    tally = _Tally()
    path = os.path.abspath(path)
    parent_path, root_name = os.path.split(path)
    try:
        parent_fd = _open_dir(parent_path or "/", None)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            tally.error(parent_path, exc)
        return tally.outcome()
    try:
        try:
            st = os.lstat(root_name, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                tally.error(path, exc)
            return tally.outcome()
        if not stat.S_ISDIR(st.st_mode):  # a link or file where the tree was: the entry itself
            visit(parent_fd, root_name, st, tally)
            return tally.outcome()
        _walk_from(parent_fd, root_name, path, visit, remove_dirs, tally)
    finally:
        os.close(parent_fd)
    return tally.outcome()


class _Level(NamedTuple):
    name: str  # its name in the directory above
    ident: tuple[int, int]  # (st_dev, st_ino) of the directory itself
    pending: list[str]  # its subdirectories not walked yet


def _walk_from(parent_fd: int, root_name: str, path: str, visit, remove_dirs: bool, tally: _Tally) -> None:
    try:
        fd = _open_dir(root_name, parent_fd)
    except OSError as exc:
        tally.error(path, exc)
        return
    stack: list[_Level] = []
    try:
        stack.append(_Level(root_name, _ident(fd), _list(fd, visit, tally, path)))
        while stack:
            level = stack[-1]
            if level.pending:
                name = level.pending.pop()
                child = _enter(fd, name, visit, tally, path)
                if child is None:
                    continue
                try:
                    pending = _list(child, visit, tally, path)
                    stack.append(_Level(name, _ident(child), pending))
                except OSError as exc:
                    os.close(child)
                    tally.error(f"{path}/.../{name}", exc)
                    continue
                os.close(fd)
                fd = child
                continue
            # This level is done: climb to the directory above (checked) and remove it there.
            stack.pop()
            if not stack:
                break
            up = _open_dir("..", fd)
            if _ident(up) != stack[-1].ident:
                os.close(up)
                tally.error(f"{path}/.../{level.name}", OSError(errno.ESTALE, "moved while walked"))
                return  # moved meanwhile: stop rather than work in a place not chosen
            os.close(fd)
            fd = up
            if remove_dirs:
                _rmdir(fd, level.name, tally, path)
    except OSError as exc:
        tally.error(path, exc)
        return
    finally:
        os.close(fd)
    if remove_dirs:
        _rmdir(parent_fd, root_name, tally, path)


def _enter(fd: int, name: str, visit, tally: _Tally, path: str) -> int | None:
    """The open subdirectory `name` of `fd`, or None (gone, or swapped for a non-directory: then
    visited as such)."""
    try:
        return _open_dir(name, fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):  # swapped for a file or link meanwhile
            try:
                st = os.lstat(name, dir_fd=fd)
            except OSError:
                return None
            if not stat.S_ISDIR(st.st_mode):
                visit(fd, name, st, tally)
            return None
        tally.error(f"{path}/.../{name}", exc)
        return None


def _list(fd: int, visit, tally: _Tally, path: str) -> list[str]:
    """Visit every non-directory entry of the open directory `fd`; its subdirectories' names."""
    subdirs: list[str] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    tally.error(f"{path}/.../{entry.name}", exc)
                continue
            visit(fd, entry.name, st, tally)
    return subdirs


def _unlink(fd: int, name: str, tally: _Tally, path: str) -> bool:
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    except OSError as exc:
        tally.error(f"{path}/.../{name}", exc)
        return False
    tally.removed += 1
    return True


def _rmdir(fd: int, name: str, tally: _Tally, path: str) -> None:
    try:
        os.rmdir(name, dir_fd=fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        tally.error(f"{path}/.../{name}", exc)
        return
    tally.removed += 1


def remove_tree(path: str) -> Outcome:
    """Remove the tree at `path` (any depth; a link at `path` is removed, never followed).
    Never raises: what could not be removed is counted in the Outcome."""

    def unlink(fd: int, name: str, st: os.stat_result, tally: _Tally) -> bool:
        return _unlink(fd, name, tally, path)

    return _walk(path, unlink, remove_dirs=True)


def is_hazard(mode: int) -> bool:
    """A device node, or a file with a set-user-id or set-group-id bit: what the host must not
    keep of what an agent made (a device opens hardware; a set-id file owned by root is a way up)."""
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or (not stat.S_ISDIR(mode) and bool(mode & SETID))


def remove_hazards(path: str) -> Outcome:
    """Remove every device node and set-id file below `path` (any depth, no link followed),
    keeping everything else: the dump stays evidence, without what could harm the host."""

    def drop(fd: int, name: str, st: os.stat_result, tally: _Tally) -> bool:
        return is_hazard(st.st_mode) and _unlink(fd, name, tally, path)

    return _walk(path, drop, remove_dirs=False)
