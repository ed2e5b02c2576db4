"""Did the task change its workspace? A bounded listing before and after, compared (pure diff)."""

from __future__ import annotations

import os
from pathlib import Path

MAX_ENTRIES = 20000  # beyond this the listing is cut short; a cut listing counts as changed


def snapshot(root: str | None) -> dict | None:
    """{relative path: (size, mtime_ns)} of regular files, skipping .git; None without a root."""
    if not root:
        return None
    found: dict = {}
    base = Path(root)
    for directory, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            path = Path(directory) / name
            try:
                info = path.lstat()
            except OSError:
                continue
            found[str(path.relative_to(base))] = (info.st_size, info.st_mtime_ns)
            if len(found) >= MAX_ENTRIES:
                found["\0truncated"] = (0, 0)
                return found
    return found


def artifact_status(before: dict | None, after: dict | None) -> str:
    if before is None or after is None:
        return "not_applicable"
    return "ready_no_changes" if before == after else "ready_with_changes"
