"""The bundled demo benchmark as a git repository with a deterministic commit.

The adapter pins a benchmark by its commit, so the demo is materialized as a one-commit repository
whose author, committer, dates and file modes are fixed: identical content gives the identical SHA
on every machine. The scripted policy (demo/policy.py) goes in as `demo_policy.py`, beside the
demo engine `main.py` that imports it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent
DEMO_BENCH_ROOT = DEMO_DIR / "bench"
POLICY_SOURCE = DEMO_DIR / "policy.py"
POLICY_NAME = "demo_policy.py"

_IDENTITY = {
    "GIT_AUTHOR_NAME": "cowork-adapter demo",
    "GIT_AUTHOR_EMAIL": "demo@cowork-adapter.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "cowork-adapter demo",
    "GIT_COMMITTER_EMAIL": "demo@cowork-adapter.invalid",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000",
}
COMMIT_MESSAGE = "Demo benchmark (bundled with cowork-adapter)"
GIT_TIMEOUT_S = 60
# Build and test debris that must never change the commit.
_IGNORED_NAMES = {"__pycache__", ".pytest_cache", "dumps", "benchmark_logs", ".git"}
_IGNORED_SUFFIXES = (".pyc", ".pyo")
_EXECUTABLE = {"run_parallel.sh"}


def bench_files(root: Path = DEMO_BENCH_ROOT) -> list[Path]:
    """Relative paths of the files that make up the benchmark tree, sorted."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED_NAMES)
        for name in sorted(filenames):
            if name.endswith(_IGNORED_SUFFIXES):
                continue
            files.append(Path(dirpath, name).relative_to(root))
    return sorted(files)


def _git(dest: Path, *args: str) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(dest),
        # No user or system config may change the commit (signing, hooks, autocrlf...).
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        **_IDENTITY,
    }
    proc = subprocess.run(
        ["git", "-C", str(dest), *args], env=env, capture_output=True, text=True, timeout=GIT_TIMEOUT_S
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def materialize_bench(dest: Path) -> str:
    """Copy the demo benchmark to dest (must not exist), commit it once, return the commit SHA."""
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} already exists")
    dest.mkdir(parents=True)
    for rel in bench_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DEMO_BENCH_ROOT / rel, target)
        os.chmod(target, 0o755 if rel.name in _EXECUTABLE else 0o644)
    shutil.copyfile(POLICY_SOURCE, dest / POLICY_NAME)
    os.chmod(dest / POLICY_NAME, 0o644)
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    _git(dest, "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-m", COMMIT_MESSAGE)
    return _git(dest, "rev-parse", "HEAD")


def expected_bench_commit() -> str:
    """The SHA materialize_bench would give now (materializes into a temporary directory)."""
    with tempfile.TemporaryDirectory(prefix="cowork-demo-bench-") as tmp:
        return materialize_bench(Path(tmp) / "bench")
