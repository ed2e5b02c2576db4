"""Pure mapping from an Ouroboros task result to the benchmark's status, and the summary shape."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .vocab import INFRA_RUNTIME_REASONS, AdapterStage, BenchStatus

SUMMARY_SCHEMA = "cowork_adapter.adapter_summary.v1"
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "rejected_duplicate"})
UNSETTLED_ARTIFACTS = frozenset({"pending", "finalizing"})
COST_FIELDS = (
    "accounted_upper_bound_usd",
    "accounted_upper_bound_usd_with_children",
    "cost_known",
    "cost_accounting_status",
    "cost_accounting_error",
    "cost_final",
    "cost_with_children_partial",
    "unknown_unmetered",
    "non_final_rows",
    "reserved_usd",
    "unresolved_upper_bound_usd",
    "ledger_integrity_degraded",
    "cost_presentation",
    # Release 6.97.x reports these instead of the accounted upper bounds: keep them, never invent one.
    "cost_usd",
    "cost_usd_with_children",
)
ERROR_MAX = 2000


def artifact_status(result: Mapping) -> str | None:
    bundle = result.get("artifact_bundle")
    if isinstance(bundle, dict) and bundle.get("status"):
        return str(bundle["status"])
    value = result.get("artifact_status")
    return str(value) if value else None


def is_terminal(result: Mapping) -> bool:
    """Lifecycle terminal and the artefact bundle settled (pending/finalizing delays it)."""
    return result.get("status") in TERMINAL_STATUSES and artifact_status(result) not in UNSETTLED_ARTIFACTS


def cost_unsettled(result: Mapping) -> bool:
    """A completed (or degraded) result whose cost is not final yet: worth a short grace wait.

    Rows of an unpriced model never become final, so waiting for them is pointless: when every
    non-final row is an unmetered one, the cost is as settled as it will get (and stays unknown).
    """
    finished_ok = result.get("status") == "completed" or bool(result.get("degraded"))
    if not finished_ok:
        return False
    non_final, unmetered = result.get("non_final_rows"), result.get("unknown_unmetered")
    if isinstance(non_final, int) and isinstance(unmetered, int) and 0 < non_final <= unmetered:
        return False
    return result.get("cost_final") is False or result.get("cost_with_children_partial") is True


def execution_axis(result: Mapping) -> Mapping:
    axes = result.get("outcome_axes")
    execution = axes.get("execution") if isinstance(axes, dict) else None
    return execution if isinstance(execution, dict) else {}


def classify(result: Mapping, truncation_codes: Iterable[str]) -> dict:
    """{bench_status, infra_failed, truncated, reason_code} for a terminal task result.

    Infra (provider death, execution infra_failed) beats truncation, which beats completion.
    """
    reason = result.get("reason_code") or None
    execution = execution_axis(result)
    exec_reason = execution.get("reason_code")
    if (
        reason in INFRA_RUNTIME_REASONS
        or execution.get("status") == "infra_failed"
        or exec_reason in INFRA_RUNTIME_REASONS
    ):
        return {
            "bench_status": BenchStatus.FAILED.value,
            "infra_failed": True,
            "truncated": False,
            "reason_code": reason or exec_reason or "infra_failed",
        }
    if reason in set(truncation_codes):
        return {
            "bench_status": BenchStatus.MAX_TURNS_REACHED.value,
            "infra_failed": False,
            "truncated": True,
            "reason_code": reason,
        }
    if result.get("status") == "completed":
        return {
            "bench_status": BenchStatus.SUCCESS.value,
            "infra_failed": False,
            "truncated": False,
            "reason_code": reason,
        }
    return {
        "bench_status": BenchStatus.FAILED.value,
        "infra_failed": False,
        "truncated": False,
        "reason_code": reason or result.get("status"),
    }


def _tokens(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def model_activity(submitted: bool, result: Mapping | None) -> bool | None:
    """False if nothing was submitted, True on positive tokens, else None (unknown, not zero)."""
    if not submitted:
        return False
    if result:
        total = (_tokens(result.get("prompt_tokens")) or 0) + (_tokens(result.get("completion_tokens")) or 0)
        if total > 0:
            return True
    return None


def new_summary(*, engine: str, model: str | None, task: str, max_steps: int) -> dict:
    """A summary that is already valid before anything ran (stage init, failed, not submitted)."""
    summary: dict[str, Any] = {
        "schema": SUMMARY_SCHEMA,
        "engine": engine,
        "model": model,
        "task": task,
        "max_steps": max_steps,
        "bench_status": BenchStatus.FAILED.value,
        "adapter_stage": AdapterStage.INIT.value,
        "infra_failed": True,
        "reason_code": None,
        "truncated": False,
        "error": None,
        "task_submission_started": False,
        "model_activity_observed": False,
        "mcp_servers": [],
        "adapter_overhead_sec": None,
        "ouroboros_timeout_sec": None,
        "ouroboros_task_id": None,
        "ouroboros_status": None,
        "prompt_tokens": None,
        "completion_tokens": None,
        "total_rounds": None,
        "degraded": None,
        "cost_finality_wait_exhausted": False,
        "elapsed_sec": None,
        "artifact_status": None,
        "artifact_bundle": None,
        "unknown_flags": [],
    }
    for name in COST_FIELDS:
        summary[name] = None
    return summary


def apply_result(summary: dict, result: Mapping) -> None:
    """Copy the runtime facts of a task result into the summary (only fields it carries)."""
    summary["ouroboros_status"] = result.get("status")
    for name in ("prompt_tokens", "completion_tokens", "total_rounds", "degraded"):
        if name in result:
            summary[name] = result.get(name)
    for name in COST_FIELDS:
        if name in result:
            summary[name] = result.get(name)
    summary["artifact_status"] = artifact_status(result)
    if isinstance(result.get("artifact_bundle"), dict):
        summary["artifact_bundle"] = result["artifact_bundle"]


def final_answer(result: Mapping | None) -> str | None:
    if not result:
        return None
    for key in ("final_answer", "result"):
        value = result.get(key)
        if isinstance(value, str) and value:
            return value
        if value not in (None, "", {}, []):
            return str(value)
    return None
