"""Streaming scan of one task dump's agent logs: counting, reference findings, gaps.

What a caller must know:
- Lines are read by audit_lines (bounded memory; every non-empty line must be a JSON object,
  else a `malformed_line` gap at its line; the scan goes on).
- Counting rules:
    tools.jsonl   a row counts as a tool call when its `type` is "tool_call" (or it has no
                  `type` but a string `tool`); MCP calls (`mcp_<server>__<tool>`) are counted
                  per server and tool, with `is_error: true` as an error.
    events.jsonl  a row counts as a capability omission when its `type` contains "omission"
                  (one per row). Usage: when the server's physical-attempt ledger was copied
                  beside it (usage_attempts.jsonl, Ouroboros 6.97+), each provider request is one
                  usage record there (see scan_attempts) and llm_usage rows are validated only:
                  they are a projection that misses some request kinds (capability probes,
                  safety checks without an event queue...). Without that file, a row counts as
                  usage when `type == "llm_usage"`.
    progress, chat, supervisor: validated only; their content is not used.
- Findings come from tool-call arguments only (audit_rules). Arguments stay raw JSON bytes and
  are decoded only when a probe occurs in them.
- Regular usage records (flat, plain counts and cost, no escapes) are summed in C (_jsonl.usage);
  every other record goes through TaskScan.add_usage, so each irregularity is a gap at its line.
"""

from __future__ import annotations

import json
import math
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from .audit_lines import Block, decode_raw, iter_blocks, raw_rows, tally_rows, usage_rows
from .audit_rules import PROBES, args_may_match, find_references, split_mcp_name
from .schemas.audit import (
    MAX_FINDINGS_PER_TASK,
    MAX_GAPS_PER_TASK,
    MAX_NAMES_PER_TASK,
    MAX_REFERENCES_PER_TASK,
)
from .vocab import AuditFindingReason, AuditGapReason


def _count(value: Any) -> int | None:
    """A stated token count: a nonnegative finite number (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return int(value) if value >= 0 else None


def _money(value: Any) -> float | None:
    """A stated cost: a nonnegative finite number (an int too large for a float is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


class UsageRow(NamedTuple):
    """The usage fields of one llm_usage record (None when absent)."""

    prompt_tokens: Any
    completion_tokens: Any
    cached_tokens: Any
    cost: Any
    cost_known: Any
    cost_estimated: Any
    model: Any
    provider: Any
    response_provider: Any
    usage: Any


TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "cached_tokens")
NAME_FIELDS = ("model", "provider", "response_provider")


def _hashable(value: Any) -> Any:
    """Decoded JSON lists and dicts are unhashable; they are never None, "tool_call" or a string."""
    try:
        hash(value)
    except TypeError:
        return ()
    return value


def _is_call(kind: Any, tool: Any) -> bool:
    return kind == "tool_call" or (kind is None and isinstance(tool, str))


