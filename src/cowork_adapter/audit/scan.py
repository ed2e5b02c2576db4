"""Streaming scan of one task dump's agent logs: counting, reference findings, gaps.

What a caller must know:
- Lines are read by audit.read (bounded memory; every non-empty line must be a JSON object,
  else a `malformed_line` gap at its line; the scan goes on). Each log has its row Struct: the
  fields a scanner reads, tool-call arguments kept as raw JSON text (msgspec.Raw).
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
                  usage when `type == "llm_usage"` (TaskScan.add_usage is the one rule for a record).
    progress, chat, supervisor: validated only; their content is not used.
- Row Structs are untracked by the cyclic garbage collector (gc=False): a row holds decoded JSON
  only, which can form no reference cycle, and tracking the millions a large audit decodes ran
  the collector 1,397 times over 1 GiB (51 times untracked).
- Findings come from tool-call arguments only (audit.rules). Arguments stay raw JSON text and
  are decoded only when a probe occurs in them (found by a multi-pattern search, audit.rules).
"""

from __future__ import annotations

import math
import os
import stat
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import reduce
from itertools import accumulate, compress, repeat
from operator import add, attrgetter, eq, is_, itemgetter
from pathlib import Path
from typing import Any, Literal

import msgspec

from ..container import safefile
from ..runroot.layout import ENGINE_EVENTS
from ..schemas.audit import (
    MAX_FINDINGS_PER_TASK,
    MAX_GAPS_PER_TASK,
    MAX_NAMES_PER_TASK,
    MAX_REFERENCES_PER_TASK,
)
from ..vocab import AuditFindingReason, AuditGapReason, TamperKind
from .read import Folder, RowReader, UnsafeEntry, iter_blocks, read_rows
from .rules import args_may_match, find_references, probe_hits, split_mcp_name


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


class UsageRow(msgspec.Struct, gc=False):
    """An events.jsonl row: its type and the usage fields of an llm_usage record (None when absent)."""

    type: Any = None
    prompt_tokens: Any = None
    completion_tokens: Any = None
    cached_tokens: Any = None
    cost: Any = None
    cost_known: Any = None
    cost_estimated: Any = None
    model: Any = None
    provider: Any = None
    response_provider: Any = None
    usage: Any = None


