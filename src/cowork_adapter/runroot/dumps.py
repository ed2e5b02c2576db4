"""Where the trust of a task dump's path ends, for host readers of files the agent could write.

A task dump is `<bench>/dumps/<short>/SingleUserTurn-<task>/`: the `dumps` folder and everything
above it are the host's own, every component below it could have been replaced by the agent under
test (a link, a FIFO...). container.safefile's `below` is that folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from .layout import DUMPS

DUMPS_FOLDER = DUMPS


def dumps_folder_of(path: Path | str) -> str | None:
    """The nearest `dumps` folder above `path` (a path the host itself recorded, in its ledger
    or listing), or None when there is none (then only the last component is checked). A cut of
    the string: pathlib's parents cost a tenth of the audit's whole walk of a dump."""
    text = os.fspath(path)
    mark = os.sep + DUMPS_FOLDER + os.sep
    cut = text.rfind(mark)
    if cut >= 0:
        return text[: cut + len(mark) - 1]
    return DUMPS_FOLDER if text.startswith(DUMPS_FOLDER + os.sep) else None
