"""One task's transcript as its engine logged it: model turns, tool calls and results, in order.

No inspect_ai here (export.inspect_log maps this to Inspect's messages and events), so the mapping
from logs can be tested and timed on its own.

Every file is a dump file the agent under test could have written: each is read through
container.safefile (no link followed below the run's dumps folder, no FIFO or device read, at most
a cap of bytes), and every value is checked for its type before it is used.

Two sources, tried in this order:
- Ouroboros' own logs, copied into <dump>/ouroboros/ by the entrypoint: chat.jsonl (`in` rows are
  what the task was given; `out` rows what the agent said), progress.jsonl (the agent's notes),
  events.jsonl (one `llm_usage` row per model call; `task_error` rows), tools.jsonl (one row per
  tool call with its arguments and the engine's result preview), and the task's result record
  (<task_id>.json, its `result` text). Rows are merged by their `ts`; each `llm_usage` row opens a
  model turn, and the text and tool calls logged after it, until the next one, are that turn's.
- An upstream engine's traj.json (`messages`: CAMEL's OpenAI-style messages, or Strands' messages
  of content blocks with toolUse / toolResult).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from ..container import safefile
from ..runroot.layout import ENGINE_EVENTS

# The longest tool output kept: Ouroboros' own result previews stop at 2,000 characters, and an
# upstream engine's full outputs are cut to the same length, so every transcript shows the same.
TOOL_OUTPUT_CAP = 2000
# Arguments longer than this (as JSON text) are kept as their first characters, as one string.
ARGUMENTS_CAP = 8000
# Any other text (a model turn's notes, a user message, the final result).
TEXT_CAP = 20000
# The most model turns one sample keeps (its first ones; the rest are counted and disclosed): a task
# of 100 steps takes about as many turns, and the log of one sample stays a few MiB at most.
MAX_TURNS = 400
# The most bytes read of one log (its first bytes when larger; the cut is disclosed).
LOG_CAP = 256 << 20
LOG_NAMES = ("chat.jsonl", "progress.jsonl", ENGINE_EVENTS, "tools.jsonl")
KNOWN_JSON = frozenset({"usage_attempts.jsonl"})


@dataclass
class ToolUse:
    id: str
    function: str
    arguments: dict[str, Any]
    result: str
    error: str | None = None  # the error text when the call failed
    ts: str | None = None
    cut: bool = False  # the result was longer than TOOL_OUTPUT_CAP


@dataclass
class Turn:
    """One model call (or, without usage rows, one stretch of the agent's output)."""

    ts: str | None = None
    model: str | None = None
    text: list[str] = field(default_factory=list)
    calls: list[ToolUse] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost: float | None = None


@dataclass
class UserText:
    text: str
    ts: str | None = None


@dataclass
class Info:
    """Something the engine logged that is neither a message nor a tool call (an error, a note)."""

    kind: str
    text: str
    ts: str | None = None


Item = UserText | Turn | Info


@dataclass
class Transcript:
    source: str  # ouroboros_logs | traj.json | none
    items: list[Item] = field(default_factory=list)
    system: str | None = None
    final: str | None = None  # the task's final answer as the engine recorded it
    notes: list[str] = field(default_factory=list)  # what could not be read, or was cut

    @property
    def tool_calls(self) -> int:
        return sum(len(i.calls) for i in self.items if isinstance(i, Turn))

    @property
    def cut_outputs(self) -> int:
        return sum(c.cut for i in self.items if isinstance(i, Turn) for c in i.calls)


# ---------------------------------------------------------------- small value rules


def _text(value: Any, cap: int = TEXT_CAP) -> str | None:
    return value[:cap] if isinstance(value, str) else None


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _money(value: Any) -> float | None:
    if type(value) in (int, float) and value >= 0 and value != float("inf"):
        return float(value)
    return None


def capped(text: str, cap: int = TOOL_OUTPUT_CAP) -> tuple[str, bool]:
    return (text, False) if len(text) <= cap else (text[:cap], True)


def _arguments(raw: Any) -> dict[str, Any]:
    """Tool arguments as Inspect wants them (an object); anything else, or a long one, as one string."""
    if isinstance(raw, msgspec.Raw):
        data = bytes(raw)
        if len(data) > ARGUMENTS_CAP:
            return {"arguments_cut": data[:ARGUMENTS_CAP].decode("utf-8", "replace")}
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError):
            return {"arguments": data[:ARGUMENTS_CAP].decode("utf-8", "replace")}
    if isinstance(raw, str):  # OpenAI-style arguments are a JSON text
        if len(raw) > ARGUMENTS_CAP:
            return {"arguments_cut": raw[:ARGUMENTS_CAP]}
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return {"arguments": raw}
    if isinstance(raw, dict):
        return raw
    return {} if raw is None else {"arguments": raw}


