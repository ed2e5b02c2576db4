"""Streaming scan of one task dump's agent logs: counting, reference rules, gaps.

What a caller must know:
- Files are read in fixed-size binary chunks; no file is ever loaded whole. A line longer than
  MAX_LINE_BYTES is skipped (an `oversized_line` gap), so memory stays bounded by
  CHUNK_BYTES + MAX_LINE_BYTES whatever the file size.
- A line that is not a JSON object is a `malformed_line` gap with its 1-based line number; the
  scan goes on. Empty lines are ignored.
- Which lines are parsed (the documented counting rule):
    tools.jsonl   every line is parsed; a row counts as a tool call when its `type` is
                  "tool_call" (or it has no `type` but a string `tool`).
    events.jsonl  only lines containing `llm_usage` or `omission` are parsed; a row counts as
                  usage when `type == "llm_usage"`, as a capability omission when its `type`
                  contains "omission" (one per row). Other lines are framing-checked.
    progress, chat, supervisor: framing-checked only (starts with `{`, ends with `}`).
- Findings come only from tool-call arguments, unwrapped through dicts, lists, JSON-in-strings
  and shlex-split shell strings. A decoded argument string is matched and unwrapped only when
  it contains a probe (STR_PROBES): every rule's token contains one, and `\\u` / `\\/` catch
  escaped spellings inside JSON-in-strings.
- Database-client rules apply only to shell/code tools (`is_code_tool`). The benchmark's
  PostgreSQL MCP server is the sanctioned database route, so MCP tools count as code tools only
  when their server name says terminal or shell.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .schemas.audit import (
    MAX_FINDINGS_PER_TASK,
    MAX_GAPS_PER_TASK,
    MAX_NAMES_PER_TASK,
    MAX_REFERENCES_PER_TASK,
)
from .vocab import AuditFindingReason, AuditGapReason

CHUNK_BYTES = 1 << 20
MAX_LINE_BYTES = 16 << 20

# Raw-byte prefilter: every rule token below contains one of these (case as written in logs).
PROBES: tuple[bytes, ...] = (
    b"eval",  # evaluation/, eval_res.json, ouroboros_eval_
    b"groundtruth",
    b"diagnostic_",
    b"0717376",
    b"oolathlon",  # toolathlon / Toolathlon
    b"TOOLATHLON",
    b"psql",
    b"pgcli",
    b"psycopg",
    b"asyncpg",
    b"postgres://",
    b"postgresql://",
    b"PGPASSWORD",
    b"\\u",  # a JSON unicode escape could spell any token
    b"\\/",  # so could an escaped slash (postgres:\/\/)
)
# The same probes on decoded strings: a leaf is unwrapped and matched only when it has one.
STR_PROBES: tuple[str, ...] = tuple(p.decode() for p in PROBES)

_RULES: tuple[tuple[AuditFindingReason, re.Pattern[str]], ...] = (
    (
        AuditFindingReason.ANSWER_SOURCE_REFERENCE,
        re.compile(r"groundtruth_workspace|0717376/cowork_bench|toolathlon", re.I),
    ),
    (AuditFindingReason.EVALUATOR_REFERENCE, re.compile(r"(?<![\w.-])evaluation/(?:main\.py)?")),
    (
        AuditFindingReason.EVAL_RECORD_REFERENCE,
        re.compile(r"eval_res\.json|ouroboros_eval_\w*|ouroboros_diagnostic_\w*"),
    ),
)
_DB_RULE = re.compile(
    r"(?<![\w.-])(?:psql|pgcli)(?![\w-])"
    r"|(?<!\w)psycopg\d?(?![A-Za-z])"
    r"|(?<!\w)asyncpg(?!\w)"
    r"|(?<!\w)postgres(?:ql)?://"
    r"|(?<!\w)PGPASSWORD="
)
# Secrets the agent may have typed: masked before matching so no excerpt can carry them.
_SECRET_RULES = (
    (re.compile(r"(PGPASSWORD=)(?:'[^']*'|\"[^\"]*\"|\S+)"), r"\1***"),
    (re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@"), r"\1***@"),
)
_CODE_TOOL_MARKERS = (
    "run_command",
    "run_script",
    "start_service",
    "shell",
    "terminal",
    "python_execute",
    "execute",
    "bash",
)
EXCERPT_CONTEXT = 40  # characters each side of the match: at most 80 of context
MAX_UNWRAP_DEPTH = 4
MAX_SHLEX_CHARS = 200_000  # shlex is slow on huge strings; the raw string is still matched


def is_code_tool(name: str) -> bool:
    """Shell or code-execution tools, where a database client means bypassing the MCP server."""
    lowered = name.lower()
    if lowered.startswith("mcp_"):
        server = lowered[4:].split("__", 1)[0]
        return "terminal" in server or "shell" in server
    return any(marker in lowered for marker in _CODE_TOOL_MARKERS)


def split_mcp_name(name: str) -> tuple[str, str] | None:
    """`mcp_<server>__<tool>` -> (server, tool); None for a native tool."""
    if not name.startswith("mcp_") or "__" not in name[4:]:
        return None
    server, tool = name[4:].split("__", 1)
    return server, tool


def has_probe(text: str) -> bool:
    for probe in STR_PROBES:
        if probe in text:
            return True
    return False


# Made once: json.dumps with non-default options would build a new encoder on every call.
_ARGS_ENCODER = json.JSONEncoder(ensure_ascii=False, check_circular=False)


def args_may_match(args: Any) -> bool:
    """False only when no string inside `args` can hold a rule token (exact, and cheap: C-level).

    The arguments are re-serialised without ASCII escaping and probed once, instead of walking
    every leaf in Python. JSON escaping never splits a probe (probes hold no quote or control
    character, and an escaped backslash still contains a backslash-u or backslash-slash pair),
    so a probe-free serialisation means no key or string leaf holds a probe, and iter_leaves
    would yield nothing. Measured: probing the raw line instead is slower (long result previews).
    """
    try:
        text = _ARGS_ENCODER.encode(args)
    except (TypeError, ValueError):
        return True  # not expected from parsed JSON: take the full path
    return has_probe(text)


def iter_leaves(value: Any) -> Iterator[str]:
    """Every string inside `value` that holds a probe, unwrapping JSON-in-strings and shell strings.

    A string without a probe cannot contain a rule token (every token holds a probe, and JSON
    escapes are probes themselves), so it is skipped. Spellings split by shell quoting
    (`"ps"ql`) are out of scope: no finding does not prove a clean trace.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not has_probe(item):
                continue  # no token can hide in it: nothing to match, nothing to unwrap
            yield item
            if depth >= MAX_UNWRAP_DEPTH:
                continue
            text = item.strip()
            if text[:1] in ("{", "[", '"'):
                try:
                    inner = json.loads(text)
                except ValueError:
                    inner = None
                if isinstance(inner, (dict, list)) or (isinstance(inner, str) and inner != item):
                    stack.append((inner, depth + 1))
            if len(text) <= MAX_SHLEX_CHARS and len(text.split(maxsplit=1)) > 1:
                try:
                    words = shlex.split(text)
                except ValueError:  # unbalanced quotes: the raw string was matched already
                    words = []
                if len(words) > 1 or (words and words[0] != text):
                    stack.extend((w, depth + 1) for w in words)
        elif isinstance(item, dict):
            for key, val in item.items():
                stack.append((str(key), MAX_UNWRAP_DEPTH))  # keys are matched, not unwrapped
                stack.append((val, depth))
        elif isinstance(item, (list, tuple)):
            stack.extend((x, depth) for x in item)


