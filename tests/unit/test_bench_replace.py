"""Substituted content in a benchmark checkout: the run's clone carries it, the manifest and report say so.

The public snapshot of the pinned benchmark lacks one blob (the database seed). An operator's
stand-in is either a file marked skip-worktree or an object in `refs/replace/`; either way
`git status` stays clean, so the adapter must carry it into the run's clone and disclose it.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from cowork_adapter.benchmark.provenance import bench_identity, checked_bench, clone_at, replaced_objects
from cowork_adapter.report.build import _disclosures
from cowork_adapter.report.merge import RunRecord
from cowork_adapter.schemas.manifest import BenchIdentity


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@x",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@x",
            "PATH": "/usr/bin:/bin",
        },
    )
    return out.stdout.strip()


def drop_object(repo: Path, oid: str) -> None:
    """Remove a loose object: the store then lacks it, as the public snapshot lacks the seed."""
    (repo / ".git" / "objects" / oid[:2] / oid[2:]).unlink()


def make_bench(root: Path) -> tuple[str, str, str]:
    (root / "tasks" / "finalpool" / "t1").mkdir(parents=True)
    (root / "tasks" / "finalpool" / "t1" / "task_config.json").write_text("{}")
    (root / "db").mkdir()
    (root / "db" / "seed.sql").write_text("published seed\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "pin")
    original = git(root, "rev-parse", "HEAD:db/seed.sql")
    drop_object(root, original)
    (root / "standin.sql").write_text("stand-in seed\n")
    standin = git(root, "hash-object", "-w", "standin.sql")
    (root / "standin.sql").unlink()
    git(root, "update-ref", f"refs/replace/{original}", standin)  # `git replace` wants the original present
    git(root, "checkout", "-q", "--", "db/seed.sql")
    return git(root, "rev-parse", "HEAD"), original, standin


def test_clone_carries_replacements_and_identity_records_them(tmp_path):
    bench = tmp_path / "bench"
    commit, original, standin = make_bench(bench)
    assert replaced_objects(bench) == {original: standin}
    ident, subs = checked_bench(bench, commit)
    assert ident.replaced_objects == {original: standin}
    copy = tmp_path / "copy"
    clone_at(bench, copy, commit, subs)
    assert (copy / "db" / "seed.sql").read_text() == "stand-in seed\n"
    assert replaced_objects(copy) == {original: standin}


def test_a_checkout_without_replacements_records_none(tmp_path):
    bench = tmp_path / "bench"
    (bench / "tasks" / "finalpool").mkdir(parents=True)
    (bench / "f").write_text("x")
    git(bench, "init", "-q")
    git(bench, "add", "-A")
    git(bench, "commit", "-qm", "pin")
    head = git(bench, "rev-parse", "HEAD")
    assert bench_identity(bench, head).replaced_objects == {}
    clone_at(bench, tmp_path / "copy", head, [])
    assert (tmp_path / "copy" / "f").read_text() == "x"


def test_a_skip_worktree_stand_in_is_carried_into_the_clone_and_recorded(tmp_path):
    bench = tmp_path / "bench"
    (bench / "tasks" / "finalpool" / "t1").mkdir(parents=True)
    (bench / "tasks" / "finalpool" / "t1" / "task_config.json").write_text("{}")
    (bench / "db").mkdir()
    (bench / "db" / "seed.sql").write_text("published seed\n")
    git(bench, "init", "-q")
    git(bench, "add", "-A")
    git(bench, "commit", "-qm", "pin")
    head = git(bench, "rev-parse", "HEAD")
    drop_object(bench, git(bench, "rev-parse", "HEAD:db/seed.sql"))
    (bench / "db" / "seed.sql").write_text("stand-in seed\n")
    git(bench, "update-index", "--skip-worktree", "db/seed.sql")
    assert git(bench, "status", "--porcelain") == ""  # hidden from status: hence the disclosure
    digest = hashlib.sha256(b"stand-in seed\n").hexdigest()
    ident, subs = checked_bench(bench, head)
    assert ident.skip_worktree == {"db/seed.sql": digest}
    copy = tmp_path / "copy"
    clone_at(bench, copy, head, subs)
    assert (copy / "db" / "seed.sql").read_text() == "stand-in seed\n"
    assert git(copy, "status", "--porcelain") == ""
    assert bench_identity(copy, head).skip_worktree == {"db/seed.sql": digest}


def _Run(manifest) -> RunRecord:
    return RunRecord(root="/runs/r1", manifest=manifest, rows=[])


def test_the_report_discloses_replaced_objects():
    class M:
        seed = None
        dry_run = False
        inventory = None
        engine = "ouroboros"
        llm_gateway = None  # the manifest field the report's gateway disclosures read (5060de5)
        bench = BenchIdentity(root="/b", expected_commit="d943e75", replaced_objects={"a" * 40: "b" * 40})

    notes = _disclosures([_Run(M())], 496, {}, 0, 0, 0)
    assert any("substituted content" in n and "/runs/r1" in n for n in notes), notes
    M.bench = BenchIdentity(root="/b", expected_commit="d943e75", skip_worktree={"db/init.sql.gz": "c" * 64})
    notes = _disclosures([_Run(M())], 496, {}, 0, 0, 0)
    assert any("substituted content" in n and "db/init.sql.gz" in n for n in notes), notes
    M.bench = BenchIdentity(root="/b", expected_commit="d943e75")
    assert not any("substituted content" in n for n in _disclosures([_Run(M())], 496, {}, 0, 0, 0))
