"""The oracle engine's ground truth: where the host stages it, and how it lands in the workspace.

The runner gives agent containers a sanitized task tree (no groundtruth_workspace, no
evaluation), so the oracle cannot read the answer keys from /workspace/tasks. For an oracle run
only, the host copies each selected task's groundtruth_workspace beside the run config
(configs/ is mounted read-only into every task container); a paid run never stages anything there.
Standard library only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Under the run config's folder: <configs>/cowork_oracle_groundtruth/<task>/...
STAGE_DIR = "cowork_oracle_groundtruth"
GROUNDTRUTH_DIR = "groundtruth_workspace"


def stage_groundtruth(bench_copy: Path, task_ids: list[str]) -> int:
    """On the host, for an oracle run only: each task's groundtruth_workspace copied under configs/
    (mounted read-only into task containers), because the agent container's task tree is sanitized.
    Returns how many tasks had one to stage."""
    stage = bench_copy / "configs" / STAGE_DIR
    stage.mkdir(parents=True, exist_ok=False)
    staged = 0
    for task in task_ids:
        source = bench_copy / "tasks" / "finalpool" / task / GROUNDTRUTH_DIR
        if source.is_dir():
            shutil.copytree(source, stage / task, symlinks=True)
            staged += 1
    return staged


def staged_groundtruth(run_config_path: str, task_dir: str) -> str:
    """The staged copy of `task_dir`'s ground truth (it may be absent: a task without one)."""
    name = os.path.basename(task_dir.rstrip("/"))
    return os.path.join(os.path.dirname(os.path.abspath(run_config_path)), STAGE_DIR, name)


def place_groundtruth(source: str, workspace: str) -> dict:
    """Copy `source` over `workspace` (files replaced, others kept) as an agent's written files.

    Returns what the summary records: {"state": "placed" | "absent", "files": n}. A task without
    a ground-truth folder gets nothing placed; its evaluator then says whether that passes.
    """
    if not os.path.isdir(source):
        return {"state": "absent", "files": 0}
    shutil.copytree(source, workspace, symlinks=True, dirs_exist_ok=True)
    count = sum(len(files) for _, _, files in os.walk(source))
    return {"state": "placed", "files": count}
