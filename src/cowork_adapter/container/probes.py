"""Model-free probes through mcp-proxy: `inventory` (list every server's tools) and `stateful`
(state survives separate HTTP sessions). Both write a JSON report under --probe-output."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from . import bench, mcp, safetree
from .mcpclient import McpError, McpSession
from .procs import stop_group
from .protocol import runner_safe
from .runconfig import ImagePaths, env_seconds, load_run_config, run_config_path

PROBE_WAIT_SEC = 180.0
# The probes' own agent short name: their task-like workspaces never share a folder with a task's
# dump (the probe container does not mount dumps/; the folder lives in its writable layer).
PROBE_SHORT_NAME = "cowork-probe"
ALL_TASK = "all-servers"


def _needed(task_dir: str, configs_dir: str) -> list:
    if not task_dir:
        return sorted(n for n in mcp.load_server_docs(configs_dir) if not n.startswith("\0"))
    with open(os.path.join(bench.task_path(task_dir), "task_config.json"), encoding="utf-8") as fh:
        return list(json.load(fh).get("needed_mcp_servers") or [])


def task_like_workspace(task_dir: str) -> str:
    """A fresh workspace laid out as the agent phase lays out a task's: under cwd (/workspace) at
    dumps/<short>/SingleUserTurn-<task>/workspace. Servers run as `uv run <script>` find the
    /workspace project only from a working directory below it, so a probe run elsewhere would
    report them broken although a task's servers start."""
    workspace = os.path.join(bench.expected_task_root(task_dir or ALL_TASK, PROBE_SHORT_NAME), "workspace")
    if os.path.isdir(workspace) and not os.path.islink(workspace):
        removed = safetree.remove_tree(workspace)  # any depth: rmtree recursed per level
        if not removed.ok:
            raise OSError(f"the workspace {workspace} could not be removed: {', '.join(removed.errors)}")
    for sub in ("",) + tuple(bench.SERVER_DIRS.values()):
        os.makedirs(os.path.join(workspace, sub), exist_ok=True)
    return workspace


def _with_stderr_log(server: dict, log_path: str) -> dict:
    """Wrap a server so its stderr lands in its own log (stdout is the MCP channel)."""
    return {
        **server,
        "command": "/bin/sh",
        "args": ["-c", 'exec "$@" 2>>"$0"', log_path, server["command"], *server["args"]],
    }


def _start(names: list, task_dir: str, out_dir: str):
    """Render `names` and start the proxy with those that render; (proc, port, error, {name: error})."""
    paths = ImagePaths.from_env(os.environ)
    cfg, _, _ = load_run_config(run_config_path(os.environ))
    port = cfg.proxy_port if cfg else 8096
    workspace = task_like_workspace(task_dir)
    subst = {
        "local_servers_paths": os.environ.get("LOCAL_SERVERS_PATH") or os.path.abspath("./local_servers"),
        "agent_workspace": workspace,
        "task_dir": bench.task_path(task_dir) if task_dir else "",
    }
    configs_dir = os.path.abspath(os.path.join("configs", "mcp_servers"))
    servers, failed = {}, {}
    for name in names:
        try:
            rendered = mcp.render_servers(
                [name], configs_dir, subst=subst, env=os.environ, workspace=workspace, is_root=os.geteuid() == 0
            )[name]
        except mcp.McpConfigError as exc:
            failed[name] = f"mcp_config_{exc.kind}: {exc}"
            continue
        servers[name] = _with_stderr_log(rendered, os.path.join(out_dir, f"{name}.stderr.log"))
    if not servers:
        return None, port, "no server could be rendered", failed
    config_path = os.path.join(out_dir, "mcp_proxy.json")
    mcp.write_proxy_config(config_path, servers)
    proc = mcp.start_proxy(
        paths.mcp_proxy,
        config_path=config_path,
        port=port,
        cwd=workspace,
        env=os.environ,
        log_path=os.path.join(out_dir, "mcp_proxy.log"),
    )
    deadline = time.monotonic() + env_seconds(os.environ, "COWORK_PROBE_WAIT_SEC", PROBE_WAIT_SEC)
    outcome = mcp.wait_proxy(proc, port, deadline)
    return proc, port, (f"mcp-proxy {outcome}" if outcome else ""), failed


