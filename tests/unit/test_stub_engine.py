"""The stub Ouroboros engine: seed repository, process contract, routes (host only); its endings and the
seed's pure pieces are in test_stub_engine_endings.py and test_stub_engine_pieces.py.

Servers run as real subprocesses from a seed built by make_stub_seed, on free ports, in their own
process groups, and are killed at teardown.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cowork_adapter.demo.seed_repo import POLICY_FILE, make_stub_seed

FAKE_KEY = "sk-or-v1-FAKE-stub-test-key-0000"


# ---- helpers (also used by test_stub_engine_proxy.py) ---------------------------------------------
class StubProcess:
    """One stub server subprocess with its own data root; `stop()` kills its process group."""

    def __init__(self, seed: Path, root: Path, settings: dict, env: dict | None = None):
        self.seed, self.root = seed, root
        self.data = root / "data"
        self.data.mkdir(parents=True)
        self.settings_path = self.data / "settings.json"
        self.settings_path.write_text(json.dumps(settings))
        self.settings_path.chmod(0o600)
        self.pid_file = root / "runtime" / "ouroboros.pid"
        self.port_file = self.data / "state" / "server_port"
        self.log_path = root / "server.log"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("OUROBOROS_", "STUB_"))}
        base.pop("OPENROUTER_API_KEY", None)
        base.update(
            OUROBOROS_DATA_DIR=str(self.data),
            OUROBOROS_SETTINGS_PATH=str(self.settings_path),
            OUROBOROS_PID_FILE=str(self.pid_file),
            OUROBOROS_PORT_FILE=str(self.port_file),
            OUROBOROS_REPO_DIR=str(seed),
            PYTHONUNBUFFERED="1",
        )
        base.update(env or {})
        self.env = base
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None

    def start(self, wait_port: bool = True) -> StubProcess:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "server.py", "--host", "127.0.0.1", "--port", "0"],
                cwd=self.seed,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if wait_port:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                if self.port_file.exists() and self.port_file.read_text().strip():
                    self.port = int(self.port_file.read_text())
                    return self
                if self.proc.poll() is not None:
                    raise AssertionError(f"stub exited early:\n{self.log()}")
                time.sleep(0.05)
            raise AssertionError(f"stub wrote no port file:\n{self.log()}")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def request(self, method: str, path: str, body=None, raw: bytes | None = None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def get(self, path: str):
        return self.request("GET", path)

    def post(self, path: str, body=None, raw: bytes | None = None):
        return self.request("POST", path, body if body is not None else {}, raw)

    def wait_ready(self, timeout: float = 15) -> dict:
        return self.wait_state(lambda s: s["supervisor_ready"], timeout)

    def wait_state(self, predicate, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            state = self.get("/api/state")[1]
            if predicate(state) or time.monotonic() > deadline:
                return state
            time.sleep(0.05)

    def wait_task(self, task_id: str, predicate, timeout: float = 20, seen: list | None = None) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            view = self.get(f"/api/tasks/{task_id}")[1]
            if seen is not None:
                seen.append(view)
            if predicate(view):
                return view
            if time.monotonic() > deadline:
                raise AssertionError(f"task {task_id} never matched; last: {view}\n{self.log()}")
            time.sleep(0.02)

    def settled(self, task_id: str, timeout: float = 20) -> dict:
        return self.wait_task(
            task_id,
            lambda v: (
                v.get("status") in ("completed", "failed", "cancelled")
                and v.get("artifact_status") not in ("pending", "finalizing")
                and v.get("cost_final") is True
            ),
            timeout,
        )

    def submit(self, description: str, **extra) -> str:
        status, body = self.post("/api/tasks", {"description": description, **extra})
        assert status == 200, body
        return body["task_id"]

    def log_rows(self, name: str) -> list[dict]:
        path = self.data / "logs" / f"{name}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(timeout=10)


def base_settings(**overrides) -> dict:
    settings = {
        "OPENROUTER_API_KEY": FAKE_KEY,
        "OUROBOROS_MODEL": "stub/test-model",
        "OUROBOROS_MAX_WORKERS": 4,
        "STUB_SECONDS_PER_ROUND": 0.05,
        "STUB_COST_FINAL_DELAY_SEC": 0.3,
        "STUB_ARTIFACT_DELAY_SEC": 0.2,
        "MCP_ENABLED": False,
    }
    settings.update(overrides)
    return settings


def plan(*steps: tuple[str, str], ending: str = "finish", answer: str = "done") -> dict:
    return {
        "steps": [{"server": s, "tool": t, "arguments": {}} for s, t in steps],
        "ending": ending,
        "final_answer": answer,
    }


# ---- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def seed(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("stubseed") / "ouroboros-src"
    make_stub_seed(path)
    return path


@pytest.fixture()
def spawn(seed, tmp_path):
    started: list[StubProcess] = []

    def _spawn(settings: dict, env: dict | None = None, wait_port: bool = True, name: str = "s"):
        stub = StubProcess(seed, tmp_path / f"{name}{len(started)}", settings, env)
        started.append(stub)
        return stub.start(wait_port)

    yield _spawn
    for stub in started:
        stub.stop()


@pytest.fixture(scope="module")
def ready_stub(seed, tmp_path_factory):
    stub = StubProcess(
        seed,
        tmp_path_factory.mktemp("ready"),
        base_settings(
            OUROBOROS_MAX_ROUNDS=2,
            STUB_EXTRA_PLANS={
                "two": plan(("nowhere", "a"), ("nowhere", "b")),
                "over": plan(("nowhere", "a"), ("nowhere", "b"), ("nowhere", "c")),
                "spin": plan(ending="round_limit"),
                "boom": plan(("nowhere", "a"), ending="provider_error"),
                "hang": plan(ending="hang"),
            },
        ),
    )
    stub.start()
    assert stub.wait_ready()["supervisor_ready"], stub.log()
    yield stub
    stub.stop()


@pytest.fixture(scope="session")
def seed_modules(seed):
    """The seed's own pure modules, imported from the built seed (policy.py included)."""
    sys.path.insert(0, str(seed))
    try:
        yield {
            name: importlib.import_module(f"stub_ouroboros.{name}")
            for name in ("outcomes", "accounting", "naming", "settings", "workspace", "admission")
        }
    finally:
        sys.path.remove(str(seed))


