"""The pages stay true as prose: no paragraph or list item stops in the middle of a sentence, no page names
an issue number (an internal trial is no reader's reference), and a measured time or test count stands
only in docs/benchmarks.md, with its date and command, where the other pages link. Relative links and
their anchors are checked by tests/unit/test_readme_commands.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# docs/reference.md is generated: its help paragraphs quote the CLI's (tests/unit/test_docs_reference.py).
PAGES = [
    REPO / "README.md",
    REPO / "METHODOLOGY.md",
    *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "reference.md"),
]
ENDS = re.compile(r"""[.:!?]["'`*)\]]*$""")
# A list item may end a clause of the sentence its list makes.
ITEM_ENDS = re.compile(r"""[.:!?;,]["'`*)\]]*$""")
ISSUE = re.compile(r"\bissues? \d+|\bissue-\d+|/issues/\d+", re.IGNORECASE)
# A measured figure: a time or a count of tests or checks (bounds and settings such as "every 5 s" are not).
MEASURED = re.compile(
    r"\babout \d+ (min|minutes|hours?)\b|\b\d[\d,]* (passed|tests collected)\b|"
    r"\b\d+ of \d+ checks\b|\b\d+ min \d+ s\b",
    re.IGNORECASE,
)
# A progress line quoted as an example ("28 checks so far (28 passed)") is a format, not a figure.
EXAMPLE = re.compile(r"\(\d+ passed\)")


def page_id(path: Path) -> str:
    return str(path.relative_to(REPO))


def blocks(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each paragraph and list item outside code, tables, headings and comments."""
    out: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    in_code = False

    def flush() -> None:
        if current:
            out.append((start, " ".join(current)))
            current.clear()

    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            in_code = not in_code
            continue
        if in_code or not stripped or stripped.startswith(("#", "|", "<!--")):
            flush()
            continue
        item = re.match(r"^(\s*)([-*]|\d+\.) ", line)
        if item and (not current or len(item[1]) <= 2):
            flush()
        if not current:
            start = number
        current.append(stripped)
    flush()
    return out


def unfinished(text: str) -> list[str]:
    return [
        f"line {n}: ...{b[-60:]}"
        for n, b in blocks(text)
        if not (ITEM_ENDS if re.match(r"([-*]|\d+\.) ", b) else ENDS).search(b)
    ]


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_sentence_stops_in_the_middle(page: Path) -> None:
    assert unfinished(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_page_names_an_issue_number(page: Path) -> None:
    text = page.read_text()
    assert [m.group(0) for m in ISSUE.finditer(text)] == []


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "benchmarks.md"], ids=page_id)
def test_measured_figures_live_in_benchmarks_md(page: Path) -> None:
    found = [m.group(0) for m in MEASURED.finditer(EXAMPLE.sub("", page.read_text()))]
    assert found == [], f"{page_id(page)}: move these to docs/benchmarks.md (with date and command) and link there"


def test_the_checks_catch_what_they_are_for() -> None:
    text = "\n".join(
        [
            "A sentence that stops",
            "",
            "- an item.",
            "- an item that",
            "  goes on.",
            "- stops here",
            "",
            "```",
            "code without a stop",
            "```",
            "| a | b |",
            "Fine: (see x).",
        ]
    )
    assert unfinished(text) == ["line 1: ...A sentence that stops", "line 6: ...- stops here"]
    assert ISSUE.search("as in issue 19's trial") and not ISSUE.search("an issue with 3 hosts")
    assert (
        MEASURED.search("111 of 111 checks") and MEASURED.search("2,400 passed") and MEASURED.search("About 14 minutes")
    )
    assert not MEASURED.search("every 5 s") and not MEASURED.search("up to 300 s")


# applied_config keys that are not one flag's name: what the runbook names for each instead.
_RESUME_WORDS = {"memory_bytes": "--memory", "key_route": "--key-in-agent", "provider_standin": None}


def test_the_runbook_names_every_flag_a_resume_compares() -> None:
    """The runbook's Resume section lists each flag of the run's applied configuration (what
    runroot/identity.py compares across an ancestry), so a condition added in config/ is documented."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from run_flags import config_for

    text = (REPO / "docs" / "runbook.md").read_text()
    section = text[text.index("## Resume") : text.index("## Clear")]
    cfg = config_for(llm_gateway=True)
    keys = set(cfg.applied_config())
    assert "llm_gateway_max_tokens" in keys  # a gateway's caps are compared, so they are listed too
    missing = []
    for key in sorted(keys):
        word = _RESUME_WORDS.get(key, "--" + key.replace("_", "-"))
        if word is not None and f"`{word}`" not in section:
            missing.append(word)
    assert missing == [], f"docs/runbook.md's Resume section does not name: {missing}"