def mask_secrets(text: str) -> str:
    for pattern, replacement in _SECRET_RULES:
        if pattern.search(text):
            text = pattern.sub(replacement, text)
    return text


def _excerpt(text: str, start: int, end: int) -> str:
    lo = max(0, start - EXCERPT_CONTEXT)
    hi = min(len(text), end + EXCERPT_CONTEXT)
    piece = text[lo:hi]
    return "".join(c if c.isprintable() else " " for c in piece)


def find_references(args: Any, tool: str) -> list[tuple[AuditFindingReason, str, str]]:
    """(reason, matched token, excerpt) for each distinct reference in one call's arguments."""
    rules = list(_RULES)
    if is_code_tool(tool):
        rules.append((AuditFindingReason.DIRECT_DATABASE_ACCESS, _DB_RULE))
    seen: set[tuple[str, str]] = set()
    out: list[tuple[AuditFindingReason, str, str]] = []
    for leaf in iter_leaves(args):
        text = mask_secrets(leaf)
        for reason, pattern in rules:
            for match in pattern.finditer(text):
                key = (reason.value, match.group(0).lower())
                if key in seen:
                    continue
                seen.add(key)
                out.append((reason, match.group(0), _excerpt(text, match.start(), match.end())))
    return out


def _count(value: Any) -> int | None:
    """A stated token count: a nonnegative finite number (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return int(value) if value >= 0 else None


def _money(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


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
    mcp_servers: dict[str, list[Any]] = field(default_factory=dict)  # server -> [calls, errors, Counter]
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
    files: int = 0
    bytes: int = 0
    lines: int = 0

    def gap(self, reason: AuditGapReason, file: str | None, line: int | None = None, detail: str | None = None) -> None:
        self.gaps_total += 1
        self.gaps_by_reason[reason.value] += 1
        if file is not None and file.endswith("events.jsonl") and reason in _EVENTS_COST_GAPS:
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

    def add_usage(self, rec: dict[str, Any], file: str, line: int) -> None:
        usage = rec.get("usage")
        if isinstance(usage, dict) and usage:

            def stated(name: str) -> Any:
                value = rec.get(name)
                return usage.get(name) if value is None else value
        else:
            stated = rec.get  # the common flat row: no nested usage to fall back on

        self.usage_records += 1
        counts = {}
        for name in ("prompt_tokens", "completion_tokens", "cached_tokens"):
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
        for name, bucket in (("model", self.models), ("provider", self.providers),
                             ("response_provider", self.response_providers)):
            value = stated(name)
            if isinstance(value, str) and value and len(bucket) < MAX_NAMES_PER_TASK:
                bucket[value] = None

    def add_tool_call(self, rec: dict[str, Any]) -> str:
        self.tool_calls += 1
        tool = rec.get("tool")
        tool = tool if isinstance(tool, str) else ""
        split = split_mcp_name(tool)
        if split is not None:
            self.mcp_calls += 1
            failed = rec.get("is_error") is True
            self.mcp_errors += failed
            server = self.mcp_servers.get(split[0])
            if server is None:
                server = self.mcp_servers[split[0]] = [0, 0, Counter()]
            server[0] += 1
            server[1] += failed
            server[2][split[1]] += 1
        return tool

    def add_omission(self, file: str, line: int) -> None:
        self.omissions += 1
        if len(self.omission_refs) < MAX_REFERENCES_PER_TASK:
            self.omission_refs.append((file, line))


_EVENTS_COST_GAPS = frozenset(
    {AuditGapReason.MISSING_LOG, AuditGapReason.UNREADABLE_LOG,
     AuditGapReason.MALFORMED_LINE, AuditGapReason.OVERSIZED_LINE}
)


def iter_blocks(path: Path, scan: TaskScan, rel: str) -> Iterator[tuple[int, bytes]]:
    """(first line number, block of whole lines without its final newline), streamed.

    Oversized lines are reported as gaps here and never yielded. OSError propagates.
    """
    lineno = 1
    carry = b""
    skipping = False  # inside an oversized line: drop bytes up to its newline
    with open(path, "rb", buffering=0) as handle:
        while True:
            chunk = handle.read(CHUNK_BYTES)
            if not chunk:
                break
            scan.bytes += len(chunk)
            if skipping:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                chunk = chunk[newline + 1:]
                skipping = False
            buf = carry + chunk if carry else chunk
            cut = buf.rfind(b"\n")
            if cut < 0:
                if len(buf) > MAX_LINE_BYTES:
                    scan.gap(AuditGapReason.OVERSIZED_LINE, rel, lineno)
                    lineno += 1
                    carry, skipping = b"", True
                else:
                    carry = buf
                continue
            block, carry = buf[:cut], buf[cut + 1:]
            yield lineno, block
            lineno += block.count(b"\n") + 1
        if skipping:
            pass  # the oversized final line was reported when it crossed the bound
        elif carry:
            yield lineno, carry
    scan.lines += lineno - 1 + (1 if carry and not skipping else 0)


def _framed(line: bytes) -> bool:
    stripped = line.strip()
    return stripped.startswith(b"{") and stripped.endswith(b"}")


_SCAN_ONCE = json.JSONDecoder().scan_once  # the same configuration json.loads uses by default
_JSON_WS = json.decoder.WHITESPACE


def _parse(line: bytes) -> dict[str, Any] | None:
    """The line as a JSON object, else None: exactly json.loads' answer, with less overhead.

    A line starting `{` with a nonzero second byte is what json.loads decodes as UTF-8
    (surrogatepass) with no leading whitespace; that case goes straight to the C scanner.
    Anything else (BOMs, UTF-16/32 guesses, leading blanks) takes json.loads itself.
    """
    if line[:1] == b"{" and line[1:2] != b"\x00":
        try:
            text = line.decode("utf-8", "surrogatepass")
            value, end = _SCAN_ONCE(text, 0)
        except (ValueError, StopIteration):  # includes UnicodeDecodeError
            return None
        if end != len(text) and _JSON_WS.match(text, end).end() != len(text):
            return None  # extra data after the object
        return value if isinstance(value, dict) else None
    try:
        value = json.loads(line)
    except ValueError:  # includes UnicodeDecodeError
        return None
    return value if isinstance(value, dict) else None


def scan_tools(path: Path, rel: str, scan: TaskScan) -> None:
    """Count tool calls (MCP per server/tool, errors) and scan suspicious arguments."""
    index = 0
    for first, block in iter_blocks(path, scan, rel):
        for offset, line in enumerate(block.split(b"\n")):
            if not line or line == b"\r":
                continue
            rec = _parse(line)
            if rec is None:
                scan.gap(AuditGapReason.MALFORMED_LINE, rel, first + offset)
                continue
            kind = rec.get("type")
            if kind != "tool_call" and not (kind is None and isinstance(rec.get("tool"), str)):
                continue
            tool = scan.add_tool_call(rec)
            # Measured: probing decoded argument strings beats probing the raw line, which
            # carries the result preview and whose \u escapes (any non-ASCII) defeat a prefilter.
            args = rec.get("args")
            if args and args_may_match(args):
                for reason, token, excerpt in find_references(args, tool):
                    scan.finding(reason, rel, first + offset, index, tool, token, excerpt)
            index += 1


def scan_events(path: Path, rel: str, scan: TaskScan) -> None:
    """Count llm_usage records (tokens, cost, names) and capability-omission rows."""
    for first, block in iter_blocks(path, scan, rel):
        if b"llm_usage" not in block and b"omission" not in block:
            _check_framing(block, first, rel, scan)
            continue
        for offset, line in enumerate(block.split(b"\n")):
            if not line or line == b"\r":
                continue
            if b"llm_usage" in line or b"omission" in line:
                rec = _parse(line)
                if rec is None:
                    scan.gap(AuditGapReason.MALFORMED_LINE, rel, first + offset)
                    continue
                kind = rec.get("type")
                if kind == "llm_usage":
                    scan.add_usage(rec, rel, first + offset)
                elif isinstance(kind, str) and "omission" in kind:
                    scan.add_omission(rel, first + offset)
            elif not _framed(line):
                scan.gap(AuditGapReason.MALFORMED_LINE, rel, first + offset)


def _check_framing(block: bytes, first: int, rel: str, scan: TaskScan) -> None:
    # Fast path in C: every line starts with '{' and ends with '}' iff both counts equal the lines.
    lines = block.count(b"\n") + 1
    opens = block.startswith(b"{") + block.count(b"\n{")
    closes = block.endswith(b"}") + block.count(b"}\n")
    if opens == lines and closes == lines:
        return
    for offset, line in enumerate(block.split(b"\n")):
        if line and line != b"\r" and not _framed(line):
            scan.gap(AuditGapReason.MALFORMED_LINE, rel, first + offset)


def scan_framed(path: Path, rel: str, scan: TaskScan) -> None:
    """Framing check only (progress, chat, supervisor): their content is not used by the audit."""
    for first, block in iter_blocks(path, scan, rel):
        _check_framing(block, first, rel, scan)


# Which scanner reads which log of <dump>/ouroboros/ (all five are expected; absence is a gap).
LOG_SCANNERS = (
    ("tools.jsonl", scan_tools),
    ("events.jsonl", scan_events),
    ("progress.jsonl", scan_framed),
    ("chat.jsonl", scan_framed),
    ("supervisor.jsonl", scan_framed),
)
