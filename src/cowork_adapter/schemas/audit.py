"""audit.json: the offline audit's evidence report for one run root.

The audit is advisory. The official evaluator, through result_index.jsonl, is the only scoring
authority; nothing here changes a verdict. Findings are references that need a human reading,
gaps are evidence that could not be read or counted. Every list a trace could grow without limit
(findings, gaps, omission references) is stored up to a cap and always counted in full.

These are msgspec Structs like every host-side schema, but plain ones, not schemas.record.Record:
the audit builds them from values it has checked itself, so they skip a Record's conversion on
construction; `read_report` validates a file against the same types.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from ..runroot import layout
from ..runroot.layout import RunRoot
from ..vocab import AuditFindingReason, AuditGapReason, TamperKind

AUDIT_SCHEMA: Final = "cowork_adapter.audit.v1"

# The launcher's own audit of a run, at the run's end, and the operator's (runroot/layout.py names both).
LAUNCHER_AUDIT_NAME = layout.LAUNCHER_AUDIT


def launcher_audit_path(run_root: Path) -> Path:
    """The file where the launcher writes its audit of `run_root`."""
    return RunRoot(run_root).launcher_audit


def audit_path_to_read(run_root: Path) -> Path:
    """The audit a reader of a run uses: the launcher's own, else the operator's `audit.json`."""
    root = RunRoot(run_root)
    for path in (root.launcher_audit, root.operator_audit):
        if path.is_file():
            return path
    return root.launcher_audit


SCORING_AUTHORITY = (
    f"The official evaluator, as recorded in {layout.RESULT_INDEX}, is the only scoring authority; "
    "this audit reports evidence for manual review and never changes a verdict."
)

LIMITATIONS: tuple[str, ...] = (
    "A finding is a reference in tool-call arguments that needs manual review, not proof of misuse.",
    "No finding does not prove a clean trace: only tool-call arguments are scanned, by fixed rules.",
    "Usage is the agent server's own accounting (its physical-attempt ledger: one record per model request; "
    "else its llm_usage rows), not provider billing.",
    "Provider names in usage records do not identify the upstream endpoint that served a call.",
    "A receipt verdict on a row that is not completed is disclosure only, never a score.",
    "Residual-state diagnostics are post-stop observations and are never scored.",
    "progress, chat and supervisor logs are only checked to hold one JSON object per line; their content is not used.",
    "Tampering the audit saw is what its listings of the dumps show when it runs (links, FIFOs, devices, oversize "
    "files, misplaced or set-aside records); no such entry is ever opened or followed, and one removed before the "
    "audit, or deeper in a dump than it lists, is not seen. The ledger rows' flags are the host's own checks.",
    "A task database's changed tables are accounted for by any call of a PostgreSQL-backed MCP server in the "
    "transcript (its tools name no tables), or by a database client in a shell tool (a finding): a table changed "
    "with neither is for review, never a verdict.",
)

# Storage caps: counts stay exact, stored examples stop here (bounded report size and memory).
MAX_FINDINGS_PER_TASK = 200
MAX_GAPS_PER_TASK = 100
MAX_REFERENCES_PER_TASK = 50
MAX_NAMES_PER_TASK = 50


class _Model(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class McpServerActivity(_Model, kw_only=True):
    calls: int = 0
    errors: int = 0
    tools: dict[str, int] = msgspec.field(default_factory=dict)


class Activity(_Model, kw_only=True):
    usage_records: int = 0
    token_bearing_usage_records: int = 0  # prompt + completion tokens > 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    tool_calls: int = 0
    mcp_calls: int = 0
    mcp_error_calls: int = 0
    mcp_by_server: dict[str, McpServerActivity] = msgspec.field(default_factory=dict)


class Cost(_Model, kw_only=True):
    """Sum of known usage costs. `complete` needs ≥1 record, no unknown cost, no events gap.
    `source`: the attempt ledger (one record per model request) or, without it, llm_usage rows."""

    known_usd: float = 0.0
    unknown_records: int = 0
    estimated_records: int = 0
    complete: bool = False
    source: Literal["llm_usage_projection", "attempt_ledger"] = "llm_usage_projection"


class LogRef(_Model, kw_only=True):
    file: str  # relative to the run root
    line: int  # 1-based


class CapabilityOmissions(_Model, kw_only=True):
    count: int = 0
    references: list[LogRef] = msgspec.field(default_factory=list)
    absence_proves_none: Literal[False] = False


class Finding(_Model, kw_only=True):
    reason: AuditFindingReason
    file: str  # relative to the run root
    line: int  # 1-based physical line of the tool_call record
    record_index: int  # 0-based index among the file's tool_call records
    tool: str
    token: str  # the matched text
    excerpt: str  # the token and at most 80 characters of argument context (secrets masked)


class Gap(_Model, kw_only=True):
    reason: AuditGapReason
    file: str | None = None  # relative to the run root
    line: int | None = None
    detail: str | None = None


class TamperSeen(_Model, kw_only=True):
    """One thing the audit itself saw while reading a dump (a tampering flag, never a verdict)."""

    kind: TamperKind
    file: str  # relative to the run root; a link's target is never read or named
    detail: str | None = None  # what stood there: symlink, fifo, device, socket, too_large:<bytes>...


class LedgerTamper(_Model, kw_only=True):
    """A ledger row's tampering flag as the row states it (its kind kept as written)."""

    kind: str
    detail: str = ""


