"""Everything copied into the task image must parse as Python 3.10 (the pinned image's interpreter)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cowork_adapter
from cowork_adapter.image.derived import ENTRY_SCRIPT

PKG = Path(cowork_adapter.__file__).parent
IN_IMAGE = sorted((PKG / "container").glob("*.py"))


@pytest.mark.parametrize("path", IN_IMAGE, ids=lambda p: p.name)
def test_container_module_parses_as_python_3_10(path):
    ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 10))


def test_the_entry_script_parses_as_python_3_10():
    ast.parse(ENTRY_SCRIPT, feature_version=(3, 10))


def test_the_check_can_fail():
    # A 3.11-only construct (except*) must be rejected, or the tests above prove nothing.
    with pytest.raises(SyntaxError):
        ast.parse("try:\n    pass\nexcept* ValueError:\n    pass\n", feature_version=(3, 10))
