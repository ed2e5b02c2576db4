"""derived.py: which requirements a seed declares (lock file first, else pyproject) and the build
requirements its offline editable install needs."""

from __future__ import annotations

import pytest

from cowork_adapter.errors import Refusal
from cowork_adapter.image.derived import seed_build_requirements, seed_requirements

PYPROJECT = """
[build-system]
requires = ["setuptools>=69", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "seed"
dependencies = ["openai>=1.66", "mcp>=1.6,<2.0"]
"""


def test_a_lock_file_wins_over_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "requirements-runtime.lock").write_text(
        "# pinned\nopenai==2.53.0\n-e .\n--index-url x\nmcp==1.29.0 ; python_version >= '3.10'\n"
    )
    assert seed_requirements(tmp_path) == ["openai==2.53.0", "mcp==1.29.0 ; python_version >= '3.10'"]


def test_without_a_lock_the_pyproject_dependencies_are_used(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    assert seed_requirements(tmp_path) == ["openai>=1.66", "mcp>=1.6,<2.0"]
    assert seed_build_requirements(tmp_path) == ["setuptools>=69", "wheel"]


def test_a_seed_without_pyproject_needs_nothing_more(tmp_path):
    assert seed_requirements(tmp_path) == [] and seed_build_requirements(tmp_path) == []


def test_a_broken_pyproject_is_a_refusal(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project\n")
    with pytest.raises(Refusal):
        seed_build_requirements(tmp_path)
