"""Explicit task selection: `--task` ids and a `--task-file`, validated before anything starts.

Every problem is a Refusal("selection", one sentence). No selector at all means "no explicit
selection" (None): the full pinned dataset, or the original selection when recovering.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import Refusal

STAGE = "selection"
# Task ids are folder names under tasks/finalpool/ and end up in container names: keep them tame.
TASK_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
# 496 ids fit in a few KiB; anything far larger is the wrong file.
MAX_TASK_FILE_BYTES = 1024 * 1024
_ID_RULE = "only letters, digits, '.', '_' and '-', not starting with '.'"


def _shown(text: str, limit: int = 60) -> str:
    """A short, quoted rendering of untrusted input for an error sentence."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def is_task_id(text: str) -> bool:
    return TASK_ID.fullmatch(text) is not None


def read_task_file(path: str | Path) -> list[str]:
    """The task ids of a newline-separated file, in order.

    Blank lines and lines starting with `#` are skipped; surrounding whitespace is stripped.
    Refuses a missing or unreadable file, non-UTF-8 content, an invalid id, a repeated id
    (naming the first repeat and the line it first appeared on) and a file that lists no id.
    """
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = fh.read(MAX_TASK_FILE_BYTES + 1)
    except FileNotFoundError:
        raise Refusal(STAGE, f"task file {p} does not exist.") from None
    except IsADirectoryError:
        raise Refusal(STAGE, f"task file {p} is a directory, not a file.") from None
    except OSError as exc:
        raise Refusal(STAGE, f"task file {p} cannot be read ({exc.strerror or exc}).") from None
    if len(data) > MAX_TASK_FILE_BYTES:
        raise Refusal(STAGE, f"task file {p} is larger than 1 MiB; it is not a list of task ids.")
    try:
        text = data.decode("utf-8-sig")  # a leading byte-order mark is harmless, so accept it
    except UnicodeDecodeError as exc:
        raise Refusal(STAGE, f"task file {p} is not valid UTF-8 (bad byte at offset {exc.start}).") from None

    ids: list[str] = []
    first_line: dict[str, int] = {}
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not is_task_id(line):
            raise Refusal(STAGE, f"task file {p} line {number}: {_shown(line)} is not a task id ({_ID_RULE}).")
        if line in first_line:
            raise Refusal(
                STAGE,
                f"task file {p} line {number} repeats task {line!r}, first listed on line {first_line[line]}.",
            )
        first_line[line] = number
        ids.append(line)
    if not ids:
        raise Refusal(STAGE, f"task file {p} lists no task ids.")
    return ids


def explicit_selection(tasks: Sequence[str] | None, task_file: str | Path | None) -> list[str] | None:
    """`--task` ids (in order) followed by the task file's ids; None when neither was given.

    A task named twice, within `--task` or across both, is refused.
    """
    tasks = list(tasks or [])
    if not tasks and task_file is None:
        return None
    seen: dict[str, str] = {}
    chosen: list[str] = []
    for task in tasks:
        if not is_task_id(task):
            raise Refusal(STAGE, f"--task {_shown(task)} is not a task id ({_ID_RULE}).")
        if task in seen:
            raise Refusal(STAGE, f"task {task!r} is selected twice with --task.")
        seen[task] = "--task"
        chosen.append(task)
    if task_file is not None:
        for task in read_task_file(task_file):
            if task in seen:
                raise Refusal(STAGE, f"task {task!r} is selected by both --task and --task-file {task_file}.")
            seen[task] = "--task-file"
            chosen.append(task)
    return chosen


def validate_against_dataset(ids: Iterable[str], dataset_ids: Iterable[str]) -> None:
    """Refuse any selected id that the pinned dataset does not contain (naming up to three)."""
    known = set(dataset_ids)
    unknown = [task for task in ids if task not in known]
    if not unknown:
        return
    named = ", ".join(repr(t) for t in unknown[:3])
    more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
    noun = "task is" if len(unknown) == 1 else "tasks are"
    raise Refusal(STAGE, f"{len(unknown)} selected {noun} not in the pinned dataset: {named}{more}.")
