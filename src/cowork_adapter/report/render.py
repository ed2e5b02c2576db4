"""Markdown and one self-contained HTML page from the report dict."""

from __future__ import annotations

from html import escape
from typing import Any

from . import svg
from .build import count
from .numbers import pct
from .trials import trials_headline, trials_html, trials_markdown


def _usd(x: float | None) -> str:
    return "n/a" if x is None else f"${x:,.2f}"


def _hours(s: float | None) -> str:
    return "n/a" if s is None else f"{s / 3600:.1f} h"


def _mib(n: int | None) -> str:
    return "unknown" if n is None else f"{n / 2**20:,.0f} MiB"


def _cpu(s: float | None) -> str:
    return "unknown" if s is None else f"{s:,.1f} s"


def headline(r: dict[str, Any]) -> str:
    if r.get("trials"):
        return trials_headline(r["trials"])  # the trial set's figure; trial 1's own is in its table
    lo, hi = r["wilson95"]
    return (
        f"pass@1 = {r['passed']}/{r['denominator']} = {pct(r['pass_at_1'])} "
        f"(Wilson 95 % interval {pct(lo)} – {pct(hi)})"
    )


def methodology_line(r: dict[str, Any], *, markdown: bool) -> str:
    """The pointer to METHODOLOGY.md that precedes every number: what is scored, the denominator,
    the statuses and the disclosures' sections are defined there."""
    where = r.get("methodology") or "METHODOLOGY.md"
    if markdown:
        link = f"[METHODOLOGY.md]({where})"
    else:
        href = where if not where.startswith("/") else "file://" + where
        link = f"<a href='{escape(href, quote=True)}'>METHODOLOGY.md</a>"
    return (
        f"Read {link} before interpreting this result: it defines what is scored, the denominator and "
        "the statuses, and each disclosure below names its section (§)."
    )


def valid_line(r: dict[str, Any]) -> str | None:
    """pass@1 over the valid tasks (a run given --task-validity), shown under the headline."""
    v = r.get("validity")
    if not v:
        return None
    lo, hi = v["valid_wilson95"]
    return (
        f"pass@1 over valid tasks = {v['valid_passed']}/{v['valid_denominator']} = {pct(v['valid_pass_at_1'])} "
        f"(Wilson 95 % interval {pct(lo)} – {pct(hi)})"
    )


def _validity_rows(r: dict[str, Any]) -> list[list[str]]:
    return [[k, str(n)] for k, n in r["validity"]["classes"].items()]


def _summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    c, cost, p = r["counts"], r["cost"], r["projection"]
    return [
        ("Denominator (selected tasks)", str(r["denominator"])),
        ("Passed", str(c["passed"])),
        ("Failed (verifier)", str(c["failed"])),
        ("Agent failed", str(c["agent_failed"])),
        ("Infrastructure failures", str(c["infra_failed"])),
        ("Truncated attempts", str(r["truncations"])),
        ("Not attempted", str(c["not_attempted"])),
        ("Environment-blocked", str(c["environment_blocked"])),
        (
            "Known cost (accounted / llm_usage)",
            f"{_usd(cost['known_usd'])} over {count(cost['known_attempts'], 'attempt')}",
        ),
        ("Attempts with unknown cost", str(cost["unknown_attempts"])),
        ("Key-meter spend", _usd(cost["meter_run_spent_usd"])),
        ("Mean known cost per attempt", _usd(cost["mean_known_per_attempt_usd"])),
        (
            f"Projected full run ({count(p['tasks'], 'task')}, concurrency {p['concurrency']})",
            f"{_usd(p['projected_cost_usd'])} (p90 {_usd(p['projected_cost_p90_usd'])}), "
            f"{_hours(p['projected_wall_s'])} (p90 {_hours(p['projected_wall_p90_s'])})",
        ),
        ("Campaign remainder", _usd(p["campaign_remaining_usd"])),
    ]


def _group_table(groups: list[dict[str, Any]]) -> list[list[str]]:
    return [[g["name"], str(g["tasks"]), str(g["passed"]), pct(g["pass_rate"]), str(g["infra_failed"])] for g in groups]


