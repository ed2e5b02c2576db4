"""One builder per image tag on this machine.

Two callers that find the same tag missing (two launchers with --build-image, two parallel test
workers asking for the demo pack image) would both build it, and the later build retags the tag
under the first caller, which has already recorded the earlier image's ID. The lock is a file
beside the wheelhouse cache, held with flock (the `filelock` library): the kernel releases it when
its holder dies, even by SIGKILL, so a crashed builder never blocks the next.
"""

from __future__ import annotations

from filelock import FileLock

from .wheelhouse import default_cache_dir


def build_lock(tag: str) -> FileLock:
    """The lock that serialises building `tag` (take it, then check the tag again before building)."""
    folder = default_cache_dir().parent / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in tag)
    return FileLock(str(folder / f"build-{name}.lock"))
