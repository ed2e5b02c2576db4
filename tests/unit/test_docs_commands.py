"""Every `cowork-adapter ...` command line in README.md, METHODOLOGY.md and docs/*.md parses with the CLI's
own parser: the command exists, every flag exists, every value converts (a number, a choice, a path), and
no required flag is missing. Nothing is run: click's make_context parses with resilient parsing off and
stops there. Shell variables take plausible values (the README's WHERE and MONEY arrays are expanded as
the README defines them), so a renamed or removed flag fails here, naming the page and the line.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from cowork_adapter.docsgen.reference import cli_command

REPO = Path(__file__).resolve().parents[2]
# docs/reference.md is generated from the parser itself (tests/unit/test_docs_reference.py keeps it true).
PAGES = [
    REPO / "README.md",
    REPO / "METHODOLOGY.md",
    *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "reference.md"),
]
FENCE = re.compile(r"^```(\w*)\s*$")
INLINE = re.compile(r"`((?:\.venv/bin/)?cowork-adapter [^`]+)`")
ARRAY = re.compile(r"^(\w+)=\((.*)\)\s*$")
# Plausible values for the variables the pages' shells define (each a path, a URL or a task id).
VALUES = {
    "COWORK_SEED": "/data/ouroboros",
    "COWORK_BENCH": "/data/cowork_bench",
    "COWORK_STORAGE": "/data/runs",
    "COWORK_CAMPAIGN": "/data/runs/campaign.json",
    "COWORK_RUN": "/data/runs/one-1",
    "COWORK_PREV": "/data/runs/one-0",
    "QUALIFIED": "/data/runs/qualify-1",
    "TASK": "customer-satisfaction-analytics-framework",
    "DOCKER_HOST": "unix:///run/user/1000/docker.sock",
    "COWORK_DB": "postgresql://db.lan/campaigns",
    "DEMO_ROOT": "/tmp/demo-1",
    "HOME": "/root",
    "PWD": "/work/clone",
}


def _readme_arrays() -> dict[str, list[str]]:
    arrays = {}
    for line in (REPO / "README.md").read_text().splitlines():
        match = ARRAY.match(line)
        if match:
            arrays[match[1]] = shlex.split(_substitute(match[2], {}))
    return arrays


def _substitute(text: str, arrays: dict[str, list[str]]) -> str:
    text = re.sub(r"\$\(date \+%s\)", "1764900000", text)
    text = re.sub(r"\$\(id -u\)", "1000", text)
    for name, words in arrays.items():
        text = text.replace(f'"${{{name}[@]}}"', " ".join(shlex.quote(w) for w in words))
    return re.sub(r"\$\{?([A-Za-z_]\w*)\}?", lambda m: VALUES.get(m[1], f"/x/{m[1].lower()}"), text)


def command_lines(text: str) -> list[tuple[int, str, bool]]:
    """(line number, command, whole) of each cowork-adapter command: a shell block's lines (continuations
    joined, from the command's name on, comments dropped: whole, every required flag given) and inline
    code spans of the prose that give arguments (a part of a command: its flags must exist and parse)."""
    out: list[tuple[int, str, bool]] = []
    lines = text.splitlines()
    fence: str | None = None
    pending, start = "", 0
    for number, line in enumerate(lines, 1):
        match = FENCE.match(line)
        if match and fence is None:
            fence = match[1]
            continue
        if line.startswith("```") and fence is not None:
            fence = None
            continue
        if fence is None:
            # A span with <placeholders> or a parenthesis quotes output, not a command line.
            # A bare command name is a reference to it, not a command line.
            out += [
                (number, m, False)
                for m in INLINE.findall(line)
                if not re.search(r"[<(…]", m) and " -" in m or re.search(r"cowork-adapter \S+ [\"$/]", m)
            ]
            continue
        if fence not in {"bash", "sh", "shell"}:
            continue
        if not pending:
            start = number
        pending += line.rstrip("\\") + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        code, pending = pending, ""
        where = code.split(" # ", 1)[0].find("cowork-adapter ")
        if where >= 0 and not code.lstrip().startswith("#"):
            out.append((start, code[where:], True))
    return out


def _words(command: str, arrays: dict[str, list[str]]) -> list[str]:
    lexer = shlex.shlex(
        _substitute(command, arrays).replace("[", " ").replace("]", " "), posix=True, punctuation_chars=";&|"
    )
    lexer.whitespace_split, lexer.commenters = True, "#"
    words = []
    for word in lexer:
        if word in {";", "&&", "||", "|", "&", ">", ">>"} or word.startswith((">", "2>")):
            break
        words.append(word)
    return words[1:]  # without the program's name


def _rest(ctx) -> list[str]:
    """What a group's parse left for its subcommand (click 8.2 renamed protected_args)."""
    protected = getattr(ctx, "_protected_args", None)
    if protected is None:
        protected = getattr(ctx, "protected_args", [])
    return list(protected) + list(ctx.args)