@dataclass
class TaskScan:
    """Mutable per-task accumulator. Counts are exact; stored examples are capped."""

    usage_records: int = 0
    token_bearing: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    tool_calls: int = 0
    mcp_calls: int = 0
    mcp_errors: int = 0
    mcp_servers: dict[str, list[Any]] = field(default_factory=dict)  # server -> [calls, errors, {tool: calls}]
    cost_known_usd: float = 0.0
    cost_unknown: int = 0
    cost_estimated: int = 0
    models: dict[str, None] = field(default_factory=dict)  # insertion-ordered sets
    providers: dict[str, None] = field(default_factory=dict)
    response_providers: dict[str, None] = field(default_factory=dict)
    omissions: int = 0
    omission_refs: list[tuple[str, int]] = field(default_factory=list)
    findings_total: int = 0
    findings_by_reason: Counter = field(default_factory=Counter)
    findings: list[dict[str, Any]] = field(default_factory=list)
    gaps_total: int = 0
    gaps_by_reason: Counter = field(default_factory=Counter)
    gaps: list[dict[str, Any]] = field(default_factory=list)
    events_gap: bool = False
    usage_source: str = "llm_usage_projection"  # "attempt_ledger" when usage came from usage_attempts.jsonl
    files: int = 0
    bytes: int = 0
    lines: int = 0

    def gap(self, reason: AuditGapReason, file: str | None, line: int | None = None, detail: str | None = None) -> None:
        self.gaps_total += 1
        self.gaps_by_reason[reason.value] += 1
        if file is not None and file.endswith(USAGE_FILES) and reason in _EVENTS_COST_GAPS:
            self.events_gap = True
        if len(self.gaps) < MAX_GAPS_PER_TASK:
            self.gaps.append({"reason": reason, "file": file, "line": line, "detail": detail})

    def finding(self, reason: AuditFindingReason, file: str, line: int, index: int, tool: str, token: str, excerpt: str) -> None:
        self.findings_total += 1
        self.findings_by_reason[reason.value] += 1
        if len(self.findings) < MAX_FINDINGS_PER_TASK:
            self.findings.append(
                {"reason": reason, "file": file, "line": line, "record_index": index,
                 "tool": tool, "token": token, "excerpt": excerpt}
            )

    def add_usage(self, rec: UsageRow, file: str, line: int) -> None:
        """One llm_usage record, with every irregularity a gap at its line."""
        usage = rec.usage
        if isinstance(usage, dict) and usage:

            def stated(name: str) -> Any:
                value = getattr(rec, name)
                return usage.get(name) if value is None else value
        else:

            def stated(name: str) -> Any:
                return getattr(rec, name)

        self.usage_records += 1
        counts = {}
        for name in TOKEN_FIELDS:
            counts[name] = _count(stated(name))
            if counts[name] is None:
                self.gap(AuditGapReason.UNKNOWN_TOKENS, file, line, name)
        self.prompt_tokens += counts["prompt_tokens"] or 0
        self.completion_tokens += counts["completion_tokens"] or 0
        self.cached_tokens += counts["cached_tokens"] or 0
        if (counts["prompt_tokens"] or 0) + (counts["completion_tokens"] or 0) > 0:
            self.token_bearing += 1
        cost = _money(stated("cost"))
        if cost is None or stated("cost_known") is False:
            self.cost_unknown += 1
            self.gap(AuditGapReason.UNKNOWN_COST, file, line)
        else:
            self.cost_known_usd += cost
        if stated("cost_estimated") is True:
            self.cost_estimated += 1
        for which, name in enumerate(NAME_FIELDS):
            self.add_name(which, stated(name))

    def add_name(self, which: int, value: Any) -> None:
        """A model (which=0), provider (1) or response provider (2) name: non-empty strings are
        kept in first-seen order, at most MAX_NAMES_PER_TASK of each."""
        bucket = (self.models, self.providers, self.response_providers)[which]
        if isinstance(value, str) and value and len(bucket) < MAX_NAMES_PER_TASK:
            bucket[value] = None

    def add_usage_sums(self, sums: tuple[int, int, int, int, int, int, float]) -> None:
        """Regular llm_usage records summed in C (see _jsonl.usage): add_usage's counts for
        them, which note no gap."""
        records, bearing, prompt, completion, cached, estimated, cost = sums
        self.usage_records += records
        self.token_bearing += bearing
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cached_tokens += cached
        self.cost_estimated += estimated
        self.cost_known_usd += cost

    def add_tool_calls(self, counts: dict[bytes, int]) -> dict[bytes, tuple[bool, str]]:
        """Count rows by their raw type, tool and is_error texts (joined by newlines).

        Returns, per joined text, whether such a row is a tool call and its tool name ("" when
        the name is not a string)."""
        decoded: dict[bytes, tuple[bool, str]] = {}
        for raw, n in counts.items():
            call, name, split, failed = _call_kind(raw)
            decoded[raw] = (call, name)
            if not call:
                continue
            self.tool_calls += n
            if split is None:
                continue
            self.mcp_calls += n
            self.mcp_errors += n * failed
            server = self.mcp_servers.get(split[0])
            if server is None:
                server = self.mcp_servers[split[0]] = [0, 0, {}]
            server[0] += n
            server[1] += n * failed
            server[2][split[1]] = server[2].get(split[1], 0) + n
        return decoded

    def add_omission(self, file: str, line: int) -> None:
        self.omissions += 1
        if len(self.omission_refs) < MAX_REFERENCES_PER_TASK:
            self.omission_refs.append((file, line))


