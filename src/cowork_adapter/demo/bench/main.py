"""The demo benchmark's own trivial engine, for bare runs of run_parallel.sh without any model.

Same contract as the real benchmark's engines; run from the benchmark root (/workspace):
    python3 -u main.py --task_dir <task> --max_steps N [--phase all|agent|eval]
Agent phase: build the TaskConfig, wipe and refill the workspace, run the task's preprocess, then
play the scripted plan that demo_policy.py gives for the task text, one tool call per round over
ONE MCP session per needed server (stdio from configs/mcp_servers, or streamable HTTP for the
names listed in MCP_HTTP_URLS). Endings: finish -> success; more steps than --max_steps or a
round_limit ending -> max_turns_reached; provider_error -> failed; hang -> sleeps until killed.
It writes traj_log.json and prints `Status: <status>`.
Eval phase: grade the dump once with the benchmark evaluator, print `Pass:` and `Details:`,
exit 0 on pass, else 1. Phase all does both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from datetime import datetime, timedelta

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import demo_policy  # noqa: E402  (copied beside this file)
from utils.data_structures.task_config import TaskConfig  # noqa: E402
from utils.evaluation.evaluator import TaskEvaluator  # noqa: E402
from utils.mcp_config import load_server_configs, render_server_config  # noqa: E402

PREPROCESS_TIMEOUT_S = 300
CONNECT_TIMEOUT_S = 60
GLOBAL_TASK_CONFIG = {"dump_path": "./dumps/"}


class ProviderError(RuntimeError):
    """The scripted stand-in for a failing model provider."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="demo benchmark engine (scripted, no model)")
    parser.add_argument("--task_dir", required=True)
    parser.add_argument("--max_steps", type=int, default=100)
    parser.add_argument("--phase", choices=("all", "agent", "eval"), default="all")
    parser.add_argument("--eval_config", default=None)
    parser.add_argument("--model_name", default=None)
    parser.add_argument("--provider", default=None)
    parser.add_argument("--debug", action="store_true")
    return parser.parse_args(argv)


def agent_short_name(args) -> str:
    """<provider>/<model>: the env wins, as in the real engines (both containers get it)."""
    provider = os.environ.get("MODEL_PROVIDER") or args.provider or "demo"
    model = os.environ.get("MODEL_NAME") or args.model_name or "demo"
    return "%s/%s" % (provider, model)


def build_config(args) -> TaskConfig:
    return TaskConfig.build(args.task_dir, agent_short_name(args), dict(GLOBAL_TASK_CONFIG), True)


def prepare_workspace(config: TaskConfig) -> None:
    """Empty workspace, initial files copied in, then the task's preprocess (failure raises)."""
    if os.path.isdir(config.agent_workspace):
        shutil.rmtree(config.agent_workspace)
    os.makedirs(config.task_root, exist_ok=True)
    if config.initialization.workspace:
        shutil.copytree(config.initialization.workspace, config.agent_workspace)
    else:
        os.makedirs(config.agent_workspace)
    command = config.initialization.process_command
    if command:
        launch = " ".join(config.launch_time.split()[:2])
        full = '%s --agent_workspace %s --launch_time "%s"' % (command, config.agent_workspace, launch)
        proc = subprocess.run(full, shell=True, capture_output=True, text=True, timeout=PREPROCESS_TIMEOUT_S)
        print(proc.stdout, end="")
        if proc.returncode != 0:
            print(proc.stderr, end="", file=sys.stderr)
            raise RuntimeError("preprocess exited %d" % proc.returncode)


def http_urls() -> dict:
    """MCP_HTTP_URLS = name=url,name=url."""
    urls = {}
    for item in (os.environ.get("MCP_HTTP_URLS") or "").split(","):
        if "=" in item:
            name, url = item.split("=", 1)
            urls[name.strip()] = url.strip()
    return urls


