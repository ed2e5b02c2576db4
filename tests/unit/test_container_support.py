"""A tiny fake benchmark tree and a fake Ouroboros server for the container entrypoint tests.

The fake tree has its own utils/ (TaskConfig.build, an async TaskEvaluator), one task, one stdio
MCP server on the real mcp SDK, and /workspace/cowork_entry.py laid out as the image lays it out.
The entrypoint runs as a subprocess under Python 3.10 when available (the oldest it supports).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTAINER_SRC = REPO / "src" / "cowork_adapter" / "container"
VENV_PY = REPO / ".venv" / "bin" / "python"
MCP_PROXY = REPO / ".venv" / "bin" / "mcp-proxy"


# The benchmark's interpreter may be 3.10: run the entrypoint under a 3.10 when this machine has
# one (test_container_py310_syntax checks the grammar on every machine regardless).
def _python310() -> str | None:
    """A working 3.10 interpreter, if this machine has one (a pyenv shim alone does not count)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [str(p) for p in sorted(root.glob("versions/3.10*/bin/python3.10"))]
    candidates += [c for c in [shutil.which("python3.10")] if c]
    for candidate in candidates:
        try:
            if subprocess.run([candidate, "-c", "pass"], capture_output=True, timeout=20).returncode == 0:
                return candidate
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


PY310 = _python310()
BENCH_PY = PY310 or sys.executable
FAKE_KEY = "sk-or-FAKE-test-key-0123456789abcdef"
TASK = "demo-task"
MODEL = "fake/model-1"
SHORT = f"ouroboros/{MODEL}"

TASK_CONFIG_PY = """
import json, os
from datetime import datetime

class TaskConfig:
    def __init__(self, **kw):
        self.__dict__.update(kw)
        stale = os.path.join(self.task_root, "eval_res.json")
        if os.path.exists(stale):
            os.remove(stale)

    @classmethod
    def build(cls, task_dir, agent_short_name=None, global_task_config=None, single_turn_mode=False, cn_mode=False):
        base = os.path.join("tasks", "finalpool", task_dir)
        with open(os.path.join(base, "task_config.json")) as fh:
            tc = json.load(fh)
        root = os.path.join(global_task_config["dump_path"], agent_short_name.replace("/", "_"), "SingleUserTurn-" + task_dir)
        pre = os.path.join(base, "preprocess", "main.py")
        init = os.path.join(base, "initial_workspace")
        with open(os.path.join(base, "docs", "task.md")) as fh:
            task_str = fh.read()
        return cls(task_dir=task_dir, id=task_dir, needed_mcp_servers=tc.get("needed_mcp_servers", []),
                   task_root=root, log_file=os.path.join(root, "traj_log.json"),
                   agent_workspace=os.path.join(root, "workspace"),
                   system_prompts={"agent": "  You are a careful agent.  ", "user": None},
                   initialization={"workspace": init if os.path.isdir(init) else None,
                                   "process_command": (os.environ.get("PYTHON_BIN", "python3") + " " + pre) if os.path.exists(pre) else None},
                   task_str=task_str, launch_time=datetime.now().strftime("%Y-%m-%d %H:%M:%S %A"),
                   single_turn_mode=single_turn_mode, agent_short_name=agent_short_name)

    def to_dict(self):
        return dict(self.__dict__)
"""

EVALUATOR_PY = """
import asyncio, json, os

class TaskEvaluator:
    @staticmethod
    async def evaluate_from_log_file(log_file, allow_resume=False):
        with open(os.environ["FAKE_EVAL_COUNTER"], "a") as fh:
            fh.write("call\\n")
        await asyncio.sleep(float(os.environ.get("FAKE_EVAL_SLEEP", "0")))
        if os.environ.get("FAKE_EVAL_CRASH"):
            os._exit(9)
        if not os.path.exists(log_file):
            return {"pass": False, "failure": "log_file_not_found", "details": "missing"}
        with open(log_file) as fh:
            status = json.load(fh)["status"]
        if status != "success":
            res = {"pass": None, "details": "Task status: %s, only SUCCESS counts as pass; pass is null" % status}
        else:
            res = {"pass": json.loads(os.environ.get("FAKE_EVAL_PASS", "true")), "details": "checked"}
        if os.environ.get("FAKE_EVAL_OVERWRITE_LOG"):
            with open(log_file, "w") as fh:
                json.dump({"total_passed": 1}, fh)
        with open(os.path.join(os.path.dirname(log_file), "eval_res.json"), "w") as fh:
            json.dump(res, fh)
        return res
"""