class TamperCounts(_Model, kw_only=True):
    """Tampering flags over a set of tasks, counted per vocab.TamperKind (every kind listed, zeros
    included, so "none seen" is explicit). `tasks_not_checked` are tasks whose ledger rows were
    written before the host checked (their `tampering` is null): nothing is known of them."""

    tasks: int = 0
    tasks_checked: int = 0
    tasks_not_checked: list[str] = msgspec.field(default_factory=list)
    findings: int = 0
    tasks_with_findings: list[str] = msgspec.field(default_factory=list)
    by_kind: dict[str, int] = msgspec.field(default_factory=dict)
    tasks_by_kind: dict[str, list[str]] = msgspec.field(default_factory=dict)


class Tampering(_Model, kw_only=True):
    """The run's tampering flags: those its ledger rows carry (the host's seal and dump checks),
    and those the audit saw itself reading the dumps (links, FIFOs, oversize files, official
    record names outside a task's own dump; `outside_task_dumps` lists those above every dump)."""

    ledger: TamperCounts = msgspec.field(default_factory=TamperCounts)
    seen: TamperCounts = msgspec.field(default_factory=TamperCounts)
    outside_task_dumps: list[TamperSeen] = msgspec.field(default_factory=list)


class ReceiptFact(_Model, kw_only=True):
    attempt_id: str | None = None
    official_run: bool | None = None
    cause: str | None = None
    state: str  # terminal (parsed) | invalid (unreadable or not an object)


class DiagnosticFact(_Model, kw_only=True):
    present: bool = False
    outcome: str | None = None
    reason: str | None = None
    eligible: bool | None = None
    receipts: int = 0
    reports: int = 0
    logs: int = 0  # ouroboros_diagnostic_log-<attempt>.log files (the checker's own output)
    checker_exit_code: int | None = None
    custody: str | None = None  # group_dead | unconfirmed | not_started (the receipt's word)
    linked: bool | None = None  # the receipt names the official claim's attempt
    # The shim's host-side record of agent-<id> at the eval exec (custody/evidence/<id>.eval_admission).
    host_agent_container_state: str | None = None


class TaskEvalAttempts(_Model, kw_only=True):
    claims: int = 0
    receipts: list[ReceiptFact] = msgspec.field(default_factory=list)
    eval_refusal: str | None = None  # the shim's refusal cause for this task's eval container
    diagnostic: DiagnosticFact = msgspec.field(default_factory=DiagnosticFact)


class TaskDbTable(_Model, kw_only=True):
    """One table of the task's database that changed between the phases (score/taskdb.py's TableDiff)."""

    table: str
    change: str  # added | removed | changed
    rows_before: int | None = None
    rows_after: int | None = None
    added: int | None = None
    changed: int | None = None
    removed: int | None = None
    columns_changed: bool = False
    basis: str = ""
    accounted_by: str | None = None  # pg_mcp_call | shell_database_client | None: for review


class TaskDbAudit(_Model, kw_only=True):
    """The task's database between the phases, as audit evidence (the ledger's flags decide nothing here)."""

    baseline: str | None = None  # after_preprocess | before_preprocess | no_marker
    code: list[str] = msgspec.field(default_factory=list)
    settings: list[str] = msgspec.field(default_factory=list)
    processes: list[str] = msgspec.field(default_factory=list)
    catalog: list[str] = msgspec.field(default_factory=list)
    problems: list[str] = msgspec.field(default_factory=list)
    tables: list[TaskDbTable] = msgspec.field(default_factory=list)
    pg_servers: list[str] | None = None  # the run's PostgreSQL-backed MCP servers (None: configs unreadable)
    pg_tool_calls: int = 0  # non-error calls of those servers in the transcript
    for_review: bool = False  # a table changed that no tool call accounts for


