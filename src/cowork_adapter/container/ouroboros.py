"""Driving the Ouroboros server's HTTP task API: settings, process env, readiness, submit, poll.

Pure builders first (settings, env, body, timeout budget), then the I/O steps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from . import protocol, safetree
from .mcp import server_url
from .outcome import cost_unsettled, is_terminal
from .procs import HttpError, http_json, spawn_group, wait_until

SENTINEL = ".ouroboros_isolated_benchmark"
LOG_NAMES = ("tools.jsonl", "events.jsonl", "progress.jsonl", "chat.jsonl", "supervisor.jsonl")
# The server's physical-attempt ledger (6.97+): one attempt per provider request, the monetary
# authority; its llm_usage rows in events.jsonl are a projection that misses some request kinds.
ATTEMPTS_LEDGER = os.path.join("state", "usage_attempts.jsonl")
SAVE_MARGIN_SEC = 105  # room left to save artefacts before the runner's hard kill
MIN_TASK_TIMEOUT_SEC = 60
STRIPPED_ENV_PREFIXES = ("OUROBOROS_", "LLM_", "MODEL_")


class EngineFailure(Exception):
    """A typed engine failure: its reason goes to the summary (infra)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def build_settings(
    *,
    base: Mapping,
    mcp_names: list,
    proxy_port: int,
    mcp_tool_timeout_sec: float,
    max_steps: int,
    credential_setting: str,
    key: str,
    base_url: str | None,
) -> dict:
    """The server's settings.json (boot-time authority over its env); holds the credential."""
    settings = dict(base)
    settings["MCP_ENABLED"] = True
    settings["MCP_SERVERS"] = [
        {"id": name, "name": name, "enabled": True, "transport": "streamable_http", "url": server_url(proxy_port, name)}
        for name in mcp_names
    ]
    settings["MCP_TOOL_TIMEOUT_SEC"] = mcp_tool_timeout_sec
    settings["OUROBOROS_MAX_ROUNDS"] = int(max_steps)
    settings[credential_setting] = key
    if base_url:
        settings["OPENAI_COMPATIBLE_BASE_URL"] = base_url
    return settings


def applied_settings(settings: Mapping, credential_setting: str, terms: list) -> dict:
    """settings.json without secrets, for the dump: the credential and every *_API_KEY dropped."""
    out = {}
    for key, value in settings.items():
        if key == credential_setting or key.upper().endswith("_API_KEY"):
            continue
        out[key] = json.loads(protocol.scrub(json.dumps(value), terms))
    return out


