"""Build the stub Ouroboros seed: a clean git repository holding the stand-in server.

The seed is what a derived image copies to /opt/ouroboros-src. Identical content always gives the
same HEAD SHA (fixed author, committer, dates, message, file modes), so a test or the demo can pin
it like a real seed commit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

STUB_SEED_DIR = Path(__file__).resolve().parent / "stub_seed"
POLICY_FILE = Path(__file__).resolve().parent / "policy.py"
POLICY_IN_SEED = Path("stub_ouroboros") / "policy.py"

_FIXED_DATE = "2026-01-01T00:00:00+0000"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "cowork-adapter stub seed",
    "GIT_AUTHOR_EMAIL": "stub-seed@cowork-adapter.invalid",
    "GIT_COMMITTER_NAME": "cowork-adapter stub seed",
    "GIT_COMMITTER_EMAIL": "stub-seed@cowork-adapter.invalid",
    "GIT_AUTHOR_DATE": _FIXED_DATE,
    "GIT_COMMITTER_DATE": _FIXED_DATE,
}
COMMIT_MESSAGE = "Stub Ouroboros seed (a stand-in for the real agent server)"
BRANCH = "ouroboros"


def _git_env() -> dict:
    # Ignore the caller's git configuration and any GIT_* overrides: they would change the SHA.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(_IDENTITY, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    return env


def _git(dest: Path, *args: str) -> str:
    out = subprocess.run(
        [
            "git",
            "-c",
            "core.hooksPath=" + os.devnull,
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.autocrlf=false",
            "-c",
            "core.fileMode=true",
            *args,
        ],
        cwd=dest,
        env=_git_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {dest}: {out.stderr.strip()}")
    return out.stdout.strip()


def _normalise_modes(root: Path) -> None:
    # Modes are part of the tree hash; the checkout's umask must not change the SHA.
    for path in root.rglob("*"):
        if ".git" in path.relative_to(root).parts:
            continue
        path.chmod(0o755 if path.is_dir() else 0o644)


def make_stub_seed(dest: Path) -> str:
    """Create the seed repository at `dest` (which must not exist); return its HEAD SHA.

    The working tree is left clean (`git status --porcelain` is empty, bytecode is ignored).
    """
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"seed destination already exists: {dest}")
    shutil.copytree(STUB_SEED_DIR, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
    shutil.copyfile(POLICY_FILE, dest / POLICY_IN_SEED)
    _normalise_modes(dest)
    _git(dest, "init", "-q", "-b", BRANCH)
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "--no-verify", "-m", COMMIT_MESSAGE)
    if _git(dest, "status", "--porcelain"):
        raise RuntimeError(f"seed at {dest} is not clean after its commit")
    return _git(dest, "rev-parse", "HEAD")
