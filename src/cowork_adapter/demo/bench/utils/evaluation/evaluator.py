"""The benchmark evaluator: grades one dump by running the task's own evaluation/main.py.

Contract (the same as the real benchmark's):
- a missing log file gives {"pass": False, "failure": "log_file_not_found"} and writes nothing;
- a run whose status is not "success" is not graded: pass is None, and that result is written;
- otherwise the task's evaluation command runs through a shell in the current directory (the
  benchmark root, with the full task tree) with --res_log_file, --agent_workspace,
  --groundtruth_workspace and --launch_time; exit code 0 means pass;
- the result is written to eval_res.json next to the log file; an exception gives
  {"pass": False, "failure": "evaluation_error"} and writes nothing.
Many task evaluators overwrite the log file with their own summary, so a dump is graded once.
Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Dict

from ..data_structures.task_config import Evaluation, TaskConfig


class TaskEvaluator:
    @staticmethod
    async def evaluate_from_log_file(log_file_path: str, allow_resume: bool = False) -> Dict[str, Any]:
        """Grade the dump whose traj_log.json is log_file_path; see the module docstring."""
        if not os.path.isfile(log_file_path):
            return {
                "pass": False,
                "failure": "log_file_not_found",
                "details": "no log file at %s" % log_file_path,
            }
        try:
            with open(log_file_path, encoding="utf-8") as fh:
                dump = json.load(fh)
            result = await TaskEvaluator.evaluate_one(dump)
            out = os.path.join(os.path.dirname(os.path.abspath(log_file_path)), "eval_res.json")
            with open(out, "w", encoding="utf-8") as fh:
                json.dump(result, fh, ensure_ascii=False, indent=2)
            return result
        except Exception as exc:  # any failure of the grading itself, not of the agent
            return {"pass": False, "failure": "evaluation_error", "details": str(exc)}

    @staticmethod
    async def evaluate_one(dump: Dict[str, Any]) -> Dict[str, Any]:
        """Grade one loaded traj_log.json object (status gate, then the task's evaluator)."""
        config = TaskConfig.from_dict(dump["config"])
        status = dump.get("status")
        log_file = os.path.abspath(config.log_file)
        agent_workspace = os.path.abspath(config.agent_workspace)
        launch_time = " ".join(str(config.launch_time).split()[:2])
        groundtruth = config.evaluation.groundtruth_workspace
        command = config.evaluation.evaluation_command
        if command is None or groundtruth is None:
            # Written by a sanitized agent container: resolve against the full tree here.
            rebuilt = Evaluation.build(config.task_dir)
            command = command or rebuilt.evaluation_command
            groundtruth = groundtruth or rebuilt.groundtruth_workspace

        if status != "success":
            return {
                "pass": None,
                "details": "Task status: %s, only SUCCESS counts as pass; pass is null" % status,
            }
        if command is None:
            return {"pass": True, "details": "All evaluation checks passed, and task status is success"}

        full = '%s --res_log_file %s --agent_workspace %s --groundtruth_workspace %s --launch_time "%s"' % (
            command,
            log_file,
            agent_workspace,
            groundtruth,
            launch_time,
        )
        proc = subprocess.run(full, shell=True, capture_output=True, text=True, cwd=os.getcwd())
        print("== Evaluation STDOUT ==")
        print(proc.stdout)
        print("== Evaluation STDERR ==")
        print(proc.stderr)
        if proc.returncode != 0:
            return {"pass": False, "failure": proc.stdout}
        return {"pass": True, "details": "All evaluation checks passed, and task status is success"}