class TaskAudit(_Model, kw_only=True):
    instance_id: str
    ledger_status: str | None = None
    reason_code: str | None = None
    official_eval_status: str | None = None
    official_pass: bool | None = None  # the receipt's literal bool, only when completed
    task_dump: str | None = None  # relative to the run root when inside it
    activity: Activity = msgspec.field(default_factory=Activity)
    model_activity_observed: bool = False
    cost: Cost = msgspec.field(default_factory=Cost)
    models: list[str] = msgspec.field(default_factory=list)
    providers: list[str] = msgspec.field(default_factory=list)
    response_providers: list[str] = msgspec.field(default_factory=list)
    response_provider_coverage: Literal["observed_subset", "unavailable"] = "unavailable"
    capability_omissions: CapabilityOmissions = msgspec.field(default_factory=CapabilityOmissions)
    findings_total: int = 0
    findings_by_reason: dict[str, int] = msgspec.field(default_factory=dict)
    findings: list[Finding] = msgspec.field(default_factory=list)
    gaps_total: int = 0
    gaps_by_reason: dict[str, int] = msgspec.field(default_factory=dict)
    gaps: list[Gap] = msgspec.field(default_factory=list)
    eval_attempts: TaskEvalAttempts = msgspec.field(default_factory=TaskEvalAttempts)
    # The ledger row's own flags, as its `tampering` (kind, detail); None: a row written before
    # the host checked (not checked), or no row.
    ledger_tampering: list[LedgerTamper] | None = None
    tampering_seen: list[TamperSeen] = msgspec.field(default_factory=list)  # stored up to MAX_GAPS_PER_TASK
    tampering_seen_by_kind: dict[str, int] = msgspec.field(default_factory=dict)  # every one counted
    task_db: TaskDbAudit | None = None  # None: no task database was checked (no pg container, an older run)


class Totals(_Model, kw_only=True):
    tasks_with_findings: int = 0
    findings: int = 0
    findings_by_reason: dict[str, int] = msgspec.field(default_factory=dict)
    tasks_with_gaps: int = 0
    gaps: int = 0
    gaps_by_reason: dict[str, int] = msgspec.field(default_factory=dict)
    usage_records: int = 0
    token_bearing_usage_records: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    tool_calls: int = 0
    mcp_calls: int = 0
    mcp_error_calls: int = 0
    cost_known_usd: float = 0.0
    cost_complete: bool = False  # every task's cost is complete
    files_scanned: int = 0
    bytes_scanned: int = 0
    lines_scanned: int = 0


class RunEvalAttempts(_Model, kw_only=True):
    """Run-level eval facts. The diagnostic counters are denominators for disclosure only."""

    diagnostic_enabled: bool | None = None  # from the manifest's applied_config; None: unknown
    official_completed: int = 0
    official_declined: int = 0
    diagnostic_present: int = 0
    diagnostic_eligible: int = 0
    diagnostic_checked: int = 0  # outcome checks_passed or checks_failed
    diagnostic_outcomes: dict[str, int] = msgspec.field(default_factory=dict)
    diagnostic_ineligible_reasons: dict[str, int] = msgspec.field(default_factory=dict)  # ineligible/unavailable
    diagnostic_semantics: str = "residual_state_after_agent_stop_not_exact_cutoff"
    diagnostic_cap_sec: int = 900
    # Eligible diagnostics whose host-side shim record does not say the agent container was absent.
    diagnostic_without_host_absence: list[str] = msgspec.field(default_factory=list)
    eval_refusals: dict[str, str] = msgspec.field(default_factory=dict)  # instance_id -> refusal cause
    cleanup_proven: bool = False  # monitor.json finished is true
    stop_reason: str | None = None


class AuditReport(_Model, kw_only=True):
    schema_: Literal["cowork_adapter.audit.v1"] = msgspec.field(default=AUDIT_SCHEMA, name="schema")
    generated_at: str
    run_root: str
    scoring_authority: str = SCORING_AUTHORITY
    limitations: list[str] = msgspec.field(default_factory=lambda: list(LIMITATIONS))
    task_count: int = 0
    totals: Totals = msgspec.field(default_factory=Totals)
    run_gaps: list[Gap] = msgspec.field(default_factory=list)
    eval_attempts: RunEvalAttempts = msgspec.field(default_factory=RunEvalAttempts)
    tampering: Tampering | None = None  # None: an audit written before it looked for tampering
    task_db_for_review: list[str] = msgspec.field(
        default_factory=list
    )  # tasks whose database changed without a tool call
    tasks: list[TaskAudit] = msgspec.field(default_factory=list)

    def to_json(self) -> str:
        try:
            data = msgspec.json.encode(self)
        except UnicodeEncodeError:
            # A log may escape a lone surrogate (\\udcff); decoded, it has no UTF-8 form. Keep it visible
            # as its escape text rather than lose the report (rare: only then is the tree walked).
            data = msgspec.json.encode(_without_surrogates(msgspec.to_builtins(self)))
        return msgspec.json.format(data, indent=2).decode() + "\n"


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    return value


def read_report(data: bytes) -> AuditReport:
    """An audit.json's report, checked against these types (msgspec.ValidationError if not)."""
    return msgspec.json.decode(data, type=AuditReport)


def read_launcher_audit(run_root: Path) -> AuditReport | None:
    """The launcher's audit of `run_root`; None when the run has none.

    Raises OSError or msgspec errors (DecodeError, ValidationError) for a file that exists but
    cannot be read as an audit report: a reader must say so, never show it as "no findings".
    """
    path = audit_path_to_read(run_root)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return read_report(data)