# ---- the seed repository ---------------------------------------------------------------------------
def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()


def test_seed_sha_is_deterministic_clean_and_carries_the_policy(tmp_path, seed):
    first = make_stub_seed(tmp_path / "a")
    second = make_stub_seed(tmp_path / "b")
    assert first == second == git(seed, "rev-parse", "HEAD")
    assert git(tmp_path / "a", "status", "--porcelain") == ""
    assert (tmp_path / "a" / "stub_ouroboros" / "policy.py").read_bytes() == POLICY_FILE.read_bytes()
    assert "README.md" in git(tmp_path / "a", "ls-files").split()
    with pytest.raises(FileExistsError):
        make_stub_seed(tmp_path / "a")


def test_seed_sha_changes_with_content(tmp_path, monkeypatch):
    import cowork_adapter.demo.seed_repo as seed_repo

    original = make_stub_seed(tmp_path / "orig")
    altered = tmp_path / "policy.py"
    altered.write_text(POLICY_FILE.read_text() + "\n# changed\n")
    monkeypatch.setattr(seed_repo, "POLICY_FILE", altered)
    assert seed_repo.make_stub_seed(tmp_path / "changed") != original


# ---- process contract -------------------------------------------------------------------------------
def test_boot_writes_port_and_pid_files_and_sigterm_exits_cleanly(spawn, seed, tmp_path):
    custom_port_file = tmp_path / "elsewhere" / "port"
    stub = spawn(base_settings(), env={"OUROBOROS_PORT_FILE": str(custom_port_file)})
    deadline = time.monotonic() + 10
    while not custom_port_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stub.port = int(custom_port_file.read_text())
    # 6.97.2 always writes <data>/state/server_port; the stand-in writes both.
    assert int((stub.data / "state" / "server_port").read_text()) == stub.port
    assert int(stub.pid_file.read_text()) == stub.proc.pid
    status, health = stub.get("/api/health")
    assert status == 200 and health["status"] == "ok" and health["runtime_version"]
    state = stub.wait_ready()
    assert state["workers_total"] == 4 and state["workers_alive"] == 4
    assert state["sha"] == git(seed, "rev-parse", "HEAD") and state["branch"] == "ouroboros"
    stub.submit("no marker here")  # runs, so the seed imports its modules (bytecode appears)
    assert stub.stop() == 0
    assert [r["type"] for r in stub.log_rows("supervisor")][-1] == "server_shutdown"
    assert git(seed, "status", "--porcelain") == ""  # running the seed leaves it clean


def test_settings_file_beats_environment_and_environment_fills_gaps(spawn):
    settings = base_settings(OUROBOROS_MODEL="file/model")
    del settings["OPENROUTER_API_KEY"]
    stub = spawn(settings, env={"OUROBOROS_MODEL": "env/model", "OPENROUTER_API_KEY": FAKE_KEY})
    assert stub.wait_ready()["supervisor_ready"]  # the credential came from the environment
    task = stub.submit("no marker")
    stub.settled(task)
    usage = [r for r in stub.log_rows("events") if r["type"] == "llm_usage"]
    assert usage and {r["model"] for r in usage} == {"file/model"}


