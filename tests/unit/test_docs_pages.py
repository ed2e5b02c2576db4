"""The documentation stays readable (issue 31): the README fits in 250 lines, no line of the README,
METHODOLOGY.md or a docs/ page is longer than 200 characters, and the pages that list things list
all of them (every package of the code in docs/layout.md, every benchmark script in
docs/benchmarks.md).

The one exemption from the line limit: a line inside a shell block that is a single command, with no
comment on it (a command that cannot be shortened; its explanation goes on a line of its own)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [README, REPO / "METHODOLOGY.md", *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 250
LINE_MAX = 200
SHELL_FENCE = re.compile(r"^```(bash|sh|shell)\s*$")


def too_long(text: str) -> list[str]:
    """Each line over LINE_MAX characters that is not a single command in a shell block."""
    problems = []
    in_shell = in_code = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_shell = not in_code and bool(SHELL_FENCE.match(line))
            in_code = not in_code
            continue
        if len(line) <= LINE_MAX:
            continue
        a_command = in_shell and not line.lstrip().startswith("#") and " #" not in line
        if not a_command:
            problems.append(f"line {number}: {len(line)} characters")
    return problems


def test_the_readme_fits_in_250_lines():
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


def test_the_two_commands_are_on_the_readmes_first_screen():
    first_screen = "\n".join(README.read_text().splitlines()[:40])
    assert "bash scripts/demo.sh" in first_screen and "bash .ci/run" in first_screen


# docs/reference.md is generated (python -m cowork_adapter.docsgen): its table rows are as long as the help
# texts they hold, and tests/unit/test_docs_reference.py keeps it true instead.
@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "reference.md"], ids=lambda p: str(p.relative_to(REPO)))
def test_no_line_is_longer_than_200_characters(page):
    assert too_long(page.read_text()) == []


def test_the_line_rule_exempts_only_a_single_command_in_a_shell_block():
    long_command = "cowork-adapter run " + "--task t " * 30
    text = "\n".join(
        [
            "x" * 201,  # prose: too long
            "```bash",
            long_command,
            long_command + "  # why",
            "# " + "y" * 200,
            "```",
            "```",
            long_command,
            "```",  # not a shell block
            "| a | " + "z" * 200 + " |",  # a table row
        ]
    )
    n = len(long_command)
    assert too_long(text) == [
        "line 1: 201 characters",
        f"line 4: {n + 7} characters",
        "line 5: 202 characters",
        f"line 8: {n} characters",
        "line 10: 208 characters",
    ]


def test_the_layout_page_names_every_package_of_the_code():
    layout = (REPO / "docs" / "layout.md").read_text()
    packages = sorted(p.name for p in (REPO / "src" / "cowork_adapter").iterdir() if (p / "__init__.py").is_file())
    assert packages, "no package found"
    missing = [name for name in packages if not re.search(rf"^{re.escape(name)}/\s", layout, re.MULTILINE)]
    assert missing == [], f"docs/layout.md does not name these packages: {missing}"


def test_the_benchmarks_page_has_a_row_and_a_section_for_every_benchmark_script():
    page = (REPO / "docs" / "benchmarks.md").read_text()
    scripts = sorted(p.name for p in (REPO / "benchmarks").glob("bench_*.py"))
    assert scripts, "no benchmark script found"
    rows = {m for m in re.findall(r"^\| \[`(bench_\w+\.py)\b", page, re.MULTILINE)}
    sections = set(re.findall(r"^## (bench_\w+\.py)$", page, re.MULTILINE))
    assert [s for s in scripts if s not in rows] == [], "a benchmark script without a row in docs/benchmarks.md"
    assert [s for s in scripts if s not in sections] == [], "a benchmark script without a section in docs/benchmarks.md"
    assert "## History" in page
