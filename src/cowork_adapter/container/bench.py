"""The benchmark's own pieces, imported from cwd (/workspace): TaskConfig, TaskEvaluator, paths."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from typing import Any

from . import safetree
from .procs import stop_group

GLOBAL_TASK_CONFIG = {"dump_path": "./dumps/"}
# The subfolders the benchmark's servers expect in the workspace (as both upstream engines do).
SERVER_DIRS = {"arxiv_local": "arxiv_local_storage", "memory": "memory", "playwright_with_chunk": ".playwright_output"}


def _cwd_on_path() -> None:
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def build_task_config(task_dir: str, agent_short_name: str) -> Any:
    """The benchmark's TaskConfig for one task (note: it deletes a stale eval_res.json)."""
    _cwd_on_path()
    from utils.data_structures.task_config import TaskConfig  # type: ignore

    return TaskConfig.build(
        task_dir, agent_short_name=agent_short_name, global_task_config=dict(GLOBAL_TASK_CONFIG), single_turn_mode=True
    )


def evaluator_class() -> Any:
    _cwd_on_path()
    from utils.evaluation.evaluator import TaskEvaluator  # type: ignore

    return TaskEvaluator


def expected_task_root(task_dir: str, agent_short_name: str) -> str:
    """The dump folder TaskConfig derives (computed without building it, which deletes files)."""
    return os.path.abspath(
        os.path.join(GLOBAL_TASK_CONFIG["dump_path"], agent_short_name.replace("/", "_"), f"SingleUserTurn-{task_dir}")
    )


def dumps_of_task(task_dir: str, exclude: str = "") -> list:
    """Every dumps/<short>/SingleUserTurn-<task>/ holding a traj_log.json, `exclude` left out
    (to name where an engine wrote when it was not where the adapter expects)."""
    base = os.path.abspath(GLOBAL_TASK_CONFIG["dump_path"])
    found: list[str] = []
    try:
        shorts = sorted(os.listdir(base))
    except OSError:
        return found
    for short in shorts:
        root = os.path.join(base, short, f"SingleUserTurn-{task_dir}")
        if root != os.path.abspath(exclude or "/nonexistent") and os.path.isfile(os.path.join(root, "traj_log.json")):
            found.append(root)
    return found


def task_path(task_dir: str) -> str:
    return os.path.abspath(os.path.join("tasks", "finalpool", task_dir))


def attr(obj: Any, *names: str, default: Any = None) -> Any:
    """Nested attribute or key lookup (TaskConfig pieces are objects or dicts by version)."""
    cur = obj
    for name in names:
        if cur is None:
            return default
        cur = cur.get(name) if isinstance(cur, dict) else getattr(cur, name, None)
    return default if cur is None else cur


def prepare_workspace(task_config: Any) -> str:
    """Wipe and recreate the agent workspace, copy the initial workspace, make server folders."""
    workspace = os.path.abspath(attr(task_config, "agent_workspace"))
    if os.path.isdir(workspace) and not os.path.islink(workspace):
        removed = safetree.remove_tree(workspace)  # any depth: rmtree recursed per level
        if not removed.ok:
            raise OSError(f"the workspace {workspace} could not be removed: {', '.join(removed.errors)}")
    elif os.path.lexists(workspace):
        os.unlink(workspace)
    initial = attr(task_config, "initialization", "workspace")
    if initial and os.path.isdir(initial):
        shutil.copytree(initial, workspace, symlinks=True)
    else:
        os.makedirs(workspace, exist_ok=True)
    for server in attr(task_config, "needed_mcp_servers", default=[]) or []:
        sub = SERVER_DIRS.get(server)
        if sub:
            os.makedirs(os.path.join(workspace, sub), exist_ok=True)
    return workspace


def preprocess_command(task_config: Any, workspace: str) -> str | None:
    command = attr(task_config, "initialization", "process_command")
    if not command:
        return None
    launch = " ".join(str(attr(task_config, "launch_time", default="")).split()[:2])
    return f'{command} --agent_workspace {_quote(workspace)} --launch_time "{launch}"'


def _quote(path: str) -> str:
    return shlex.quote(path)


def run_preprocess(command: str, *, log_path: str, env: dict, timeout: float) -> tuple[int, str]:
    """Run the task's preprocess through the shell. (exit code, "" | "timeout")."""
    with open(log_path, "ab") as log:
        log.write(f"$ {command}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            command,
            shell=True,
            cwd=os.getcwd(),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return proc.wait(timeout=max(1.0, timeout)), ""
        except subprocess.TimeoutExpired:
            stop_group(proc, grace=5)
            return -1, "timeout"
        except BaseException:
            stop_group(proc, grace=5)
            raise