def test_missing_credential_keeps_supervisor_unready_with_an_error(spawn):
    settings = base_settings()
    del settings["OPENROUTER_API_KEY"]
    stub = spawn(settings, env={"OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1"})
    state = stub.wait_state(lambda s: s["supervisor_error"], 10)
    assert state["supervisor_ready"] is False and "OPENROUTER_API_KEY" in state["supervisor_error"]
    status, body = stub.post("/api/tasks", {"description": "x"})
    assert (status, body["error"]) == (503, "supervisor is still starting")


def test_start_delay_then_ready(spawn):
    stub = spawn(base_settings(STUB_START_DELAY_SEC=1.5))
    assert stub.get("/api/state")[1]["supervisor_ready"] is False
    assert stub.post("/api/tasks", {"description": "x"})[0] == 503
    assert stub.wait_ready(10)["supervisor_ready"] is True


def test_never_ready_fault(spawn):
    stub = spawn(base_settings(STUB_NEVER_READY=True))
    time.sleep(0.8)
    state = stub.get("/api/state")[1]
    assert state["supervisor_ready"] is False and state["supervisor_error"] is None


def test_zero_workers_fault_is_ready_but_refuses_tasks(spawn):
    stub = spawn(base_settings(STUB_ZERO_WORKERS=True))
    state = stub.wait_ready()
    assert state["supervisor_ready"] is True and state["workers_total"] == 0
    status, body = stub.post("/api/tasks", {"description": "x"})
    assert status == 503 and body["reason_code"] == "worker_pool_unavailable"


def test_exit_during_start_fault(spawn):
    stub = spawn(base_settings(STUB_EXIT_DURING_START=True, STUB_START_DELAY_SEC=0.2))
    assert stub.proc.wait(timeout=10) == 86


def test_create_503_fault(spawn):
    stub = spawn(base_settings(STUB_CREATE_503=True))
    stub.wait_ready()
    status, body = stub.post("/api/tasks", {"description": "x"})
    assert status == 503 and body["error"]


def test_exit_mid_task_fault_leaves_a_running_record(spawn):
    stub = spawn(
        base_settings(
            STUB_EXIT_MID_TASK=True,
            STUB_EXTRA_PLANS={"three": plan(("nowhere", "a"), ("nowhere", "b"), ("nowhere", "c"))},
        )
    )
    stub.wait_ready()
    task = stub.submit("[demo-policy: three]")
    assert stub.proc.wait(timeout=15) == 86
    record = json.loads((stub.data / "task_results" / f"{task}.json").read_text())
    assert record["status"] == "running" and record["total_rounds"] == 1
    assert len(stub.log_rows("tools")) == 1


def test_echo_secret_fault_writes_the_credential_to_chat_and_stdout(spawn):
    stub = spawn(base_settings(STUB_ECHO_SECRET=True))
    stub.wait_ready()
    stub.settled(stub.submit("no marker"))
    assert FAKE_KEY in (stub.data / "logs" / "chat.jsonl").read_text()
    assert FAKE_KEY in stub.log()


def test_without_echo_the_credential_is_nowhere(spawn):
    stub = spawn(base_settings())
    stub.wait_ready()
    stub.settled(stub.submit("no marker"))
    stub.stop()
    written = "".join(p.read_text() for p in (stub.data / "logs").glob("*.jsonl"))
    written += "".join(p.read_text() for p in (stub.data / "task_results").glob("*.json"))
    assert FAKE_KEY not in written and FAKE_KEY not in stub.log()


# ---- route validation -------------------------------------------------------------------------------
VALIDATION_CASES = [
    ("list body", [], 400, "JSON object"),
    ("no description", {}, 400, "description is required"),
    ("blank description", {"description": "  "}, 400, "description is required"),
    ("bad id leading dash", {"description": "x", "task_id": "-x"}, 400, "invalid task_id"),
    ("bad id space", {"description": "x", "task_id": "a b"}, 400, "invalid task_id"),
    ("bad id too long", {"description": "x", "task_id": "a" * 129}, 400, "invalid task_id"),
    ("bad id type", {"description": "x", "task_id": 7}, 400, "invalid task_id"),
    ("memory mode", {"description": "x", "memory_mode": "bogus"}, 400, "memory_mode"),
    ("shared with workspace", {"description": "x", "memory_mode": "shared", "workspace_root": "{ws}"}, 400, "shared"),
    ("relative workspace", {"description": "x", "workspace_root": "rel/dir"}, 400, "absolute"),
    ("missing workspace", {"description": "x", "workspace_root": "{ws}/nope"}, 400, "does not exist"),
    ("workspace is data dir", {"description": "x", "workspace_root": "{data}"}, 400, "overlap"),
    ("subagent role", {"description": "x", "delegation_role": "subagent"}, 400, "subagent"),
    ("subagent in metadata", {"description": "x", "metadata": {"delegation_role": "subagent"}}, 400, "subagent"),
    ("parent id", {"description": "x", "parent_task_id": "p1"}, 400, "parent_task_id"),
    ("metadata not object", {"description": "x", "metadata": []}, 400, "metadata"),
    ("metadata project", {"description": "x", "metadata": {"project_id": "p"}}, 400, "project_id"),
    ("internal type", {"description": "x", "type": "review"}, 400, "review"),
    ("naive deadline", {"description": "x", "deadline_at": "2030-01-01T00:00:00"}, 400, "deadline_at"),
    ("timeout not number", {"description": "x", "timeout_sec": "soon"}, 400, "timeout_sec"),
    ("disabled tools not list", {"description": "x", "disabled_tools": "web"}, 400, "disabled_tools"),
]


