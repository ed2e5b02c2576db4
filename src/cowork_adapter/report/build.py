"""The report's content as one JSON-ready dict (rendering lives in render.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from ..runroot.layout import RunRoot
from ..schemas.campaign import parse_campaign
from ..schemas.inventory import Inventory
from ..schemas.ledger import TaskRow
from ..schemas.manifest import GatewayRecord
from ..schemas.record import RecordInvalid, convert
from ..score.context import task_config
from ..score.tampering import count_tampering, counts_sentence
from ..vocab import REFERENCE_ENGINES, PaidActivity, ServerHealth, TamperKind, TaskStatus
from .campaign import CampaignView
from .merge import MergedRow, RunRecord, denominator, merge_rows, own_attempts
from .reference import CAVEAT, reference_rows
from .stats import project_full_run, wilson_interval
from .validity import disclosure as validity_disclosure
from .validity import load_validity, validity_section

REPORT_SCHEMA = "cowork_adapter.report.v1"
FULL_DATASET = 496
METHODOLOGY_NAME = "METHODOLOGY.md"
# The repository's copy, when the package runs from its source tree (an editable install).
_METHODOLOGY_SOURCE = Path(__file__).resolve().parents[3] / METHODOLOGY_NAME


def methodology_location() -> str:
    """Where the reader finds METHODOLOGY.md: the source tree's file when present, else its name."""
    return str(_METHODOLOGY_SOURCE) if _METHODOLOGY_SOURCE.is_file() else METHODOLOGY_NAME


def _see(section: str, note: str) -> str:
    """A disclosure names the METHODOLOGY.md section that explains it."""
    return f"{note} ({METHODOLOGY_NAME} §{section})"


def row_cost(row: TaskRow) -> float | None:
    """Known cost of one attempt: with --llm-gateway the provider's own figures the gateway logged
    (exact, when every forwarded request carried one), else the adapter's accounted bound, else
    complete llm_usage costs."""
    g = row.gateway
    if g is not None and g.unknown_cost_requests == 0:
        return g.cost_usd
    s = row.adapter_summary
    if s is not None and s.cost_known is True and s.accounted_upper_bound_usd is not None:
        return s.accounted_upper_bound_usd
    u = row.usage
    if u is not None and u.records > 0 and u.unknown_cost_records == 0 and not u.unreadable:
        return u.known_cost_usd
    if row.paid_activity is PaidActivity.NONE:
        return 0.0
    return None


def row_duration(row: TaskRow) -> float | None:
    if row.runner_row is not None and row.runner_row.duration_s is not None:
        return row.runner_row.duration_s
    if row.adapter_summary is not None:
        return row.adapter_summary.elapsed_sec
    return None


def _domain(config: dict[str, Any], task: str) -> str:
    meta = found if isinstance(found := config.get("meta"), dict) else {}
    for key in ("domain", "category"):
        if isinstance(meta.get(key), str) and meta[key]:
            return meta[key]
    return task.split("-", 1)[0]


def _group(tasks: list[str], merged: dict[str, MergedRow], keys: dict[str, list[str]]) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, int]] = {}
    for task in tasks:
        status = merged[task].row.status if task in merged else TaskStatus.NOT_ATTEMPTED
        for key in keys.get(task) or ["unknown"]:
            g = groups.setdefault(key, {"tasks": 0, "passed": 0, "infra_failed": 0, "not_attempted": 0})
            g["tasks"] += 1
            g["passed"] += status is TaskStatus.PASSED
            g["infra_failed"] += status is TaskStatus.INFRA_FAILED
            g["not_attempted"] += status is TaskStatus.NOT_ATTEMPTED
    out = []
    for key in sorted(groups):
        g = groups[key]
        lo, hi = wilson_interval(g["passed"], g["tasks"])
        out.append({"name": key, **g, "pass_rate": g["passed"] / g["tasks"], "wilson95": [lo, hi]})
    return out


