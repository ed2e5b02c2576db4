"""TaskConfig: everything an engine and the evaluator need to know about one task.

Paths are resolved relative to the current directory, which must be the benchmark root
(`/workspace` in the containers). The dump of a run lives at
`<dump_path>/<agent_short_name with '/' replaced by '_'>/SingleUserTurn-<task>/`, holding
`traj_log.json`, `eval_res.json` and `workspace/`. The path is deterministic, so the agent and the
eval containers compute the same one from the task name and the model identity alone.
Standard library only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Optional

TASKS_ROOT = os.path.join("tasks", "finalpool")
DEFAULT_DUMP_PATH = "./dumps/"
SINGLE_TURN_SUFFIX = (
    "\n\nComplete the task on your own from start to finish; do not ask the user for "
    "confirmation or further input."
)


def _marker(name: str) -> str:
    return "!!<<<<||||" + name + "||||>>>>!!"


def _existing_dir(path: str) -> Optional[str]:
    return path if os.path.isdir(path) else None


def _script_command(task_dir: str, part: str) -> Optional[str]:
    """`<PYTHON_BIN> -m tasks.finalpool.<task>.<part>.main` when <part>/main.py exists, else None."""
    if not os.path.isfile(os.path.join(TASKS_ROOT, task_dir, part, "main.py")):
        return None
    return "%s -m tasks.finalpool.%s.%s.main" % (os.environ.get("PYTHON_BIN", "python3"), task_dir, part)


def _read_text(path: str) -> Optional[str]:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return fh.read()


@dataclass
class Initialization:
    workspace: Optional[str] = None  # initial_workspace/ to copy into the agent workspace
    process_command: Optional[str] = None  # the preprocess module command, without its arguments

    @classmethod
    def build(cls, task_dir: str) -> "Initialization":
        return cls(
            workspace=_existing_dir(os.path.join(TASKS_ROOT, task_dir, "initial_workspace")),
            process_command=_script_command(task_dir, "preprocess"),
        )

    def to_dict(self) -> Dict[str, Any]:
        return {"workspace": self.workspace, "process_command": self.process_command}


@dataclass
class Evaluation:
    groundtruth_workspace: Optional[str] = None  # relative path; None in a sanitized tree
    evaluation_command: Optional[str] = None  # None when evaluation/ is absent (agent container)

    @classmethod
    def build(cls, task_dir: str) -> "Evaluation":
        return cls(
            groundtruth_workspace=_existing_dir(os.path.join(TASKS_ROOT, task_dir, "groundtruth_workspace")),
            evaluation_command=_script_command(task_dir, "evaluation"),
        )

    def to_dict(self) -> Dict[str, Any]:
        return {
            "groundtruth_workspace": self.groundtruth_workspace,
            "evaluation_command": self.evaluation_command,
        }


@dataclass
class Stop:
    user_phrases: List[str] = field(default_factory=lambda: ["#### STOP"])
    tool_names: List[str] = field(default_factory=lambda: ["local-claim_done"])

    def to_dict(self) -> Dict[str, Any]:
        return {"user_phrases": list(self.user_phrases), "tool_names": list(self.tool_names)}


@dataclass
class SystemPrompts:
    agent: Optional[str] = None
    user: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return {"agent": self.agent, "user": self.user}


@dataclass
class TaskConfig:
    task_dir: str
    id: str
    needed_mcp_servers: List[str]
    needed_local_tools: List[str]
    task_root: str
    task_str: str
    log_file: str
    agent_workspace: str
    launch_time: str
    system_prompts: SystemPrompts
    initialization: Initialization
    stop: Stop
    evaluation: Evaluation
    max_turns: Optional[int] = None
    max_steps_under_single_turn_mode: Optional[int] = None
    single_turn_mode: bool = True
    cn_mode: bool = False
    agent_short_name: str = ""
    global_task_config: Dict[str, Any] = field(default_factory=dict)
    meta: Dict[str, Any] = field(default_factory=dict)
    local_token_key_session: Optional[Any] = None

    def __post_init__(self) -> None:
        # A result left by an earlier run of the same dump path must never be mistaken for this one.
        stale = os.path.join(self.task_root, "eval_res.json")
        if os.path.isfile(stale):
            os.remove(stale)

    @classmethod
    def build(
        cls,
        task_dir: str,
        agent_short_name: str,
        global_task_config: Optional[Dict[str, Any]],
        single_turn_mode: bool,
        cn_mode: bool = False,
    ) -> "TaskConfig":
        """Read tasks/finalpool/<task_dir>/ (relative to cwd) and compute the dump layout."""
        global_task_config = dict(global_task_config or {})
        base = os.path.join(TASKS_ROOT, task_dir)
        with open(os.path.join(base, "task_config.json"), encoding="utf-8") as fh:
            raw = json.load(fh)

        dump_path = global_task_config.get("dump_path", DEFAULT_DUMP_PATH)
        short = agent_short_name.replace("/", "_")
        task_root = os.path.abspath(os.path.join(dump_path, short, "SingleUserTurn-" + task_dir))
        agent_workspace = os.path.join(task_root, "workspace")
        log_file = os.path.join(task_root, "traj_log.json")
        launch_time = datetime.now().strftime("%Y-%m-%d %H:%M:%S %A")

        suffix = "_cn" if cn_mode else ""
        task_str = _read_text(os.path.join(base, "docs", "task%s.md" % suffix)) or ""
        agent_prompt = _read_text(os.path.join(base, "docs", "agent_system_prompt%s.md" % suffix))
        if agent_prompt is not None:
            replacements = {
                "current_working_dir": os.getcwd(),
                "workspace_dir": agent_workspace,
                "workspace_dir_rela": os.path.relpath(agent_workspace),
                "time": launch_time,
            }
            for name, value in replacements.items():
                agent_prompt = agent_prompt.replace(_marker(name), value)
            if single_turn_mode:
                agent_prompt += SINGLE_TURN_SUFFIX
        user_prompt = _read_text(os.path.join(base, "docs", "user_system_prompt%s.md" % suffix))

        stop_raw = raw.get("stop") or {}
        stop = Stop(
            user_phrases=stop_raw.get("user_phrases", ["#### STOP"]),
            tool_names=stop_raw.get("tool_names", ["local-claim_done"]),
        )
        return cls(
            task_dir=task_dir,
            id="-".join(part for part in task_dir.split("/") if part),
            needed_mcp_servers=list(raw.get("needed_mcp_servers", [])),
            needed_local_tools=list(raw.get("needed_local_tools", [])),
            task_root=task_root,
            task_str=task_str,
            log_file=log_file,
            agent_workspace=agent_workspace,
            launch_time=launch_time,
            system_prompts=SystemPrompts(agent=agent_prompt, user=user_prompt),
            initialization=Initialization.build(task_dir),
            stop=stop,
            evaluation=Evaluation.build(task_dir),
            max_turns=raw.get("max_turns"),
            max_steps_under_single_turn_mode=global_task_config.get("max_steps_under_single_turn_mode"),
            single_turn_mode=single_turn_mode,
            cn_mode=cn_mode,
            agent_short_name=agent_short_name,
            global_task_config=global_task_config,
            meta=dict(raw.get("meta", {})),
        )

    def to_dict(self) -> Dict[str, Any]:
        """The `config` object of traj_log.json."""
        return {
            "task_dir": self.task_dir,
            "id": self.id,
            "needed_mcp_servers": list(self.needed_mcp_servers),
            "needed_local_tools": list(self.needed_local_tools),
            "task_root": self.task_root,
            "task_str": self.task_str,
            "log_file": self.log_file,
            "agent_workspace": self.agent_workspace,
            "launch_time": self.launch_time,
            "max_turns": self.max_turns,
            "max_steps_under_single_turn_mode": self.max_steps_under_single_turn_mode,
            "single_turn_mode": self.single_turn_mode,
            "cn_mode": self.cn_mode,
            "system_prompts": self.system_prompts.to_dict(),
            "initialization": self.initialization.to_dict(),
            "stop": self.stop.to_dict(),
            "evaluation": self.evaluation.to_dict(),
            "meta": dict(self.meta),
            "local_token_key_session": self.local_token_key_session,
            "agent_short_name": self.agent_short_name,
            "global_task_config": dict(self.global_task_config),
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "TaskConfig":
        """Rebuild from a to_dict() result (re-runs __post_init__, like the real one)."""
        return cls(
            task_dir=data["task_dir"],
            id=data["id"],
            needed_mcp_servers=list(data["needed_mcp_servers"]),
            needed_local_tools=list(data["needed_local_tools"]),
            task_root=data["task_root"],
            task_str=data["task_str"],
            log_file=data["log_file"],
            agent_workspace=data["agent_workspace"],
            launch_time=data["launch_time"],
            system_prompts=SystemPrompts(**data["system_prompts"]),
            initialization=Initialization(**data["initialization"]),
            stop=Stop(**data["stop"]),
            evaluation=Evaluation(**data["evaluation"]),
            max_turns=data["max_turns"],
            max_steps_under_single_turn_mode=data["max_steps_under_single_turn_mode"],
            single_turn_mode=data["single_turn_mode"],
            cn_mode=data["cn_mode"],
            agent_short_name=data.get("agent_short_name", ""),
            global_task_config=dict(data.get("global_task_config") or {}),
            meta=dict(data["meta"]),
            local_token_key_session=data["local_token_key_session"],
        )
