"""The README's shell blocks run as written in a fresh shell: every `$VAR` they use is set earlier in
the README (by an assignment in a block, or by an `eval "$(bash testbed/<script> ...)"` whose script
prints that export), or is the documented secret; no block uses a placeholder where a value belongs,
and each block is valid bash. So the README cannot regress to commands a newcomer cannot paste."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# Set by the operator's secret environment, never by the README (it must not say how to write it down).
SECRETS = {"OPENROUTER_API_KEY"}
# Set by every shell.
SHELL_VARS = {"PWD", "HOME", "PATH"}

FENCE = re.compile(r"^```(\w*)\s*$")
USE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
ASSIGN = re.compile(r"(?:^|[\s;(&|])(?:export\s+|local\s+|readonly\s+)?([A-Za-z_][A-Za-z0-9_]*)\+?=")
EVAL_SCRIPT = re.compile(r'eval\s+"\$\(bash\s+(testbed/[\w.-]+\.sh)\b')
SCRIPT_EXPORT = re.compile(r'echo\s+"export\s+([A-Za-z_][A-Za-z0-9_]*)=')
# A value to fill in (<first 7 of the commit>, RUN_ROOT, TASK_ID): not runnable as written.
ANGLE_PLACEHOLDER = re.compile(r"<[a-z][^<>]*>")
# (A name in single quotes is Python's, as in os.environ['DOCKER_HOST'].)
CAPS_PLACEHOLDER = re.compile(r"(?<![\w$./{=:'-])[A-Z][A-Z0-9]*_[A-Z0-9_]+(?![\w='])")


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


def undefined_uses(text: str) -> list[str]:
    """Each use of a variable that nothing before it defines, as 'line N: $NAME'."""
    defined = set(SECRETS | SHELL_VARS)
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


def test_every_variable_in_the_readme_is_defined_before_use():
    assert undefined_uses(README.read_text()) == []


def test_no_placeholder_in_a_readme_command():
    assert placeholders(README.read_text()) == []


def test_every_readme_shell_block_is_valid_bash():
    for start, lines in shell_blocks(README.read_text()):
        done = subprocess.run(["bash", "-n"], input="\n".join(lines) + "\n", capture_output=True, text=True)
        assert done.returncode == 0, f"the block at line {start}: {done.stderr}"


def test_the_checks_catch_what_they_are_for():
    # The checker itself: an undefined variable, one used before its definition, a placeholder.
    text = "\n".join([
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
    ])
    assert undefined_uses(text) == ["line 2: $COWORK_RUN", "line 3: $COWORK_STORAGE"]
    assert placeholders(text) == ["line 6: <a task>", "line 6: RUN_ROOT"]


def test_the_readme_points_to_no_document_outside_the_repository():
    # The seed's description is shipped as docs/SYSTEM.md; every relative link resolves in the repository.
    text = README.read_text()
    assert "docs/SYSTEM.md" in text and (REPO / "docs" / "SYSTEM.md").is_file()
    for target in re.findall(r"\]\((?!https?://|#)([^)#]+)", text):
        assert (REPO / target).exists(), target
