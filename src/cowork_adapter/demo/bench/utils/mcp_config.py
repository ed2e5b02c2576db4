"""MCP server configs (configs/mcp_servers/*.yaml): lookup by `name` and placeholder rendering.

A config is found by its `name` field, not its file name. Placeholders are plain strings:
${local_servers_paths} (env LOCAL_SERVERS_PATH, else ./local_servers made absolute),
${agent_workspace} and ${task_dir}. The server's env is the yaml env overridden by the process
env, then PG* copied to PG_* so a yaml's `cowork_pg` defaults point at the task's own database.
Loading needs PyYAML (present in the benchmark image); rendering is standard library only.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional

PG_ALIASES = {
    "PGHOST": "PG_HOST",
    "PGPORT": "PG_PORT",
    "PGDATABASE": "PG_DATABASE",
    "PGUSER": "PG_USER",
    "PGPASSWORD": "PG_PASSWORD",
}


def load_server_configs(config_dir: str = os.path.join("configs", "mcp_servers")) -> Dict[str, Dict[str, Any]]:
    """All yaml configs in config_dir, keyed by their `name` field."""
    import yaml

    configs: Dict[str, Dict[str, Any]] = {}
    for entry in sorted(os.listdir(config_dir)):
        if not entry.endswith((".yaml", ".yml")):
            continue
        with open(os.path.join(config_dir, entry), encoding="utf-8") as fh:
            raw = yaml.safe_load(fh) or {}
        if "name" in raw:
            configs[raw["name"]] = raw
    return configs


def _substitute(value: Any, table: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for key, replacement in table.items():
            value = value.replace("${%s}" % key, replacement)
        return value
    if isinstance(value, list):
        return [_substitute(item, table) for item in value]
    if isinstance(value, dict):
        return {key: _substitute(item, table) for key, item in value.items()}
    return value


def render_server_config(
    raw: Mapping[str, Any],
    agent_workspace: str,
    task_dir: str,
    environ: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """{command, args, env, cwd, timeout} ready for a stdio client, placeholders substituted.

    task_dir is the absolute tasks/finalpool/<task> directory.
    """
    environ = dict(os.environ if environ is None else environ)
    table = {
        "local_servers_paths": environ.get("LOCAL_SERVERS_PATH") or os.path.abspath("./local_servers"),
        "agent_workspace": agent_workspace,
        "task_dir": task_dir,
    }
    params = _substitute(dict(raw.get("params") or {}), table)
    env = {key: str(value) for key, value in (params.get("env") or {}).items()}
    env.update(environ)
    for source, alias in PG_ALIASES.items():
        if environ.get(source):
            env[alias] = environ[source]
    return {
        "name": raw.get("name"),
        "command": params["command"],
        "args": [str(arg) for arg in params.get("args") or []],
        "env": env,
        "cwd": params.get("cwd") or agent_workspace,
        "timeout": float(raw.get("client_session_timeout_seconds") or 60),
    }
