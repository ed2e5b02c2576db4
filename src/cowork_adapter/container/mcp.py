"""Render the benchmark's MCP server yamls for mcp-proxy, and run the proxy.

mcp-proxy keeps one stdio session per server for the whole task and exposes it at
`/servers/<name>/mcp`, so PPTX/browser state survives the engine's separate HTTP sessions.
"""

from __future__ import annotations

import glob
import json
import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

from .procs import http_json, spawn_group, wait_until
from .yamlmini import load_yaml

PG_ENV = (
    ("PGHOST", "PG_HOST"),
    ("PGPORT", "PG_PORT"),
    ("PGDATABASE", "PG_DATABASE"),
    ("PGUSER", "PG_USER"),
    ("PGPASSWORD", "PG_PASSWORD"),
)


class McpConfigError(Exception):
    """A needed server has no yaml (`missing`) or no command (`invalid`)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def load_server_docs(configs_dir: str) -> dict[str, dict]:
    """{name: yaml document} over configs_dir/*.yaml in sorted order; the first file wins a name."""
    docs: dict[str, dict] = {}
    for path in sorted(glob.glob(os.path.join(configs_dir, "*.yaml")) + glob.glob(os.path.join(configs_dir, "*.yml"))):
        try:
            with open(path, encoding="utf-8") as fh:
                doc = load_yaml(fh.read())
        except (OSError, ValueError) as exc:
            docs.setdefault(f"\0unreadable:{os.path.basename(path)}", {"error": f"{type(exc).__name__}: {exc}"})
            continue
        if not isinstance(doc, dict):
            continue
        name = doc.get("name") or os.path.splitext(os.path.basename(path))[0]
        docs.setdefault(str(name), doc)
    return docs


def _sub(value: Any, subst: Mapping[str, str]) -> Any:
    if not isinstance(value, str):
        return value
    for key, repl in subst.items():
        value = value.replace("${" + key + "}", repl)
    return value


def render_server(
    name: str, doc: Mapping, *, subst: Mapping[str, str], env: Mapping[str, str], workspace: str, is_root: bool
) -> dict:
    """One proxy entry `{command, args, env}` for a yaml document (placeholders substituted)."""
    params = found if isinstance(found := doc.get("params"), dict) else {}
    command = _sub(params.get("command"), subst)
    if not isinstance(command, str) or not command.strip():
        raise McpConfigError("invalid", f"MCP server {name} has no command")
    args = params.get("args") or []
    if not isinstance(args, list):
        raise McpConfigError("invalid", f"MCP server {name} args is not a list")
    args = [str(_sub(a, subst)) for a in args]
    yaml_env = params.get("env") or {}
    if not isinstance(yaml_env, dict):
        raise McpConfigError("invalid", f"MCP server {name} env is not a mapping")
    out_env = {str(k): str(env.get(str(k), _sub("" if v is None else v, subst))) for k, v in yaml_env.items()}
    for src, dst in PG_ENV:
        if env.get(src):
            out_env[dst] = env[src]
    if name == "playwright_with_chunk" and is_root and "--no-sandbox" not in args:
        args.append("--no-sandbox")  # Chromium refuses to start as root with its sandbox on
    cwd = _sub(params.get("cwd"), subst) or workspace
    if os.path.abspath(cwd) != os.path.abspath(workspace):
        # The proxy starts every server in its own cwd (the workspace): change dir in a shell.
        args = ["-c", 'cd "$0" && exec "$@"', cwd, command, *args]
        command = "/bin/sh"
    return {"command": command, "args": args, "env": out_env}


def render_servers(
    names: list[str],
    configs_dir: str,
    *,
    subst: Mapping[str, str],
    env: Mapping[str, str],
    workspace: str,
    is_root: bool,
) -> dict[str, dict]:
    docs = load_server_docs(configs_dir)
    rendered = {}
    for name in names:
        if name not in docs:
            raise McpConfigError("missing", f"no yaml in {configs_dir} names MCP server {name}")
        rendered[name] = render_server(name, docs[name], subst=subst, env=env, workspace=workspace, is_root=is_root)
    return rendered


def server_url(port: int, name: str) -> str:
    return f"http://127.0.0.1:{port}/servers/{urllib.parse.quote(name, safe='')}/mcp"


def write_proxy_config(path: str, servers: Mapping[str, dict]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"mcpServers": dict(servers)}, fh, indent=2, sort_keys=True)


def start_proxy(proxy_bin: str, *, config_path: str, port: int, cwd: str, env: Mapping[str, str], log_path: str):
    argv = [
        proxy_bin,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--stateless",
        "--pass-environment",
        "--named-server-config",
        config_path,
    ]
    return spawn_group(argv, cwd=cwd, env=env, log_path=log_path)


def wait_proxy(proc, port: int, deadline: float) -> str:
    """ "" when `GET /status` answers any JSON; "exited" or "timeout" otherwise."""
    return wait_until(
        lambda: http_json("GET", f"http://127.0.0.1:{port}/status", timeout=5) is not None,
        proc=proc,
        deadline=deadline,
        interval=0.5,
    )