async def open_sessions(stack: AsyncExitStack, config: TaskConfig) -> dict:
    """One initialized ClientSession per needed server, all kept open until the stack closes."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamablehttp_client

    configs = load_server_configs()
    urls = http_urls()
    http_timeout = float(os.environ.get("MCP_HTTP_TIMEOUT") or 600)
    task_dir = os.path.abspath(os.path.join("tasks", "finalpool", config.task_dir))
    sessions = {}
    for name in config.needed_mcp_servers:
        if name in urls:
            read, write, _ = await stack.enter_async_context(
                streamablehttp_client(urls[name], timeout=http_timeout, sse_read_timeout=http_timeout)
            )
            call_timeout = http_timeout
        elif name in configs:
            rendered = render_server_config(configs[name], config.agent_workspace, task_dir)
            params = StdioServerParameters(
                command=rendered["command"], args=rendered["args"], env=rendered["env"], cwd=rendered["cwd"]
            )
            read, write = await stack.enter_async_context(stdio_client(params))
            call_timeout = rendered["timeout"]
        else:
            print("warning: no MCP server config named %r" % name)
            continue
        session = await stack.enter_async_context(
            ClientSession(read, write, read_timeout_seconds=timedelta(seconds=call_timeout))
        )
        await asyncio.wait_for(session.initialize(), CONNECT_TIMEOUT_S)
        sessions[name] = session
    return sessions


def result_text(result) -> str:
    parts = [getattr(item, "text", "") for item in (result.content or [])]
    return "\n".join(part for part in parts if part)


async def play(config: TaskConfig, plan, max_steps: int, calls: list) -> str:
    """Run the plan's steps (one per round, at most max_steps); returns the run status."""
    async with AsyncExitStack() as stack:
        sessions = await open_sessions(stack, config)
        steps = list(plan.steps)
        for number, step in enumerate(steps[:max_steps], start=1):
            arguments = demo_policy.render_arguments(step, config.agent_workspace)
            record = {"round": number, "server": step.server, "tool": step.tool, "arguments": arguments}
            session = sessions.get(step.server)
            if session is None:
                record.update(is_error=True, output="server %s not available" % step.server)
            else:
                try:
                    result = await session.call_tool(step.tool, arguments)
                    record.update(is_error=bool(result.isError), output=result_text(result)[:2000])
                except Exception as exc:  # a failing tool is reported to the "model", as usual
                    record.update(is_error=True, output="%s: %s" % (type(exc).__name__, exc))
            calls.append(record)
            print("round %d: %s.%s -> %s" % (number, step.server, step.tool, "error" if record["is_error"] else "ok"))
        if plan.ending == demo_policy.Ending.HANG:
            print("scripted model stopped answering; waiting forever")
            while True:
                await asyncio.sleep(3600)
        if plan.ending == demo_policy.Ending.PROVIDER_ERROR:
            raise ProviderError("scripted provider error: HTTP 503 from the model endpoint")
        if plan.ending == demo_policy.Ending.ROUND_LIMIT or len(steps) > max_steps:
            return "max_turns_reached"
        return "success"


def write_json(path: str, data) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, ensure_ascii=False, indent=2)


def run_agent_phase(args) -> str:
    config = build_config(args)
    start = datetime.now().isoformat()
    calls: list = []
    plan = demo_policy.plan_for(config.task_str)
    try:
        prepare_workspace(config)
        status = asyncio.run(play(config, plan, args.max_steps, calls))
    except Exception as exc:
        print("agent error: %s: %s" % (type(exc).__name__, exc))
        status = "failed"
    end = datetime.now().isoformat()
    os.makedirs(config.task_root, exist_ok=True)
    write_json(config.log_file, {"config": config.to_dict(), "status": status, "start_time": start, "end_time": end})
    write_json(
        os.path.join(config.task_root, "traj.json"),
        {
            "status": status,
            "start_time": start,
            "end_time": end,
            "plan": plan.tag,
            "final_answer": plan.final_answer if status == "success" else None,
            "tool_calls": calls,
        },
    )
    print("====== Status: %s ======" % status)
    return status


def run_eval_phase(args) -> int:
    config = build_config(args)
    result = asyncio.run(TaskEvaluator.evaluate_from_log_file(config.log_file))
    print("Pass:    %s" % result.get("pass"))
    print("Details: %s" % (result.get("details") or result.get("failure") or "N/A"))
    return 0 if result.get("pass") is True else 1


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    if args.phase in ("all", "agent"):
        run_agent_phase(args)
        if args.phase == "agent":
            print("agent phase done in %.1fs" % (time.monotonic() - started))
            return 0
    return run_eval_phase(args)


if __name__ == "__main__":
    sys.exit(main())
