"""docs/reference.md is what the command line and the vocabularies make now (docsgen/reference.py).

Fast and offline: the page is rendered from typer's own command objects and the enums' meaning
tables; nothing is run. A flag, a help text, a default or an enum member changed in code fails here
with the command that regenerates the page; a member without its meaning fails naming the one line
to add and the file it goes in.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from cowork_adapter.docsgen import meanings, reference

REPO = Path(__file__).resolve().parents[2]


def test_every_member_of_every_table_has_its_meaning() -> None:
    problems = reference.missing_meanings()
    assert not problems, "\n".join(problems)


def test_the_page_is_what_the_code_makes_now() -> None:
    page = REPO / reference.PAGE
    current = page.read_text(encoding="utf-8") if page.is_file() else ""
    made = reference.render()
    if current != made:
        diff = "".join(
            list(
                difflib.unified_diff(
                    current.splitlines(True), made.splitlines(True), str(reference.PAGE), "generated", n=1
                )
            )[:60]
        )
        pytest.fail(
            f"{reference.PAGE} differs from the command line and the vocabularies; regenerate it with\n"
            f"    {reference.REGENERATE}\nfirst lines of the difference:\n{diff}"
        )


def test_a_member_without_text_names_the_line_and_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    table = dict(meanings.TAMPER_KINDS)
    dropped = next(iter(table))
    del table[dropped]
    monkeypatch.setattr(meanings, "TAMPER_KINDS", table)
    problems = reference.missing_meanings()
    assert len(problems) == 1
    assert f"TamperKind.{dropped.name}: M(" in problems[0] and reference.MEANINGS_FILE in problems[0]
    with pytest.raises(reference.MissingMeaning, match="TAMPER_KINDS"):
        reference.render()


def test_every_visible_option_of_every_command_is_on_the_page() -> None:
    """The page is built from the same objects `--help` prints: each option spelling appears once per command."""
    root = reference.cli_command()
    ctx = root.make_context("cowork-adapter", [], resilient_parsing=True)
    page = reference.render()
    sections = re.split(r"^### ", page, flags=re.M)
    by_command = {s.split("\n", 1)[0].strip("`"): s for s in sections[1:]}
    seen = 0
    for path, command, sub_ctx in reference._commands(root, ctx, "cowork-adapter"):
        section = by_command[path]
        for param in command.get_params(sub_ctx):
            record = param.get_help_record(sub_ctx)
            if record is None:
                assert param.hidden
                continue
            assert f"| `{record[0]}` |" in section, f"{path}: {record[0]} is not on the page"
            seen += 1
    assert seen > 100  # run, doctor and qualify alone have over 100
