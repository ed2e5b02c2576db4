"""Counting tampering flags (vocab.TamperKind) over tasks: one rule for the audit, the report and
`status`, so the three always say the same numbers.

A task is `(instance_id, kinds)`: `kinds` the kinds of its flags (a kind may repeat), or None when
its ledger row was written before the host checked (old rows): such a task is "not checked",
never counted as clean. Every TamperKind is listed, zeros included, so "none seen" is explicit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..schemas.audit import TamperCounts
from ..vocab import TamperKind


def count_tampering(tasks: Iterable[tuple[str, Iterable[str] | None]]) -> TamperCounts:
    counts = TamperCounts(by_kind={k.value: 0 for k in TamperKind}, tasks_by_kind={})
    for task, kinds in tasks:
        counts.tasks += 1
        if kinds is None:
            counts.tasks_not_checked.append(task)
            continue
        counts.tasks_checked += 1
        seen = False
        for kind in kinds:
            seen = True
            counts.findings += 1
            counts.by_kind[kind] = counts.by_kind.get(kind, 0) + 1
            listed = counts.tasks_by_kind.setdefault(kind, [])
            if not listed or listed[-1] != task:
                listed.append(task)
        if seen:
            counts.tasks_with_findings.append(task)
    return counts


def row_kinds(tampering: Any) -> list[str] | None:
    """The kinds of a ledger row's `tampering` value as read from JSON (None: not checked). An
    entry that is not an object with a string kind still counts, as `unreadable_flag`."""
    if tampering is None:
        return None
    if not isinstance(tampering, list):
        return ["unreadable_flag"]
    return [
        item["kind"] if isinstance(item, dict) and isinstance(item.get("kind"), str) else "unreadable_flag"
        for item in tampering
    ]


def counts_sentence(
    counts: TamperCounts | dict[str, Any],
    *,
    what: str = "the ledger",
    unchecked: str = "ledger rows written before the check",
) -> str:
    """One sentence: zero findings said explicitly, and the tasks not checked named by number."""
    c = counts if isinstance(counts, dict) else _as_dict(counts)
    checked, not_checked = c["tasks_checked"], len(c["tasks_not_checked"])
    if c["findings"]:
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(c["by_kind"].items()) if n)
        text = (
            f"{what} flags {_n(c['findings'], 'tampering finding')} in {_n(len(c['tasks_with_findings']), 'task')} "
            f"({kinds})."
        )
    elif checked:
        text = f"{what} shows zero tampering findings: none was seen in the {_n(checked, 'task')} checked."
    else:
        text = f"{what} holds no task checked for tampering."
    if not_checked:
        text += f" {_n(not_checked, 'task')} {'was' if not_checked == 1 else 'were'} not checked ({unchecked})."
    return text[0].upper() + text[1:]


def _n(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _as_dict(counts: TamperCounts) -> dict[str, Any]:
    return {f: getattr(counts, f) for f in counts.__struct_fields__}
