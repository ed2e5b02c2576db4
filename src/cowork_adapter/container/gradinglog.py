"""The traj_log.json the evaluator reads: written by the eval phase from the task tree and the host.

The pinned evaluator builds a SHELL command line from traj_log.json (`<eval_command> ... --launch_time
"<launch_time>"`, exit 0 = pass) and gates on its `status`, and the agent under test wrote that file.
So on the first eval entry the eval phase writes it itself (issue 36), from facts the agent cannot
choose:
* `config`: the benchmark's own TaskConfig built from the full task tree (`to_dict()`), its
  `launch_time` the agent exec's start as the docker shim recorded it on the host (STARTED_ENV),
  in the upstream format `YYYY-MM-DD HH:MM:SS Weekday`, in this container's local time (the agent
  phase formatted it the same way);
* `status`: the agent's value only when it is one of the upstream statuses, else `failed`;
* `start_time` / `end_time`: the agent exec's start and end as the host saw them.
The agent's original is kept beside it (AGENT_LOG_NAME, evidence only), and every field that
differs from what an honest engine writes is named: `grading_differences` (paths, task, command,
ground truth: TamperKind.GRADING_INPUTS_DIFFER) and `log_differences` (the rest:
TamperKind.GRADING_LOG_REWRITTEN). Names only: no byte the agent chose goes into the evidence.
Pure functions apart from `write_host_log`. Standard library only; Python 3.10.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, MutableMapping
from datetime import datetime
from typing import Any, NamedTuple

from . import protocol, safefile
from .vocab import UpstreamTaskStatus

AGENT_LOG_NAME = "traj_log.agent.json"  # the agent's traj_log.json as it left it (evidence)
# Set by the docker shim on the eval exec (custody/shim.py: AGENT_STARTED_ENV ...).
STARTED_ENV = "COWORK_AGENT_STARTED_AT"
ENDED_ENV = "COWORK_AGENT_ENDED_AT"
MAX_STEPS_ENV = "COWORK_AGENT_MAX_STEPS"
LAUNCH_FORMAT = "%Y-%m-%d %H:%M:%S %A"  # upstream TaskConfig.build's launch_time
LAUNCH_SHAPE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Za-z]{6,9}\Z")
# The clock is the host's kernel clock on both sides; the slack covers whole-second formatting.
SLACK_SEC = 2.0
LOG_KEYS = ("config", "status", "start_time", "end_time")
# The traj_log.json config fields that decide what the evaluator grades, and where.
GRADING_FIELDS = ("task_dir", "id", "task_root", "log_file", "agent_workspace")
EVALUATION_FIELDS = ("evaluation_command", "groundtruth_workspace")
# Compared apart: launch_time against the host's window, the grading fields above by
# grading_differences, evaluation by grading_differences too.
APART = frozenset(GRADING_FIELDS) | {"evaluation", "launch_time"}
ISO_MAX = 64


class HostFacts(NamedTuple):
    """The agent exec as the host saw it (None: not under the shim, e.g. the `all` phase)."""

    started: float | None = None
    ended: float | None = None
    max_steps: int | None = None

    def as_evidence(self) -> dict:
        return {"agent_started_at": self.started, "agent_ended_at": self.ended, "max_steps": self.max_steps}


def _epoch(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def host_facts(environ: MutableMapping[str, str]) -> HostFacts:
    """The shim's variables, taken out of the environment (the evaluator's children never see them)."""
    started = _epoch(environ.pop(STARTED_ENV, ""))
    ended = _epoch(environ.pop(ENDED_ENV, ""))
    steps = environ.pop(MAX_STEPS_ENV, "")
    if started is None or ended is None or ended < started:
        started = ended = None
    return HostFacts(started, ended, int(steps) if steps.isdigit() and len(steps) < 10 else None)


def launch_time(epoch: float) -> str:
    """`YYYY-MM-DD HH:MM:SS Weekday` in local time, as upstream TaskConfig.build writes it."""
    return datetime.fromtimestamp(epoch).strftime(LAUNCH_FORMAT)


def iso_local(epoch: float) -> str:
    """A naive local ISO time, as the upstream runner writes start_time/end_time."""
    return datetime.fromtimestamp(epoch).isoformat()


def map_status(value: Any) -> str:
    """The agent's status when the upstream code knows it exactly, else `failed`."""
    return value if isinstance(value, str) and value in UpstreamTaskStatus.values() else UpstreamTaskStatus.FAILED.value


