"""The shell blocks of the README and of every docs/ page run as written in a fresh shell: every `$VAR`
they use is set earlier on the same page (by an assignment in a block, or by an
`eval "$(bash testbed/<script> ...)"` whose script prints that export), or is the documented secret, or
is one the page says it takes from another page; no block uses a placeholder where a value belongs,
each block is valid bash, and every relative link (with its #anchor) resolves. So no page can regress
to commands a newcomer cannot paste.

The rule for variables across pages: a page that runs in the shell another page sets up says so in a
line `<!-- shell: expects NAME ... from PAGE -->` (PAGE relative to the page), and each NAME listed
must be defined by PAGE's own blocks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [README, REPO / "METHODOLOGY.md", *sorted((REPO / "docs").glob("*.md"))]
# Set by the operator's secret environment, never by a page (it must not say how to write it down).
SECRETS = {"OPENROUTER_API_KEY"}
# Set by every shell.
SHELL_VARS = {"PWD", "HOME", "PATH"}

FENCE = re.compile(r"^```(\w*)\s*$")
USE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
ASSIGN = re.compile(r"(?:^|[\s;(&|])(?:export\s+|local\s+|readonly\s+)?([A-Za-z_][A-Za-z0-9_]*)\+?=")
EVAL_SCRIPT = re.compile(r'eval\s+"\$\(bash\s+(testbed/[\w.-]+\.sh)\b')
SCRIPT_EXPORT = re.compile(r'echo\s+"export\s+([A-Za-z_][A-Za-z0-9_]*)=')
EXPECTS = re.compile(r"^<!-- shell: expects ([A-Za-z0-9_ ]+) from (\S+) -->$", re.MULTILINE)
# A value to fill in (<first 7 of the commit>, RUN_ROOT, TASK_ID): not runnable as written.
ANGLE_PLACEHOLDER = re.compile(r"<[a-z][^<>]*>")
# (A name in single quotes is Python's, as in os.environ['DOCKER_HOST'].)
CAPS_PLACEHOLDER = re.compile(r"(?<![\w$./{=:'-])[A-Z][A-Z0-9]*_[A-Z0-9_]+(?![\w='])")
LINK = re.compile(r"\]\((?!https?://)([^)\s]+)\)")


def page_id(path: Path) -> str:
    return str(path.relative_to(REPO))


def shell_blocks(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each ```bash / ```sh / ```shell block, in order."""
    blocks: list[tuple[int, list[str]]] = []
    current: list[str] | None = None
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if current is None and fence and fence.group(1) in {"bash", "sh", "shell"}:
            current, start = [], number + 1
        elif current is not None and line.startswith("```"):
            blocks.append((start, current))
            current = None
        elif current is not None:
            current.append(line)
    assert current is None, "an unclosed shell block"
    return blocks


def exported_by(script: str) -> set[str]:
    return set(SCRIPT_EXPORT.findall((REPO / script).read_text()))


def defined_by(text: str) -> set[str]:
    """Every variable a page's blocks define."""
    names: set[str] = set()
    for _, lines in shell_blocks(text):
        for line in lines:
            names.update(ASSIGN.findall(line))
            for script in EVAL_SCRIPT.findall(line):
                names.update(exported_by(script))
    return names


def expected(text: str) -> list[tuple[set[str], str]]:
    """(names, page) of each `<!-- shell: expects ... from PAGE -->` line."""
    return [(set(names.split()), page) for names, page in EXPECTS.findall(text)]


def undefined_uses(text: str) -> list[str]:
    """Each use of a variable that nothing before it defines, as 'line N: $NAME'."""
    defined = set(SECRETS | SHELL_VARS)
    for names, _ in expected(text):
        defined |= names
    problems = []
    for start, lines in shell_blocks(text):
        for offset, line in enumerate(lines):
            for name in USE.findall(line):
                if name not in defined:
                    problems.append(f"line {start + offset}: ${name}")
            defined.update(ASSIGN.findall(line))
            for script in EVAL_SCRIPT.findall(line):
                defined.update(exported_by(script))
    return problems


def placeholders(text: str) -> list[str]:
    found = []
    for start, lines in shell_blocks(text):
        for offset, line in enumerate(lines):
            code = "" if line.lstrip().startswith("#") else line.split(" # ", 1)[0]  # comments name things freely
            for match in ANGLE_PLACEHOLDER.findall(code) + CAPS_PLACEHOLDER.findall(code):
                found.append(f"line {start + offset}: {match}")
    return found


def anchors(text: str) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, code marks and punctuation dropped,
    spaces as hyphens, a repeated heading numbered."""
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return out


def broken_links(page: Path) -> list[str]:
    text = page.read_text()
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    problems = []
    for target in LINK.findall(prose):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            problems.append(f"{target}: no such heading")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_variable_is_defined_before_use(page):
    assert undefined_uses(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_what_a_page_expects_from_another_page_is_defined_there(page):
    for names, other in expected(page.read_text()):
        source = (page.parent / other).resolve()
        assert source.is_file(), f"{page_id(page)} expects variables from {other}, which does not exist"
        assert names <= defined_by(source.read_text()), (other, sorted(names - defined_by(source.read_text())))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_placeholder_in_a_command(page):
    assert placeholders(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_shell_block_is_valid_bash(page):
    for start, lines in shell_blocks(page.read_text()):
        done = subprocess.run(["bash", "-n"], input="\n".join(lines) + "\n", capture_output=True, text=True)
        assert done.returncode == 0, f"{page_id(page)}: the block at line {start}: {done.stderr}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_checks_catch_what_they_are_for(tmp_path):
    # The checker itself: an undefined variable, one used before its definition, a placeholder.
    text = "\n".join(
        [
            "```bash",
            'cowork-adapter status "$COWORK_RUN"',
            'COWORK_RUN="$COWORK_STORAGE/x"',
            'eval "$(bash testbed/testbed.sh up)"',
            'echo "$DOCKER_HOST $OPENROUTER_API_KEY $COWORK_RUN"',
            "cowork-adapter report RUN_ROOT --task <a task>",
            "```",
            "```",
            "$NOT_SHELL",
            "```",
        ]
    )
    assert undefined_uses(text) == ["line 2: $COWORK_RUN", "line 3: $COWORK_STORAGE"]
    assert undefined_uses("<!-- shell: expects COWORK_RUN COWORK_STORAGE from x.md -->\n" + text) == []
    assert placeholders(text) == ["line 6: <a task>", "line 6: RUN_ROOT"]
    # Links: a missing file, a missing heading, and the two that resolve.
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## The demo (`scripts/demo.sh`)\n")
    page.write_text("[a](other.md#the-demo-scriptsdemosh) [b](other.md) [c](gone.md) [d](other.md#nothing)\n")
    assert broken_links(page) == ["gone.md: no such file", "other.md#nothing: no such heading"]


def test_the_readme_links_every_docs_page_and_points_outside_the_repository_only_by_url():
    text = README.read_text()
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in text, f"the README does not link docs/{page.name}"