# ---------------------------------------------------------------- reading files (safefile only)


def _read(path: str, below: str, cap: int, notes: list[str]) -> bytes | None:
    """The bytes of a dump file (its first `cap` when larger, noted), or None when absent or unsafe."""
    found, chunks = safefile.iter_chunks(path, cap=cap, below=below)
    if found.kind == safefile.ABSENT:
        return None
    if found.kind not in (safefile.REGULAR, safefile.TOO_LARGE):
        notes.append(f"{os.path.basename(path)}: not read ({found.kind})")
        return None
    data = b"".join(chunks)
    if found.kind == safefile.TOO_LARGE:
        notes.append(f"{os.path.basename(path)}: only its first {cap} bytes were read")
        cut = data.rfind(b"\n")
        data = data[: cut + 1] if cut >= 0 else b""
    return data


class _Row(msgspec.Struct, gc=False):
    """The fields of any Ouroboros log row the transcript uses (None when absent; any JSON type)."""

    ts: Any = None
    type: Any = None
    direction: Any = None
    text: Any = None
    content: Any = None
    tool: Any = None
    args: msgspec.Raw = msgspec.Raw(b"null")
    result_preview: Any = None
    is_error: Any = None
    status: Any = None
    tool_call_id: Any = None
    model: Any = None
    prompt_tokens: Any = None
    completion_tokens: Any = None
    cached_tokens: Any = None
    cost: Any = None
    error: Any = None
    reason_code: Any = None
    llm_call_id: Any = None


_ROWS = msgspec.json.Decoder(_Row)
_ROW_LISTS = msgspec.json.Decoder(_Row)


def _rows(data: bytes, name: str, notes: list[str]) -> list[_Row]:
    """The JSON-object lines of a log; a line that is no object is skipped and counted."""
    try:
        return _ROW_LISTS.decode_lines(data)  # the usual case: every line a row, in one call
    except (msgspec.DecodeError, RecursionError):
        pass
    rows, bad = [], 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            rows.append(_ROWS.decode(line))
        except (msgspec.DecodeError, RecursionError):
            bad += 1
    if bad:
        notes.append(f"{name}: {bad} line(s) that are no JSON object were skipped")
    return rows


# ---------------------------------------------------------------- Ouroboros logs


_ORDER = {"chat.jsonl": 0, ENGINE_EVENTS: 1, "progress.jsonl": 2, "tools.jsonl": 3}


