"""container/safefile.py: a reader of agent-writable files never follows a link, blocks or reads without bound."""

from __future__ import annotations

import os
import threading

import pytest

from cowork_adapter.container import safefile


@pytest.fixture()
def tree(tmp_path):
    base = tmp_path / "dumps"
    (base / "sub").mkdir(parents=True)
    (base / "sub" / "f").write_bytes(b"hello")
    (tmp_path / "secret").write_bytes(b"host file")
    os.symlink(tmp_path, base / "link")  # a directory link inside the trusted folder
    os.symlink(tmp_path / "secret", base / "sub" / "to_secret")
    os.symlink("/dev/zero", base / "sub" / "zero")
    os.mkfifo(base / "sub" / "fifo")
    return base


def test_a_regular_file_is_read(tree):
    got = safefile.read_bytes(str(tree / "sub" / "f"), below=str(tree))
    assert (got.kind, got.data, got.size, got.ok) == (safefile.REGULAR, b"hello", 5, True)


@pytest.mark.parametrize(
    "rel, kind",
    [
        ("sub/to_secret", safefile.SYMLINK),  # a link as the last component
        ("link/secret", safefile.SYMLINK),  # a link as a middle component: never resolved
        ("sub/zero", safefile.SYMLINK),  # a link to a device
        ("sub/fifo", safefile.FIFO),  # a FIFO: named, never opened for reading
        ("sub/missing", safefile.ABSENT),
        ("sub", safefile.DIRECTORY),
    ],
)
def test_anything_but_a_regular_file_is_named_and_not_read(tree, rel, kind):
    got = safefile.read_bytes(str(tree / rel), below=str(tree))
    assert got.kind == kind and got.data is None and not got.ok


def test_a_fifo_with_a_writer_waiting_does_not_block(tree):
    # A reader that opened the FIFO would block until a writer came; this one must return at once.
    done = threading.Event()

    def read():
        safefile.read_bytes(str(tree / "sub" / "fifo"), below=str(tree))
        done.set()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    assert done.wait(5), "read_bytes blocked on a FIFO"


def test_a_device_is_not_read_without_below():
    assert safefile.read_bytes("/dev/zero").kind == safefile.DEVICE


def test_a_file_over_the_cap_is_too_large_and_not_read(tree):
    got = safefile.read_bytes(str(tree / "sub" / "f"), cap=4, below=str(tree))
    assert (got.kind, got.data, got.size) == (safefile.TOO_LARGE, None, 5)


def test_a_path_outside_below_is_refused(tree, tmp_path):
    got = safefile.read_bytes(str(tmp_path / "secret"), below=str(tree))
    assert got.kind == safefile.UNREADABLE and got.cause.startswith("outside:")


def test_scan_dir_reports_links_as_links_and_refuses_a_linked_directory(tree):
    kind, entries = safefile.scan_dir(str(tree / "sub"), below=str(tree))
    assert kind == safefile.DIRECTORY
    assert {e.name: e.kind for e in entries} == {
        "f": safefile.REGULAR,
        "to_secret": safefile.SYMLINK,
        "zero": safefile.SYMLINK,
        "fifo": safefile.FIFO,
    }
    assert safefile.scan_dir(str(tree / "link"), below=str(tree)) == (safefile.SYMLINK, [])


def test_iter_chunks_stops_at_the_cap_and_says_the_file_was_larger(tree):
    (tree / "big").write_bytes(b"x" * 5000)
    found, chunks = safefile.iter_chunks(str(tree / "big"), cap=3000, below=str(tree), chunk=1024)
    assert found.kind == safefile.TOO_LARGE and found.size == 5000
    assert sum(len(c) for c in chunks) == 3000
    found, chunks = safefile.iter_chunks(str(tree / "sub" / "fifo"), cap=3000, below=str(tree))
    assert found.kind == safefile.FIFO and list(chunks) == []