PREPROCESS_PY = """
import json, os, sys
out = os.environ.get("FAKE_ENV_DUMP")
if out:
    with open(os.path.join(out, "preprocess.env.json"), "w") as fh:
        json.dump(dict(os.environ), fh)
print("preprocess args", sys.argv[1:])
sys.exit(int(os.environ.get("FAKE_PREPROCESS_EXIT", "0")))
"""

NOTES_SERVER_PY = '''
import json, os
from mcp.server.fastmcp import FastMCP

out = os.environ.get("FAKE_ENV_DUMP")
if out:
    with open(os.path.join(out, "mcp_server.env.json"), "w") as fh:
        json.dump(dict(os.environ), fh)
app = FastMCP("notes")
NOTES = []

@app.tool()
def add_note(text: str) -> str:
    """Remember a note."""
    NOTES.append(text)
    return "added %d" % len(NOTES)

@app.tool()
def list_notes() -> str:
    """All notes so far."""
    return " | ".join(NOTES)

@app.tool()
def pg_host() -> str:
    """The PG host the server sees."""
    return os.environ.get("PG_HOST", "")

app.run()
'''

FAKE_SERVER_PY = r'''
"""Fake Ouroboros server: a few routes and scripted terminal states (FAKE_OURO_SCENARIO)."""
import argparse, json, os, sys, threading, time, uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--host"); ap.add_argument("--port", type=int)
a = ap.parse_args()
SCEN = os.environ.get("FAKE_OURO_SCENARIO", "completed")
DATA = os.environ["OUROBOROS_DATA_DIR"]
SETTINGS = json.load(open(os.environ["OUROBOROS_SETTINGS_PATH"]))
KEY = SETTINGS.get(os.environ.get("FAKE_CRED_SETTING", "OPENROUTER_API_KEY"), "")
dump = os.environ.get("FAKE_ENV_DUMP")
if dump:
    json.dump(dict(os.environ), open(os.path.join(dump, "server.env.json"), "w"))
os.makedirs(os.path.join(DATA, "task_results"), exist_ok=True)
open(os.path.join(DATA, "fake_pid"), "w").write(str(os.getpid()))
print("booting with key " + KEY, flush=True)
open(os.path.join(DATA, "state", "server_port"), "w").write(str(a.port))
TASKS = {}
GETS = {"n": 0}

def log(name, row):
    with open(os.path.join(DATA, "logs", name), "a") as fh:
        fh.write(json.dumps(row) + "\n")

def script(n):
    base = {"status": "running", "prompt_tokens": 0, "completion_tokens": 0, "artifact_status": "pending"}
    if SCEN == "stuck" or n < 2:
        return base
    common = {"prompt_tokens": 120, "completion_tokens": 30, "total_rounds": 3, "degraded": False,
              "accounted_upper_bound_usd": 0.01, "cost_known": True,
              "outcome_axes": {"execution": {"status": "ok", "reason_code": None}}}
    if SCEN == "completed":
        art = "finalizing" if n == 2 else "ready"
        return dict(common, status="completed", reason_code="final_message", artifact_bundle={"status": art},
                    cost_final=n >= 5, cost_with_children_partial=False,
                    final_answer="done; the key is " + KEY)
    if SCEN == "round_limit":
        return dict(common, status="completed", reason_code="round_limit", artifact_status="ready", cost_final=True)
    if SCEN == "llm_api_error":
        return dict(common, status="failed", reason_code="llm_api_error", artifact_status="ready", cost_final=True,
                    prompt_tokens=0, completion_tokens=0,
                    outcome_axes={"execution": {"status": "infra_failed", "reason_code": "llm_api_error"}})
    return base

class H(BaseHTTPRequestHandler):
    def log_message(self, *args):
        sys.stderr.write("req %s\n" % (args,))

    def send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/api/state":
            ready = SCEN != "never_ready"
            return self.send(200, {"supervisor_ready": ready, "workers_total": 0 if SCEN == "zero_workers" else 2})
        if self.path.startswith("/api/tasks/"):
            tid = self.path.rsplit("/", 1)[1]
            if tid not in TASKS:
                return self.send(404, {"error": "task not found"})
            if SCEN == "die_after_submit":
                os._exit(3)
            GETS["n"] += 1
            rec = dict(TASKS[tid], **script(GETS["n"]), task_id=tid)
            json.dump(rec, open(os.path.join(DATA, "task_results", tid + ".json"), "w"))
            return self.send(200, rec)
        self.send(404, {"error": "no route"})

    def do_POST(self):
        if self.path != "/api/tasks":
            return self.send(404, {"error": "no route"})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if SCEN == "create_503":
            return self.send(503, {"error": "supervisor is still starting"})
        json.dump(body, open(os.path.join(DATA, "fake_received.json"), "w"))
        tid = uuid.uuid4().hex[:16]
        TASKS[tid] = {"status": "scheduled"}
        log("events.jsonl", {"type": "llm_usage", "task_id": tid, "prompt_tokens": 120, "completion_tokens": 30,
                             "debug": "Authorization: Bearer " + KEY})
        log("tools.jsonl", {"type": "tool_call", "task_id": tid, "tool": "mcp_notes__add_note", "args": {"k": KEY}})
        log("chat.jsonl", {"direction": "out", "text": "working"})
        self.send(200, {"ok": True, "task_id": tid, "status": "scheduled"})

if SCEN == "exit_at_start":
    sys.exit(4)
ThreadingHTTPServer((a.host, a.port), H).serve_forever()
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def run_config(**over) -> dict:
    cfg = {
        "schema": "cowork_adapter.run_config.v1",
        "engine": "ouroboros",
        "model": MODEL,
        "settings": {"OUROBOROS_MODEL": MODEL, "OUROBOROS_MAX_WORKERS": 1},
        "disabled_tools": ["web_search"],
        "task_timeout_sec": 600,
        "mcp_tool_timeout_sec": 120,
        "proxy_port": free_port(),
        "server_port": free_port(),
        "truncation_reason_codes": ["budget_exhausted", "round_limit", "deadline_local"],
        "diagnostic_eval_on_truncation": False,
        "credential_setting": "OPENROUTER_API_KEY",
        "key_env": "COWORK_PROVIDER_KEY",
        "openai_compatible_base_url": None,
        "agent_short_name": SHORT,
    }
    cfg.update(over)
    return cfg


class FakeBench:
    """A benchmark tree under `root` (the cwd the entrypoint runs in)."""

    def __init__(self, tmp: Path, servers=("notes",), config: dict | None = None):
        self.tmp = tmp
        self.root = tmp / "bench"
        self.home = tmp / "adapter"
        self.seed = tmp / "seed"
        self.data = tmp / "data"
        self.runtime = tmp / "runtime"
        self.envdump = tmp / "envdump"
        for d in (self.home, self.seed, self.envdump):
            d.mkdir(parents=True, exist_ok=True)
        (self.home / "cowork_container").symlink_to(CONTAINER_SRC)
        write(self.root / "utils" / "__init__.py", "")
        write(self.root / "utils" / "data_structures" / "__init__.py", "")
        write(self.root / "utils" / "data_structures" / "task_config.py", TASK_CONFIG_PY)
        write(self.root / "utils" / "evaluation" / "__init__.py", "")
        write(self.root / "utils" / "evaluation" / "evaluator.py", EVALUATOR_PY)
        shutil.copy(CONTAINER_SRC / "cowork_entry.py", self.root / "cowork_entry.py")
        task = self.root / "tasks" / "finalpool" / TASK
        write(task / "task_config.json", json.dumps({"needed_mcp_servers": list(servers)}))
        write(task / "docs" / "task.md", "\n  Write a note.  \n")
        write(task / "initial_workspace" / "hello.txt", "hello")
        write(task / "preprocess" / "main.py", PREPROCESS_PY)
        write(self.root / "local_servers" / "notes_server.py", NOTES_SERVER_PY)
        write(
            self.root / "configs" / "mcp_servers" / "a_notes.yaml",
            f"""
            # the notes server (file name differs from the name field)
            name: notes
            type: stdio
            params:
              command: {VENV_PY}
              args:
                - ${{local_servers_paths}}/notes_server.py
              env:
                PG_HOST: cowork_pg
                WS: ${{agent_workspace}}
            client_session_timeout_seconds: 30
            """,
        )
        write(
            self.root / "configs" / "mcp_servers" / "b_notes_dup.yaml",
            """
            name: notes
            params:
              command: /bin/false
            """,
        )
        write(
            self.root / "configs" / "mcp_servers" / "broken.yaml",
            """
            name: broken
            params:
              command: ""
            """,
        )
        write(self.seed / "server.py", FAKE_SERVER_PY)
        self.config_path = self.root / "configs" / "cowork_adapter_run.json"
        self.config = config or run_config()
        self.save_config()

    def save_config(self) -> None:
        self.config_path.write_text(json.dumps(self.config))

    @property
    def task_root(self) -> Path:
        return self.root / "dumps" / SHORT.replace("/", "_") / f"SingleUserTurn-{TASK}"

    def env(self, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "MODEL_", "COWORK_", "FAKE_"))}
        env.update(
            {
                "COWORK_RUN_CONFIG": str(self.config_path),
                "COWORK_ADAPTER_HOME": str(self.home),
                "COWORK_SEED_DIR": str(self.seed),
                "COWORK_SEED_PYTHON": sys.executable,
                "COWORK_MCP_PROXY": str(MCP_PROXY),
                "COWORK_DATA_DIR": str(self.data),
                "COWORK_RUNTIME_DIR": str(self.runtime),
                "COWORK_START_WAIT_SEC": "30",
                "COWORK_POLL_SEC": "0.2",
                "COWORK_COST_GRACE_SEC": "10",
                "COWORK_PROVIDER_KEY": FAKE_KEY,
                "COWORK_AGENT_CONTAINER_STATE": "absent",
                "LOCAL_SERVERS_PATH": str(self.root / "local_servers"),
                "PYTHON_BIN": BENCH_PY,
                "COWORK_BENCH_PYTHON": BENCH_PY,
                "FAKE_ENV_DUMP": str(self.envdump),
                "FAKE_EVAL_COUNTER": str(self.tmp / "eval_calls.txt"),
                "PGHOST": "pg-test-host",
            }
        )
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def argv(self, phase: str, *more: str) -> list:
        return [BENCH_PY, "-u", "cowork_entry.py", "--task_dir", TASK, "--max_steps", "7", "--phase", phase, *more]

    def run(self, phase: str, *more: str, timeout: float = 120, **extra) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(phase, *more),
            cwd=self.root,
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(self, phase: str, **extra) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv(phase),
            cwd=self.root,
            env=self.env(**extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def summary(self) -> dict:
        return json.loads((self.task_root / "ouroboros_summary.json").read_text())

    def eval_calls(self) -> int:
        path = self.tmp / "eval_calls.txt"
        return len(path.read_text().splitlines()) if path.exists() else 0


def status_lines(stdout: str) -> list:
    return [ln for ln in stdout.splitlines() if "Status:" in ln]


def test_fake_bench_builds(tmp_path):
    bench = FakeBench(tmp_path)
    assert (bench.root / "cowork_entry.py").exists()
    assert (bench.home / "cowork_container" / "protocol.py").exists()