USAGE_FIELDS = UsageRow.__struct_fields__[1:]  # what a nested `usage` object may state instead
TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "cached_tokens")
# Field getters for whole columns of rows (map(getter, rows) runs without a Python loop).
_TYPE, _TOOL, _IS_ERROR, _ARGS = map(attrgetter, ("type", "tool", "is_error", "args"))
_USAGE, _COST, _COST_KNOWN, _COST_ESTIMATED = map(attrgetter, ("usage", "cost", "cost_known", "cost_estimated"))
_TOKEN_GETTERS = tuple(map(attrgetter, TOKEN_FIELDS))
_NAME_GETTERS = tuple(map(attrgetter, ("model", "provider", "response_provider")))


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
    usage_source: Literal["llm_usage_projection", "attempt_ledger"] = (
        "llm_usage_projection"  # "attempt_ledger" when usage came from usage_attempts.jsonl
    )
    files: int = 0
    bytes: int = 0
    lines: int = 0
    # What the audit itself saw against the evidence (TamperKind values, every one; the stored
    # examples capped): each unsafe-entry gap is one, and record names outside a dump's own place.
    tamper_kinds: list[str] = field(default_factory=list)
    tampering: list[dict[str, Any]] = field(default_factory=list)
    _tampered: set[tuple[str, str]] = field(default_factory=set)

    def tamper(self, kind: TamperKind, file: str, detail: str | None = None) -> None:
        """One flag per kind and file (a link seen in a listing and then refused by the read is one)."""
        if (kind.value, file) in self._tampered:
            return
        self._tampered.add((kind.value, file))
        self.tamper_kinds.append(kind.value)
        if len(self.tampering) < MAX_GAPS_PER_TASK:
            self.tampering.append({"kind": kind, "file": file, "detail": detail})

    def gap(self, reason: AuditGapReason, file: str | None, line: int | None = None, detail: str | None = None) -> None:
        if reason is AuditGapReason.UNSAFE_ENTRY:
            self.tamper(TamperKind.UNSAFE_ENTRY, file or "", detail)
        self.gaps_total += 1
        self.gaps_by_reason[reason.value] += 1
        if file is not None and file.endswith(USAGE_FILES) and reason in _EVENTS_COST_GAPS:
            self.events_gap = True
        if len(self.gaps) < MAX_GAPS_PER_TASK:
            self.gaps.append({"reason": reason, "file": file, "line": line, "detail": detail})

    def finding(
        self, reason: AuditFindingReason, file: str, line: int, index: int, tool: str, token: str, excerpt: str
    ) -> None:
        self.findings_total += 1
        self.findings_by_reason[reason.value] += 1
        if len(self.findings) < MAX_FINDINGS_PER_TASK:
            self.findings.append(
                {
                    "reason": reason,
                    "file": file,
                    "line": line,
                    "record_index": index,
                    "tool": tool,
                    "token": token,
                    "excerpt": excerpt,
                }
            )

    def add_usage(self, rec: Any, file: str, line: int) -> None:
        """One llm_usage record (a UsageRow, or anything with its fields), with every
        irregularity a gap at its line. A field the record leaves null is read from its nested
        `usage` object when that is a non-empty object."""
        values: tuple[Any, ...] = (
            rec.prompt_tokens,
            rec.completion_tokens,
            rec.cached_tokens,
            rec.cost,
            rec.cost_known,
            rec.cost_estimated,
            rec.model,
            rec.provider,
            rec.response_provider,
        )
        usage = rec.usage
        if isinstance(usage, dict) and usage:
            # USAGE_FIELDS names these nine first, then `usage` itself: zip stops at the nine.
            values = tuple(
                usage.get(name) if value is None else value for name, value in zip(USAGE_FIELDS, values, strict=False)
            )
        prompt, completion, cached, cost, known, estimated, model, provider, response = values
        self.usage_records += 1
        # Plain nonnegative ints (the usual record) skip _count; anything else takes its rule.
        if not (type(prompt) is int and prompt >= 0):
            prompt = _count(prompt)
        if not (type(completion) is int and completion >= 0):
            completion = _count(completion)
        if not (type(cached) is int and cached >= 0):
            cached = _count(cached)
        if prompt is None or completion is None or cached is None:
            for name, counted in zip(TOKEN_FIELDS, (prompt, completion, cached), strict=True):
                if counted is None:
                    self.gap(AuditGapReason.UNKNOWN_TOKENS, file, line, name)
            prompt, completion, cached = prompt or 0, completion or 0, cached or 0
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cached_tokens += cached
        if prompt + completion > 0:
            self.token_bearing += 1
        if not (type(cost) is float and 0.0 <= cost < math.inf):  # else a plain cost is its own reading
            cost = _money(cost)
        if cost is None or known is False:
            self.cost_unknown += 1
            self.gap(AuditGapReason.UNKNOWN_COST, file, line)
        else:
            self.cost_known_usd += cost
        if estimated is True:
            self.cost_estimated += 1
        # Names: non-empty strings, kept in first-seen order, at most MAX_NAMES_PER_TASK of each.
        for bucket, name in ((self.models, model), (self.providers, provider), (self.response_providers, response)):
            if isinstance(name, str) and name and name not in bucket and len(bucket) < MAX_NAMES_PER_TASK:
                bucket[name] = None

    def add_usage_rows(self, rows: list[Any], file: str, first: int, lines: Iterable[int]) -> None:
        """add_usage for each row in turn (at line `first` + its index in `lines`); a batch of
        regular records (see _add_regular) in a few C-level passes with the same result."""
        if not self._add_regular(rows):
            for row, line in zip(rows, lines, strict=True):
                self.add_usage(row, file, first + line)

    def _add_regular(self, rows: list[Any]) -> bool:
        """Add the records when every one is regular: no nested `usage`, token counts plain
        nonnegative ints, a plain finite nonnegative float cost not stated unknown, hashable
        names. Then add_usage would take its fast branches and report no gap, so the sums,
        counts and first-seen names come out the same. False, changing nothing, otherwise."""
        usages = list(map(_USAGE, rows))
        if usages.count(None) != len(usages):
            return False
        tokens = [list(map(get, rows)) for get in _TOKEN_GETTERS]
        costs = list(map(_COST, rows))
        for values in tokens:
            if set(map(type, values)) != {int} or min(values) < 0:
                return False
        if set(map(type, costs)) != {float} or not (min(costs) >= 0.0 and all(map(math.isfinite, costs))):
            return False
        if any(map(is_, map(_COST_KNOWN, rows), repeat(False))):
            return False
        try:  # distinct names in first-seen order; an unhashable one takes add_usage's own rule
            names = [list(dict.fromkeys(map(get, rows))) for get in _NAME_GETTERS]
        except TypeError:
            return False
        prompts, completions, cached = tokens
        self.usage_records += len(rows)
        self.prompt_tokens += sum(prompts)
        self.completion_tokens += sum(completions)
        self.cached_tokens += sum(cached)
        self.token_bearing += len(rows) - list(map(add, prompts, completions)).count(0)
        self.cost_known_usd = reduce(add, costs, self.cost_known_usd)  # row by row, as add_usage sums
        self.cost_estimated += sum(map(is_, map(_COST_ESTIMATED, rows), repeat(True)))
        for bucket, distinct in zip((self.models, self.providers, self.response_providers), names, strict=True):
            for name in distinct:
                if isinstance(name, str) and name and name not in bucket and len(bucket) < MAX_NAMES_PER_TASK:
                    bucket[name] = None
        return True

    def add_tool_calls(self, counts: Counter) -> None:
        """Count rows by their (type, tool, is_error is true) keys (see call_kind)."""
        for key, n in counts.items():
            call, _, split, failed = call_kind(key)
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

    def add_omission(self, file: str, line: int) -> None:
        self.omissions += 1
        if len(self.omission_refs) < MAX_REFERENCES_PER_TASK:
            self.omission_refs.append((file, line))


