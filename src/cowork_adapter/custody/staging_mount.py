"""The runner's staging copy of a task, narrowed to that task (issue 37).

Standard library only: the docker shim loads this file as a sibling copy (install_custody writes it
beside shim.py).

With its agent and eval phases split, the runner copies one task (without its answer keys) into
`mktemp -d $TMPDIR/cowork-stage-<id>.XXXXXX` and mounts `<staging>/tasks` read-write at
/workspace/tasks of the agent container, because the task's preprocess writes under its task
folder. That folder is on the host (the run's TMPDIR, under the resource root), outside the dumps
the shim narrows to one task. Here, a mount whose source is inside the run's staging root and
whose target is /workspace/tasks becomes `<source>/finalpool/<task>` at
/workspace/tasks/finalpool/<task>: the one folder the task's own code works in, at the path it
reads, and nothing else of the staging tree. A mount that cannot be narrowed that way (another
target inside it, no such folder, a link on the way) refuses the creation.
"""

import os

TASKS_TARGET = "/workspace/tasks"
TASK_FOLDER = "finalpool"


def _inside(root, path):
    root = os.path.realpath(root)
    path = os.path.realpath(path)
    return path == root or path.startswith(root + "/")


def narrowed(spec, staging_root, task):
    """(new `-v` value or the same one, refused?) for one `-v SRC:DST[:opts]` value."""
    parts = spec.split(":")
    if len(parts) < 2 or not _inside(staging_root, parts[0]):
        return spec, False
    source, target, rest = parts[0], parts[1], parts[2:]
    if task is None or target.rstrip("/") != TASKS_TARGET or "/" in task or task in ("", ".", ".."):
        return spec, True
    inner = os.path.join(source, TASK_FOLDER, task)
    # The folder must be exactly where the runner's rsync put it: a link anywhere on the way (the
    # staging tree is runner-made, but a mount follows links) is refused, never followed.
    if os.path.islink(inner) or not os.path.isdir(inner) or os.path.realpath(inner) != os.path.abspath(inner):
        return spec, True
    return ":".join([inner, TASKS_TARGET + "/" + TASK_FOLDER + "/" + task] + rest), False


def mount_touches(value, staging_root):
    """Whether a `--mount` value names the staging root (such a mount is refused, never narrowed)."""
    return staging_root in value or os.path.realpath(staging_root) in value