def parse_problem(args: list[str], whole: bool = True) -> str | None:
    """None when `args` parse as the CLI would parse them (nothing is run), else click's sentence. A part
    of a command (`whole` false) may leave required flags out."""
    group = cli_command()
    try:
        ctx = group.make_context("cowork-adapter", list(args), resilient_parsing=False)
        command, rest = group, _rest(ctx)
        while hasattr(command, "list_commands") and rest:
            name, sub, rest = command.resolve_command(ctx, rest)
            if sub is None:
                return f"no command {name}"
            if "--help" in rest or "-h" in rest:
                return None
            ctx = sub.make_context(name, rest, parent=ctx, resilient_parsing=False)
            command, rest = sub, _rest(ctx)
        return None
    except Exception as exc:  # click's (or typer's copy of click's) usage errors
        if type(exc).__name__ == "Exit":
            return None  # --help and the like: the command exists
        if not whole and type(exc).__name__ == "MissingParameter":
            return None
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        return f"{type(exc).__name__}: {message}"


CASES = [(page, number, line, whole) for page in PAGES for number, line, whole in command_lines(page.read_text())]


def test_the_pages_hold_many_commands() -> None:
    assert len(CASES) > 60
    assert {p.name for p, _, _, _ in CASES} >= {"README.md", "runbook.md", "paid-campaign.md", "operating.md"}


@pytest.mark.parametrize("page,number,line,whole", CASES, ids=[f"{p.relative_to(REPO)}:{n}" for p, n, _, _ in CASES])
def test_every_command_line_parses(page: Path, number: int, line: str, whole: bool) -> None:
    words = _words(line, _readme_arrays())
    problem = parse_problem(words, whole)
    assert problem is None, f"{page.relative_to(REPO)}:{number}: {line}\n{problem}"


def test_the_parser_catches_what_it_is_for() -> None:
    assert parse_problem(["stop", "/data/run", "--timeout", "30"]) is None
    assert parse_problem(["run", "--help"]) is None
    assert "no-such-flag" in (parse_problem(["stop", "/data/run", "--no-such-flag"]) or "")
    assert parse_problem(["stop", "/data/run", "--timeout", "soon"]) is not None  # not a number
    assert parse_problem(["clear", "/data/run"]) is not None  # --operator-note is required
    assert parse_problem(["clear", "/data/run"], whole=False) is None  # ... unless a part of a command
    assert parse_problem(["campaign", "show", "--nothing"]) is not None
    assert parse_problem(["no-such-command"]) is not None
    arrays = {"WHERE": ["--repo-dir", "/s", "--run-root", "/r"]}
    assert _words('cowork-adapter run "${WHERE[@]}" --task "$TASK"  # a comment', arrays) == [
        "run",
        "--repo-dir",
        "/s",
        "--run-root",
        "/r",
        "--task",
        "customer-satisfaction-analytics-framework",
    ]