_CALL_KINDS: dict[bytes, tuple[bool, str, tuple[str, str] | None, bool]] = {}
_CALL_KINDS_LIMIT = 4096  # distinct (type, tool, is_error) texts of at most 256 bytes remembered


def _call_kind(raw: bytes) -> tuple[bool, str, tuple[str, str] | None, bool]:
    """(is a tool call, tool name, its MCP (server, tool) or None, is_error is true) of a joined
    raw (type, tool, is_error) text; remembered, as a run repeats a few dozen of them."""
    kind = _CALL_KINDS.get(raw)
    if kind is None:
        kind_value, tool, failed = map(decode_raw, raw.split(b"\n"))
        call = _is_call(_hashable(kind_value), tool)
        name = tool if isinstance(tool, str) else ""
        kind = (call, name, split_mcp_name(name) if call else None, failed is True)
        if len(raw) <= 256:  # about a megabyte at most
            if len(_CALL_KINDS) >= _CALL_KINDS_LIMIT:
                _CALL_KINDS.clear()
            _CALL_KINDS[raw] = kind
    return kind


_EVENTS_COST_GAPS = frozenset(
    {AuditGapReason.MISSING_LOG, AuditGapReason.UNREADABLE_LOG,
     AuditGapReason.MALFORMED_LINE, AuditGapReason.OVERSIZED_LINE}
)

TOOL_KEYS = (b"type", b"tool", b"is_error", b"args")  # args last: the probe sieve reads it


def scan_tools(path: str | Path, rel: str, scan: TaskScan) -> None:
    """Count tool calls (MCP per server/tool, errors) and scan suspicious arguments."""
    index = 0  # record index: a call's position among this file's tool calls
    for block in iter_blocks(path, scan, rel):
        counts, hits = tally_rows(block, TOOL_KEYS, PROBES, rel, scan)  # args only with a probe
        calls = scan.add_tool_calls(counts)
        for line, offset, joined, raw_args in hits:
            call, tool = calls[joined]
            if not call:
                continue
            args = json.loads(raw_args)
            # Probing the decoded strings drops hits from \u escapes of plain non-ASCII text.
            if not (args and args_may_match(args)):
                continue
            references = find_references(args, tool)
            if not references:
                continue
            record = index + _calls_before(block, offset, calls)
            for reason, token, excerpt in references:
                scan.finding(reason, rel, block.first + line, record, tool, token, excerpt)
        index += sum(n for joined, n in counts.items() if calls[joined][0])


def _calls_before(block: Block, offset: int, calls: dict[bytes, tuple[bool, str]]) -> int:
    """Tool calls on the block's lines before byte `offset` (a finding's record index; rare)."""
    if offset == 0:
        return 0
    prefix = Block(block.first, bytes(block.data[:offset - 1]))  # without the newline before it
    counts, _ = tally_rows(prefix, TOOL_KEYS, (), "", TaskScan())  # its gaps were noted already
    return sum(n for joined, n in counts.items() if calls[joined][0])


USAGE_KEYS = (b"type", *(name.encode() for name in UsageRow._fields))
# The server's physical-attempt ledger, copied into <dump>/ouroboros/ beside events.jsonl.
ATTEMPTS_NAME = "usage_attempts.jsonl"
USAGE_FILES = ("events.jsonl", ATTEMPTS_NAME)
ATTEMPT_KEYS = (b"kind", b"attempt_id", b"state", b"prompt_tokens", b"completion_tokens", b"cached_tokens",
                b"cost_usd", b"cost_final", b"model", b"provider")
