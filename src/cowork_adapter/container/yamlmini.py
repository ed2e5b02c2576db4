"""Read the MCP server yaml files: PyYAML when the image has it, else a small subset reader.

The subset covers what configs/mcp_servers/*.yaml use: block mappings and sequences (a sequence
item may open a mapping), plain/single/double-quoted scalars, flow lists and maps of scalars,
`|`/`>` block scalars, comments, booleans, null and numbers. Anything else raises YamlError.
"""

from __future__ import annotations

import json
import re
from typing import Any

_INT = re.compile(r"^[-+]?[0-9]+$")
_FLOAT = re.compile(r"^[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$")


class YamlError(ValueError):
    pass


def load_yaml(text: str) -> Any:
    """The document in `text` (PyYAML's safe_load when importable)."""
    try:
        import yaml
    except ImportError:
        return parse_subset(text)
    return yaml.safe_load(text)


def _strip_comment(line: str) -> str:
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _scalar(text: str) -> Any:
    s = text.strip()
    if s == "" or s in ("~", "null", "Null", "NULL"):
        return None
    if s[0] == '"':
        if not s.endswith('"') or len(s) < 2:
            raise YamlError(f"unterminated string: {s}")
        return json.loads(s)
    if s[0] == "'":
        if not s.endswith("'") or len(s) < 2:
            raise YamlError(f"unterminated string: {s}")
        return s[1:-1].replace("''", "'")
    if s[0] == "[" or s[0] == "{":
        return _flow(s)
    if s in ("true", "True", "TRUE"):
        return True
    if s in ("false", "False", "FALSE"):
        return False
    if _INT.match(s):
        return int(s)
    if _FLOAT.match(s):
        return float(s)
    return s


def _split_flow(body: str) -> list[str]:
    parts, depth, quote, cur = [], 0, "", ""
    for ch in body:
        if quote:
            cur += ch
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts]


def _flow(s: str) -> Any:
    closing = "]" if s[0] == "[" else "}"
    if not s.endswith(closing):
        raise YamlError(f"unterminated flow collection: {s}")
    items = _split_flow(s[1:-1])
    if closing == "]":
        return [_scalar(p) for p in items]
    out = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep:
            raise YamlError(f"flow mapping item without a colon: {item}")
        out[_scalar(key)] = _scalar(value)
    return out


def _key_value(text: str) -> tuple[Any, str] | None:
    """Split `key: value` (key may be quoted); None when `text` is not a mapping entry."""
    m = re.match(r"""^("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^'"\[\]{}#,][^#]*?)\s*:(\s+|$)(.*)$""", text)
    if not m:
        return None
    return _scalar(m.group(1)), m.group(3)


def parse_subset(text: str) -> Any:
    """Parse the supported YAML subset (see the module docstring)."""
    lines = []
    raw_lines = text.splitlines()
    for raw in raw_lines:
        if raw.strip() in ("---", "..."):
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YamlError("tabs in indentation")
        lines.append(raw)
    pos = [0]

    def significant(i: int) -> int:
        while i < len(lines) and not _strip_comment(lines[i]).strip():
            i += 1
        return i

    def indent_of(line: str) -> int:
        return len(line) - len(line.lstrip(" "))

    def block_scalar(style: str, parent_indent: int) -> str:
        collected = []
        while pos[0] < len(lines):
            line = lines[pos[0]]
            if line.strip() and indent_of(line) <= parent_indent:
                break
            collected.append(line)
            pos[0] += 1
        while collected and not collected[-1].strip():
            collected.pop()
        width = min((indent_of(ln) for ln in collected if ln.strip()), default=0)
        body = [ln[width:] for ln in collected]
        joined = "\n".join(body) if style.startswith("|") else " ".join(b for b in body if b)
        return joined if style.endswith("-") else joined + "\n"

    def value_after(rest: str, indent: int) -> Any:
        rest = _strip_comment(rest).strip()
        if rest in ("|", "|-", ">", ">-"):
            return block_scalar(rest, indent)
        if rest:
            return _scalar(rest)
        nxt = significant(pos[0])
        if nxt < len(lines):
            child = indent_of(lines[nxt])
            starts_seq = lines[nxt].lstrip().startswith("- ") or lines[nxt].strip() == "-"
            if child > indent or (child == indent and starts_seq):
                pos[0] = nxt
                return node(child)
        return None

    def node(indent: int) -> Any:
        pos[0] = significant(pos[0])
        first = _strip_comment(lines[pos[0]]).strip()
        if first.startswith("- ") or first == "-":
            return sequence(indent)
        return mapping(indent)

    def sequence(indent: int) -> list:
        out: list[Any] = []
        while True:
            pos[0] = significant(pos[0])
            if pos[0] >= len(lines):
                return out
            line = lines[pos[0]]
            stripped = _strip_comment(line).strip()
            if indent_of(line) != indent or not (stripped.startswith("- ") or stripped == "-"):
                if indent_of(line) > indent:
                    raise YamlError(f"bad indentation: {line!r}")
                return out
            item = stripped[1:].strip()
            after_dash = line.lstrip(" ")[1:]
            item_indent = indent + 1 + (len(after_dash) - len(after_dash.lstrip(" ")))
            pos[0] += 1
            if not item:
                out.append(value_after("", indent))
            elif _key_value(item) is not None:
                # A mapping opened on the dash line: re-read it as a mapping at the item indent.
                lines[pos[0] - 1] = " " * item_indent + item
                pos[0] -= 1
                out.append(mapping(item_indent))
            else:
                out.append(_scalar(item))

    def mapping(indent: int) -> dict:
        out: dict = {}
        while True:
            pos[0] = significant(pos[0])
            if pos[0] >= len(lines):
                return out
            line = lines[pos[0]]
            if indent_of(line) < indent:
                return out
            if indent_of(line) > indent:
                raise YamlError(f"bad indentation: {line!r}")
            stripped = _strip_comment(line).strip()
            if stripped.startswith("- "):
                return out
            kv = _key_value(stripped)
            if kv is None:
                raise YamlError(f"not a mapping entry: {line!r}")
            key, rest = kv
            if key in out:
                raise YamlError(f"duplicate key: {key}")
            pos[0] += 1
            out[key] = value_after(rest, indent)

    if significant(0) >= len(lines):
        return None
    first = lines[significant(0)]
    result = node(indent_of(first))
    if significant(pos[0]) < len(lines):
        raise YamlError(f"unexpected content: {lines[significant(pos[0])]!r}")
    return result
