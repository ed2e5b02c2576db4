"""The audit package flows one way: each module imports only the audit modules before it."""

from __future__ import annotations

import ast
from pathlib import Path

import cowork_adapter.audit as audit_package

ORDER = ["forked", "read", "rules", "scan", "taskdb", "inputs", "task", "run", "write", "__init__"]
ALLOWED = {  # which sibling modules each may import
    "forked": set(),
    "read": set(),
    "rules": set(),
    "scan": {"read", "rules"},
    "taskdb": set(),  # the task database's diff as audit evidence (issue 36)
    "inputs": {"read", "scan"},  # the run's records, ledger, dumps and evidence
    "task": {"inputs", "read", "scan"},  # one task's dump
    "run": {"forked", "inputs", "scan", "task", "taskdb"},
    "write": {"run"},
    "__init__": {"run", "write"},
}


def _sibling_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def test_each_audit_module_imports_only_those_before_it():
    folder = Path(audit_package.__file__).parent
    assert sorted(p.stem for p in folder.glob("*.py")) == sorted(ORDER)
    for name in ORDER:
        imports = _sibling_imports(folder / f"{name}.py")
        assert imports <= ALLOWED[name], (name, imports)
        assert all(ORDER.index(other) < ORDER.index(name) for other in imports), (name, imports)


def test_the_compiled_scanner_and_the_flat_modules_are_gone():
    package = Path(audit_package.__file__).parent.parent
    leftovers = [p.name for p in package.iterdir() if p.name.startswith(("_jsonl", "audit_"))]
    assert leftovers == [] and not (package.parent.parent / "setup.py").exists()