def _instant(ts: Any, cache: dict[str, float | None]) -> float | None:
    """Seconds since the epoch of an ISO timestamp (compared as text, `01.5Z` would sort before `01Z`)."""
    if not isinstance(ts, str):
        return None
    value = cache.get(ts)
    if value is None and ts not in cache:
        try:
            when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
            value = (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
        except ValueError:
            value = None
        cache[ts] = value
    return value


def _merged(logs: dict[str, list[_Row]]) -> list[tuple[str, _Row]]:
    """(log name, row) of every log by timestamp; within one instant, a model call before the text
    and tools it led to, and each log in its own order. A row without a readable timestamp takes
    the one of the row before it in its log."""
    cache: dict[str, float | None] = {}
    keyed = []
    for name, rows in logs.items():
        last = 0.0
        for index, row in enumerate(rows):
            at = _instant(row.ts, cache)
            last = last if at is None else at
            keyed.append((last, _ORDER[name], index, name, row))
    keyed.sort(key=lambda k: k[:3])
    return [(name, row) for _, _, _, name, row in keyed]


def _tool_use(row: _Row, number: int) -> ToolUse:
    result = _text(row.result_preview, 10 * TOOL_OUTPUT_CAP) or ""
    result, cut = capped(result)
    failed = row.is_error is True or row.status == "error"
    return ToolUse(
        id=_text(row.tool_call_id, 200) or f"call-{number}",
        function=_text(row.tool, 200) or "unknown",
        arguments=_arguments(row.args),
        result=result,
        error=(result or "error") if failed else None,
        ts=_text(row.ts, 64),
        cut=cut,
    )


def _usage_turn(row: _Row, out: Transcript, turns_by_call: dict[str, Turn]) -> Turn:
    """A new model turn from an llm_usage row, appended to `out` and registered by its call id."""
    call_id = row.llm_call_id if isinstance(row.llm_call_id, str) else None
    turn = Turn(
        ts=_text(row.ts, 64),
        model=_text(row.model, 200),
        prompt_tokens=_count(row.prompt_tokens),
        completion_tokens=_count(row.completion_tokens),
        cached_tokens=_count(row.cached_tokens),
        cost=_money(row.cost),
    )
    out.items.append(turn)
    if call_id is not None:
        turns_by_call[call_id] = turn
    return turn


def from_ouroboros(logs_dir: str, below: str) -> Transcript | None:
    """The transcript in <dump>/ouroboros/, or None when the folder holds none of the logs."""
    notes: list[str] = []
    logs: dict[str, list[_Row]] = {}
    for name in LOG_NAMES:
        data = _read(os.path.join(logs_dir, name), below, LOG_CAP, notes)
        if data is not None:
            logs[name] = _rows(data, name, notes)
    if not logs:
        return None
    out = Transcript(source="ouroboros_logs", notes=notes)
    # A tool row naming its model call (llm_call_id, Ouroboros 6.97+) belongs to that call's turn even
    # when the usage row, written by the supervisor, was logged after the tools ran.
    usage_by_call = {
        row.llm_call_id: row
        for row in logs.get(ENGINE_EVENTS, ())
        if row.type == "llm_usage" and isinstance(row.llm_call_id, str)
    }
    turns_by_call: dict[str, Turn] = {}
    turn: Turn | None = None
    calls = 0
    for name, row in _merged(logs):
        ts = _text(row.ts, 64)
        if name == ENGINE_EVENTS:
            if row.type == "llm_usage":
                if isinstance(row.llm_call_id, str) and row.llm_call_id in turns_by_call:
                    continue  # its turn was opened by the tool calls it led to
                turn = _usage_turn(row, out, turns_by_call)
            elif row.type == "task_error":
                out.items.append(Info("task_error", _text(row.error) or _text(row.reason_code) or "task_error", ts))
            continue
        if name == "chat.jsonl" and row.direction == "in":
            text = _text(row.text)
            if text:
                out.items.append(UserText(text, ts))
                turn = None  # what follows answers this message
            continue
        if name in ("chat.jsonl", "progress.jsonl"):
            text = _text(row.text) or _text(row.content)
            if not text:
                continue
            if turn is None:
                turn = Turn(ts=ts)
                out.items.append(turn)
            turn.text.append(text)
            continue
        if row.type not in ("tool_call", None) or not isinstance(row.tool, str):
            continue
        target = turn
        call_id = row.llm_call_id if isinstance(row.llm_call_id, str) else None
        if call_id in turns_by_call:
            target = turns_by_call[call_id]
        elif call_id in usage_by_call:  # its usage row is still to come
            target = turn = _usage_turn(usage_by_call[call_id], out, turns_by_call)
        if target is None:
            target = turn = Turn(ts=ts)
            out.items.append(turn)
        calls += 1
        target.calls.append(_tool_use(row, calls))
    given, out.final = _task_record(logs_dir, below)
    if given and not any(isinstance(item, UserText) for item in out.items):
        out.items.insert(0, UserText(given))  # the real server logs no `in` chat row for a task it is given
    return out


def _task_record(logs_dir: str, below: str) -> tuple[str | None, str | None]:
    """(the task text Ouroboros was given, its `result` text) from the task's record
    (<task_id>.json beside the logs), when there is one."""
    kind, entries = safefile.scan_dir(logs_dir, below=below)
    for entry in entries:
        if not entry.name.endswith(".json") or entry.kind != safefile.REGULAR:
            continue
        found = safefile.read_bytes(os.path.join(logs_dir, entry.name), cap=safefile.RECORD_CAP, below=below)
        try:
            record = json.loads(found.data) if found.ok and found.data is not None else None
        except (ValueError, RecursionError):
            record = None
        if isinstance(record, dict) and ("result" in record or "description" in record):
            return _text(record.get("description")), _text(record.get("result"))
    return None, None


# ---------------------------------------------------------------- upstream traj.json


def _blocks_text(content: Any) -> str:
    """The text of a message's content: a string, or the `text` of its blocks."""
    if isinstance(content, str):
        return content[:TEXT_CAP]
    parts = []
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif isinstance(block, dict) and isinstance(block.get("content"), str):
            parts.append(block["content"])
    return "\n".join(parts)[:TEXT_CAP]


def _result_text(content: Any) -> str:
    if isinstance(content, (str, list)):
        return _blocks_text(content)
    return "" if content is None else json.dumps(content)[:TEXT_CAP]


def from_traj(path: str, below: str) -> Transcript | None:
    """The transcript in an upstream engine's traj.json, or None when it has no messages."""
    notes: list[str] = []
    data = _read(path, below, safefile.LOG_JSON_CAP, notes)
    if data is None:
        return Transcript(source="none", notes=notes) if notes else None
    try:
        traj = json.loads(data)
    except (ValueError, RecursionError):
        return Transcript(source="none", notes=notes + ["traj.json: not JSON"])
    messages = traj.get("messages") if isinstance(traj, dict) else None
    if not isinstance(messages, list):
        return None
    out = Transcript(source="traj.json", notes=notes)
    pending: dict[str, ToolUse] = {}
    number = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if role == "system":
            out.system = _blocks_text(content)
        elif role == "tool":  # CAMEL: one message per tool result
            _settle(pending, message.get("tool_call_id"), _result_text(content), False, out)
        elif role == "user":
            for block in content if isinstance(content, list) else ():
                result = block.get("toolResult") if isinstance(block, dict) else None
                if isinstance(result, dict):  # Strands: results come back in a user message
                    _settle(
                        pending,
                        result.get("toolUseId"),
                        _result_text(result.get("content")),
                        result.get("status") == "error",
                        out,
                    )
            text = _blocks_text(content)
            if text:
                out.items.append(UserText(text))
        elif role == "assistant":
            turn = Turn(text=[t for t in [_blocks_text(content)] if t])
            for call_id, name, args in _calls_of(message):
                number += 1
                use = ToolUse(id=call_id or f"call-{number}", function=name, arguments=_arguments(args), result="")
                turn.calls.append(use)
                pending[use.id] = use
            out.items.append(turn)
    finals = [i for i in out.items if isinstance(i, Turn) and i.text]
    out.final = finals[-1].text[-1] if finals else None
    return out


def _calls_of(message: dict[str, Any]) -> Iterable[tuple[str | None, str, Any]]:
    """(id, function, arguments) of an assistant message's tool calls, in either engine's shape."""
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict):
            fn = found if isinstance(found := call.get("function"), dict) else call
            name = fn.get("name")
            yield _text(call.get("id"), 200), (name[:200] if isinstance(name, str) else "unknown"), fn.get("arguments")
    content = message.get("content")
    for block in content if isinstance(content, list) else ():
        use = block.get("toolUse") if isinstance(block, dict) else None
        if isinstance(use, dict):
            name = use.get("name")
            yield (
                _text(use.get("toolUseId"), 200),
                (name[:200] if isinstance(name, str) else "unknown"),
                use.get("input"),
            )