# Final states of an attempt that reached the provider: a request was sent. `reserved` and
# `released` attempts never were.
SENT_STATES = frozenset({"dispatched", "settled", "unresolved"})


def scan_events(path: str | Path, rel: str, scan: TaskScan) -> None:
    """Count usage records (tokens, cost, names) and capability-omission rows: usage from the
    attempt ledger beside `path` when there is one, else from llm_usage rows."""
    attempts = Path(path).with_name(ATTEMPTS_NAME)
    from_ledger = attempts.is_file()
    for block in iter_blocks(path, scan, rel):
        # Regular usage records come back summed; the other lines whose raw type mentions
        # llm_usage or omission as rows. Every line is validated.
        sums, names, rows = usage_rows(block, USAGE_KEYS, (b"llm_usage", b"omission"), MAX_NAMES_PER_TASK,
                                       rel, scan)
        if sums is not None and not from_ledger:
            scan.add_usage_sums(sums)
        sightings = deque(() if from_ledger else names)  # first sightings of names, merged with rows by line
        for line, raw_kind, *raw_fields in rows:
            _add_names_before(scan, sightings, line)
            kind = decode_raw(raw_kind)
            if kind == "llm_usage":
                if not from_ledger:
                    scan.add_usage(UsageRow._make(map(decode_raw, raw_fields)), rel, block.first + line)
            elif isinstance(kind, str) and "omission" in kind:
                scan.add_omission(rel, block.first + line)
        _add_names_before(scan, sightings, math.inf)
    if from_ledger:
        scan.usage_source = "attempt_ledger"
        attempts_rel = str(Path(rel).with_name(ATTEMPTS_NAME))
        try:
            scan_attempts(attempts, attempts_rel, scan)
        except OSError as exc:  # unreadable after all: a gap, and the usage stays incomplete
            scan.gap(AuditGapReason.UNREADABLE_LOG, attempts_rel, detail=type(exc).__name__)


def scan_attempts(path: str | Path, rel: str, scan: TaskScan) -> None:
    """One usage record per provider request: per `kind: attempt` id of the ledger, its last
    row (the ledger appends each state change) when that state says the request was sent.
    A settled attempt carries tokens and cost; a dispatched or unresolved one has neither
    (gaps: the request was sent, what it cost is unknown)."""
    last: dict[str, tuple[int, tuple[Any, ...]]] = {}
    for block in iter_blocks(path, scan, rel):
        for line, *raw in raw_rows(block, ATTEMPT_KEYS, (), rel, scan):
            kind, attempt_id, *fields = map(decode_raw, raw)
            if kind == "attempt" and isinstance(attempt_id, str) and attempt_id:
                last[attempt_id] = (block.first + line, tuple(fields))
    for line, (state, prompt, completion, cached, cost, final, model, provider) in sorted(last.values()):
        if state not in SENT_STATES:
            continue
        if state != "settled":
            prompt = completion = cached = cost = None
        scan.add_usage(UsageRow(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached,
                                cost=cost, cost_known=cost is not None,
                                cost_estimated=cost is not None and final is not True,
                                model=model, provider=provider, response_provider=None, usage=None),
                       rel, line)


def _add_names_before(scan: TaskScan, sightings: deque[tuple[int, int, bytes]], line: float) -> None:
    """Add the names first sighted on lines before `line`, so first-seen order holds."""
    while sightings and sightings[0][0] < line:
        _, which, raw = sightings.popleft()
        scan.add_name(which, decode_raw(raw))


def scan_objects(path: str | Path, rel: str, scan: TaskScan) -> None:
    """Every line a JSON object (progress, chat, supervisor: their content is not used)."""
    for block in iter_blocks(path, scan, rel):
        raw_rows(block, (), (), rel, scan)


# Which scanner reads which log of <dump>/ouroboros/ (all five are expected; absence is a gap).
LOG_SCANNERS = (
    ("tools.jsonl", scan_tools),
    ("events.jsonl", scan_events),
    ("progress.jsonl", scan_objects),
    ("chat.jsonl", scan_objects),
    ("supervisor.jsonl", scan_objects),
)
