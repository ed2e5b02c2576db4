"""One checked resolver for every path a command is given.

Every path argument of every command goes through `checked_path` before anything reads or writes
it, so a bad path is refused in one sentence (a `Refusal`, exit 2) instead of a traceback or a hang:
a symbolic link loop, a name component over 255 bytes, a dangling symbolic link (never created or
written through), a named pipe, socket or device where a file or folder is read (nothing ever opens
it, so nothing blocks), a folder where a file is expected (and the reverse), and anything under the
kernel's pseudo filesystems (/proc, /sys, /dev). Only `lstat`, `stat` and `realpath` are used here:
none of them opens a file, so the check itself cannot block on a FIFO.
"""

from __future__ import annotations

import errno
import os
import stat
from enum import StrEnum
from pathlib import Path

from .errors import Refusal
from .runroot import layout
from .runroot.layout import RunRoot

STAGE = "path"
NAME_MAX = 255  # bytes per component (Linux NAME_MAX)
PATH_MAX = 4095  # bytes of a whole path (Linux PATH_MAX, without the NUL)
# What makes a folder a run root, and the files of one that commands read (runroot/layout.py).
RUN_ROOT_MARKERS = layout.MARKERS
RUN_ROOT_FILES = layout.READ_FILES
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")
PSEUDO_ALLOWED = ("/dev/shm",)  # a real tmpfs under /dev
MAX_LISTED = 20


class PathKind(StrEnum):
    """What a command does with a path; decides which existing objects it accepts."""

    FILE = "file"  # an existing regular file that is read
    STATE_FILE = "state_file"  # a regular file read and rewritten, or absent (created later)
    NEW_FILE = "new_file"  # a file created by this command: must not exist, its folder must
    DIR = "dir"  # an existing folder that is read
    DIR_IF_EXISTS = "dir_if_exists"  # a folder, or absent (the command says what absence means)
    NEW_DIR = "new_dir"  # a folder this command creates (an existing folder is left to the command)
    OUTPUT_DIR = "output_dir"  # a folder written into, or absent (created)
    RUN_ROOT = "run_root"  # an existing run root, read
    RUN_ROOT_IF_EXISTS = "run_root_if_exists"  # a run root, or absent (the command says what that means)


def _show(path: str | os.PathLike[str]) -> str:
    """The path as printed in a sentence: over-long components shortened so the sentence stays readable."""
    parts = str(path).split("/")
    return "/".join(p if len(p) <= 60 else f"{p[:24]}…({len(os.fsencode(p))} bytes)" for p in parts)


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "not a regular file"


def _refuse(flag: str, raw: str, why: str) -> Refusal:
    """One sentence: `--flag PATH why.` (a positional argument has no flag: `PATH why.`)."""
    return Refusal(STAGE, f"{flag + ' ' if flag else ''}{_show(raw)} {why}.")


def _os_refusal(flag: str, raw: str, exc: OSError) -> Refusal:
    if exc.errno == errno.ELOOP:
        return _refuse(flag, raw, "goes through a symbolic link loop")
    if exc.errno == errno.ENAMETOOLONG:
        return _refuse(flag, raw, "is too long for the filesystem")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return _refuse(flag, raw, "cannot be looked up (permission denied)")
    return _refuse(flag, raw, f"cannot be looked up ({exc.strerror or type(exc).__name__})")


