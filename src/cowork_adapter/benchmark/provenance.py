"""Pins and provenance: the seed's and the benchmark's git identity, upstream file hashes."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..errors import Refusal
from ..fileio import sha256_file
from ..schemas.manifest import AdapterIdentity, BenchIdentity, BenchSubstitute, SeedIdentity
from ..vocab import SubstituteKind
from .pin_check import accepted_substitutes

GIT_TIMEOUT = 60


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class GitState:
    head: str
    porcelain: str
    diff: bytes

    @property
    def dirty(self) -> bool:
        return bool(self.porcelain.strip())


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=GIT_TIMEOUT, check=False)


def git_state(repo: Path) -> GitState | None:
    """HEAD, porcelain status and tracked diff of `repo`, or None when it is not a git repository."""
    head = _git(repo, "rev-parse", "--verify", "HEAD")
    if head.returncode != 0 or not (repo / ".git").exists():
        return None
    status = _git(repo, "status", "--porcelain", "--untracked-files=all")
    diff = _git(repo, "diff", "HEAD")
    if status.returncode != 0 or diff.returncode != 0:
        return None
    return GitState(head=head.stdout.decode().strip(), porcelain=status.stdout.decode(), diff=diff.stdout)


def seed_identity(repo_dir: Path, *, allow_dirty: bool) -> SeedIdentity:
    """The agent seed's identity; refuses a non-repository, and a dirty tree unless allowed."""
    if not repo_dir.is_dir():
        raise Refusal("seed", f"the seed directory {repo_dir} does not exist.")
    state = git_state(repo_dir)
    if state is None:
        raise Refusal("seed", f"the seed {repo_dir} is not a git repository with a commit.")
    if state.dirty and not allow_dirty:
        raise Refusal(
            "seed",
            f"the seed {repo_dir} has uncommitted changes (git status --porcelain is not empty); "
            "commit them or use a clean worktree.",
        )
    return SeedIdentity(
        repo_dir=str(repo_dir),
        head=state.head,
        dirty=state.dirty,
        status_sha256=sha256_bytes(state.porcelain.encode()),
        diff_sha256=sha256_bytes(state.diff),
        allow_dirty_seed=allow_dirty,
        reportable=not state.dirty,
    )


def bench_identity(bench_root: Path, expected_commit: str) -> BenchIdentity:
    """The benchmark checkout's identity; refuses anything but a clean tree at the pinned commit."""
    return checked_bench(bench_root, expected_commit)[0]


def checked_bench(bench_root: Path, expected_commit: str) -> tuple[BenchIdentity, list[BenchSubstitute]]:
    """The checkout's identity and its accepted substitutes (pin_check.accepted_substitutes): anything
    but a clean tree at the pinned commit, with stand-ins only for blobs the object store lacks, is refused."""
    if not (bench_root / "tasks" / "finalpool").is_dir():
        raise Refusal("bench", f"{bench_root} is not a Cowork Bench checkout (no tasks/finalpool).")
    state = git_state(bench_root)
    if state is None:
        raise Refusal("bench", f"the benchmark {bench_root} is not a git repository with a commit.")
    if not state.head.startswith(expected_commit) and state.head != expected_commit:
        raise Refusal(
            "bench",
            f"the benchmark {bench_root} is at {state.head[:12]}, not at the pinned commit {expected_commit[:12]}.",
        )
    if state.dirty:
        raise Refusal(
            "bench", f"the benchmark {bench_root} has uncommitted changes; the runner and evaluators must be unchanged."
        )
    # What `git status` cannot show (skip-worktree files, replace objects) is accepted only as a
    # stand-in for a blob the object store lacks; anything else is refused here, before the run root.

    substitutes = accepted_substitutes(bench_root, state.head)
    identity = BenchIdentity(
        root=str(bench_root),
        commit=state.head,
        expected_commit=expected_commit,
        replaced_objects=replaced_objects(bench_root),
        skip_worktree=skip_worktree_files(bench_root),
    )
    return identity, substitutes


