"""In-flight container creations: what a cleanup waits for before it may call a run empty.

The daemon finishes a create request it has accepted even when the client that sent it is killed,
so a listing made right after a stop can miss a container that lands a moment later. The shim
therefore takes an exclusive flock on a fresh file under <run_root>/custody/creations/ before it
checks admission, and the real docker it runs holds that lock until the daemon has answered (the
lock is inherited, and the request runs outside the runner's process group, so stopping the
runner does not cut it short). Hence:
- a lock that can be taken belongs to a creation that has ended: its container, if any, is on the
  daemon, where a listing sees it; the file is removed once taken;
- a lock still held is a request in flight: cleanup removes what it can see, waits, and lists
  again (cleanup_run), and proves nothing while one is held past its bound.
A creation checked after the run's fence is refused, so no new lock can outlive the wait.

flock is used directly (not the `filelock` library): the shim, which is standard-library only,
takes the same kernel lock, and this side needs one non-blocking attempt per file.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..runroot.layout import RunRoot

LOCK_SUFFIX = ".lock"
# How long cleanup waits for creations in flight. A create answers in well under a second on an
# idle daemon and in a few seconds on a loaded one; a foreground `docker run` holds its lock until
# its container is removed, which cleanup does first.
CREATION_WAIT_SEC = 30.0
# A held lock is tried again this often: a try is an open and a flock of a local file, and a stop
# waits on it (cleanup_run's short rounds), so it is short.
POLL_SEC = 0.02


def creations_dir(run_root: Path) -> Path:
    return RunRoot(run_root).creations


@dataclass(frozen=True)
class Settled:
    ended: int  # creations found ended (their lock files taken and removed)
    in_flight: int  # locks still held at the deadline


def settle(directory: Path | None, deadline: float, clock: Callable[[], float] = time.monotonic) -> Settled:
    """Wait until every creation lock under `directory` can be taken, or until `deadline`.

    Raises OSError when the directory cannot be read (the state is then unknown)."""
    if directory is None:
        return Settled(0, 0)
    try:
        pending = [directory / name for name in os.listdir(directory) if name.endswith(LOCK_SUFFIX)]
    except FileNotFoundError:
        return Settled(0, 0)  # a run from before in-flight tracking, or none was ever made
    ended = 0
    while True:
        held = [path for path in pending if not _take(path)]
        ended += len(pending) - len(held)
        if not held or clock() >= deadline:
            return Settled(ended, len(held))
        pending = held
        time.sleep(POLL_SEC)


def _take(path: Path) -> bool:
    """True when the creation holding `path` has ended (the file is then removed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True  # its shim removed it when the real docker returned
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        path.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)
