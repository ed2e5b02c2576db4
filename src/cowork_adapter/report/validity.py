"""pass@1 over the valid tasks, beside the headline over all selected tasks.

A run given `--task-validity` keeps qualify's table in its run root. The report then adds the
score over the tasks the table calls valid, with its own Wilson interval, and discloses how many
selected tasks fall in each class. The full-set score stays the headline: a task that is not
valid still counts there, as it always does.
"""

from __future__ import annotations

from typing import Any

from ..runroot.layout import RunRoot
from ..schemas.validity import TaskValidity, read_validity
from ..vocab import TaskStatus, TaskValidityClass
from .stats import wilson_interval

UNQUALIFIED = "unqualified"  # a selected task the table does not list


def load_validity(run_roots: list[str]) -> tuple[TaskValidity, str] | None:
    """The table of the newest run that kept one (runs are given oldest first), and its path."""
    for root in reversed(run_roots):
        path = RunRoot(root).task_validity
        if path.is_file():
            return read_validity(path, flag="the run's task validity table"), str(path)
    return None


def validity_section(
    tasks: list[str], status_of: dict[str, TaskStatus], found: tuple[TaskValidity, str] | None
) -> dict[str, Any] | None:
    """The report's `validity` block: classes among the selected tasks and pass@1 over the valid ones."""
    if found is None:
        return None
    table, path = found
    klass = {row.instance_id: row.class_.value for row in table.tasks}
    per_task = {task: klass.get(task, UNQUALIFIED) for task in tasks}
    classes = {k.value: 0 for k in TaskValidityClass}
    classes[UNQUALIFIED] = 0
    for value in per_task.values():
        classes[value] += 1
    valid = [t for t in tasks if per_task[t] == TaskValidityClass.VALID.value]
    passed = sum(1 for t in valid if status_of.get(t) is TaskStatus.PASSED)
    lo, hi = wilson_interval(passed, len(valid))
    return {
        "source": path,
        "bench_commit": table.bench_commit,
        "created_at": table.created_at,
        "classes": classes,
        "valid_denominator": len(valid),
        "valid_passed": passed,
        "valid_pass_at_1": passed / len(valid) if valid else None,
        "valid_wilson95": [lo, hi],
        "task_class": per_task,
    }


def disclosure(section: dict[str, Any]) -> str:
    shown = ", ".join(f"{n} {k}" for k, n in section["classes"].items() if n)
    return (
        f"Task validity from {section['source']} (qualify, {section['created_at']}): {shown}. "
        f"pass@1 over the {section['valid_denominator']} valid tasks is reported beside the headline, "
        "which stays over every selected task."
    )
