"""The bounds on what one task may leave in its dump while it runs: bytes, entries, depth.

A task dump is a host folder the agent under test writes. Without a bound, one agent wrote 3.2 GB
into its dump, another 400,000 empty files, another a tree 10,000 folders deep: the disk and
inodes every sibling needs, and the cost of every host command that reads dumps. The launcher's
meter walks each running task's dump and reports the first bound it passes (the run then stops
that task's containers and its row says which bound, score/ledger.py via dump_bounds.jsonl).

Why a budget: the meter runs inside the ledger's 2-second refresh, under the lock the supervisor's
publish also waits on, so its cost per refresh must not grow with what an agent made. Each tick
visits at most `budget` entries over all dumps; a walk in progress keeps its place (the open
directory and its listing) between ticks, so a walk of a large dump spans several ticks and
restarts when it ends. Counts within a walk only grow, so a bound is reported the moment a walk
passes it, without waiting for the walk to end. The walk never recurses, never follows a link
and never opens anything but a directory (container/safefile.open_at); it does not descend past
the depth bound, so a deep tree costs no more than the bound.

Bytes are the disk blocks an entry takes (st_blocks), not its apparent size: a sparse file that
claims a terabyte takes none of the disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..container import safefile
from ..vocab import DumpBound

GIB = 1 << 30
# Defaults of --dump-max-gib, --dump-max-entries, --dump-max-depth (config.Disk), far above what a
# benchmark task's dump holds (measured on the demo and the real benchmark: under 50 MB, a few
# thousand entries, under 20 levels with a workspace's packages) and far below what hurts a sibling.
DEFAULT_MAX_GIB = 8.0
DEFAULT_MAX_ENTRIES = 200_000
DEFAULT_MAX_DEPTH = 128
# Entries visited per tick over all dumps: about 0.1 s of one core (lstat of each) every 2 s.
DEFAULT_BUDGET = 20_000


@dataclass(frozen=True)
class Bounds:
    max_bytes: int
    max_entries: int
    max_depth: int

    @classmethod
    def of(cls, max_gib: float, max_entries: int, max_depth: int) -> Bounds:
        return cls(max_bytes=int(max_gib * GIB), max_entries=max_entries, max_depth=max_depth)


@dataclass(frozen=True)
class Over:
    """A dump past a bound: `measured` is at least what the walk had counted when it passed it."""

    task: str
    bound: DumpBound
    limit: int
    measured: int


@dataclass
class _Walk:
    """One walk of one dump, resumable: folders still to list (relative parts, depth), the
    folder being listed (its descriptor and listing), and the counts so far."""

    root: str
    pending: list[tuple[tuple[str, ...], int]] = field(default_factory=lambda: [((), 0)])
    fd: int | None = None
    listing: Iterator[os.DirEntry[str]] | None = None
    parts: tuple[str, ...] = ()
    depth: int = 0
    bytes: int = 0
    entries: int = 0
    deepest: int = 0

    def close(self) -> None:
        if self.listing is not None:
            close = getattr(self.listing, "close", None)
            if close is not None:
                close()
        if self.fd is not None:
            os.close(self.fd)
        self.fd, self.listing = None, None


class DumpMeter:
    """Walks the dumps of running tasks, `budget` entries per tick, and reports each task's first
    bound passed (once). Not thread-safe: the ledger refresh that calls it holds its own lock."""

    def __init__(self, bounds: Bounds, budget: int = DEFAULT_BUDGET) -> None:
        self.bounds = bounds
        self.budget = budget
        self.walks: dict[str, _Walk] = {}
        self.over: dict[str, Over] = {}
        self.visited_last_tick = 0  # what the last tick cost, in entries (tests and the monitor)
        self._turn = 0

    def tick(self, dumps: Mapping[str, Path]) -> list[Over]:
        """Advance the walks of `dumps` (task -> dump folder) by at most `budget` entries in all;
        the tasks that passed a bound in this tick."""
        active = sorted(task for task in dumps if task not in self.over)
        for task in [t for t in self.walks if t not in active]:  # finished or gone: let go of its descriptor
            self.walks.pop(task).close()
        self.visited_last_tick = 0
        if not active:
            return []
        share = max(1, self.budget // len(active))
        start = self._turn % len(active)
        self._turn += 1
        found: list[Over] = []
        for task in active[start:] + active[:start]:
            left = min(share, self.budget - self.visited_last_tick)
            if left <= 0:
                break
            walk = self.walks.get(task)
            if walk is None or walk.root != str(dumps[task]):
                if walk is not None:
                    walk.close()
                walk = self.walks[task] = _Walk(str(dumps[task]))
            used, over = self._advance(task, walk, left)
            self.visited_last_tick += used
            if over is not None:
                self.over[task] = over
                self.walks.pop(task).close()
                found.append(over)
        return found

    def _advance(self, task: str, walk: _Walk, left: int) -> tuple[int, Over | None]:
        used = 0
        bounds = self.bounds
        while used < left:
            if walk.listing is None:
                if not walk.pending:  # the walk ended within the bounds: the next one starts afresh
                    self.walks[task] = _Walk(walk.root)
                    return used, None
                walk.parts, walk.depth = walk.pending.pop()
                if not self._open(walk):
                    continue
            listing = walk.listing
            if listing is None:
                continue
            try:
                entry = next(listing)
            except StopIteration:
                walk.close()
                continue
            except OSError:
                walk.close()
                continue
            used += 1
            walk.entries += 1
            try:
                st = entry.stat(follow_symlinks=False)
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            walk.bytes += st.st_blocks * 512
            depth = walk.depth + 1
            walk.deepest = max(walk.deepest, depth)
            if walk.entries > bounds.max_entries:
                return used, Over(task, DumpBound.ENTRIES, bounds.max_entries, walk.entries)
            if walk.bytes > bounds.max_bytes:
                return used, Over(task, DumpBound.BYTES, bounds.max_bytes, walk.bytes)
            if is_dir:
                if depth >= bounds.max_depth:  # a folder at the bound holds entries one deeper
                    if self._has_entries(walk, entry.name):
                        return used, Over(task, DumpBound.DEPTH, bounds.max_depth, depth + 1)
                    continue
                walk.pending.append((walk.parts + (entry.name,), depth))
        return used, None

    @staticmethod
    def _open(walk: _Walk) -> bool:
        """Open the next folder of `walk` (no link followed at or below its root); False if gone."""
        path = os.path.join(walk.root, *walk.parts) if walk.parts else walk.root
        try:
            fd, kind, _ = safefile.open_nofollow(path, below=walk.root)
        except ValueError:
            return False
        if fd is None:
            return False
        if kind != safefile.DIRECTORY:
            os.close(fd)
            return False
        try:
            walk.listing = os.scandir(fd)
        except OSError:
            os.close(fd)
            return False
        walk.fd = fd
        return True

    @staticmethod
    def _has_entries(walk: _Walk, name: str) -> bool:
        """Whether the folder `name` of the folder being listed holds anything (one entry read)."""
        if walk.fd is None:
            return False
        child, kind, _ = safefile.open_at(walk.fd, name, directory=True)
        if child is None:
            return False
        try:
            with os.scandir(child) as entries:
                return next(entries, None) is not None
        except OSError:
            return False
        finally:
            os.close(child)
