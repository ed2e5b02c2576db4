"""The audit's reference rules: which tool-call arguments point at answers, graders or the database.

Pure logic over decoded arguments. What a caller must know:
- Findings come only from tool-call arguments, unwrapped through dicts, lists, JSON-in-strings
  and shlex-split shell strings. A decoded string is matched and unwrapped only when it holds a
  probe (PROBES): every rule's token contains a probe, and the escapes that could spell one of a
  token's (ASCII) characters, `\\u0000`-`\\u007f` and `\\/`, are probes too, so the same probes
  also sift raw argument bytes before anything is decoded (audit.scan).
- Database-client rules apply only to shell/code tools (`is_code_tool`). The benchmark's
  PostgreSQL MCP server is the sanctioned database route, so MCP tools count as code tools only
  when their server name says terminal or shell.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from typing import Any

import ahocorasick_rs

from ..container import safefile
from ..vocab import AuditFindingReason

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
    # A JSON escape could spell a token's character: every token is ASCII, so only \u0000-\u007f
    # (escapes of non-ASCII text, common in logs written with ensure_ascii, cannot).
    *(b"\\u00" + bytes([digit]) for digit in b"01234567"),
    b"\\/",  # an escaped slash (postgres:\/\/)
)
# Leftmost-first matching lets the library use its vectorised prefilter (several times faster
# than standard matching here; the DFA is small for 22 probes); any occurrence still yields a match.
_PROBE_SEARCH = ahocorasick_rs.BytesAhoCorasick(
    list(PROBES), matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_FIRST, implementation=ahocorasick_rs.Implementation.DFA
)


# probe_hits(bytes-like) -> [(probe index, start, end)] of non-overlapping probe occurrences:
# empty exactly when it holds no probe (one pass, whatever the number of probes).
probe_hits = _PROBE_SEARCH.find_matches_as_indexes


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
    return any(probe in text for probe in STR_PROBES)


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

    A string without a probe cannot contain a rule token (every token holds a probe, and the JSON
    escapes that could spell one are probes themselves), so it is skipped. Spellings split by shell quoting
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
                    inner = safefile.loads(text)  # an agent's text: nesting bounded before parsing
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
