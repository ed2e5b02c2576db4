"""Free space on a file system, in bytes and in inodes (files it can still hold).

A dump of a few hundred thousand empty files takes almost no bytes and can take every inode of
the file system the dumps live on: then no sibling can write a byte, whatever the byte reserve
says. Every disk check of the launcher (admission, the supervisor's reserve watch) counts both.
The docker shim (custody/shim.py, stdlib only) applies the same rule with its own copy of it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

# The share of a file system's inodes kept free, beside the byte reserve (--min-free-gib,
# --min-root-free-gib). A file system without a fixed inode table (f_files 0: btrfs, some
# overlay and network file systems) has no inode reserve: bytes alone bound it.
MIN_FREE_INODE_FRACTION = 0.05


def free_bytes(path: Path | str) -> int:
    """Bytes available to unprivileged users (statvfs f_bavail)."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def inodes_short(path: Path | str) -> tuple[int, int] | None:
    """(free inodes, the reserve) when the file system of `path` has fewer inodes available to
    unprivileged users (f_favail) than MIN_FREE_INODE_FRACTION of its inodes; None otherwise."""
    stats = os.statvfs(path)
    if stats.f_files <= 0:
        return None
    need = math.ceil(stats.f_files * MIN_FREE_INODE_FRACTION)
    return (stats.f_favail, need) if stats.f_favail < need else None
