"""Validation of a `POST /api/tasks` body: the subset both real releases enforce.

`admit` returns either a Refusal (HTTP status + error envelope) or an Admission (the fields to
store). Readiness and duplicate checks need server state, so the caller passes them in.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
MEMORY_MODES = ("forked", "empty", "shared")
INTERNAL_TYPES = ("evolution", "review", "deep_self_review")
# Metadata keys the server owns; a client's values are dropped silently.
RESERVED_METADATA = frozenset(
    {
        "task_id", "parent_task_id", "root_task_id", "session_id", "actor_id",
        "delegation_role", "drive_root", "child_drive_root", "headless_child_drive_root",
        "budget_drive_root", "task_constraint", "task_contract", "allowed_resources",
        "deadline_at",
    }
)
REFUSED_METADATA = ("project_id", "executor_ref", "workspace_executor")


@dataclass(frozen=True)
class Refusal:
    http_status: int
    error: str
    extra: dict = field(default_factory=dict)

    def body(self) -> dict:
        return {"error": self.error, **self.extra}


@dataclass(frozen=True)
class Admission:
    task_id: str
    record: dict  # the task_results/<id>.json content at status "scheduled"


def iso_utc(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(text: str) -> datetime | None:
    """An ISO-8601 instant with a zone; None if unparsable or naive."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return None
    return moment if moment.tzinfo is not None else None


def _inside(path: Path, other: Path) -> bool:
    try:
        path.relative_to(other)
        return True
    except ValueError:
        return False


def is_git_worktree_root(path: Path) -> bool:
    try:
        out = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--show-toplevel"],
            capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and Path(out.stdout.strip()).resolve() == path.resolve()


def _workspace_refusal(raw, repo_dir: Path, data_dir: Path, require_git: bool) -> Refusal | None:
    if not isinstance(raw, str) or not raw.strip():
        return Refusal(400, "workspace_root must be a non-empty string")
    path = Path(os.path.expanduser(raw.strip()))
    if not path.is_absolute():
        return Refusal(400, "workspace_root must be an absolute path")
    if not path.is_dir():
        return Refusal(400, "workspace_root does not exist or is not a directory")
    resolved, repo, data = path.resolve(), repo_dir.resolve(), data_dir.resolve()
    for other, label in ((repo, "repository"), (data, "data directory")):
        if _inside(resolved, other) or _inside(other, resolved):
            return Refusal(400, f"workspace_root must not overlap the Ouroboros {label}")
    if require_git and not is_git_worktree_root(resolved):
        return Refusal(400, "workspace_root must be the root of a git worktree")
    return None


def _deadline(body: dict, now: datetime) -> tuple[str | None, Refusal | None]:
    if body.get("deadline_at") not in (None, ""):
        moment = parse_iso(str(body["deadline_at"]))
        if moment is None:
            return None, Refusal(400, "deadline_at must be ISO-8601 with a timezone")
        return iso_utc(moment), None
    raw = body.get("timeout_sec", body.get("timeout"))
    if raw in (None, ""):
        return None, None
    if isinstance(raw, bool):
        return None, Refusal(400, "timeout_sec must be a number")
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        return None, Refusal(400, "timeout_sec must be a number")
    if seconds <= 0:
        return None, None
    return iso_utc(now + timedelta(seconds=seconds)), None


def admit(
    body,
    *,
    exists: Callable[[str], bool],
    repo_dir: Path,
    data_dir: Path,
    require_git_workspace: bool = False,
    now: datetime | None = None,
) -> Refusal | Admission:
    """Validate a create body and build the scheduled record; never touches server state."""
    now = now or datetime.now(timezone.utc)
    if not isinstance(body, dict):
        return Refusal(400, "request body must be a JSON object")
    description = body.get("description")
    if not isinstance(description, str) or not description.strip():
        return Refusal(400, "description is required")

    metadata = body.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        return Refusal(400, "metadata must be an object")
    if body.get("delegation_role") == "subagent" or metadata.get("delegation_role") == "subagent":
        return Refusal(400, "subagent tasks cannot be created through the task API")
    for key in ("parent_task_id", "root_task_id"):
        if body.get(key):
            return Refusal(400, f"{key} is not accepted on task creation")
    for key in REFUSED_METADATA:
        if key in metadata:
            return Refusal(400, f"metadata.{key} is not accepted")

    task_type = body.get("type") or "task"
    if task_type in INTERNAL_TYPES:
        return Refusal(400, f"task type {task_type!r} cannot be created through the task API")

    requested_id = body.get("task_id")
    if requested_id not in (None, ""):
        if not isinstance(requested_id, str) or not TASK_ID.fullmatch(requested_id):
            return Refusal(400, "invalid task_id")
        if exists(requested_id):
            return Refusal(409, "task already exists", {"task_id": requested_id})
        task_id = requested_id
    else:
        task_id = secrets.token_hex(8)
        while exists(task_id):
            task_id = secrets.token_hex(8)

    workspace = body.get("workspace_root")
    has_workspace = workspace not in (None, "")
    if has_workspace:
        refusal = _workspace_refusal(workspace, repo_dir, data_dir, require_git_workspace)
        if refusal is not None:
            return refusal
        if task_type != "task":
            return Refusal(400, "an external workspace requires type 'task'")
        workspace = str(Path(os.path.expanduser(workspace.strip())).resolve())

    memory_mode = body.get("memory_mode") or ("forked" if has_workspace else "shared")
    if memory_mode not in MEMORY_MODES:
        return Refusal(400, f"memory_mode must be one of {', '.join(MEMORY_MODES)}")
    if memory_mode == "shared" and has_workspace:
        return Refusal(400, "memory_mode 'shared' is not allowed with workspace_root")

    disabled = body.get("disabled_tools", metadata.get("disabled_tools", []))
    if disabled is None:
        disabled = []
    if not isinstance(disabled, list) or not all(isinstance(t, str) for t in disabled):
        return Refusal(400, "disabled_tools must be a list of tool names")

    deadline_at, refusal = _deadline(body, now)
    if refusal is not None:
        return refusal

    actor_id = str(body.get("actor_id") or "cli")
    source = str(body.get("source") or "api_task")
    session_id = str(body.get("session_id") or f"task-{task_id}")
    kept = {k: v for k, v in metadata.items() if k not in RESERVED_METADATA}
    stamp = iso_utc(now)
    stored_meta = {
        **kept,
        "session_id": session_id,
        "actor_id": actor_id,
        "source": source,
        "delegation_role": "root",
        "task_id": task_id,
        "parent_task_id": "",
        "root_task_id": task_id,
        "deadline_at": deadline_at,
        "disabled_tools": list(disabled),
        "workspace_root": workspace if has_workspace else None,
    }
    record = {
        "task_id": task_id,
        "type": task_type,
        "status": "scheduled",
        "description": description,
        "session_id": session_id,
        "chat_id": body.get("chat_id") or session_id,
        "actor_id": actor_id,
        "source": source,
        "metadata": stored_meta,
        "deadline_at": deadline_at,
        "disabled_tools": list(disabled),
        "workspace_root": workspace if has_workspace else None,
        "workspace_mode": (body.get("workspace_mode") or "external") if has_workspace else None,
        "memory_mode": memory_mode,
        "artifact_status": "pending" if has_workspace else "not_applicable",
        "reason_code": None,
        "result": None,
        "final_answer": None,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_rounds": 0,
        "degraded": False,
        "ts": stamp,
        "created_at": stamp,
        "updated_at": stamp,
    }
    return Admission(task_id=task_id, record=record)