def _task_meta(runs: list[RunRecord], tasks: list[str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(task → [domain], task → needed MCP servers) from the newest bench working copy that has them."""
    benches = []
    for run in reversed(runs):
        wc = run.manifest.bench.working_copy if run.manifest.bench else None
        for cand in (Path(wc) if wc else None, RunRoot(run.root).bench):
            if cand is not None and cand.is_dir() and cand not in benches:
                benches.append(cand)
    domains: dict[str, list[str]] = {}
    servers: dict[str, list[str]] = {}
    for task in tasks:
        config: dict[str, Any] = {}
        for bench in benches:
            config = task_config(bench, task)
            if config:
                break
        domains[task] = [_domain(config, task)]
        needed = config.get("needed_mcp_servers")
        servers[task] = sorted({s for s in needed if isinstance(s, str)}) if isinstance(needed, list) else []
    return domains, servers


def _campaign_remaining(runs: list[RunRecord]) -> tuple[float | None, str | None]:
    for run in reversed(runs):
        name = run.manifest.campaign_file
        if not name:
            continue
        try:
            record = parse_campaign(Path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError):  # RecordInvalid is a ValueError
            return None, name
        return record.remaining_usd, name
    return None, None


def count(n: int, singular: str, plural: str | None = None) -> str:
    """'1 attempt', '2 attempts' (plural given when it is not singular + 's')."""
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


def _verb(n: int, singular: str, plural: str) -> str:
    return singular if n == 1 else plural


# Findings listed one by one in the report (every one is counted; the audit file holds them all).
MAX_LISTED_FINDINGS = 500


def _audit_summary(runs: list[RunRecord]) -> dict[str, Any] | None:
    """The launcher audits of `runs`, as counts by reason and the findings themselves."""
    found = [r for r in runs if r.audit is not None]
    unreadable = [r.audit_unreadable for r in runs if r.audit_unreadable]
    if not found and not unreadable:
        return None
    by_reason: dict[str, int] = {}
    gaps_by_reason: dict[str, int] = {}
    items: list[dict[str, Any]] = []
    tasks_with_findings = stored = 0
    for run, audit in ((r, r.audit) for r in found if r.audit is not None):
        for reason, n in audit.totals.findings_by_reason.items():
            by_reason[reason] = by_reason.get(reason, 0) + n
        for reason, n in audit.totals.gaps_by_reason.items():
            gaps_by_reason[reason] = gaps_by_reason.get(reason, 0) + n
        tasks_with_findings += audit.totals.tasks_with_findings
        for task in audit.tasks:
            for f in task.findings:
                stored += 1
                if len(items) < MAX_LISTED_FINDINGS:
                    items.append(
                        {
                            "run_root": run.root,
                            "instance_id": task.instance_id,
                            "reason": f.reason.value,
                            "file": f.file,
                            "line": f.line,
                            "tool": f.tool,
                            "token": f.token,
                            "excerpt": f.excerpt,
                        }
                    )
    total = sum(by_reason.values())
    return {
        "runs_with_audit": [r.root for r in found],
        "runs_without_audit": [r.root for r in runs if r.audit is None],
        "unreadable": unreadable,
        "tasks_with_findings": tasks_with_findings,
        "findings": total,
        "findings_by_reason": dict(sorted(by_reason.items())),
        "gaps": sum(gaps_by_reason.values()),
        "gaps_by_reason": dict(sorted(gaps_by_reason.items())),
        "items": items,
        "items_omitted": total - len(items),
        "stored_findings": stored,
    }


def _tampering_section(tasks: list[str], merged: dict[str, MergedRow], runs: list[RunRecord]) -> dict[str, Any]:
    """The tampering flags of the rows the report scores (vocab.TamperKind counts and task ids),
    from each row's `tampering`: a row written before the check has None, and is "not checked".
    The launcher audits' own sightings (links, FIFOs, oversize or misplaced records) beside them."""
    counts = count_tampering(
        (t, [f.kind.value for f in found] if (found := merged[t].row.tampering) is not None else None)
        for t in tasks
        if t in merged
    )
    section: dict[str, Any] = msgspec.to_builtins(counts)
    section["sentence"] = counts_sentence(counts, what="the ledger")
    section["details"] = {
        t: [f"{f.kind.value}: {f.detail}" if f.detail else f.kind.value for f in merged[t].row.tampering or []]
        for t in counts.tasks_with_findings
    }
    audits = [r.audit for r in runs if r.audit is not None]
    if audits:
        # An audit written before it looked (no `tampering`) saw nothing: its tasks are not checked.
        seen = count_tampering(
            (
                task.instance_id,
                [k for k, n in task.tampering_seen_by_kind.items() for _ in range(n)]
                if audit.tampering is not None
                else None,
            )
            for audit in audits
            for task in audit.tasks
        )
        outside = [
            f"{r.root}: {o.kind.value} {o.file}" + (f" ({o.detail})" if o.detail else "")
            for r in runs
            if r.audit is not None and r.audit.tampering is not None
            for o in r.audit.tampering.outside_task_dumps
        ]
        section["audit_seen"] = {
            **msgspec.to_builtins(seen),
            "outside_task_dumps": outside,
            "sentence": counts_sentence(
                seen, what="the audit of the dumps", unchecked="audited before the audit looked for tampering"
            )
            + (f" {len(outside)} more outside every task's dump." if outside else ""),
        }
    else:
        section["audit_seen"] = None
    return section


def _first_line(text: str | None, limit: int = 200) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _inventory_notes(run: RunRecord) -> list[str]:
    """Sentences for the MCP servers a run found failed or repaired, and each repair that took."""
    if not run.manifest.inventory:
        return []
    try:
        inventory = convert(run.manifest.inventory, Inventory)
    except RecordInvalid as exc:
        return [
            f"The environment inventory recorded by run {run.root} could not be read "
            f"({exc}), so its repairs and failed servers are not listed."
        ]
    notes = []
    for name, server in sorted(inventory.servers.items()):
        if server.health is ServerHealth.REPAIRED:
            how = _first_line(server.repair)
            notes.append(
                f"MCP server {name} in run {run.root} was repaired in the derived image"
                + (f" ({how})." if how else ".")
            )
        elif server.health is ServerHealth.FAILED:
            why = _first_line(server.error)
            notes.append(
                f"MCP server {name} in run {run.root} failed its environment check"
                + (f": {why}" if why else "")
                + ("" if why.endswith(".") else ".")
            )
    for r in inventory.repairs:
        if r.took:
            notes.append(
                f"Environment repair in run {run.root}: MCP server {r.server} had the fault {r.fault}; "
                f"{r.requirement} was installed (before: {r.before or 'none'}, after: {r.after or 'not measured'})."
            )
    return notes


def _gateway_notes(root: object, gateway: GatewayRecord) -> list[str]:
    """A --llm-gateway run: what its model calls went through, then each thing the routing changed."""
    return [
        f"Run {root} sent its model calls through the adapter's model gateway (model {gateway.routed_model}, "
        f"forwarded to {gateway.upstream_url}); its per-task costs are the provider's own figures."
    ] + [f"Run {root}, model gateway: {d}" for d in gateway.disclosures]


def _disclosures(
    runs: list[RunRecord],
    n: int,
    counts: dict[str, int],
    unknown_cost: int,
    truncations: int,
    provisional: int,
    *,
    chain: bool = True,
) -> list[str]:
    notes: list[str] = []
    for run in runs:
        m = run.manifest
        if m.seed is not None and (m.seed.dirty or not m.seed.reportable):
            notes.append(_see("claims", f"Run {run.root} used a dirty seed (diagnostic only, not a reportable score)."))
        if m.dry_run:
            notes.append(_see("scoring", f"Run {run.root} was a dry run (no model was called)."))
        if m.bench is not None and (m.bench.replaced_objects or m.bench.skip_worktree):
            hidden = sorted(m.bench.skip_worktree) + [f"object {o[:12]}" for o in sorted(m.bench.replaced_objects)]
            notes.append(
                _see(
                    "environment",
                    f"Run {run.root} used a benchmark checkout with substituted content that `git status` does not "
                    f"show ({', '.join(hidden)}): a stand-in for what the published snapshot lacks, not its bytes.",
                )
            )
        notes.extend(_see("environment", note) for note in _inventory_notes(run))
        if run.audit_unreadable:
            notes.append(_see("claims", f"The audit of run {run.root} is not shown: {run.audit_unreadable}."))
        if m.llm_gateway is not None:
            notes.extend(_see("cost", note) for note in _gateway_notes(run.root, m.llm_gateway))
        elif not m.dry_run and m.engine not in REFERENCE_ENGINES:
            notes.append(
                _see(
                    "cost",
                    f"Run {run.root} gave the provider key to its agent containers: the agent under "
                    "test could read it (its environment, the engine's settings file, `docker "
                    "inspect`) and spend outside this run's meter readings (--key-in-agent, or an "
                    "OpenAI-compatible endpoint without --llm-gateway); the default OpenRouter "
                    "route and --llm-gateway keep it on the host.",
                )
            )
        limits = getattr(m, "limits", None)
        if limits is not None and limits.unenforced_limits:
            notes.append(
                _see(
                    "environment",
                    f"Run {run.root} ran on a {limits.daemon_kind or 'Docker'} daemon that did not enforce the "
                    f"{', '.join(limits.unenforced_limits)} limits its containers were given "
                    "(--accept-unenforced-limits): a task could use more of the machine than its limits say.",
                )
            )
        over = sum(1 for r in run.rows if any(f.kind == TamperKind.DUMP_OVER_BOUND for f in r.tampering or ()))
        if over:
            b = m.budgets
            flags = ", ".join(
                f"--dump-max-{name} {value:g}"
                for name, value in (
                    ("gib", b.dump_max_gib),
                    ("entries", b.dump_max_entries),
                    ("depth", b.dump_max_depth),
                )
                if value is not None
            )
            notes.append(
                _see(
                    "tampering",
                    f"{count(over, 'task')} of run {run.root} passed a bound on its dump while "
                    f"it ran{f' ({flags})' if flags else ''}: stopped, "
                    f"{_verb(over, 'it counts', 'they count')} as agent failures.",
                )
            )
        if (getattr(m, "applied_config", None) or {}).get("diagnostic_eval_on_truncation"):
            notes.append(
                _see(
                    "diagnostic",
                    f"Run {run.root} ran the residual diagnostic after truncations; its "
                    "outcomes are in the audit only and never count.",
                )
            )
    engines = sorted({r.manifest.engine for r in runs})
    notes.append(_see("claims", f"Engine: {', '.join(engines)}; the published rows used other engines and harnesses."))
    if n != FULL_DATASET:
        notes.append(
            _see(
                "denominator",
                f"The denominator is {count(n, 'selected task')}: a subset is not the "
                f"{FULL_DATASET}-task benchmark score.",
            )
        )
    k = counts.get("infra_failed", 0)
    if k:
        notes.append(
            _see("infra", f"{count(k, 'infrastructure failure')} {_verb(k, 'counts', 'count')} as not passed.")
        )
    k = counts.get("not_attempted", 0)
    if k:
        notes.append(
            _see(
                "statuses",
                f"{count(k, 'selected task')} {_verb(k, 'was', 'were')} never attempted and "
                f"{_verb(k, 'counts', 'count')} as not passed.",
            )
        )
    k = counts.get("environment_blocked", 0)
    if k:
        notes.append(
            _see(
                "environment",
                f"{count(k, 'task')} {_verb(k, 'was', 'were')} blocked by a failed MCP server "
                f"and {_verb(k, 'counts', 'count')} as not passed.",
            )
        )
    if truncations:
        notes.append(
            _see(
                "diagnostic",
                f"{count(truncations, 'attempt')} {_verb(truncations, 'was', 'were')} truncated "
                f"by a runtime rail (time, rounds or budget) and "
                f"{_verb(truncations, 'counts', 'count')} as not passed.",
            )
        )
    if unknown_cost:
        notes.append(
            _see("cost", f"Cost is unknown for {count(unknown_cost, 'attempt')}; the known total is a lower bound.")
        )
    if provisional:
        notes.append(
            _see(
                "statuses",
                f"{count(provisional, 'row')} {_verb(provisional, 'is', 'are')} provisional: "
                "a run was still live when its ledger was written.",
            )
        )
    if len(runs) > 1 and chain:
        notes.append(
            _see(
                "recovery",
                f"{len(runs)} runs were merged through recovery ancestry; each row names the run of its attempt.",
            )
        )
    return notes


def _gateway_totals(runs: list[RunRecord]) -> dict[str, Any] | None:
    """--llm-gateway runs: the gateway's sum of provider costs against the meter's delta, the
    difference disclosed (charges outside the gateway, late charges, or responses without a cost)."""
    used = [r for r in runs if r.manifest.llm_gateway is not None]
    if not used:
        return None
    gateways = [r.manifest.llm_gateway for r in used if r.manifest.llm_gateway is not None]  # (all of them)
    total = sum(g.spent_usd or 0.0 for g in gateways)
    meter = [r.run_spent_usd() for r in used]
    meter_total = sum(v for v in meter if v is not None) if all(v is not None for v in meter) else None
    return {
        "runs": len(used),
        "gateway_total_usd": total,
        "unknown_cost_requests": sum(g.unknown_cost_requests or 0 for g in gateways),
        # What the gateway's fences counted those at (its pessimistic price); not in gateway_total_usd.
        "assumed_usd": sum(g.assumed_usd or 0.0 for g in gateways),
        "meter_delta_usd": meter_total,
        "meter_minus_gateway_usd": (meter_total - total) if meter_total is not None else None,
        "note": "the gateway's total is the provider's own per-request figures; the meter's delta also holds "
        "spending on the key outside the gateway and charges the provider posts late",
    }


def build_report(runs: list[RunRecord], *, concurrency: int, campaign: CampaignView | None = None) -> dict[str, Any]:
    """The report over a resume chain, or (`campaign`) over one campaign's host runs: then the
    denominator, the rows, the spend and the remainder are the campaign's."""
    tasks = campaign.merge.tasks if campaign else denominator(runs)
    merged = campaign.merge.merged if campaign else merge_rows(runs)
    n = len(tasks)
    counts: dict[str, int] = {s.value: 0 for s in TaskStatus}
    for task in tasks:
        counts[(merged[task].row.status if task in merged else TaskStatus.NOT_ATTEMPTED).value] += 1
    passed = counts[TaskStatus.PASSED.value]
    lo, hi = wilson_interval(passed, n)
    scored = [merged[t] for t in tasks if t in merged]
    truncations = sum(1 for m in scored if m.row.truncated)
    provisional = sum(1 for m in scored if m.row.provisional)

    attempts = [row for run in runs for row in own_attempts(run)]
    costs = [c for c in (row_cost(r) for r in attempts) if c is not None]
    unknown_cost = sum(1 for r in attempts if row_cost(r) is None)
    durations = [d for d in (row_duration(r) for r in attempts) if d is not None]
    attempt_costs = [
        c for c in (row_cost(r) for r in attempts if r.paid_activity is not PaidActivity.NONE) if c is not None
    ]
    meter = [(r.root, r.run_spent_usd()) for r in runs]
    meter_known = [v for _, v in meter if v is not None]
    meter_total = sum(meter_known) if meter_known else None
    if campaign is not None:
        meter_total = campaign.meter_delta_usd  # concurrent hosts' run deltas overlap; the campaign's does not

    projection: dict[str, Any] = project_full_run(attempt_costs, durations, tasks=FULL_DATASET, concurrency=concurrency)
    remaining, campaign_file = (campaign.remaining_usd, campaign.location) if campaign else _campaign_remaining(runs)
    warnings: list[str] = []
    if remaining is not None and projection["projected_cost_usd"] is not None:
        if projection["projected_cost_usd"] > remaining:
            warnings.append(
                f"The projected full-run cost ${projection['projected_cost_usd']:.2f} exceeds the campaign remainder "
                f"${remaining:.2f}."
            )
        elif (projection["projected_cost_p90_usd"] or 0) > remaining:
            warnings.append(
                f"At the observed p90 per-task cost a full run (${projection['projected_cost_p90_usd']:.2f}) would "
                f"exceed the campaign remainder ${remaining:.2f}."
            )
    elif campaign_file and remaining is None:
        warnings.append(
            f"The campaign file {campaign_file} could not be read; the projection is not checked against a remainder."
        )
    projection.update(campaign_file=campaign_file, campaign_remaining_usd=remaining, warnings=warnings)

    domains, servers = _task_meta(runs, tasks)
    # Cumulative spend: each run's meter readings, stacked on the total of the runs before it.
    spend: list[tuple[float, float]] = []
    offset = 0.0
    for run in runs if campaign is None else []:
        spend.extend((ts, offset + v) for ts, v in run.meter)
        last = run.run_spent_usd()
        offset += last if last is not None else 0.0
    if campaign is not None:
        spend = list(campaign.spend_series)

    tampering = _tampering_section(tasks, merged, runs)
    status_of = {t: merged[t].row.status for t in tasks if t in merged}
    validity = validity_section(tasks, status_of, load_validity([r.root for r in runs]))
    task_rows = []
    for task in tasks:
        m = merged.get(task)
        row = m.row if m else None
        task_rows.append(
            {
                "instance_id": task,
                "status": row.status.value if row else TaskStatus.NOT_ATTEMPTED.value,
                "reason_code": row.reason_code if row else "missing_row",
                "official_eval_status": row.official_eval_status.value if row else "unreported",
                "pass": row.official_receipt.pass_ if row else None,
                "truncated": row.truncated if row else None,
                "paid_activity": row.paid_activity.value if row else PaidActivity.NONE.value,
                "cost_usd": row_cost(row) if row else None,
                "duration_s": row_duration(row) if row else None,
                "provenance": m.provenance if m else None,
                "domain": domains[task][0],
                "mcp_servers": servers[task],
                "validity_class": validity["task_class"][task] if validity else None,
                "peak_memory_bytes": row.peak_memory_bytes if row else None,
                "cpu_seconds": row.cpu_seconds if row else None,
                "resource_basis": row.resource_basis if row else None,
                "infra_cause": row.infra_cause.value if row and row.infra_cause else None,  # what the host saw (§infra)
            }
        )
    return {
        "schema": REPORT_SCHEMA,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "runs": [
            {
                "run_root": r.root,
                "generation": r.manifest.selection.resume_generation,
                "outcome": r.manifest.outcome,
                "stop_reason": r.manifest.stop_reason,
                "engine": r.manifest.engine,
                "created_at": r.manifest.created_at,
                "run_spent_usd": r.run_spent_usd(),
            }
            for r in runs
        ],
        "denominator": n,
        "full_dataset": FULL_DATASET,
        "passed": passed,
        "pass_at_1": passed / n if n else None,
        "wilson95": [lo, hi],
        "counts": counts,
        "truncations": truncations,
        "provisional_rows": provisional,
        "cost": {
            "attempts": len(attempts),
            "known_usd": sum(costs),
            "known_attempts": len(costs),
            "unknown_attempts": unknown_cost,
            "complete": unknown_cost == 0,
            "mean_known_per_attempt_usd": (sum(costs) / len(costs)) if costs else None,
            "meter_run_spent_usd": meter_total,
            "meter_runs_without_reading": [r for r, v in meter if v is None],
            "meter_per_attempt_usd": (meter_total / len(attempts)) if meter_total is not None and attempts else None,
            "known_per_passed_task_usd": (sum(costs) / passed) if passed and unknown_cost == 0 else None,
            "gateway": _gateway_totals(runs),
            "source_note": "known cost is the adapter's accounted upper bound or llm_usage projection, not billing; "
            "the meter figure is the provider key's delta",
        },
        "by_domain": _group(tasks, merged, domains),
        "by_mcp_server": _group(tasks, merged, servers),
        "reference": {"rows": reference_rows(), "caveat": CAVEAT},
        "methodology": methodology_location(),
        "disclosures": _disclosures(runs, n, counts, unknown_cost, truncations, provisional, chain=campaign is None)
        + ([_see("validity", validity_disclosure(validity))] if validity else [])
        + [_see("hosts", d) for d in (campaign.disclosures if campaign else [])]
        + [_see("tampering", tampering["sentence"])],
        "campaign": campaign.section if campaign else None,
        "validity": validity,
        "audit": _audit_summary(runs),
        "tampering": tampering,
        "projection": projection,
        "series": {"cumulative_spend": [[ts, v] for ts, v in spend], "costs": costs, "durations": durations},
        "tasks": task_rows,
    }
