"""runroot/layout.py is the only place in src/ that spells a run root's file names.

A name spelled twice drifts (MANIFEST_NAME was once defined in two modules): this test reads every
string literal of src/cowork_adapter (docstrings aside: prose may name a file) and fails on a run
root's file name outside layout.py, and on a path built with a run root's folder name (`x / "custody"`).
Exempt, because they cannot import the host's code: container/
(copied into the image; it names the task dumps' files itself), custody/shim.py and its split-out
modules (run as `python3 -I -S shim.py`, standard library only; test_shim_install.py holds their names to
layout's) and the shim's sibling custody/taskdb_probe.py (copied beside it, as stdlib-only;
test_the_probes_evidence_names_are_the_layouts holds its two names to layout's). demo/ is exempt as
the tests are: its scenarios assert the on-disk layout.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from cowork_adapter.runroot import layout
from cowork_adapter.runroot.layout import RunRoot

SRC = Path(layout.__file__).resolve().parents[1]
# The shim's own files (custody/bash_env.py SHIM_FILES) that spell run-root names: shim.py and its split-out
# concerns (custody/shim_config.py is the host's typed config, not one of them).
SHIM_SPLIT = tuple(f"custody/shim_{name}.py" for name in ("words", "flags", "taskdb"))
EXEMPT = ("container/", "demo/", "custody/shim.py", *SHIM_SPLIT, "custody/taskdb_probe.py", "runroot/layout.py")
# Every file name (a name with a dot) that layout.py defines.
NAMES = sorted(
    {value for key, value in vars(layout).items() if key.isupper() and isinstance(value, str) and "." in value},
    key=len,
    reverse=True,
)
# A name counts where it stands alone or as a path's last components ("custody/processes.json"),
# not inside a longer name ("audit.launcher.json" holds no "audit.json"; "x-events.jsonl" is another file).
SPELLED = re.compile("|".join(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])" for name in NAMES))
# A run root's folders are words used elsewhere too (a refusal's stage is "custody"), so a folder name
# counts only where a path is built with it: `x / "custody"`, Path("bench"), x.joinpath("custody", ...).
FOLDERS = {
    layout.CUSTODY,
    layout.PRIVATE,
    layout.GATEWAY,
    layout.BENCH,
    layout.DUMPS,
    layout.CONFIGS,
    layout.TMP,
    layout.EVIDENCE,
    layout.CREATIONS,
    layout.STOP,
}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _folder_joined(node: ast.AST) -> str | None:
    """The run-root folder name a path is built with at `node`, if any."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        parts = [node.left, node.right]
    elif isinstance(node, ast.Call) and (
        getattr(node.func, "id", None) == "Path" or getattr(node.func, "attr", None) == "joinpath"
    ):
        parts = list(node.args)
    else:
        return None
    for part in parts:
        if isinstance(part, ast.Constant) and part.value in FOLDERS:
            return part.value
    return None


def spelled_outside(src: Path) -> list[str]:
    """`file:line: name` for each run-root file name spelled in a string literal outside layout.py,
    and each path built with a run-root folder's name there."""
    hits = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel.startswith(EXEMPT):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                for match in SPELLED.finditer(node.value):
                    hits.append(f"{rel}:{node.lineno}: {match.group(0)}")
            folder = _folder_joined(node)
            if folder is not None:
                hits.append(f"{rel}:{node.lineno}: {folder}/")
    return sorted(hits, key=lambda hit: (hit.split(":")[0], int(hit.split(":")[1])))


def test_no_run_root_file_name_outside_layout():
    assert spelled_outside(SRC) == []


def test_the_guard_finds_a_name_spelled_elsewhere(tmp_path):
    (tmp_path / "reader.py").write_text(
        '"""Reads run_manifest.json (prose)."""\nPATH = "custody/processes.json"\n'
        'OTHER = "audit.launcher.json.bak"\nSTAGE = "custody"\n'
        'KEY = root / "private" / NAME\nSEALS = root.joinpath("custody", "evidence")\n',
        encoding="utf-8",
    )
    assert spelled_outside(tmp_path) == [
        "reader.py:2: custody/processes.json",
        "reader.py:5: private/",
        "reader.py:6: custody/",
    ]


def test_run_root_paths():
    root = RunRoot("/runs/r1")
    assert root.manifest == Path("/runs/r1/run_manifest.json")
    assert root.events == Path("/runs/r1/events.jsonl")
    assert root.result_index == Path("/runs/r1/result_index.jsonl")
    assert root.monitor == Path("/runs/r1/monitor.json")
    assert root.custody_processes == Path("/runs/r1/custody/processes.json")
    assert root.stop_file == Path("/runs/r1/custody/stop")
    assert root.agent_env == Path("/runs/r1/private/agent.env")
    assert root.gateway_requests == Path("/runs/r1/gateway/requests.jsonl")
    assert root.seal("r-1") == Path("/runs/r1/custody/evidence/r-1.seal.json")
    assert root.run_config == Path("/runs/r1/bench/configs/cowork_adapter_run.json")
    assert RunRoot(root.path) == root and hash(RunRoot("/runs/r1")) == hash(root)


def test_the_probes_evidence_names_are_the_layouts():
    from cowork_adapter.custody import taskdb_probe

    assert taskdb_probe.baseline_file("r1") == "r1" + layout.TASKDB_BASELINE_SUFFIX
    assert taskdb_probe.eval_file("r1") == "r1" + layout.TASKDB_SUFFIX
