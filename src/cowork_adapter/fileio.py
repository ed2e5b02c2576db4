"""The host side's one way to write a file that must never be seen torn or be overwritten.

Two operations, both crash-safe (our own SIGKILL can land on any line):

  replace_atomic(path, data)   readers see the old file or the new one, never half of either:
                               a same-directory temp file (O_EXCL, unique name) is written and
                               fsynced, renamed over `path` with os.replace, and the directory
                               is fsynced so the rename itself survives a power loss.
  create_exclusive(path, data) `path` is created only if nothing is there (FileExistsError
                               otherwise, the existing file untouched); the content is written to
                               a temp file first and linked into place (link(2) fails on an
                               existing name, atomically), so a reader never sees a half file
                               under `path` either, and a crash leaves no file at all.

A secret (the agent's key file) passes in_place=True to create_exclusive: it is opened with
O_EXCL at its own name and written there, never staged under another name, because its
deletion is by that exact name (the watchdog, `clear`): a kill between the temp write and the link
would otherwise leave a copy of the key where nothing looks for it. A kill mid-write leaves a
short file under the known name, which that same deletion removes.

Durability: by default both fsync the file and, after the rename or link, its directory, so the
result survives a power loss. A stop marker (the fence the docker shim reads) passes
durable=False: what it must reach is the other processes on this host, which see it as soon as
the link returns, and a power loss ends every container it fences anyway; waiting on a disk
flush there would only delay the stop on a busy disk.

Mode bits: `mode` is applied exactly (fchmod, so the umask does not narrow it); with
`mode=None`, replace_atomic keeps the replaced file's permission bits (0o644 for a new file).

Why hand-written: `atomicwrites` is archived by its author; boltons' AtomicSaver (26.2, read
before choosing) writes every save through one fixed `<name>.part` file by default (two writers
of one file clobber each other's part) and does not fsync the directory after the rename. What
is needed is a handful of stdlib calls; a dependency would not make them shorter or safer.

Not used by: the container side (src/cowork_adapter/container/, stdlib-only, copied into the
image: protocol.write_atomic is its own) and the docker shim (custody/shim.py runs as
`python -I -S shim.py` on every docker call and imports nothing of this package; its
write_once keeps the first cause with a bare O_EXCL create and never raises).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from pathlib import Path

DEFAULT_MODE = 0o644


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_fd(fd: int, data: bytes, mode: int, durable: bool) -> None:
    """Give the open file exactly `mode`, write all of `data`, fsync when durable; always closes fd."""
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(directory: Path, name: str, data: bytes, mode: int, durable: bool = True) -> Path:
    """A new, fsynced temp file beside `name` holding `data` with exactly `mode`; removed on failure."""
    tmp = directory / f".{name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        _write_fd(fd, data, mode, durable)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _create_in_place(path: Path, data: bytes, mode: int, durable: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    _write_fd(fd, data, mode, durable)
    if durable:
        _fsync_dir(path.parent)


def replace_atomic(path: Path | str, data: bytes | str, *, mode: int | None = DEFAULT_MODE) -> None:
    """Replace `path` with `data` (str is written as UTF-8): old or new content, never a torn file."""
    path = Path(path)
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            mode = DEFAULT_MODE
    tmp = _write_temp(path.parent, path.name, _as_bytes(data), mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def create_exclusive(
    path: Path | str, data: bytes | str, *, mode: int = DEFAULT_MODE, durable: bool = True, in_place: bool = False
) -> None:
    """Create `path` holding `data`; FileExistsError (and nothing changed) if the name is taken."""
    path = Path(path)
    if in_place:
        _create_in_place(path, _as_bytes(data), mode, durable)
        return
    if os.path.lexists(path):  # cheap early refusal; the link below is what makes it exclusive
        raise FileExistsError(17, "File exists", str(path))
    tmp = _write_temp(path.parent, path.name, _as_bytes(data), mode, durable)
    try:
        os.link(tmp, path)  # atomic, and never over an existing name (not even a dangling link)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        _fsync_dir(path.parent)


__all__ = ["DEFAULT_MODE", "create_exclusive", "replace_atomic"]


def sha256_file(path: Path | str) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB chunks (the host's own files: benchmark clones)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
