"""How each ending of a task reads on the wire (pure): status, reason_code and outcome_axes.

A client detects the ending by `status`, `reason_code` and `outcome_axes.execution`; the table
below is the whole mapping, so a test can pin it row by row.
"""

from __future__ import annotations

TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "rejected_duplicate"})
# Artefact states a client must keep polling through.
OPEN_ARTIFACT_STATUSES = frozenset({"pending", "finalizing"})
_RANK = {"requested": 0, "scheduled": 1, "running": 2, "interrupted": 2}

# reason_code -> (lifecycle status, execution status)
ENDINGS = {
    "final_message": ("completed", "ok"),
    "round_limit": ("completed", "best_effort"),
    "budget_exhausted": ("completed", "best_effort"),
    "deadline_local": ("completed", "best_effort"),
    "llm_api_error": ("failed", "infra_failed"),
    "task_exception": ("failed", "failed"),
    "cancelled": ("cancelled", "cancelled"),
}

# Keys the real server strips from every task response.
_HIDDEN_KEYS = ("result_status", "compat_result_status")


def status_rank(status: str) -> int:
    return 3 if status in TERMINAL_STATUSES else _RANK.get(status, 0)


def accepts_write(current: str | None, new: str | None) -> bool:
    """Monotonic statuses: never backwards; a terminal status is sticky (same-status enrichment only)."""
    if current is None or new is None:
        return True
    if current in TERMINAL_STATUSES:
        return new == current
    return status_rank(new) >= status_rank(current)


def terminal_fields(reason_code: str) -> dict:
    """Top-level fields of the terminal write for an ending."""
    status, _execution = ENDINGS[reason_code]
    return {"status": status, "reason_code": reason_code, "degraded": False}


def outcome_axes(record: dict) -> dict:
    """The five normalised axes every GET /api/tasks/{id} carries."""
    status = record.get("status")
    reason = record.get("reason_code")
    if status in TERMINAL_STATUSES and reason in ENDINGS:
        execution = {"status": ENDINGS[reason][1], "reason_code": reason}
    elif status in TERMINAL_STATUSES:
        execution = {"status": "failed", "reason_code": reason}
    else:
        execution = {"status": None, "reason_code": None}  # not settled yet
    execution.update(
        recoveries=[], cosmetic_tool_errors=[], ignored_tool_errors=[], policy_denials=[]
    )
    return {
        "schema_version": 1,
        "lifecycle": {"status": status},
        "execution": execution,
        "artifacts": {"status": record.get("artifact_status")},
        "objective": {"status": "not_evaluated", "source": "none"},
        "review": {"status": "skipped"},
    }


def artifact_bundle(status: str | None) -> dict:
    return {"schema_version": 1, "status": status, "artifacts": [], "errors": []}


def public_view(record: dict) -> dict:
    """The stored record as GET returns it: hidden keys stripped, axes and bundle added."""
    view = {k: v for k, v in record.items() if k not in _HIDDEN_KEYS}
    view["outcome_axes"] = outcome_axes(record)
    view["artifact_bundle"] = artifact_bundle(record.get("artifact_status"))
    return view


def is_settled(view: dict) -> bool:
    """The client's terminal rule: a terminal status and an artefact status that is not open."""
    return view.get("status") in TERMINAL_STATUSES and (
        view.get("artifact_status") not in OPEN_ARTIFACT_STATUSES
    )
