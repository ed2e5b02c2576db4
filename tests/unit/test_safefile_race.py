"""A host reader never opens a FIFO or device swapped in while it reads (issue 37 deliverable 6).

The readers checked a path with lstat, then opened it: an agent that swaps a regular file and a
device node at the same name won the race (151 opens of the device in 319k reads). Here a thread
renames a regular file, a FIFO and (as root) a device node in turn to the one name a reader
reads, as fast as it can, while the reader reads; inotify reports every open of the FIFO's and
the device's inodes (an O_PATH handle opens nothing and reports none). The reader must never
block, never return anything but the regular file's bytes or the name of what stood there, and
never open the FIFO or the device.
"""

from __future__ import annotations

import ctypes
import os
import stat
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowork_adapter.container import safefile

IN_OPEN = 0x20
IN_NONBLOCK = os.O_NONBLOCK
_libc = ctypes.CDLL(None, use_errno=True)


class OpenWatch:
    """inotify IN_OPEN on some inodes (the watch follows an inode through renames)."""

    def __init__(self, paths):
        self.fd = _libc.inotify_init1(IN_NONBLOCK)
        if self.fd < 0:
            pytest.fail(f"inotify_init1: errno {ctypes.get_errno()}")
        for path in paths:
            if _libc.inotify_add_watch(self.fd, os.fsencode(path), IN_OPEN) < 0:
                pytest.fail(f"inotify_add_watch {path}: errno {ctypes.get_errno()}")

    def opens(self) -> int:
        count = 0
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return count
            count += data.count(IN_OPEN.to_bytes(4, "little"))  # struct inotify_event.mask

    def close(self) -> None:
        os.close(self.fd)


def test_the_watch_sees_an_open_of_a_fifo_so_a_zero_below_means_something(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    watch = OpenWatch([tmp_path / "fifo"])
    os.close(os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK))
    assert watch.opens() == 1
    os.close(os.open(tmp_path / "fifo", os.O_PATH | os.O_NOFOLLOW))  # what safefile holds first
    assert watch.opens() == 0
    watch.close()


def _swapper(folder, names, stop: threading.Event, order):
    """Rename each of `names` onto `record` in turn until told to stop (each rename replaces
    what stood there, so the others are re-made from spare copies)."""
    index = 0
    while not stop.is_set():
        name = names[order[index % len(order)]]
        try:
            os.link(folder / name, folder / "spare")  # the same inode, so the watch still sees it
            os.rename(folder / "spare", folder / "record")
        except OSError:
            pass
        index += 1


_READERS = {
    "read_bytes": lambda folder: safefile.read_bytes(str(folder / "record"), below=str(folder.parent)),
    "read_at": lambda folder: _read_at(folder),
    "kind_at": lambda folder: safefile.kind_at(str(folder / "record"), below=str(folder.parent)),
    "iter_chunks": lambda folder: _drain(*safefile.iter_chunks(str(folder / "record"), cap=1 << 20)),
}


def _read_at(folder):
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return safefile.read_at(fd, "record")
    finally:
        os.close(fd)


def _drain(found, chunks):
    return found, b"".join(chunks)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    order=st.lists(st.integers(min_value=0, max_value=2), min_size=2, max_size=8),
    reads=st.integers(200, 2000),
    reader=st.sampled_from(sorted(_READERS)),
)
def test_a_swap_while_reading_never_opens_the_fifo_or_the_device(tmp_path_factory, order, reads, reader):
    folder = tmp_path_factory.mktemp("dump")
    (folder / "regular").write_bytes(b'{"pass": true}')
    os.mkfifo(folder / "fifo")
    names = ["regular", "fifo", "fifo"]
    watched = [folder / "fifo"]
    if os.geteuid() == 0:  # a character device: /dev/null's numbers (opening it would show)
        os.mknod(folder / "device", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        names[2] = "device"
        watched.append(folder / "device")
    os.link(folder / "regular", folder / "record")
    watch = OpenWatch(watched)
    stop = threading.Event()
    thread = threading.Thread(target=_swapper, args=(folder, names, stop, order), daemon=True)
    thread.start()
    seen = set()
    try:
        for _ in range(reads):
            got = _READERS[reader](folder)
            found = got[0] if reader == "iter_chunks" else got
            seen.add(found if reader == "kind_at" else found.kind)
            if reader in ("read_bytes", "read_at") and got.ok:
                assert got.data == b'{"pass": true}'
    finally:
        stop.set()
        thread.join()
    assert watch.opens() == 0, f"{reader} opened the FIFO or the device"
    assert seen <= {safefile.REGULAR, safefile.FIFO, safefile.DEVICE, safefile.ABSENT, safefile.UNREADABLE}
    watch.close()
