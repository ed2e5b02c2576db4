"""Make docs/reference.md from the CLI's own command objects and the vocabularies' meaning tables.

Every command and option comes from typer's click commands, exactly as `--help` shows them (the same
help records, the same panels in the same order); every table of codes comes from its enum in
container/vocab.py with its text from meanings.py. Nothing here is written by hand twice: a flag or a
member added in code changes the page, and tests/unit/test_docs_reference.py fails until it is
regenerated.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import typer

from .. import cli
from . import meanings

PAGE = Path("docs") / "reference.md"
REGENERATE = "PYTHONPATH=src .venv/bin/python -m cowork_adapter.docsgen"
MEANINGS_FILE = "src/cowork_adapter/docsgen/meanings.py"

# (heading, enum, the table in meanings.py, what the first column holds)
TABLES: tuple[tuple[str, type[Enum], str, str], ...] = (
    ("Exit codes", meanings.ExitCode, "EXIT_CODES", "code"),
    ("Stop reasons", meanings.StopReason, "STOP_REASONS", "stop reason"),
    ("Ledger statuses", meanings.TaskStatus, "TASK_STATUSES", "status"),
    ("Audit finding reasons", meanings.AuditFindingReason, "AUDIT_FINDING_REASONS", "reason"),
    ("Tampering kinds", meanings.TamperKind, "TAMPER_KINDS", "kind"),
    ("Daemon kinds", meanings.DaemonKind, "DAEMON_KINDS", "kind"),
)

_EXTRA = re.compile(r"^(?P<help>.*?)\s\s\[(?P<extra>[^\[\]]*)\]$", re.DOTALL)


class MissingMeaning(LookupError):
    """An enum member has no line in meanings.py: the message says which line to add, and where."""


def _text(text: str) -> str:
    """Help text as Markdown prose: one line, and `<word>` outside code spans escaped (else a renderer
    takes `<first 7 of --bench-commit>` for an HTML tag and drops it)."""
    parts = " ".join(str(text).split()).split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")


def missing_meanings() -> list[str]:
    """One sentence per member without text (empty when every member has its line)."""
    out = []
    for _heading, enum, table_name, _col in TABLES:
        table: Mapping[Any, meanings.M] = getattr(meanings, table_name)
        for member in enum:
            if member not in table:
                out.append(
                    f"{enum.__name__}.{member.name} ({member.value!r}) has no meaning: add one line "
                    f"`{enum.__name__}.{member.name}: M(meaning, money, score, next),` to {table_name} "
                    f"in {MEANINGS_FILE}, then run `{REGENERATE}`."
                )
            elif not all(part.strip() for part in table[member]):
                out.append(f"{enum.__name__}.{member.name} has an empty field in {table_name} in {MEANINGS_FILE}.")
    return out


def _code_tables() -> list[str]:
    problems = missing_meanings()
    if problems:
        raise MissingMeaning("\n".join(problems))
    lines: list[str] = []
    for heading, enum, table_name, column in TABLES:
        table = getattr(meanings, table_name)
        lines += [
            f"### {heading}",
            "",
            f"From `{enum.__name__}` in `src/cowork_adapter/container/vocab.py`.",
            "",
            f"| {column} | meaning | money | score | next |",
            "|---|---|---|---|---|",
        ]
        for member in enum:
            m = table[member]
            lines.append(
                f"| `{member.value}` | {_cell(m.meaning)} | {_cell(m.money)} | {_cell(m.score)} | {_cell(m.next)} |"
            )
        lines.append("")
    return lines


def _split_record(record: tuple[str, str]) -> tuple[str, str, str]:
    """(flag spelling, help, default) from a click help record: the trailing `[default: ...; env var:
    ...; required]` that `--help` appends goes to the default column."""
    names, text = record
    match = _EXTRA.match(text)
    extras: list[str] = []
    if match:
        text, extras = match["help"], [e.strip() for e in match["extra"].split(";")]
    default = []
    for extra in extras:
        if extra.startswith("default: "):
            default.append(f"`{extra[len('default: ') :]}`")
        elif extra.startswith("env var: "):
            default.append(f"env `{extra[len('env var: ') :]}`")
        else:
            default.append(extra)
    return names, text, ", ".join(default)


def _command_lines(path: str, command: Any, ctx: Any) -> list[str]:
    lines = [f"### `{path}`", ""]
    for paragraph in (command.help or "").split("\n\n"):
        lines += [_text(paragraph), ""]
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines += [f"Usage: `{path} {usage}`", ""]
    panels: dict[str, list[tuple[str, str, str]]] = {}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:  # hidden: test beds and benchmarks only
            continue
        if getattr(param, "param_type_name", "") == "argument":
            panel = "Arguments"
        else:
            panel = getattr(param, "rich_help_panel", None) or "Options"
        names, text, default = _split_record(record)
        if getattr(param, "is_flag", False) and not default and names != "-h, --help":
            default = "off"
        panels.setdefault(panel, []).append((names, text, default))
    for title, rows in panels.items():
        lines += [f"#### {title}", "", "| option | help | default |", "|---|---|---|"]
        lines += [f"| `{n.replace('|', chr(92) + '|')}` | {_cell(t)} | {_cell(d) or '-'} |" for n, t, d in rows]
        lines.append("")
    return lines


def _commands(group: Any, ctx: Any, path: str) -> Iterable[tuple[str, Any, Any]]:
    for name in group.list_commands(ctx):
        sub = group.get_command(ctx, name)
        if sub is None or sub.hidden:
            continue
        sub_ctx = sub.make_context(name, [], parent=ctx, resilient_parsing=True)
        if hasattr(sub, "list_commands"):
            yield from _commands(sub, sub_ctx, f"{path} {name}")
        else:
            yield f"{path} {name}", sub, sub_ctx


def cli_command() -> Any:
    """The whole app as click commands, with the same flag metavars as `cowork-adapter --help`."""
    command = typer.main.get_command(cli.app)
    cli._quiet_flag_types(command)
    return command


def render() -> str:
    root = cli_command()
    ctx = root.make_context(cli.PROG, [], resilient_parsing=True)
    commands = list(_commands(root, ctx, cli.PROG))
    lines = [
        "# Reference: every command, option and code",
        "",
        "<!-- Generated by `python -m cowork_adapter.docsgen` from the command line and the vocabularies; "
        "do not edit by hand. -->",
        "",
        "For anyone looking up a flag, a default, an exit code, a stop reason, a ledger status, an audit finding or "
        "a tampering kind. This page is generated from the command line itself (each command's `--help`, grouped "
        "as `--help` groups it) and from the vocabularies in `src/cowork_adapter/container/vocab.py`; "
        "`tests/unit/test_docs_reference.py` fails when it differs from the code. What to do on a bad day: "
        "[runbook.md](runbook.md). Words: [glossary.md](glossary.md).",
        "",
        "## Commands",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    for path, command, _ctx in commands:
        anchor = re.sub(r"[^a-z0-9 _-]", "", f"`{path}`".lower()).replace(" ", "-")
        lines.append(f"| [`{path}`](#{anchor}) | {_cell((command.help or '').split(chr(10) * 2)[0])} |")
    lines.append("")
    for path, command, sub_ctx in commands:
        lines += _command_lines(path, command, sub_ctx)
    lines += [
        "## Codes and reasons",
        "",
        "Each table is generated from its enum; the texts are in `" + MEANINGS_FILE + "`, one line per member. "
        "RUN_ROOT is the run root concerned; NEW a new run root. Exit codes by command and the files of a "
        "run root: [exit-codes.md](exit-codes.md).",
        "",
    ]
    lines += _code_tables()
    return "\n".join(lines).rstrip("\n") + "\n"


def write(root: Path) -> Path:
    path = root / PAGE
    path.write_text(render(), encoding="utf-8")
    return path