_CALL_KINDS: dict[tuple[Any, Any, bool], tuple[bool, str, tuple[str, str] | None, bool]] = {}
_CALL_KINDS_LIMIT = 4096  # distinct (type, tool, is_error) keys remembered: a run repeats a few dozen


def call_kind(key: tuple[Any, Any, bool]) -> tuple[bool, str, tuple[str, str] | None, bool]:
    """(is a tool call, tool name, its MCP (server, tool) or None, is_error is true) of a
    (type, tool, is_error is true) key."""
    kind = _CALL_KINDS.get(key)
    if kind is None:
        kind_value, tool, failed = key
        call = _is_call(kind_value, tool)
        name = tool if isinstance(tool, str) else ""
        kind = (call, name, split_mcp_name(name) if call else None, failed)
        if len(_CALL_KINDS) >= _CALL_KINDS_LIMIT:
            _CALL_KINDS.clear()
        _CALL_KINDS[key] = kind
    return kind


def _call_key(row: ToolRow) -> tuple[Any, Any, bool]:
    """A row's counting key. `is_error is True` and not the value itself: 1 and True are equal
    keys. An unhashable type or tool (a list, an object) is never "tool_call" or a string."""
    return (_hashable(row.type), _hashable(row.tool), row.is_error is True)


_EVENTS_COST_GAPS = frozenset(
    {
        AuditGapReason.MISSING_LOG,
        AuditGapReason.UNREADABLE_LOG,
        AuditGapReason.UNSAFE_ENTRY,
        AuditGapReason.MALFORMED_LINE,
        AuditGapReason.OVERSIZED_LINE,
    }
)


class ToolRow(msgspec.Struct, gc=False):
    """A tools.jsonl row: what counting reads, and the call's arguments as raw JSON text."""

    type: Any = None
    tool: Any = None
    is_error: Any = None
    args: msgspec.Raw = msgspec.Raw(b"null")


_TOOL_ROWS = RowReader(ToolRow)


def _keyed(rows: list[ToolRow], consume: Callable[[Iterable[Any]], Any]) -> Any:
    """consume(the rows' counting keys), the keys built column-wise without a Python loop, or
    row by row (see _call_key) when consuming them finds an unhashable type or tool."""
    try:
        return consume(
            zip(map(_TYPE, rows), map(_TOOL, rows), map(is_, map(_IS_ERROR, rows), repeat(True)), strict=True)
        )
    except TypeError:
        return consume(map(_call_key, rows))