def launch_epoch(value: Any) -> float | None:
    """The local epoch of an upstream-format launch_time (weekday checked), else None."""
    if not isinstance(value, str) or not LAUNCH_SHAPE.match(value):
        return None
    try:
        stamp = datetime.strptime(value[:19], "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return stamp.timestamp() if stamp.strftime("%A") == value[20:] else None


def iso_epoch(value: Any) -> float | None:
    """The epoch of an ISO time (naive = local, `Z` or an offset = that zone), else None."""
    if not isinstance(value, str) or not value or len(value) > ISO_MAX:
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        stamp = datetime.fromisoformat(text)
        return stamp.timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def _within(epoch: float | None, host: HostFacts, *, whole_seconds: bool = False) -> bool:
    if epoch is None:
        return False
    if host.started is None or host.ended is None:
        return True  # no window to hold it to: its shape was checked
    low = host.started - SLACK_SEC - (1.0 if whole_seconds else 0.0)
    return low <= epoch <= host.ended + SLACK_SEC


def plain(value: Any) -> Any:
    """`value` as JSON would give it back (tuples as lists, objects by str): comparable with a read."""
    return json.loads(json.dumps(value, default=str))


def _canonical_path(value: Any) -> Any:
    return os.path.normpath(os.path.abspath(value)) if isinstance(value, str) and value else value


def grading_differences(logged: Any, canonical: Mapping) -> list:
    """The grading inputs of an agent-written config that differ from the task tree's TaskConfig
    (`canonical`, its to_dict()). Pure. An evaluation field the agent left None is the sanitized
    agent tree's honest value (its container had no ground truth and no evaluator)."""
    if not isinstance(logged, dict):
        return []
    out = [name for name in GRADING_FIELDS if _canonical_path(logged.get(name)) != _canonical_path(canonical.get(name))]
    stated = logged.get("evaluation")
    built = canonical.get("evaluation")
    truth: dict = built if isinstance(built, dict) else {}
    if stated is not None and (not isinstance(stated, dict) or set(stated) != set(EVALUATION_FIELDS)):
        return out + ["evaluation"]  # not the shape any TaskConfig.to_dict() gives
    given: dict = stated if isinstance(stated, dict) else {}
    for name in EVALUATION_FIELDS:
        value = given.get(name)
        if value is not None and value != truth.get(name):
            out.append("evaluation." + name)
    return out


def _prompts_as_agent_saw(canonical: Any, built_launch: Any, agent_launch: Any) -> Any:
    """The canonical system prompts with the eval build's launch time replaced by the agent's: an
    honest agent prompt embeds its own launch time (the `time` marker)."""
    if (
        not isinstance(canonical, dict)
        or not isinstance(built_launch, str)
        or not built_launch
        or not isinstance(agent_launch, str)
    ):
        return canonical
    return {k: v.replace(built_launch, agent_launch) if isinstance(v, str) else v for k, v in canonical.items()}


def log_differences(agent: Any, canonical: Mapping, host: HostFacts) -> list:
    """Every field of the agent's traj_log.json an honest engine would not have written, apart
    from the grading inputs (grading_differences): `launch_time` and `start_time`/`end_time`
    outside the agent exec the host saw (or not in their formats), a `status` the upstream code
    does not know, any other config field unlike the task tree's, keys no engine writes. Pure.
    Honest variance allowed: the evaluation fields None (sanitized tree, see grading_differences),
    the runner's --max_steps in max_steps_under_single_turn_mode (the upstream engines put it
    there), the agent's own launch time inside its system prompt."""
    if not isinstance(agent, dict):
        return ["traj_log:not_object"]
    out = []
    if set(agent) - set(LOG_KEYS):
        out.append("traj_log:extra_keys")
    if map_status(agent.get("status")) != agent.get("status"):
        out.append("status")
    for name in ("start_time", "end_time"):
        if not _within(iso_epoch(agent.get(name)), host):
            out.append(name)
    config = agent.get("config")
    if not isinstance(config, dict):
        return out + ["config:not_object"]
    if not _within(launch_epoch(config.get("launch_time")), host, whole_seconds=True):
        out.append("config.launch_time")
    if set(config) - set(canonical):
        out.append("config:extra_keys")
    for name in sorted(set(canonical) - APART):
        want, have = canonical.get(name), config.get(name, KeyError)
        if name == "system_prompts":
            want = _prompts_as_agent_saw(want, canonical.get("launch_time"), config.get("launch_time"))
        if name == "max_steps_under_single_turn_mode" and host.max_steps is not None and have == host.max_steps:
            continue
        if have is KeyError or have != want:
            out.append("config." + name)
    return out


def host_log(canonical: Mapping, agent_status: Any, host: HostFacts, now: float) -> dict:
    """The traj_log.json the evaluator reads: the task tree's config with the host's launch time,
    the status mapped onto the upstream set, the host's times (now, without host facts)."""
    config = plain(dict(canonical))
    started = host.started if host.started is not None else now
    ended = host.ended if host.ended is not None else now
    built = config.get("launch_time")
    stamp = launch_time(started)
    config["system_prompts"] = _prompts_as_agent_saw(config.get("system_prompts"), built, stamp)
    config["launch_time"] = stamp
    return {
        "config": config,
        "status": map_status(agent_status),
        "start_time": iso_local(started),
        "end_time": iso_local(ended),
    }


class Written(NamedTuple):
    grading_differ: list
    log_differ: list
    agent_log: dict  # file facts of AGENT_LOG_NAME


def read_agent_log(path: str) -> tuple[Any, str, bytes | None]:
    """(value, "", bytes) or (None, cause, bytes|None) of the agent's log: bounded, never a link."""
    got = safefile.read_bytes(path, cap=safefile.LOG_JSON_CAP)
    if got.kind == safefile.ABSENT:
        return None, "absent", None
    if not got.ok:
        return None, got.kind, None
    data = got.data or b""
    try:
        return protocol.strict_loads(data.decode("utf-8")), "", data
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"invalid:{type(exc).__name__}", data


def write_host_log(task_root: str, task_config: Any, host: HostFacts, *, repeat: bool, now: float) -> Written:
    """Keep the agent's traj_log.json as AGENT_LOG_NAME and write the host's in its place. Only for
    a regular log file or none (the caller refuses the rest). With no log at all nothing is
    written (the evaluator reports it missing). On a repeat entry after a first that died before
    its claim, the original already kept is the agent's; on a first entry any file by that name
    was planted and has been set aside (evalphase.set_aside_planted)."""
    log_file = os.path.join(task_root, protocol.LOG_NAME)
    kept = os.path.join(task_root, AGENT_LOG_NAME)
    source = kept if repeat and safefile.kind_at(kept) == safefile.REGULAR else log_file
    value, cause, data = read_agent_log(source)
    if cause == "absent":
        return Written([], [], protocol.file_facts(kept))
    if source == log_file and data is not None:
        protocol.publish_exclusive(kept, data)
    canonical = plain(task_config.to_dict())
    if cause:
        differ = ["traj_log:" + cause.split(":", 1)[0]]
        grading: list = []
    else:
        grading = grading_differences(value.get("config") if isinstance(value, dict) else None, canonical)
        differ = log_differences(value, canonical, host)
    status = value.get("status") if isinstance(value, dict) else None
    protocol.write_atomic(log_file, protocol.dump_record(host_log(canonical, status, host, now)))
    return Written(grading, differ, protocol.file_facts(kept))