GROUP_HEAD = ["name", "tasks", "passed", "pass rate", "infra"]
REF_HEAD = ["model", "context", "PASS@1", "method", "note"]


def _ref_table(r: dict[str, Any]) -> list[list[str]]:
    return [
        [
            x["model"],
            x["context_window"],
            f"{x['passed']}/{x['denominator']} = {pct(x['pass_at_1'])}",
            x["method"],
            x["note"],
        ]
        for x in r["reference"]["rows"]
    ]


AUDIT_HEAD = ["task", "reason", "where", "tool", "matched"]


def _audit_sentence(a: dict[str, Any]) -> str:
    runs = len(a["runs_with_audit"])
    text = (
        f"The offline audit of {count(runs, 'run')} found {count(a['findings'], 'finding')} in "
        f"{count(a['tasks_with_findings'], 'task')} for manual review, and "
        f"{count(a['gaps'], 'evidence gap')}. A finding is a reference that needs a human reading, "
        "never a verdict: the scores above are the official evaluator's."
    )
    if a["runs_without_audit"]:
        text += f" No readable audit for: {', '.join(a['runs_without_audit'])}."
    return text


def _audit_rows(a: dict[str, Any]) -> list[list[str]]:
    return [[f["instance_id"], f["reason"], f"{f['file']}:{f['line']}", f["tool"], f["token"]] for f in a["items"]]


def _audit_omitted(a: dict[str, Any]) -> str | None:
    if a["items_omitted"] <= 0:
        return None
    verb = "is" if a["items_omitted"] == 1 else "are"
    return (
        f"{count(a['items_omitted'], 'further finding')} {verb} counted above and not listed; "
        "the audit files hold the stored ones."
    )


TAMPER_HEAD = ["kind", "findings", "tasks"]
MAX_LISTED_TASKS = 50  # task ids per kind shown in the table (the JSON holds them all)


def _task_list(tasks: list[str]) -> str:
    shown = ", ".join(tasks[:MAX_LISTED_TASKS])
    return shown + (f" and {len(tasks) - MAX_LISTED_TASKS} more" if len(tasks) > MAX_LISTED_TASKS else "")


def _tamper_rows(c: dict[str, Any]) -> list[list[str]]:
    """Every TamperKind with its count (zeros too: none seen is said), and its tasks."""
    return [[kind, str(n), _task_list(c["tasks_by_kind"].get(kind, []))] for kind, n in c["by_kind"].items()]


def _tamper_lines(t: dict[str, Any]) -> list[tuple[str, list[list[str]] | None]]:
    """(sentence, table or None) pieces of the Tampering section, for either format."""
    out: list[tuple[str, list[list[str]] | None]] = [(t["sentence"], _tamper_rows(t))]
    if t["tasks_not_checked"]:
        out.append((f"Not checked (rows written before the check): {_task_list(t['tasks_not_checked'])}.", None))
    seen = t.get("audit_seen")
    if seen is not None:
        out.append((seen["sentence"], _tamper_rows(seen) if seen["findings"] else None))
        for line in seen["outside_task_dumps"][:MAX_LISTED_TASKS]:
            out.append((f"Outside every task's dump: {line}", None))
    else:
        out.append(("No readable audit: what the audit would see in the dumps is not shown.", None))
    return out


HOST_HEAD = [
    "host",
    "runs",
    "settled",
    "claimed now",
    "run hours",
    "settled per hour",
    "meter during its runs",
    "accounted cost",
]


def _host_rows(c: dict[str, Any]) -> list[list[str]]:
    return [
        [
            h["host"],
            str(len(h["runs"])),
            str(h["settled"]),
            str(h["claimed"]),
            f"{h['hours']:.2f}",
            "n/a" if h["settled_per_hour"] is None else f"{h['settled_per_hour']:.1f}",
            _usd(h["meter_spent_usd"]),
            _usd(h["accounted_usd"])
            + (f" (+{h['unknown_cost_attempts']} unknown)" if h["unknown_cost_attempts"] else ""),
        ]
        for h in c["hosts"]
    ]