def _settle(pending: dict[str, ToolUse], call_id: Any, text: str, failed: bool, out: Transcript) -> None:
    use = pending.pop(call_id, None) if isinstance(call_id, str) else None
    if use is None:
        out.notes.append("a tool result without its call was left out")
        return
    use.result, use.cut = capped(text)
    use.error = (use.result or "error") if failed else None


# ---------------------------------------------------------------- one dump


def bounded(transcript: Transcript, max_turns: int = MAX_TURNS) -> Transcript:
    """The transcript cut after its `max_turns`-th model turn, the cut noted."""
    turns = 0
    for index, item in enumerate(transcript.items):
        if isinstance(item, Turn):
            turns += 1
            if turns > max_turns:
                left = sum(isinstance(i, Turn) for i in transcript.items[index:])
                del transcript.items[index:]
                transcript.notes.append(
                    f"{left} later model turn(s) are left out: a sample keeps the first {max_turns}"
                )
                break
    return transcript


def read_transcript(dump: str | None, below: str | None) -> Transcript:
    """The transcript of the task dump `dump` (a folder below `below`, the run's dumps folder), bounded."""
    return bounded(_read_transcript(dump, below))


def _read_transcript(dump: str | None, below: str | None) -> Transcript:
    if dump is None or below is None:
        return Transcript(source="none", notes=["the task has no dump"])
    try:
        logs = from_ouroboros(os.path.join(dump, "ouroboros"), below)
        if logs is not None and logs.items:
            return logs
        traj = from_traj(os.path.join(dump, "traj.json"), below)
    except ValueError:  # the dump is not below the dumps folder: never read
        return Transcript(source="none", notes=[f"{dump} is not below {below}; not read"])
    if traj is not None:
        return traj
    if logs is not None:
        return logs
    return Transcript(source="none", notes=["the engine logged no messages"])