def skip_worktree_files(repo: Path) -> dict[str, str]:
    """{path: sha256 of the file on disk} of the paths marked skip-worktree (hidden from `git status`)."""
    out = _git(repo, "ls-files", "-v", "-z")
    if out.returncode != 0:
        return {}
    found: dict[str, str] = {}
    for entry in out.stdout.decode(errors="replace").split("\0"):
        if entry[:2] == "S " and (repo / entry[2:]).is_file():
            found[entry[2:]] = hashlib.sha256((repo / entry[2:]).read_bytes()).hexdigest()
    return found


def replaced_objects(repo: Path) -> dict[str, str]:
    """{original object: replacement} of the repository's `refs/replace/` (empty when none)."""
    out = _git(repo, "for-each-ref", "--format=%(refname:strip=2) %(objectname)", "refs/replace/")
    if out.returncode != 0:
        return {}
    pairs = (line.split() for line in out.stdout.decode(errors="replace").splitlines())
    return {p[0]: p[1] for p in pairs if len(p) == 2}


def dataset_ids(bench_root: Path) -> list[str]:
    """Every task of the benchmark: tasks/finalpool/<id>/task_config.json, dot-dirs excluded, sorted."""
    pool = bench_root / "tasks" / "finalpool"
    return sorted(p.parent.name for p in pool.glob("*/task_config.json") if not p.parent.name.startswith("."))


# Shared scoring code every task's grading passes through, hashed beside the per-task evaluators.
SHARED_EVALUATOR_FILES = ("utils/evaluation/evaluator.py", "utils/data_structures/task_config.py")


def upstream_hashes(bench_copy: Path, task_ids: list[str]) -> tuple[str | None, dict[str, str]]:
    """SHA-256 of run_parallel.sh, of the shared evaluator entry (keys `utils/...`) and of each
    task's evaluation/main.py (keys: task ids): the scoring authority, byte for byte."""
    runner = bench_copy / "run_parallel.sh"
    runner_hash = sha256_file(runner) if runner.is_file() else None
    evaluators = {
        name: sha256_file(bench_copy / name) for name in SHARED_EVALUATOR_FILES if (bench_copy / name).is_file()
    }
    for task in task_ids:
        main = bench_copy / "tasks" / "finalpool" / task / "evaluation" / "main.py"
        if main.is_file():
            evaluators[task] = sha256_file(main)
    return runner_hash, evaluators


def adapter_identity() -> AdapterIdentity:
    """The adapter's own version and, when it runs from a git checkout, its commit."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / ".git").exists() and (parent / "pyproject.toml").is_file():
            state = git_state(parent)
            if state is not None:
                return AdapterIdentity(version=__version__, commit=state.head, dirty=state.dirty)
            break
    return AdapterIdentity(version=__version__)


def clone_at(source: Path, dest: Path, commit: str, substitutes: list[BenchSubstitute]) -> None:
    """A run-scoped working copy of `source` at `commit` (never the operator's checkout), carrying
    only the accepted `substitutes` (pin_check.accepted_substitutes); pin_check.verify_copy then
    checks it against the pin before anything runs."""
    out = subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", "--no-checkout", str(source), str(dest)],
        capture_output=True,
        timeout=600,
        check=False,
    )
    replaced = sorted({s.pinned_blob for s in substitutes if s.kind is SubstituteKind.REPLACE_OBJECT})
    if out.returncode == 0 and replaced:
        # A replacement for a blob the store lacks comes along, or the checkout cannot write that path.
        out = _git(dest, "fetch", "--quiet", "origin", *(f"refs/replace/{o}:refs/replace/{o}" for o in replaced))
    copied = [s.path for s in substitutes if s.kind is SubstituteKind.SKIP_WORKTREE]
    if out.returncode == 0:
        out = _git(dest, "checkout", "--quiet", "--detach", commit)
        if out.returncode != 0 and copied:
            # A blob only the operator's substitute stands for cannot be checked out; the rest was.
            out = _git(dest, "reset", "--quiet", commit)
    if out.returncode != 0:
        raise Refusal(
            "bench", f"cloning {source} at {commit[:12]} failed: {out.stderr.decode(errors='replace').strip()[:300]}"
        )
    # A skip-worktree stand-in comes along as it is in the operator's checkout, marked the same.
    for rel in copied:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / rel, dest / rel, follow_symlinks=False)
        _git(dest, "update-index", "--skip-worktree", rel)