def _resolve(flag: str, raw: str) -> tuple[Path, bool]:
    """(the absolute path with every symbolic link resolved, whether it exists).

    The longest existing ancestor is resolved strictly; the rest must be plain names that do not
    exist yet (a dangling link or a file in the middle is refused)."""
    if not raw or "\x00" in raw:
        raise _refuse(flag, repr(raw), "is not a usable path")
    text = os.path.expanduser(raw)
    encoded = os.fsencode(text)
    if len(encoded) > PATH_MAX:
        raise _refuse(flag, raw, f"is longer than {PATH_MAX} bytes")
    if any(len(os.fsencode(part)) > NAME_MAX for part in text.split("/")):
        raise _refuse(flag, raw, f"has a name component longer than {NAME_MAX} bytes")
    try:
        absolute = os.path.join(os.getcwd(), text)
    except OSError as exc:
        raise _refuse(flag, raw, f"is relative, and the current folder is gone ({exc.strerror})") from None
    tail: list[str] = []
    current = absolute
    while True:
        try:
            base = os.path.realpath(current, strict=True)
            break
        except (FileNotFoundError, NotADirectoryError):
            parent, name = os.path.split(current)
            if parent == current:  # "/" itself cannot be missing; stop rather than loop
                raise _refuse(flag, raw, "cannot be looked up") from None
            if name:
                tail.insert(0, name)
            current = parent
        except OSError as exc:
            raise _os_refusal(flag, raw, exc) from None
    if not tail:
        return Path(base), True
    if not os.path.isdir(base):
        raise _refuse(flag, raw, f"goes through {_show(base)}, which is not a directory")
    if os.path.lexists(os.path.join(base, tail[0])):
        # realpath failed below an existing entry: that entry is a symbolic link to nothing.
        target = os.path.join(base, tail[0])
        if len(tail) == 1:
            raise _refuse(flag, raw, f"is a symbolic link to {_show(os.readlink(target))}, which does not exist")
        raise _refuse(flag, raw, f"goes through {_show(target)}, a symbolic link to nothing")
    if any(part in (".", "..") for part in tail):
        raise _refuse(flag, raw, "uses '.' or '..' below a directory that does not exist")
    return Path(base, *tail), False


def _pseudo(path: Path) -> bool:
    text = str(path)
    inside = lambda root: text == root or text.startswith(root + "/")  # noqa: E731
    return any(inside(r) for r in PSEUDO_ROOTS) and not any(inside(r) for r in PSEUDO_ALLOWED)


def _require(flag: str, raw: str, path: Path, want_dir: bool) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise _os_refusal(flag, raw, exc) from None
    if want_dir and not stat.S_ISDIR(mode):
        raise _refuse(flag, raw, f"is {_kind_of(mode)}, not a directory")
    if not want_dir and not stat.S_ISREG(mode):
        raise _refuse(flag, raw, f"is {_kind_of(mode)}, not a regular file")


def _check_run_root_files(flag: str, raw: str, root: Path) -> None:
    """Every file of the run root that commands read is a regular file (a FIFO would block a reader)."""
    for name in RUN_ROOT_FILES:
        path = root / name
        if not os.path.lexists(path):
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            reason = "a symbolic link to nothing" if exc.errno == errno.ENOENT else (exc.strerror or "unreadable")
            raise _refuse(flag, raw, f"holds {name}, which is {reason}") from None
        if not stat.S_ISREG(mode):
            raise _refuse(flag, raw, f"holds {name}, which is {_kind_of(mode)}, not a regular file")


def is_run_root(path: Path) -> bool:
    return any(os.path.lexists(path / marker) for marker in RUN_ROOT_MARKERS)


