"""The scripted "model" of the demo: what a competent (or broken) agent does on each demo task.

Standard library only. The same file is copied into the demo benchmark image (for the demo's own
bare engine) and into the stub Ouroboros seed (the stand-in agent), so both act identically.
A demo task opts into a plan with a marker line in its task text: `[demo-policy: <tag>]`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MARKER = re.compile(r"\[demo-policy:\s*([a-z0-9_-]+)\s*\]")


class Ending:
    """How the scripted agent ends, after running its steps (one step = one round)."""

    FINISH = "finish"  # completed voluntarily: reason final_message
    ROUND_LIMIT = "round_limit"  # runs out of rounds: a truncation
    PROVIDER_ERROR = "provider_error"  # the model provider fails: infrastructure
    HANG = "hang"  # never finishes: the outer wall clock must end it


@dataclass(frozen=True)
class Step:
    server: str  # MCP server name as in configs/mcp_servers/*.yaml `name`
    tool: str
    arguments: dict = field(default_factory=dict)  # str values may contain "{workspace}"


@dataclass(frozen=True)
class Plan:
    tag: str
    steps: tuple[Step, ...] = ()
    ending: str = Ending.FINISH
    final_answer: str = "done"


# Filled in with the demo benchmark's tasks (see demo/bench/tasks/finalpool/*/docs/task.md).
PLANS: dict[str, Plan] = {}


def plan_for(task_text: str) -> Plan:
    """The plan named by the task's marker; a task without a known marker gets an empty finish."""
    match = MARKER.search(task_text)
    if match is None:
        return Plan(tag="none")
    return PLANS.get(match.group(1), Plan(tag=match.group(1)))


def render_arguments(step: Step, workspace: str) -> dict:
    """The step's arguments with `{workspace}` replaced in every string value."""

    def render(value):
        if isinstance(value, str):
            return value.replace("{workspace}", workspace)
        if isinstance(value, list):
            return [render(v) for v in value]
        if isinstance(value, dict):
            return {k: render(v) for k, v in value.items()}
        return value

    return render(dict(step.arguments))
