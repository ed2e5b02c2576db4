"""Server-side state of the stand-in: readiness, the worker pool, task admission, cancel, settle.

Route handlers call `create_task`, `task_view`, `cancel_task` and `state`; each returns plain
data (HTTP status + JSON body) so the HTTP layer stays a thin router.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from . import STUB_VERSION, policy
from .accounting import cost_fields
from .admission import TASK_ID, Admission, admit
from .logs import JsonlLogs
from .outcomes import TERMINAL_STATUSES, public_view, terminal_fields
from .settings import Paths, StubConfig
from .store import ResultStore
from .tasklife import TaskControl, fault_exit, say
from .worker import TaskWorker
from .workspace import artifact_status, snapshot

def install_extra_plans(extra: dict) -> None:
    """Register STUB_EXTRA_PLANS entries in the copied policy module (a test hook)."""
    for tag, spec in extra.items():
        steps = tuple(
            policy.Step(
                server=str(s["server"]), tool=str(s["tool"]), arguments=dict(s.get("arguments", {}))
            )
            for s in spec.get("steps", [])
        )
        policy.PLANS[tag] = policy.Plan(
            tag=tag,
            steps=steps,
            ending=spec.get("ending", policy.Ending.FINISH),
            final_answer=str(spec.get("final_answer", "done")),
        )


def git_head(repo_dir: Path) -> tuple[str, str]:
    """(sha, branch) of the seed checkout, or empty strings when it is not a git repository."""
    def run(*args: str) -> str:
        try:
            out = subprocess.run(
                ["git", "-C", str(repo_dir), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return out.stdout.strip() if out.returncode == 0 else ""

    return run("rev-parse", "HEAD"), run("rev-parse", "--abbrev-ref", "HEAD")


class Supervisor:
    def __init__(self, config: StubConfig, paths: Paths):
        self.config = config
        self.paths = paths
        self.logs = JsonlLogs(paths.logs_dir)
        self.store = ResultStore(paths.results_dir)
        self.started = time.monotonic()
        self.ready = False
        self.error: str | None = None
        self.workers_total = 0
        self.slots = threading.Semaphore(max(1, config.max_workers))
        self.controls: dict[str, TaskControl] = {}
        self._finish_lock = threading.Lock()
        self.sha, self.branch = git_head(paths.repo_dir)
        install_extra_plans(config.extra_plans)

    # ---- boot -------------------------------------------------------------------------------
    def boot(self) -> None:
        """Runs on its own thread: delay, faults, provider check, then workers and readiness."""
        cfg = self.config
        self.logs.append(
            "supervisor",
            {"type": "stub_server_start", "stand_in": True, "version": STUB_VERSION,
             "pid": os.getpid(), "sha": self.sha, "branch": self.branch},
        )
        if cfg.echo_secret:
            say(f"STUB_ECHO_SECRET: provider credential is {cfg.credential}")
        if cfg.start_delay_sec:
            say(f"start delay {cfg.start_delay_sec:g}s (STUB_START_DELAY_SEC)")
            time.sleep(cfg.start_delay_sec)
        if cfg.exit_during_start:
            fault_exit("STUB_EXIT_DURING_START")
        self.logs.append("supervisor", {"type": "deps_sync_ok", "note": "stand-in: nothing to sync"})
        error = cfg.supervisor_error()
        if error:
            self.error = error
            self.logs.append("supervisor", {"type": "supervisor_init_failed", "error": error})
            say(f"supervisor not started: {error}")
            return
        if cfg.never_ready:
            say("STUB_NEVER_READY: the supervisor will never report ready")
            return
        self.workers_total = 0 if cfg.zero_workers else cfg.max_workers
        self.logs.append("supervisor", {"type": "worker_spawn_start", "count": self.workers_total})
        for worker in range(self.workers_total):
            self.logs.append("events", {"type": "worker_boot", "worker_id": worker, "pid": os.getpid()})
            self.logs.append("events", {"type": "worker_ready", "worker_id": worker})
        self.ready = True
        say(f"supervisor ready with {self.workers_total} worker(s)")

    # ---- state --------------------------------------------------------------------------------
    def _count(self, status: str) -> int:
        return sum(1 for r in self.store.records() if r.get("status") == status)

    def spent_usd(self) -> float:
        return round(float(sum(c.spent_usd for c in self.controls.values())), 6)

    def state(self) -> dict:
        cfg, spent = self.config, self.spent_usd()
        return {
            "supervisor_ready": self.ready,
            "supervisor_error": self.error,
            "workers_total": self.workers_total,
            "workers_alive": self.workers_total,
            "pending_count": self._count("scheduled"),
            "running_count": self._count("running"),
            "uptime": round(time.monotonic() - self.started, 3),
            "spent_usd": spent,
            "budget_limit": cfg.total_budget,
            "budget_pct": round(100.0 * spent / cfg.total_budget, 3) if cfg.total_budget > 0 else 0.0,
            "runtime_mode": cfg.runtime_mode,
            "context_mode": cfg.context_mode,
            "safety_mode": cfg.safety_mode,
            "sha": self.sha,
            "branch": self.branch,
            "stand_in": True,
        }

    # ---- tasks --------------------------------------------------------------------------------
    def create_task(self, body) -> tuple[int, dict]:
        cfg = self.config
        if cfg.create_503:
            return 503, {"error": "task admission unavailable (STUB_CREATE_503)",
                         "reason_code": "stub_create_503"}
        if not isinstance(body, dict):
            return 400, {"error": "request body must be a JSON object"}
        if not self.ready:
            return 503, {"error": "supervisor is still starting"}
        if self.workers_total <= 0:
            return 503, {"error": "supervisor worker pool is unavailable",
                         "reason_code": "worker_pool_unavailable",
                         "worker_pool_disabled_reason": "no workers (STUB_ZERO_WORKERS)"}
        verdict = admit(
            body, exists=self.store.exists, repo_dir=self.paths.repo_dir,
            data_dir=self.paths.data_dir, require_git_workspace=cfg.require_git_workspace,
        )
        if not isinstance(verdict, Admission):
            return verdict.http_status, verdict.body()
        record = dict(verdict.record)
        record.update(model=cfg.model, **cost_fields(0.0, 0, False, cfg.cost_schema))
        control = TaskControl(snapshot(record.get("workspace_root")))
        if not self.store.create(record):
            return 409, {"error": "task already exists", "task_id": verdict.task_id}
        self.controls[verdict.task_id] = control

        threading.Thread(
            target=TaskWorker(self, verdict.task_id, control).run,
            name=f"task-{verdict.task_id}", daemon=True,
        ).start()
        say(f"task {verdict.task_id} scheduled")
        return 200, {"ok": True, "task_id": verdict.task_id, "status": "scheduled"}

    def task_view(self, task_id: str) -> tuple[int, dict]:
        if not TASK_ID.fullmatch(task_id or ""):
            return 400, {"error": "invalid task_id"}
        record = self.store.get(task_id)
        if record is None:
            return 404, {"error": "task not found"}
        return 200, public_view(record)

    def cancel_task(self, task_id: str, body) -> tuple[int, dict]:
        if not TASK_ID.fullmatch(task_id or ""):
            return 400, {"error": "invalid task_id"}
        if body is None:
            body = {}
        if not isinstance(body, dict):
            return 400, {"error": "request body must be a JSON object"}
        if "cascade" in body and not isinstance(body["cascade"], bool):
            return 400, {"error": "cascade must be a boolean"}
        stop_policy = body.get("stop_policy") or "cancel"
        if stop_policy not in ("cancel", "finalize_then_cancel"):
            return 400, {"error": "stop_policy must be 'cancel' or 'finalize_then_cancel'"}
        record = self.store.get(task_id)
        control = self.controls.get(task_id)
        if record is None or control is None or record.get("status") in TERMINAL_STATUSES:
            return 404, {"error": "task not found or not active", "task_id": task_id}
        self.logs.append("supervisor", {"type": "cancel_intent", "event": stop_policy, "task_id": task_id})
        if stop_policy == "finalize_then_cancel":
            control.stop_policy = stop_policy
            self.store.update(task_id, {"cancel_state": "pending", "stop_policy": stop_policy})
            control.stop.set()
            return 202, {"ok": True, "task_id": task_id, "cancel_state": "pending",
                         "stop_policy": stop_policy}
        self.finish(task_id, "cancelled", result="cancelled by request")
        control.stop.set()
        reply = {"ok": True, "task_id": task_id}
        if body.get("cascade"):
            reply["cascade"] = True
        return 200, reply

    # ---- settling -----------------------------------------------------------------------------
    def cost_now(self, control: TaskControl, final: bool) -> dict:
        return cost_fields(control.spent_usd, control.usage_rows, final, self.config.cost_schema)

    def finish(self, task_id: str, reason_code: str, *, result: str = "", final_answer: str = "") -> bool:
        """The terminal write of a task (once); then artefacts and cost settle in the background."""
        with self._finish_lock:
            record = self.store.get(task_id)
            control = self.controls[task_id]
            if record is None or record.get("status") in TERMINAL_STATUSES:
                return False
            fields = terminal_fields(reason_code)
            open_artifacts = record.get("artifact_status") == "pending"
            changes = {
                **fields,
                **self.cost_now(control, final=False),
                "result": result,
                "final_answer": final_answer,
                "artifact_status": "finalizing" if open_artifacts else record.get("artifact_status"),
                "loop_outcome": {
                    "schema_version": 3,
                    "finish_reason": reason_code,
                    "reason_code": reason_code,
                    "final_text": result,
                    "final_answer": final_answer,
                    "usage": {
                        "cost_usd": round(control.spent_usd, 6),
                        "prompt_tokens": record.get("prompt_tokens", 0),
                        "completion_tokens": record.get("completion_tokens", 0),
                        "total_rounds": record.get("total_rounds", 0),
                    },
                },
            }
            if record.get("cancel_state") == "pending":
                changes["cancel_state"] = "cancelled"
            self.store.update(task_id, changes)
        self.logs.append(
            "events",
            {"type": "task_done", "task_id": task_id, "root_task_id": task_id,
             "status": fields["status"], "reason_code": reason_code,
             "total_rounds": record.get("total_rounds", 0), "cost": round(control.spent_usd, 6)},
        )
        if result:
            self.logs.append("chat", self.chat_row(record, "out", result))
        say(f"task {task_id} {fields['status']} ({reason_code})")
        threading.Thread(
            target=self._settle, args=(task_id, open_artifacts), name=f"settle-{task_id}", daemon=True
        ).start()
        return True

    def _settle(self, task_id: str, open_artifacts: bool) -> None:
        control, began = self.controls[task_id], time.monotonic()
        record = self.store.get(task_id) or {}
        if open_artifacts:
            time.sleep(self.config.artifact_delay_sec)
            after = snapshot(record.get("workspace_root"))
            self.store.update(task_id, {"artifact_status": artifact_status(control.workspace_before, after)})
        delay = self.config.cost_final_delay_sec
        if delay < 0:
            return  # STUB_COST_FINAL_DELAY_SEC < 0: the "never final" case
        time.sleep(max(0.0, delay - (time.monotonic() - began)))
        self.store.update(task_id, self.cost_now(control, final=True))

    def chat_row(self, record: dict, direction: str, text: str) -> dict:
        return {
            "session_id": record.get("session_id"),
            "direction": direction,
            "chat_id": record.get("chat_id"),
            "user_id": record.get("actor_id"),
            "text": text,
            "format": "text",
            "source": record.get("source"),
            "transport": "api_task",
            "task_id": record.get("task_id"),
        }