def _listed_and_distinct(keys: Iterable[Any]) -> tuple[list[Any], set[Any]]:
    listed = list(keys)
    return listed, set(listed)


def scan_tools(path: str | Path, rel: str, scan: TaskScan, folder: Folder | None = None) -> None:
    """Count tool calls (MCP per server/tool, errors) and scan suspicious arguments."""
    index = 0  # record index: a call's position among this file's tool calls
    for block in iter_blocks(path, scan, rel, folder=folder):
        lines, rows = read_rows(block, _TOOL_ROWS, rel, scan)
        counts = _keyed(rows, Counter)
        scan.add_tool_calls(counts)
        # Arguments holding a probe: one search over the block's raw arguments joined by
        # newlines (no probe holds one, so no hit spans two calls' arguments, and each call's
        # arguments with a probe get a hit of their own), and a block without any (the usual
        # case) ends here.
        args = list(map(_ARGS, rows))
        hits = probe_hits(b"\n".join(args))
        if not hits:
            index += sum(n for key, n in counts.items() if call_kind(key)[0])
            continue
        ends = list(accumulate(len(arg) + 1 for arg in args))  # each call's end in the joined text
        with_probe = sorted({bisect_right(ends, start) for _, start, _ in hits})
        # Each row's kind and its record index (the tool calls before it), in C-level passes.
        keys, distinct = _keyed(rows, _listed_and_distinct)
        kinds = {key: call_kind(key) for key in distinct}
        row_kinds = list(map(kinds.__getitem__, keys))
        before = list(accumulate(map(itemgetter(0), row_kinds), initial=index))
        for position in with_probe:
            call, tool, _, _ = row_kinds[position]
            if call:
                _add_findings(scan, rel, block.first + lines[position], before[position], tool, rows[position].args)
        index = before[-1]


def _add_findings(scan: TaskScan, rel: str, line: int, record: int, tool: str, raw_args: msgspec.Raw) -> None:
    try:  # json.loads' reading, as every decision rests on; nesting bounded before parsing
        args = safefile.loads(bytes(raw_args))
    except ValueError:  # msgspec skipped a value json.loads refuses (too deep): nothing to match
        return
    # Probing the decoded strings drops hits from \u escapes of plain non-ASCII text.
    if not (args and args_may_match(args)):
        return
    for reason, token, excerpt in find_references(args, tool):
        scan.finding(reason, rel, line, record, tool, token, excerpt)


# The server's physical-attempt ledger, copied into <dump>/ouroboros/ beside events.jsonl.
ATTEMPTS_NAME = "usage_attempts.jsonl"
USAGE_FILES = (ENGINE_EVENTS, ATTEMPTS_NAME)
# Final states of an attempt that reached the provider: a request was sent. `reserved` and
# `released` attempts never were.
SENT_STATES = frozenset({"dispatched", "settled", "unresolved"})
_EVENT_ROWS = RowReader(UsageRow)


