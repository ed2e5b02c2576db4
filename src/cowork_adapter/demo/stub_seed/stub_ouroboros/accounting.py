"""Cost and token fields of a task record (pure). Amounts are accounted upper bounds in USD."""

from __future__ import annotations


def usage_for_call(call_index: int) -> dict:
    """Deterministic token counts for the N-th model call of a task (context grows per round)."""
    prompt = 1200 + 350 * call_index
    return {
        "prompt_tokens": prompt,
        "completion_tokens": 80 + 10 * call_index,
        "cached_tokens": 0 if call_index == 0 else prompt // 2,
    }


def cost_fields(spent_usd: float, rows: int, final: bool, schema: str = "newest") -> dict:
    """The cost family one release emits: "newest" (7.x, §4d) or "legacy" (6.97.2)."""
    amount = round(spent_usd, 6)
    common = {
        "cost_accounting_status": "available",
        "cost_accounting_error": None,
        "cost_final": final,
        "cost_with_children_partial": not final,
        "unknown_unmetered": 0,
        "non_final_rows": 0 if final else rows,
        "reserved_usd": 0.0,
        "unresolved_upper_bound_usd": 0.0,
        "ledger_integrity_degraded": False,
    }
    if schema == "legacy":
        return {**common, "cost_usd": amount, "cost_usd_with_children": amount}
    return {
        **common,
        "accounted_upper_bound_usd": amount,
        "accounted_upper_bound_usd_with_children": amount,
        "cost_known": True,
        "cost_presentation": {
            "scope": "own",
            "tracked_amount": amount,
            "has_unpriced": False,
            "tracked_final": final,
            "accounting_open": not final,
            "has_rows": rows > 0,
        },
    }
