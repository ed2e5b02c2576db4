"""container/safetree.py: agent-made trees are walked and removed without recursion or following a
link; device nodes and set-id files do not stay on the host (issue 37 deliverables 4 and 6).

shutil.rmtree recursed once per level and raised RecursionError (past ignore_errors=True) on a
10,000-deep tree: in the launcher's critical cleanup, in `clear` and in the watchdog.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowork_adapter.container import safetree

DEPTH = 10_000
CAN_MKNOD = os.geteuid() == 0


def deep_tree(root: Path, depth: int, *, every: int = 1000) -> None:
    """A chain of `depth` folders below `root`, made through descriptors (no path is that long
    to the kernel); every `every` levels a set-uid file, a link out of the tree and a FIFO."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            if level % every == 0:
                os.close(os.open("setuid", os.O_CREAT | os.O_WRONLY, 0o4755, dir_fd=fd))
                os.symlink(str(root.parent / "outside"), "out", dir_fd=fd)
                os.mkfifo("fifo", dir_fd=fd)
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


@pytest.fixture()
def base(tmp_path):
    """A folder in memory where the host has one (/dev/shm): on this disk each rmdir cost about
    2 ms under load (the kernel's journal, not the walk: 10,000 removals took 0.6 s in memory).
    What is measured is the walk's correctness; the disk's speed is not the subject."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(dir=shm, prefix="cowork-test-safetree-"))
    yield folder
    safetree.remove_tree(str(folder))


@pytest.fixture()
def outside(base):
    folder = base / "outside"
    folder.mkdir()
    (folder / "keep").write_text("host file")
    return folder


def test_a_10000_deep_tree_is_removed_whole_and_nothing_a_link_names(base, outside):
    deep_tree(base / "dump", DEPTH)
    hazards = safetree.remove_hazards(str(base / "dump"))
    assert (hazards.removed, hazards.failed) == (DEPTH // 1000, 0)  # the set-uid files; links and FIFOs stay
    removed = safetree.remove_tree(str(base / "dump"))
    assert removed.ok, removed.errors
    assert removed.removed == DEPTH + 1 + 2 * (DEPTH // 1000)  # the folders, the root, the links and FIFOs
    assert not os.path.lexists(base / "dump")
    assert (outside / "keep").read_text() == "host file"


def test_a_link_or_file_where_the_tree_was_is_removed_itself_and_never_followed(base, outside):
    os.symlink(outside, base / "tmpdir")
    assert safetree.remove_tree(str(base / "tmpdir")).removed == 1
    assert (outside / "keep").exists() and not os.path.lexists(base / "tmpdir")
    assert safetree.remove_tree(str(base / "absent")) == safetree.Outcome(0, 0, ())


# A generated tree: each step makes one entry of some kind in one of the folders made so far.
_STEPS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=50),
        st.sampled_from(
            ["dir", "file", "setuid", "setgid", "link_out", "link_dir", "fifo"] + (["chr", "blk"] if CAN_MKNOD else [])
        ),
    ),
    max_size=60,
)


def _build(root: Path, steps, outside: Path) -> set[str]:
    """Make the tree; the relative paths of its hazards."""
    folders, hazards = [root], set()
    root.mkdir()
    for index, (pick, kind) in enumerate(steps):
        where = folders[pick % len(folders)]
        path = where / f"e{index}"
        if kind == "dir":
            path.mkdir()
            folders.append(path)
        elif kind in ("file", "setuid", "setgid"):
            path.write_bytes(b"x")
            os.chmod(path, {"file": 0o755, "setuid": 0o4755, "setgid": 0o2750}[kind])
        elif kind == "link_out":
            os.symlink(outside / "keep", path)
        elif kind == "link_dir":
            os.symlink(outside, path)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            os.mknod(path, 0o600 | (stat.S_IFCHR if kind == "chr" else stat.S_IFBLK), os.makedev(1, 3))
        if kind in ("setuid", "setgid", "chr", "blk"):
            hazards.add(str(path.relative_to(root)))
    return hazards


def _listing(root: Path) -> set[str]:
    out = set()
    for top, dirs, files in os.walk(root):  # os.walk never descends into a link
        out.update(str((Path(top) / n).relative_to(root)) for n in dirs + files)
    return out


@settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=_STEPS)
def test_generated_trees_lose_exactly_their_hazards_then_everything(base, steps):
    base = Path(tempfile.mkdtemp(dir=base))
    outside = base / "outside"
    outside.mkdir()
    (outside / "keep").write_text("host file")
    os.chmod(outside / "keep", 0o4755)  # a set-uid file outside: a link to it must not remove it
    root = base / "dump"
    hazards = _build(root, steps, outside)
    before = _listing(root)
    found = safetree.remove_hazards(str(root))
    assert (found.removed, found.failed) == (len(hazards), 0)
    assert _listing(root) == before - hazards
    gone = safetree.remove_tree(str(root))
    assert gone.ok and gone.removed == len(before) - len(hazards) + 1
    assert not os.path.lexists(root)
    assert (outside / "keep").read_text() == "host file" and os.stat(outside / "keep").st_mode & stat.S_ISUID