def run_roots_inside(folder: Path, depth: int = 2) -> list[Path]:
    """Run roots found below `folder` (a demo root holds them under runs/), nearest first, sorted."""
    found: list[Path] = []
    level = [folder]
    for _ in range(depth):
        nxt: list[Path] = []
        for parent in level:
            try:
                entries = sorted(os.scandir(parent), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                try:
                    if not entry.is_dir(follow_symlinks=False):
                        continue
                except OSError:
                    continue
                child = Path(entry.path)
                (found if is_run_root(child) else nxt).append(child)
        level = nxt
    return found


def not_a_run_root(flag: str, raw: str, folder: Path, why: str) -> Refusal:
    """The refusal for a folder that is not a run root, naming the run roots it holds (a demo root)."""
    inside = run_roots_inside(folder) if folder.is_dir() else []
    if not inside:
        return _refuse(flag, raw, f"is not a run root ({why})")
    listed = ", ".join(str(p) for p in inside[:MAX_LISTED]) + (" …" if len(inside) > MAX_LISTED else "")
    return _refuse(flag, raw, f"is not a run root but holds {len(inside)} run root(s): {listed}")


def checked_path(
    raw: str | os.PathLike[str],
    kind: PathKind,
    flag: str,
    *,
    needs_manifest: bool = False,
    output_names: tuple[str, ...] = (),
) -> Path:
    """The resolved absolute path for `raw` used as `kind`, or a Refusal (stage "path") naming `flag`.

    `needs_manifest`: a run root must hold run_manifest.json (what `report` and `clear` read).
    `output_names`: for OUTPUT_DIR, the files the command will create there; none may exist yet
    (a symbolic link among them, dangling or not, is never written through)."""
    raw = os.fspath(raw)
    path, exists = _resolve(flag, raw)
    # Both as written and as resolved: /proc/self/cwd resolves to a real folder, but is still /proc.
    written = Path(os.path.normpath(os.path.join(os.getcwd(), os.path.expanduser(raw))))
    for seen in (written, path):
        if _pseudo(seen):
            raise _refuse(flag, raw, f"is under /{seen.parts[1]}, a kernel pseudo filesystem")
    final_is_link = os.path.islink(str(written))

    if kind in (PathKind.FILE, PathKind.DIR, PathKind.RUN_ROOT) and not exists:
        raise _refuse(flag, raw, "does not exist")
    if kind is PathKind.FILE or (kind is PathKind.STATE_FILE and exists):
        _require(flag, raw, path, want_dir=False)
    elif kind is PathKind.NEW_FILE:
        if exists or final_is_link:
            raise _refuse(flag, raw, "already exists, and this command never overwrites a file")
        if not path.parent.is_dir():
            raise _refuse(flag, raw, "is in a directory that does not exist")
    elif kind is PathKind.NEW_DIR:
        if final_is_link:
            raise _refuse(flag, raw, "is a symbolic link; name a new directory itself")
        if exists:
            _require(flag, raw, path, want_dir=True)
    elif exists:  # DIR, DIR_IF_EXISTS, OUTPUT_DIR, RUN_ROOT, RUN_ROOT_IF_EXISTS
        _require(flag, raw, path, want_dir=True)
    if kind in (PathKind.RUN_ROOT, PathKind.RUN_ROOT_IF_EXISTS) and exists:
        if kind is PathKind.RUN_ROOT and not is_run_root(path):
            raise not_a_run_root(flag, raw, path, "no " + ", ".join(layout.MARKERS[:-1]) + " or " + layout.MARKERS[-1])
        if needs_manifest and not os.path.lexists(RunRoot(path).manifest):
            raise not_a_run_root(flag, raw, path, f"no {layout.MANIFEST}")
        _check_run_root_files(flag, raw, path)
    if kind is PathKind.OUTPUT_DIR:
        check_output_files(flag, raw, path, output_names)
    return path


def checked_result_root(raw: str | os.PathLike[str], flag: str = "") -> Path:
    """A run root holding its manifest, or a trial-set folder (`run --trials`: trials.json, a regular file,
    whose trial run roots runroot/trials.py reads): what `report` and `compare` read results from."""
    path = checked_path(raw, PathKind.DIR, flag)
    marker = path / layout.TRIALS
    if os.path.isfile(marker) and not os.path.islink(marker):
        return path
    return checked_path(raw, PathKind.RUN_ROOT, flag, needs_manifest=True)


def check_output_files(flag: str, raw: str, folder: Path, names: tuple[str, ...]) -> None:
    """None of `names` exists in `folder` (a dangling symbolic link counts: it is never written through)."""
    for name in names:
        target = folder / name
        if os.path.lexists(target):
            what = "a symbolic link" if os.path.islink(target) else "already there"
            raise _refuse(
                flag,
                raw,
                f"holds {name} ({what}), and neither a report nor an export ever overwrites one; "
                "choose another directory",
            )


__all__ = ["PathKind", "checked_path", "check_output_files", "is_run_root", "run_roots_inside", "not_a_run_root"]