def server_env(env: Mapping[str, str], *, paths: Any, port: int) -> dict:
    """Inherited env minus OUROBOROS_*/LLM_*/MODEL_*, plus the isolated-root overrides."""
    out = {k: v for k, v in env.items() if not k.startswith(STRIPPED_ENV_PREFIXES)}
    out.update(
        {
            "OUROBOROS_APP_ROOT": paths.app_root,
            "OUROBOROS_REPO_DIR": paths.seed_dir,
            "OUROBOROS_DATA_DIR": paths.data_dir,
            "OUROBOROS_SETTINGS_PATH": os.path.join(paths.data_dir, "settings.json"),
            "OUROBOROS_PID_FILE": os.path.join(paths.runtime_dir, "ouroboros.pid"),
            "OUROBOROS_PORT_FILE": os.path.join(paths.data_dir, "state", "server_port"),
            "OUROBOROS_SERVER_HOST": "127.0.0.1",
            "OUROBOROS_SERVER_PORT": str(port),
            "OUROBOROS_WORKER_START_METHOD": "spawn",
            "PYTHONUNBUFFERED": "1",
            # A local-dev server pip-installs its lock file at every start: the venv already holds it,
            # and the container has no package index, so pip must not wait on one.
            "PIP_NO_INDEX": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
    )
    loopback = ["127.0.0.1", "localhost"]
    for name in ("NO_PROXY", "no_proxy"):
        have = [h for h in out.get(name, "").split(",") if h.strip()]
        out[name] = ",".join(have + [h for h in loopback if h not in have])
    return out


def agent_timeout(task_timeout_sec: float, overhead_sec: float) -> int:
    """The agent-visible deadline: task timeout − start-up overhead − save margin, at least 60 s."""
    return max(MIN_TASK_TIMEOUT_SEC, int(task_timeout_sec - overhead_sec - SAVE_MARGIN_SEC))


def task_body(*, system_prompt: str, task_text: str, workspace: str, disabled_tools: list, timeout_sec: int) -> dict:
    return {
        "description": f"{(system_prompt or '').strip()}\n\n{(task_text or '').strip()}",
        "workspace_root": workspace,
        "workspace_mode": "external",
        "memory_mode": "empty",
        "actor_id": "cowork-bench",
        "source": "cowork-bench",
        "metadata": {"source": "cowork-bench", "delegation_role": "root"},
        "disabled_tools": list(disabled_tools),
        "timeout_sec": int(timeout_sec),
    }


def ensure_worktree_root(workspace: str, timeout: float = 120.0) -> bool:
    """Make `workspace` its own git worktree root with one commit of its initial files (6.97 admits
    only such workspaces). True when this created the repository (remove it with
    `remove_worktree_git` after the server stops); False when one exists or git is absent."""
    if os.path.exists(os.path.join(workspace, ".git")) or shutil.which("git") is None:
        return False
    git = [
        "git",
        "-c",
        "user.name=cowork-adapter",
        "-c",
        "user.email=cowork-adapter@invalid",
        "-c",
        "commit.gpgsign=false",
        "-c",
        "core.hooksPath=/dev/null",
    ]
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["commit", "-q", "--allow-empty", "--no-verify", "-m", "initial workspace"],
    ):
        subprocess.run(
            git + args,
            cwd=workspace,
            check=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    return True


def remove_worktree_git(workspace: str) -> None:
    """Drop the repository `ensure_worktree_root` made: the benchmark's evaluator sees its own files only."""
    safetree.remove_tree(os.path.join(workspace, ".git"))  # the agent could have deepened it: no recursion


def prepare_data_root(data_dir: str, settings: Mapping) -> None:
    """Create logs/ state/ and the sentinel; write settings.json with mode 0600 from the start."""
    for sub in ("logs", "state"):
        os.makedirs(os.path.join(data_dir, sub), exist_ok=True)
    open(os.path.join(data_dir, SENTINEL), "a").close()
    path = os.path.join(data_dir, "settings.json")
    if os.path.exists(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(settings, fh, ensure_ascii=False, indent=2)
    os.chmod(path, 0o600)


def start_server(paths: Any, *, port: int, env: Mapping[str, str], log_path: str):
    argv = [paths.seed_python, "server.py", "--host", "127.0.0.1", "--port", str(port)]
    return spawn_group(argv, cwd=paths.seed_dir, env=env, log_path=log_path)


def server_ready(state: Any) -> bool:
    """Ready = supervisor_ready truthy, no supervisor_error, and workers_total absent or > 0
    (older builds lack it; 6.97 sets supervisor_ready even when its supervisor failed to start)."""
    if not isinstance(state, dict) or not state.get("supervisor_ready") or state.get("supervisor_error"):
        return False
    workers = state.get("workers_total")
    return workers is None or (isinstance(workers, (int, float)) and workers > 0)


def _ready_or_failed(state: Any) -> bool:
    if isinstance(state, dict) and state.get("supervisor_ready") and state.get("supervisor_error"):
        raise EngineFailure(
            "server_start_failed", f"supervisor failed to start: {str(state['supervisor_error'])[:500]}"
        )
    return server_ready(state)


def wait_server(proc, port: int, deadline: float) -> str:
    """ "" when ready, "exited"/"timeout" otherwise; EngineFailure(server_start_failed) on a reported
    supervisor error (it never recovers by itself)."""
    return wait_until(
        lambda: _ready_or_failed(http_json("GET", f"http://127.0.0.1:{port}/api/state", timeout=5)),
        proc=proc,
        deadline=deadline,
        interval=0.5,
    )


def submit(port: int, body: Mapping) -> str:
    """POST /api/tasks; the task id, or EngineFailure(task_create_failed) on any refusal."""
    try:
        answer = http_json("POST", f"http://127.0.0.1:{port}/api/tasks", body=dict(body), timeout=30)
    except HttpError as exc:
        why = exc.body.get("error") if isinstance(exc.body, dict) else None
        raise EngineFailure("task_create_failed", f"{exc}: {why}" if why else str(exc)) from None
    task_id = answer.get("task_id") if isinstance(answer, dict) else None
    if not isinstance(task_id, str) or not task_id:
        raise EngineFailure("task_create_failed", "POST /api/tasks answered without a task_id")
    return task_id


def checkpoint(data_dir: str, task_id: str | None, out_dir: str, terms: list) -> None:
    """Copy the runtime logs and the task result into the dump, scrubbed, via tmp+rename."""
    os.makedirs(out_dir, exist_ok=True)
    sources = [os.path.join(data_dir, "logs", n) for n in LOG_NAMES] + [os.path.join(data_dir, ATTEMPTS_LEDGER)]
    if task_id:
        sources.append(os.path.join(data_dir, "task_results", f"{os.path.basename(task_id)}.json"))
    for src in sources:
        try:
            with open(src, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        protocol.write_atomic(os.path.join(out_dir, os.path.basename(src)), protocol.scrub_bytes(data, terms))


SENT_ATTEMPT_STATES = ("dispatched", "settled", "unresolved")  # a request reached the provider


def attempt_usage(data_dir: str) -> dict | None:
    """Totals of the server's physical-attempt ledger: one record per model request sent (the
    last row of each `kind: attempt` id, in a sent state), tokens of the settled ones. None
    when the server keeps no ledger (older builds) or it cannot be read."""
    last: dict = {}
    try:
        with open(os.path.join(data_dir, ATTEMPTS_LEDGER), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and row.get("kind") == "attempt" and row.get("attempt_id"):
                    last[str(row["attempt_id"])] = row
    except OSError:
        return None
    sent = [r for r in last.values() if r.get("state") in SENT_ATTEMPT_STATES]

    def total(name: str) -> int:
        return sum(int(r.get(name) or 0) for r in sent if r.get("state") == "settled")

    return {
        "records": len(sent),
        "settled": sum(1 for r in sent if r.get("state") == "settled"),
        "prompt_tokens": total("prompt_tokens"),
        "completion_tokens": total("completion_tokens"),
    }


def poll(
    port: int,
    task_id: str,
    *,
    proc,
    deadline: float,
    on_tick: Callable[[], None],
    on_result: Callable[[dict], None],
    cost_grace_sec: float = 60.0,
    interval: float = 2.0,
) -> tuple[dict, bool]:
    """Poll GET /api/tasks/<id> until terminal (+ cost-finality grace). (result, grace exhausted).

    `on_tick` runs before every request (log checkpoint); a transport error with a dead server
    raises EngineFailure(server_died); reaching `deadline` raises TimeoutError.
    """
    url = f"http://127.0.0.1:{port}/api/tasks/{urllib.parse.quote(task_id, safe='')}"
    grace_until: float | None = None
    while True:
        on_tick()
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("outer deadline reached while polling")
        try:
            answer = http_json("GET", url, timeout=min(30.0, left))
        except HttpError as exc:
            if proc.poll() is not None:
                raise EngineFailure("server_died", f"server exited ({proc.returncode}) while polling: {exc}") from None
            answer = None
        if isinstance(answer, dict) and answer:
            on_result(answer)
            if is_terminal(answer):
                if not cost_unsettled(answer):
                    return answer, False
                now = time.monotonic()
                if grace_until is None:
                    grace_until = min(now + cost_grace_sec, deadline)
                if now >= grace_until:
                    return answer, True
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))