@pytest.mark.parametrize("body,status,needle", [c[1:] for c in VALIDATION_CASES], ids=[c[0] for c in VALIDATION_CASES])
def test_create_validation(ready_stub, tmp_path, body, status, needle):
    def fill(value):
        if isinstance(value, str):
            return value.replace("{ws}", str(tmp_path)).replace("{data}", str(ready_stub.data))
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return value

    results = ready_stub.data / "task_results"
    stored_before = len(list(results.glob("*.json")))
    got_status, got = ready_stub.post("/api/tasks", fill(body))
    assert got_status == status and needle in got["error"], got
    assert len(list(results.glob("*.json"))) == stored_before  # a refusal stores nothing


def test_invalid_json_body_is_400(ready_stub):
    status, body = ready_stub.post("/api/tasks", raw=b"{not json")
    assert status == 400 and "JSON" in body["error"]


def test_get_and_cancel_errors(ready_stub):
    assert ready_stub.get("/api/tasks/-bad") == (400, {"error": "invalid task_id"})
    assert ready_stub.get("/api/tasks/unknown1")[0] == 404
    assert ready_stub.get("/api/tasks/unknown1")[1]["error"] == "task not found"
    status, body = ready_stub.post("/api/tasks/unknown1/cancel", {})
    assert status == 404 and body["error"] == "task not found or not active"
    task = ready_stub.submit("[demo-policy: hang]")
    assert ready_stub.post(f"/api/tasks/{task}/cancel", {"cascade": "yes"})[0] == 400
    assert ready_stub.post(f"/api/tasks/{task}/cancel", {"stop_policy": "later"})[0] == 400
    assert ready_stub.post(f"/api/tasks/{task}/cancel", {"cascade": True}) == (
        200,
        {"ok": True, "task_id": task, "cascade": True},
    )


def test_create_reply_record_duplicate_and_queue(spawn, tmp_path):
    stub = spawn(base_settings(OUROBOROS_MAX_WORKERS=1, STUB_EXTRA_PLANS={"hang": plan(ending="hang")}))
    stub.wait_ready()
    blocker = stub.submit("[demo-policy: hang]")
    stub.wait_task(blocker, lambda v: v["status"] == "running")
    (tmp_path / "ws").mkdir()
    before = datetime.now(UTC)
    status, reply = stub.post(
        "/api/tasks",
        {
            "description": "queued",
            "task_id": "Job-1.a",
            "workspace_root": str(tmp_path / "ws"),
            "memory_mode": "empty",
            "timeout_sec": 120,
            "metadata": {"source": "t", "root_task_id": "no"},
        },
    )
    assert (status, reply) == (200, {"ok": True, "task_id": "Job-1.a", "status": "scheduled"})
    record = json.loads((stub.data / "task_results" / "Job-1.a.json").read_text())
    assert record["status"] == "scheduled" and record["artifact_status"] == "pending"
    assert record["deadline_at"].endswith("Z") and record["metadata"]["root_task_id"] == "Job-1.a"
    deadline = datetime.fromisoformat(record["deadline_at"].replace("Z", "+00:00"))
    assert 115 <= (deadline - before).total_seconds() <= 125
    state = stub.get("/api/state")[1]
    assert (state["pending_count"], state["running_count"]) == (1, 1)
    view = stub.get("/api/tasks/Job-1.a")[1]
    assert view["outcome_axes"]["lifecycle"] == {"status": "scheduled"}
    assert view["outcome_axes"]["objective"] == {"status": "not_evaluated", "source": "none"}
    status, body = stub.post("/api/tasks", {"description": "again", "task_id": "Job-1.a"})
    assert status == 409 and body["task_id"] == "Job-1.a"
    minted = stub.submit("minted id")
    assert len(minted) == 16 and int(minted, 16) >= 0
    assert stub.post(f"/api/tasks/{blocker}/cancel", {})[0] == 200
    assert stub.settled("Job-1.a")["status"] == "completed"
