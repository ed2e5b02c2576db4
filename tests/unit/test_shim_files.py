"""The shim's files: one list (custody/bash_env.py SHIM_FILES) that install_custody copies beside the
shim, closed under what the shim imports, and nothing else.

The shim runs as `python3 -I -S shim.py` (no site-packages, not even its own folder on sys.path until
it adds it), so a module it imports that is not in the list fails only on a real run; this test reads
every listed file's imports instead: relative imports (the package form) and top-level ones (the
installed form) alike, and the sibling copies it loads by name.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from cowork_adapter.custody.bash_env import SHIM_FILES, SHIM_SOURCE, install_custody
from cowork_adapter.custody.shim_config import ContainerLimits

STEMS = {path.stem for path in SHIM_FILES}
LOADERS = ("load_sibling",)  # shim_io.load_sibling(name): a sibling loaded when needed


def _imports(path: Path) -> set[str]:
    """The modules `path` imports, by their last dotted part (a sibling's stem) or top-level name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.add(node.module.rsplit(".", 1)[-1] if node.module else "")
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or "").split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) in LOADERS
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(node.args[0].value)
    return found


def test_the_list_is_closed_under_the_shims_imports_and_stdlib_only():
    outside = {
        f"{path.name} imports {name}"
        for path in SHIM_FILES
        for name in _imports(path)
        if name not in STEMS and name not in sys.stdlib_module_names and name != "__future__"
    }
    assert outside == set()


def test_every_listed_file_is_reached_from_the_shim_and_names_are_flat_and_unique():
    reached, todo = set(), [SHIM_SOURCE.stem]
    by_stem = {path.stem: path for path in SHIM_FILES}
    while todo:
        stem = todo.pop()
        if stem in reached:
            continue
        reached.add(stem)
        todo += [name for name in _imports(by_stem[stem]) if name in by_stem]
    assert reached == STEMS
    assert len(STEMS) == len(SHIM_FILES)  # copied flat: two files of one name would overwrite each other
    assert not STEMS & set(sys.stdlib_module_names)  # first on sys.path: a stdlib name would be shadowed
    assert all(path.is_file() for path in SHIM_FILES)


def test_the_guard_finds_an_import_outside_the_list(tmp_path):
    stray = tmp_path / "shim_stray.py"
    stray.write_text("from .shim_missing import X\nimport yaml\nload_sibling('not_listed')\n", encoding="utf-8")
    assert _imports(stray) == {"shim_missing", "yaml", "not_listed"}


def test_install_copies_exactly_the_list_and_the_copy_runs_alone(tmp_path):
    """The installed folder holds the list's files and nothing else, and the shim runs from it under
    `-I -S`: a creation with an unreadable config is refused (exit 75) after every sibling imported."""
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    (tmp_path / "resources").mkdir()
    files = install_custody(
        tmp_path / "run",
        real_docker=str(fake),
        docker_host="unix:///nowhere.sock",
        run_label="0" * 32,
        limits=ContainerLimits(cpus=1, memory_bytes=256 << 20, pids_limit=64),
        stop_file=tmp_path / "run" / "STOP",
        resource_root=tmp_path / "resources",
        min_free_bytes=0,
        evidence_dir=tmp_path / "evidence",
        agent_env_file=None,
        environ={},
    )
    assert sorted(p.name for p in files.shim_dir.iterdir() if p.name != "docker") == sorted(p.name for p in SHIM_FILES)
    for path in SHIM_FILES:
        assert (files.shim_dir / path.name).read_bytes() == path.read_bytes()
    probe = (
        "import runpy, sys, json\n"
        "sys.argv = ['shim.py', 'run', 'img']\n"
        "try:\n"
        f"    runpy.run_path({str(files.shim_program)!r}, run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "mods = {m: getattr(sys.modules[m], '__file__', None) for m in sys.modules if m.split('.')[0] in "
        f"{sorted(STEMS)!r}}}\n"
        "print(json.dumps({'code': code, 'mods': mods}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe],
        env={"COWORK_SHIM_CONFIG": str(tmp_path / "missing.json")},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = json.loads(done.stdout)
    assert out["code"] == 75 and "config_unreadable" in done.stderr
    assert out["mods"] and all(Path(f).parent == files.shim_dir for f in out["mods"].values())
    assert "cowork_adapter" not in done.stdout