def scan_events(path: str | Path, rel: str, scan: TaskScan, folder: Folder | None = None) -> None:
    """Count usage records (tokens, cost, names) and capability-omission rows: usage from the
    attempt ledger beside `path` when there is one, else from llm_usage rows."""
    attempts = os.path.join(os.path.dirname(path), ATTEMPTS_NAME)  # strings: pathlib cost more per log
    if folder is not None:  # the listing says what stands there (a link counts: see _present)
        from_ledger = folder.kinds.get(ATTEMPTS_NAME, safefile.DIRECTORY) != safefile.DIRECTORY
    else:
        from_ledger = _present(attempts)
    for block in iter_blocks(path, scan, rel, folder=folder):
        lines, rows = read_rows(block, _EVENT_ROWS, rel, scan)  # every line is validated
        kinds = list(map(_TYPE, rows))
        try:
            distinct = set(kinds)
        except TypeError:  # an unhashable type (a list, an object): neither usage nor omission
            distinct = {kind for kind in kinds if isinstance(kind, str)}
        if any(isinstance(kind, str) and "omission" in kind for kind in distinct):
            for line, kind in zip(lines, kinds, strict=True):
                if isinstance(kind, str) and "omission" in kind:
                    scan.add_omission(rel, block.first + line)
        if not from_ledger and "llm_usage" in distinct:
            usage = list(map(eq, kinds, repeat("llm_usage")))  # == as a row-by-row test would use
            scan.add_usage_rows(list(compress(rows, usage)), rel, block.first, compress(lines, usage))
    if from_ledger:
        scan.usage_source = "attempt_ledger"
        attempts_rel = str(Path(rel).with_name(ATTEMPTS_NAME))
        try:
            scan_attempts(attempts, attempts_rel, scan, folder)
        except UnsafeEntry as exc:  # a link, FIFO, device or oversize file: never read, usage incomplete
            scan.gap(AuditGapReason.UNSAFE_ENTRY, attempts_rel, detail=exc.detail)
        except OSError as exc:  # unreadable after all: a gap, and the usage stays incomplete
            scan.gap(AuditGapReason.UNREADABLE_LOG, attempts_rel, detail=type(exc).__name__)


def _present(path: str) -> bool:
    """Whether anything stands at `path` (a link is not followed: whatever it is, the usage must
    come from it, and an unsafe one leaves the usage incomplete rather than counted twice)."""
    try:
        return not stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


class AttemptRow(msgspec.Struct, gc=False):
    """A usage_attempts.jsonl row (None when absent)."""

    kind: Any = None
    attempt_id: Any = None
    state: Any = None
    prompt_tokens: Any = None
    completion_tokens: Any = None
    cached_tokens: Any = None
    cost_usd: Any = None
    cost_final: Any = None
    model: Any = None
    provider: Any = None


_ATTEMPT_ROWS = RowReader(AttemptRow)


def scan_attempts(path: str | Path, rel: str, scan: TaskScan, folder: Folder | None = None) -> None:
    """One usage record per provider request: per `kind: attempt` id of the ledger, its last
    row (the ledger appends each state change) when that state says the request was sent.
    A settled attempt carries tokens and cost; a dispatched or unresolved one has neither
    (gaps: the request was sent, what it cost is unknown)."""
    last: dict[str, tuple[int, AttemptRow]] = {}
    for block in iter_blocks(path, scan, rel, folder=folder):
        for line, row in zip(*read_rows(block, _ATTEMPT_ROWS, rel, scan), strict=True):
            if row.kind == "attempt" and isinstance(row.attempt_id, str) and row.attempt_id:
                last[row.attempt_id] = (block.first + line, row)
    for line, row in sorted(last.values(), key=lambda item: item[0]):
        if not isinstance(row.state, str) or row.state not in SENT_STATES:
            continue
        settled = row.state == "settled"
        cost = row.cost_usd if settled else None
        scan.add_usage(
            UsageRow(
                prompt_tokens=row.prompt_tokens if settled else None,
                completion_tokens=row.completion_tokens if settled else None,
                cached_tokens=row.cached_tokens if settled else None,
                cost=cost,
                cost_known=cost is not None,
                cost_estimated=cost is not None and row.cost_final is not True,
                model=row.model,
                provider=row.provider,
            ),
            rel,
            line,
        )


class _Object(msgspec.Struct, gc=False):
    """Any JSON object (progress, chat, supervisor rows: their content is not used)."""


_OBJECTS = RowReader(_Object)


def scan_objects(path: str | Path, rel: str, scan: TaskScan, folder: Folder | None = None) -> None:
    """Every line a JSON object (progress, chat, supervisor: their content is not used)."""
    for block in iter_blocks(path, scan, rel, folder=folder):
        read_rows(block, _OBJECTS, rel, scan)


# Which scanner reads which log of <dump>/ouroboros/ (all five are expected; absence is a gap).
LOG_SCANNERS = (
    ("tools.jsonl", scan_tools),
    (ENGINE_EVENTS, scan_events),
    ("progress.jsonl", scan_objects),
    ("chat.jsonl", scan_objects),
    ("supervisor.jsonl", scan_objects),
)
