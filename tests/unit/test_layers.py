"""Layers point down (docs/layout.md): a structural guard over every import in src/, those inside
functions included, since a function-level import crosses a layer just as much as a top-level one."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import cowork_adapter

SRC = Path(cowork_adapter.__file__).parent

# (the files a rule covers, the packages or modules they must not import, why); "campaign.records" is the
# one module of campaign/ that the report may import.
READER = "campaign.records"
RULES = [
    (
        ("config/", "defaults.py", "resolved.py", "schemas/"),
        ("run", "ops", "host", "score", "report", "custody", "gateway"),
        "typed files and config know nothing of running; the gateway's defaults live in defaults.py",
    ),
    (("report/",), ("run",), "a reader of finished runs needs no run machinery (runroot/identity.py compares runs)"),
    (("campaign/", "custody/"), ("score", "report"), "money and Docker custody do not import the scoring code"),
    (("campaign/",), ("ops", "run"), "money does not import the operator commands or the run"),
    (("report/",), ("campaign",), "the report reads a campaign only through campaign/records.py"),
    (("score/",), ("host", "ops", "run", "report"), "the ledger talks to no daemon and knows no command"),
    (
        ("score/", "report/", "audit/"),
        ("custody",),
        "custody's evidence is read through runroot/ and schemas/ (runroot/custody_evidence.py for what the"
        " shim shares), never through the program that writes it",
    ),
]


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, the imported module as a dotted name under cowork_adapter) for each project import of `path`."""
    package = path.relative_to(SRC).parent.parts
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(package[: len(package) - (node.level - 1)])
            target = ".".join(base + ([node.module] if node.module else []))
            names = [target] if node.module else [f"{target}.{a.name}".lstrip(".") for a in node.names]
            out += [(node.lineno, name) for name in names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cowork_adapter."):
            out.append((node.lineno, node.module.removeprefix("cowork_adapter.")))
    return out


def test_the_guard_finds_a_reader_importing_custody(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule above bites: a module of score/ importing the shim (as the ledger once did) is a crossing,
    and so is one of report/ or audit/ importing anything of custody/."""
    for rel, line in (
        ("score/reader.py", "from ..custody import shim as shim_program\n"),
        ("report/reader.py", "from ..custody.bash_env import runner_digest\n"),
        ("audit/reader.py", "from cowork_adapter.custody.shim_words import SEAL_SUFFIX\n"),
    ):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(line, encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    assert _crossings() == [
        "audit/reader.py:1 imports custody.shim_words (" + RULES[-1][2] + ")",
        "report/reader.py:1 imports custody.bash_env (" + RULES[-1][2] + ")",
        "score/reader.py:1 imports custody (" + RULES[-1][2] + ")",
    ]


def _covered(rel: str, prefixes: tuple[str, ...]) -> bool:
    return any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in prefixes)


def test_every_layer_points_down() -> None:
    crossings = _crossings()
    assert crossings == [], "\n".join(crossings)


def _crossings() -> list[str]:
    crossings = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for files, banned, why in RULES:
            if not _covered(rel, files):
                continue
            for line, name in _imported(path):
                if name != READER and any(name == b or name.startswith(b + ".") for b in banned):
                    crossings.append(f"{rel}:{line} imports {name} ({why})")
    return crossings