def _write(out_dir: str, name: str, report: dict) -> None:
    with open(os.path.join(out_dir, name), "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2, sort_keys=True)


def run_inventory(task_dir: str, out_dir: str, out=None) -> int:
    """List each needed server's tools; exit 1 unless every server answered with ≥1 tool."""
    out = out or sys.stdout
    os.makedirs(out_dir, exist_ok=True)
    report: dict = {}
    proc = None
    try:
        try:
            names = _needed(task_dir, os.path.abspath(os.path.join("configs", "mcp_servers")))
            proc, port, error, failed = _start(names, task_dir, out_dir)
        except (OSError, ValueError) as exc:
            names, failed, error = [], {}, f"{type(exc).__name__}: {exc}"
            report["\0setup"] = {"ok": False, "tool_count": 0, "tools": [], "error": error}
        for name in names:
            entry: dict[str, Any] = {
                "ok": False,
                "tool_count": 0,
                "tools": [],
                "error": failed.get(name) or error or None,
            }
            if not entry["error"]:
                try:
                    tools = McpSession(mcp.server_url(port, name)).open().list_tools()
                    entry.update(
                        ok=len(tools) > 0,
                        tool_count=len(tools),
                        tools=tools,
                        error=None if tools else "no tools listed",
                    )
                except (McpError, ValueError) as exc:
                    entry["error"] = str(exc)[:500]
            report[name] = entry
            with open(os.path.join(out_dir, f"{name}.probe.log"), "w", encoding="utf-8") as fh:
                fh.write(json.dumps(entry, sort_keys=True) + "\n")
    finally:
        stop_group(proc)
    report = {k.lstrip("\0"): v for k, v in report.items()}
    _write(out_dir, "inventory.json", report)
    ok = bool(report) and all(v["ok"] for v in report.values())
    good = sum(1 for v in report.values() if v["ok"])
    print(runner_safe(f"[cowork] inventory: {good}/{len(report)} servers listed tools"), file=out, flush=True)
    return 0 if ok else 1


def run_stateful(task_dir: str, out_dir: str, out=None) -> int:
    """Tool calls from COWORK_STATEFUL_PROBE ({server, calls[{name, arguments}], expect}), each in
    a fresh HTTP session; state survived when the last answer contains `expect`."""
    out = out or sys.stdout
    os.makedirs(out_dir, exist_ok=True)
    report: dict = {"ok": False, "sessions": [], "error": None}
    proc = None
    try:
        spec = json.loads(os.environ.get("COWORK_STATEFUL_PROBE", ""))
        server, calls, expect = spec["server"], spec["calls"], spec["expect"]
        report.update(server=server, expect=expect)
        proc, port, error, failed = _start([server], task_dir, out_dir)
        if error or failed:
            raise McpError(failed.get(server) or error)
        text = ""
        for call in calls:
            session = McpSession(mcp.server_url(port, server)).open()
            text = session.call_text(call["name"], call.get("arguments") or {})
            report["sessions"].append({"tool": call["name"], "session_id": session.session_id, "text": text[:500]})
        report["ok"] = expect in text
        if not report["ok"]:
            report["error"] = "state did not survive separate sessions"
    except (ValueError, KeyError, TypeError, OSError, McpError, mcp.McpConfigError) as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        stop_group(proc)
    _write(out_dir, "stateful.json", report)
    verdict = "state survived" if report["ok"] else f"failed ({report['error']})"
    print(runner_safe(f"[cowork] stateful probe: {verdict}"), file=out, flush=True)
    return 0 if report["ok"] else 1
