"""One task, run by the scripted policy: each plan step is one round (a model call + a tool call).

Rails are checked before every round, in this order: cancel request, local deadline, cost limits
(per task, then TOTAL_BUDGET), round limit. The plan's ending decides what happens after its last step.
"""

from __future__ import annotations

import secrets
import time
from datetime import datetime, timezone

from . import policy
from .accounting import usage_for_call
from .admission import parse_iso
from .mcp_call import PREVIEW_CHARS, ToolResult, call_tool
from .model_call import ModelCallError, chat_once
from .naming import mcp_tool_name
from .outcomes import TERMINAL_STATUSES
from .tasklife import TaskControl, WorkerHost, fault_exit, say


class TaskWorker:
    def __init__(self, sup: WorkerHost, task_id: str, control: TaskControl):
        self.sup = sup
        self.cfg = sup.config
        self.task_id = task_id
        self.control = control
        self.record = sup.store.get(task_id) or {}
        self.calls = 0  # model calls so far (= total_rounds)
        self.tool_rounds = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        deadline = self.record.get("deadline_at")
        self.deadline = parse_iso(deadline) if deadline else None

    def run(self) -> None:
        try:
            while not self.sup.slots.acquire(timeout=0.2):  # wait for a free worker
                if self._settled():
                    return
            try:
                if not self._settled():
                    self._run_plan()
            finally:
                self.sup.slots.release()
        except ModelCallError as exc:  # the endpoint (or a gateway in front of it) refused the round
            self.sup.logs.append("events", {"type": "task_error", "task_id": self.task_id, "root_task_id": self.task_id,
                                            "reason_code": "llm_api_error", "error": str(exc)})
            self.sup.finish(self.task_id, "llm_api_error", result=f"llm_api_error: {exc}")
        except Exception as exc:  # noqa: BLE001 - any crash must still settle the task
            say(f"task {self.task_id} crashed: {type(exc).__name__}: {exc}")
            self.sup.finish(self.task_id, "task_exception", result=f"task_exception: {exc}")

    # ---- the loop -----------------------------------------------------------------------------
    def _run_plan(self) -> None:
        rec, cfg = self.record, self.cfg
        plan = policy.plan_for(rec.get("description", ""))
        self.sup.store.update(self.task_id, {"status": "running", "plan_tag": plan.tag})
        self.sup.logs.append("chat", self.sup.chat_row(rec, "in", rec.get("description", "")))
        if cfg.echo_secret:  # deliberate leak, so the adapter's scrubbing can be tested
            self.sup.logs.append("chat", self.sup.chat_row(rec, "out", f"credential {cfg.credential}"))
        self._progress(f"Started with plan {plan.tag!r} ({len(plan.steps)} step(s)).")
        steps = list(plan.steps)
        while True:
            if self._settled():
                return
            rail = self._rail()
            if rail is not None:
                self._end_by_rail(rail)
                return
            if self.tool_rounds < len(steps):
                if self.tool_rounds >= cfg.max_rounds:
                    self._end_by_rail("round_limit")
                    return
                self._tool_round(steps[self.tool_rounds])
                continue
            if plan.ending == policy.Ending.ROUND_LIMIT:
                if self.tool_rounds >= cfg.max_rounds:
                    self._end_by_rail("round_limit")
                    return
                self._thinking_round()
                continue
            if plan.ending == policy.Ending.HANG:
                self._progress("Working (this plan never finishes).")
                self.control.stop.wait()  # only a cancel request (or a kill) ends it
                continue
            if plan.ending == policy.Ending.PROVIDER_ERROR:
                self._pace()
                message = "provider returned HTTP 503 for every attempt (scripted PROVIDER_ERROR)"
                self.sup.logs.append(
                    "events",
                    {"type": "task_error", "task_id": self.task_id, "root_task_id": self.task_id,
                     "reason_code": "llm_api_error", "error": message},
                )
                self.sup.finish(self.task_id, "llm_api_error", result=f"llm_api_error: {message}")
                return
            self._pace()
            self._model_call()
            self.sup.finish(
                self.task_id, "final_message",
                result=f"FINAL ANSWER: {plan.final_answer}", final_answer=plan.final_answer,
            )
            return

    def _settled(self) -> bool:
        current = self.sup.store.get(self.task_id) or {}
        return current.get("status") in TERMINAL_STATUSES

    def _rail(self) -> str | None:
        if self.control.stop.is_set():
            return "cancelled"
        if self.deadline is not None and datetime.now(timezone.utc) >= self.deadline:
            return "deadline_local"
        limit = self.cfg.per_task_cost_usd
        if limit > 0 and self.control.spent_usd > limit + 1e-12:
            return "budget_exhausted"
        total = self.cfg.total_budget
        if total > 0 and self.sup.spent_usd() > total + 1e-12:
            return "budget_exhausted"  # TOTAL_BUDGET spans every task of this server
        return None

    def _end_by_rail(self, reason: str) -> None:
        note = f"Stopped by the {reason} rail after {self.calls} round(s)."
        if reason == "cancelled" and self.control.stop_policy == "finalize_then_cancel":
            note = f"Finalized then cancelled after {self.calls} round(s)."
        self.sup.finish(self.task_id, reason, result=note)

    # ---- rounds -------------------------------------------------------------------------------
    def _pace(self) -> None:
        # Model latency stand-in; a cancel request cuts it short.
        self.control.stop.wait(self.cfg.seconds_per_round)

    def _model_call(self) -> None:
        usage = usage_for_call(self.calls)
        cost = self.cfg.cost_per_round_usd
        if self.cfg.base_url:  # a real request; its answer's usage is the round's
            answered = chat_once(self.cfg.base_url, self.cfg.credential, self.cfg.model, self.calls + 1)
            for name in ("prompt_tokens", "completion_tokens"):
                if isinstance(answered.get(name), int):
                    usage[name] = answered[name]
            if isinstance(answered.get("cost"), (int, float)):
                cost = float(answered["cost"])
        self.calls += 1
        self.control.spent_usd += cost
        self.control.usage_rows += 1
        self.prompt_tokens += usage["prompt_tokens"]
        self.completion_tokens += usage["completion_tokens"]
        self.sup.logs.append("events", self._usage_row(usage, cost))
        self.sup.store.update(
            self.task_id,
            {"total_rounds": self.calls, "prompt_tokens": self.prompt_tokens,
             "completion_tokens": self.completion_tokens,
             **self.sup.cost_now(self.control, final=False)},
        )

    def _usage_row(self, usage: dict, cost: float) -> dict:
        cfg = self.cfg
        return {
            "type": "llm_usage",
            "task_id": self.task_id,
            "root_task_id": self.task_id,
            "parent_task_id": "",
            "delegation_role": "root",
            "task_group_id": self.task_id,
            "requested_model_lane": "main",
            "effective_model_lane": "main",
            "category": "task",
            "model": cfg.model,
            "api_key_type": cfg.provider,
            "model_category": "main",
            "provider": cfg.provider,
            "response_provider": "stub-ouroboros",  # says plainly no real provider answered
            "source": "loop",
            "llm_call_id": secrets.token_hex(8),
            "round": self.calls,
            "cost_estimated": False,
            "cost": round(cost, 6),
            "cost_known": True,
            "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"],
            "cached_tokens": usage["cached_tokens"],
            "cache_write_tokens": 0,
            "prompt_cache_ttl": None,
            "accounting_authority": "physical_attempt_ledger",
            "projection_update_status": "available",
            "ledger_attempt_ids": [secrets.token_hex(8)],
        }

    def _tool_round(self, step) -> None:
        self._pace()
        self._model_call()  # the model's turn that asks for this tool
        row = self._server_row(step.server)
        name = mcp_tool_name(row["id"] if row else step.server, step.tool)
        args = policy.render_arguments(step, self.record.get("workspace_root") or "")
        self._progress(f"Round {self.calls}: calling {name}.")
        started = time.monotonic()
        if name in (self.record.get("disabled_tools") or []):
            outcome = ToolResult(f"tool {name} is disabled for this task", True)
        elif not self.cfg.mcp_enabled or row is None:
            outcome = ToolResult(f"MCP server {step.server!r} is not configured", True)
        else:
            outcome = call_tool(row["url"], step.tool, args, self.cfg.mcp_tool_timeout_sec)
        self.sup.logs.append(
            "tools",
            {"type": "tool_call", "task_id": self.task_id, "tool": name, "args": args,
             "result_preview": outcome.text[:PREVIEW_CHARS], "is_error": outcome.is_error,
             "status": "error" if outcome.is_error else "ok", "source": "mcp",
             "duration_sec": round(time.monotonic() - started, 3), "round": self.calls,
             "root_task_id": self.task_id, "parent_task_id": "", "delegation_role": "root",
             "task_depth": 0},
        )
        self.tool_rounds += 1
        self._maybe_fault_exit()

    def _thinking_round(self) -> None:
        self._pace()
        self._model_call()
        self._progress(f"Round {self.calls}: still working.")
        self.tool_rounds += 1
        self._maybe_fault_exit()

    def _maybe_fault_exit(self) -> None:
        if self.cfg.exit_mid_task and self.tool_rounds >= self.cfg.exit_mid_task:
            fault_exit(f"STUB_EXIT_MID_TASK after round {self.tool_rounds} of task {self.task_id}")

    def _server_row(self, server: str) -> dict | None:
        for row in self.cfg.mcp_servers:
            if server in (row["id"], row["name"]):
                return row
        return None

    def _progress(self, text: str) -> None:
        rec = self.record
        self.sup.logs.append(
            "progress",
            {"type": "send_message", "task_id": self.task_id, "is_progress": True,
             "direction": "out", "chat_id": rec.get("chat_id"), "user_id": rec.get("actor_id"),
             "text": text, "content": text, "format": "text"},
        )

