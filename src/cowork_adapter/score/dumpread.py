"""What the ledger looks at in a task dump on every refresh: the named entries only.

The ledger refreshes every 2 s while a run lives, under the lock the supervisor's publish also
takes. It listed and lstat'ed every entry of every dump several times a refresh (finding the
dumps, the row cache's signature, the row itself) and kept every entry in its cache: an agent
that made 400,000 empty files cost 1.6 s of CPU per refresh, enough for the supervisor to miss
the meter and stop the run on blindness. The ledger reads a fixed set of names from a dump
(records, start evidence, the claim's receipt, the engine's events): here each of them is
looked up by name through one descriptor of the dump (safefile.open_at: no link followed, no
FIFO or device opened), so a refresh costs the same whatever else the agent left there. What
else the dump holds is measured by runroot/dump_bounds.py, on its own budget.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..container import protocol, safefile
from ..runroot.layout import ENGINE_EVENTS as EVENTS  # below the dump's ouroboros/ folder

OUROBOROS = "ouroboros"

# The names the ledger reads in a task dump (score/ledger.py): nothing else in it is looked at.
SUMMARY_NAME = "ouroboros_summary.json"
# Files only the adapter's agent phase creates: proof that an attempt began. The benchmark's
# pre-created dump dir and workspace, traj_log.json and eval_res.json are deliberately absent.
START_EVIDENCE_NAMES = (
    "ouroboros",
    "applied_settings.json",
    "preprocess.log",
    "mcp_proxy.log",
    "ouroboros_server.log",
)
# The dump entries a reader takes as records: each must be a regular file (a link, FIFO, device or
# oversize file there is a flagged unsafe entry, never read). `ouroboros` must be a real folder.
RECORD_NAMES = (SUMMARY_NAME, protocol.LOG_NAME, protocol.EVAL_RES_NAME, protocol.CLAIM_NAME, "traj.json")
DUMP_NAMES = tuple(dict.fromkeys(RECORD_NAMES + START_EVIDENCE_NAMES))  # every name a row reads


def _open(dump: Path, below: str | None) -> tuple[int | None, str, str]:
    try:
        return safefile.open_nofollow(str(dump), below=below)
    except ValueError:  # not below `below`
        return None, safefile.UNREADABLE, "outside"


def _lstat_facts(dir_fd: int, name: str) -> tuple[str, int, int, int]:
    """(kind, inode, size, mtime_ns) of the entry `name` (a link is a link), ('absent', ...) if none."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return safefile.ABSENT, -1, -1, -1
    return safefile.kind_of_mode(st.st_mode), st.st_ino, st.st_size, st.st_mtime_ns


# (device, inode, size, mtime_ns) of a claim -> the receipt name it gives: a claim the agent made
# large (up to the record cap) is read and parsed once, not on every refresh.
_RECEIPTS: dict[tuple[int, int, int, int], str | None] = {}
_RECEIPTS_MAX = 4096


def _claim_receipt(dir_fd: int) -> str | None:
    """The receipt name the dump's claim names (None when there is no valid claim)."""
    try:
        st = os.lstat(protocol.CLAIM_NAME, dir_fd=dir_fd)
    except OSError:
        return None
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key in _RECEIPTS:
        return _RECEIPTS[key]
    got = safefile.read_at(dir_fd, protocol.CLAIM_NAME)
    name = None
    if got.ok and got.data is not None:
        try:
            claim = protocol.strict_loads(got.data.decode("utf-8"))
        except ValueError:
            claim = None
        if protocol.valid_claim(claim):
            name = os.path.basename(protocol.receipt_path("", claim["attempt_id"]))
    if len(_RECEIPTS) >= _RECEIPTS_MAX:
        _RECEIPTS.clear()
    _RECEIPTS[key] = name
    return name


def named_kinds(dump: Path, names: Iterable[str], below: str | None = None) -> dict[str, str]:
    """name -> kind of each of `names` present in `dump`, and of the receipt its claim names:
    what the ledger's listing of the dump was used for, at a cost that does not grow with the
    dump. Empty when the dump is not a readable folder (no link followed at or below `below`)."""
    fd, kind, _ = _open(dump, below)
    if fd is None:
        return {}
    try:
        if kind != safefile.DIRECTORY:
            return {}
        wanted = list(names)
        receipt = _claim_receipt(fd)
        if receipt is not None:
            wanted.append(receipt)
        out = {}
        for name in wanted:
            found = _lstat_facts(fd, name)[0]
            if found != safefile.ABSENT:
                out[name] = found
        return out
    finally:
        os.close(fd)


def signature(dump: Path, names: Iterable[str], below: str | None = None) -> tuple[Any, ...]:
    """What a task's row read from its dump, cheaply: the dump folder's own identity and change
    time (an entry made, renamed or removed changes it), the facts of each named entry and of
    the claim's receipt, and of the engine's events. Equal signatures, equal readings."""
    fd, kind, _ = _open(dump, below)
    if fd is None:
        return (kind,)
    try:
        st = os.fstat(fd)
        facts: list[Any] = [kind, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
        if kind != safefile.DIRECTORY:
            return tuple(facts)
        receipt = _claim_receipt(fd)
        for name in (*names, receipt) if receipt else names:
            facts.append((name, *_lstat_facts(fd, name)))
        sub, sub_kind, _ = safefile.open_at(fd, OUROBOROS, directory=True)
        if sub is not None:
            try:
                inner = os.fstat(sub)
                facts.append((OUROBOROS, inner.st_ino, inner.st_mtime_ns, _lstat_facts(sub, EVENTS)))
            finally:
                os.close(sub)
        else:
            facts.append((OUROBOROS, sub_kind))
        return tuple(facts)
    finally:
        os.close(fd)