def campaign_sentence(c: dict[str, Any]) -> str:
    """The campaign's claims and its one spend, in one sentence."""
    k = c["claims"]
    total = sum(k.values())
    money = c["money"]
    spend = (
        "its spend is unknown (no money record yet)"
        if money is None
        else f"its spend is the key meter's delta {_usd(money['meter_delta_usd'])} of a ceiling "
        f"{_usd(money['ceiling_usd'])} ({_usd(money['remaining_usd'])} remaining)"
    )
    return (
        f"Campaign {c['name']!r} ({c['location']}), read at {c['read_at']}: {k.get('settled', 0)} of "
        f"{count(total, 'selected task')} settled, {k.get('claimed', 0)} claimed, {k.get('open', 0)} open; {spend}."
    )


def _task_table(r: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The per-task table; with a task validity table, each task's class too."""
    head = ["task", "status", "reason", "cost", "peak memory", "CPU time", "run"]
    rows = [
        [
            t["instance_id"],
            t["status"],
            t["reason_code"],
            _usd(t["cost_usd"]),
            _mib(t.get("peak_memory_bytes")),
            _cpu(t.get("cpu_seconds")),
            t["provenance"] or "",
        ]
        for t in r["tasks"]
    ]
    if r.get("validity"):
        head.append("validity")
        for row, t in zip(rows, r["tasks"], strict=True):
            row.append(t.get("validity_class") or "")
    return head, rows


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(r: dict[str, Any]) -> str:
    out = ["# Cowork Bench report", "", f"**{headline(r)}**", "", methodology_line(r, markdown=True), ""]
    if valid := valid_line(r):
        out += [
            valid,
            "",
            "## Task validity",
            "",
            f"From `{r['validity']['source']}`.",
            "",
            _md_table(["class", "selected tasks"], _validity_rows(r)),
            "",
        ]
    out += trials_markdown(r["trials"], _md_table) if r.get("trials") else []
    out += [_md_table(["", "value"], [list(x) for x in _summary_rows(r)]), ""]
    for w in r["projection"]["warnings"]:
        out += [f"> **Warning:** {w}", ""]
    if r.get("campaign"):
        out += [
            "## Campaign",
            "",
            campaign_sentence(r["campaign"]),
            "",
            _md_table(HOST_HEAD, _host_rows(r["campaign"])),
            "",
        ]
    out += ["## Disclosures", ""] + [f"- {d}" for d in r["disclosures"]] + [""]
    if r["audit"] is not None:
        a = r["audit"]
        out += ["## Audit", "", _audit_sentence(a), ""]
        if a["findings_by_reason"]:
            out += [
                _md_table(["finding reason", "count"], [[k, str(v)] for k, v in a["findings_by_reason"].items()]),
                "",
            ]
        if a["gaps_by_reason"]:
            out += [_md_table(["gap reason", "count"], [[k, str(v)] for k, v in a["gaps_by_reason"].items()]), ""]
        if a["items"]:
            out += [_md_table(AUDIT_HEAD, _audit_rows(a)), ""]
        if _audit_omitted(a):
            out += [str(_audit_omitted(a)), ""]
    if r.get("tampering") is not None:
        out += ["## Tampering", ""]
        for sentence, table in _tamper_lines(r["tampering"]):
            out += [sentence, ""] + ([_md_table(TAMPER_HEAD, table), ""] if table else [])
    out += ["## By domain", "", _md_table(GROUP_HEAD, _group_table(r["by_domain"])), ""]
    out += ["## By MCP server", "", _md_table(GROUP_HEAD, _group_table(r["by_mcp_server"])), ""]
    out += ["## Published reference rows", "", r["reference"]["caveat"], "", _md_table(REF_HEAD, _ref_table(r)), ""]
    out += [
        "## Runs",
        "",
        _md_table(
            ["run root", "generation", "outcome", "meter spend"],
            [[x["run_root"], str(x["generation"]), x["outcome"], _usd(x["run_spent_usd"])] for x in r["runs"]],
        ),
        "",
    ]
    out += ["## Tasks", "", _md_table(*_task_table(r)), ""]
    return "\n".join(out)


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


CSS = (
    "body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
    ".warn{background:#fff3cd;padding:8px;border:1px solid #e0c36a}.plots svg{display:block;margin:1em 0}"
)


def to_html(r: dict[str, Any]) -> str:
    domains = r["by_domain"]
    series = r["series"]
    plots = [
        svg.bar_chart(
            "Pass rate by domain",
            [g["name"] for g in domains],
            [g["pass_rate"] for g in domains],
            x_label="task domain",
            y_label="pass@1 (% of the domain's tasks)",
            y_max=1.0,
        ),
        svg.histogram(
            "Cost per attempt (USD)",
            series["costs"],
            x_label="known cost per attempt (USD, start of bin)",
            y_label="attempts (count)",
        ),
        svg.histogram(
            "Duration per attempt (s)",
            series["durations"],
            x_fmt=".0f",
            x_label="duration per attempt (s, start of bin)",
            y_label="attempts (count)",
        ),
        svg.step_line(
            "Cumulative key-meter spend (USD)",
            [tuple(p) for p in series["cumulative_spend"]],
            x_label="time since the first meter reading",
            y_label="key-meter spend (USD)",
        ),
    ]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Cowork Bench report</title>"
        f"<style>{CSS}</style></head><body>",
        "<h1>Cowork Bench report</h1>",
        f"<p><strong>{escape(headline(r))}</strong></p>",
        f"<p>{methodology_line(r, markdown=False)}</p>",
        *(trials_html(r["trials"], _html_table) if r.get("trials") else []),
        _html_table(["", "value"], [list(x) for x in _summary_rows(r)]),
    ]
    if valid := valid_line(r):
        parts += [
            f"<p>{escape(valid)}</p>",
            "<h2>Task validity</h2>",
            f"<p>From {escape(r['validity']['source'])}.</p>",
            _html_table(["class", "selected tasks"], _validity_rows(r)),
        ]
    parts += [f"<p class='warn'>Warning: {escape(w)}</p>" for w in r["projection"]["warnings"]]
    if r.get("campaign"):
        parts += [
            "<h2>Campaign</h2>",
            f"<p>{escape(campaign_sentence(r['campaign']))}</p>",
            _html_table(HOST_HEAD, _host_rows(r["campaign"])),
        ]
    parts += ["<h2>Disclosures</h2><ul>"] + [f"<li>{escape(d)}</li>" for d in r["disclosures"]] + ["</ul>"]
    if r["audit"] is not None:
        a = r["audit"]
        parts.append(f"<h2>Audit</h2><p>{escape(_audit_sentence(a))}</p>")
        # An empty table renders as a stray header row: each is shown only when it has rows.
        if a["findings_by_reason"]:
            parts.append(
                _html_table(["finding reason", "count"], [[k, str(v)] for k, v in a["findings_by_reason"].items()])
            )
        if a["gaps_by_reason"]:
            parts.append(_html_table(["gap reason", "count"], [[k, str(v)] for k, v in a["gaps_by_reason"].items()]))
        if a["items"]:
            parts.append(_html_table(AUDIT_HEAD, _audit_rows(a)))
        if _audit_omitted(a):
            parts.append(f"<p>{escape(str(_audit_omitted(a)))}</p>")
    if r.get("tampering") is not None:
        parts.append("<h2>Tampering</h2>")
        for sentence, table in _tamper_lines(r["tampering"]):
            parts.append(f"<p>{escape(sentence)}</p>" + (_html_table(TAMPER_HEAD, table) if table else ""))
    parts += ["<h2>Plots</h2><div class='plots'>"] + plots + ["</div>"]
    parts += ["<h2>By domain</h2>", _html_table(GROUP_HEAD, _group_table(domains))]
    parts += ["<h2>By MCP server</h2>", _html_table(GROUP_HEAD, _group_table(r["by_mcp_server"]))]
    parts += [
        "<h2>Published reference rows</h2>",
        f"<p>{escape(r['reference']['caveat'])}</p>",
        _html_table(REF_HEAD, _ref_table(r)),
    ]
    parts += ["<h2>Tasks</h2>", _html_table(*_task_table(r))]
    parts.append("</body></html>\n")
    return "".join(parts)
