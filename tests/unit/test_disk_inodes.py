"""Disk admission counts inodes as well as bytes (issue 37 deliverable 3).

A dump of a few hundred thousand empty files takes inodes, not bytes: the byte reserves never saw
it, and a full inode table stops every sibling's writes. The shim's admission check, the
launcher's preflight and its reserve watch (host/disk.py) refuse below the inode reserve too.
The file system is stood in for by its statvfs reading: the rule under test is arithmetic on it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cowork_adapter.config import Disk
from cowork_adapter.custody import shim_admission, shim_words
from cowork_adapter.host import disk
from cowork_adapter.run import launch

GIB = 1 << 30


def reading(*, files: int, favail: int, bavail: int = 10_000_000, frsize: int = 4096) -> os.statvfs_result:
    # (bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax)
    return os.statvfs_result((frsize, frsize, 2 * bavail, bavail, bavail, files, favail, favail, 0, 255))


@pytest.mark.parametrize(
    "files, favail, short",
    [
        (1_000_000, 49_999, True),  # under 5 % free
        (1_000_000, 50_000, False),  # exactly the reserve
        (1_000_000, 900_000, False),
        (0, 0, False),  # no fixed inode table: bytes alone bound it
    ],
)
def test_every_disk_check_refuses_below_the_inode_reserve(monkeypatch, tmp_path, files, favail, short):
    monkeypatch.setattr(os, "statvfs", lambda path: reading(files=files, favail=favail))
    assert (disk.inodes_short(tmp_path) is not None) is short
    assert shim_admission.inodes_short(str(tmp_path)) is short
    config = {
        "launcher_pid": None,
        "stop_file": str(tmp_path / "stop"),
        "resource_root": str(tmp_path),
        "min_free_bytes": 1,
    }
    assert shim_admission.admission_cause(config) == (shim_words.DISK_RESERVE_REACHED if short else None)
    sentence = launch.disk_refusal(tmp_path, Disk(min_free_gib=1, min_root_free_gib=1))
    assert (sentence is not None) is short
    if short:
        assert f"{favail:,} free inodes" in sentence and "50,000" in sentence


def test_the_byte_reserve_still_holds_with_inodes_to_spare(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "statvfs", lambda path: reading(files=1_000_000, favail=900_000, bavail=1000))
    config = {
        "launcher_pid": None,
        "stop_file": str(tmp_path / "stop"),
        "resource_root": str(tmp_path),
        "min_free_bytes": GIB,
    }
    assert shim_admission.admission_cause(config) == shim_words.DISK_RESERVE_REACHED
    assert "GiB free" in launch.disk_refusal(Path(tmp_path), Disk(min_free_gib=1, min_root_free_gib=1))
