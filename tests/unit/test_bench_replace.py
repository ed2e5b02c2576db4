"""A benchmark checkout with git-replaced objects: the run's clone carries them, the manifest and report say so.

The public snapshot of the pinned benchmark lacks one blob (the database seed); an operator's
stand-in lives in `refs/replace/`. Without carrying those refs the run's clone cannot check out.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from cowork_adapter.provenance import bench_identity, clone_at, replaced_objects
from cowork_adapter.report.build import _disclosures
from cowork_adapter.schemas.manifest import BenchIdentity


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                         env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
                              "GIT_COMMITTER_EMAIL": "t@x", "PATH": "/usr/bin:/bin"})
    return out.stdout.strip()


def make_bench(root: Path) -> tuple[str, str, str]:
    (root / "tasks" / "finalpool" / "t1").mkdir(parents=True)
    (root / "tasks" / "finalpool" / "t1" / "task_config.json").write_text("{}")
    (root / "db").mkdir()
    (root / "db" / "seed.sql").write_text("published seed\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "pin")
    original = git(root, "rev-parse", "HEAD:db/seed.sql")
    (root / "standin.sql").write_text("stand-in seed\n")
    standin = git(root, "hash-object", "-w", "standin.sql")
    (root / "standin.sql").unlink()
    git(root, "replace", original, standin)
    git(root, "checkout", "-q", "--", "db/seed.sql")
    return git(root, "rev-parse", "HEAD"), original, standin


def test_clone_carries_replacements_and_identity_records_them(tmp_path):
    bench = tmp_path / "bench"
    commit, original, standin = make_bench(bench)
    assert replaced_objects(bench) == {original: standin}
    ident = bench_identity(bench, commit)
    assert ident.replaced_objects == {original: standin}
    copy = tmp_path / "copy"
    clone_at(bench, copy, commit)
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
    clone_at(bench, tmp_path / "copy", head)
    assert (tmp_path / "copy" / "f").read_text() == "x"


class _Run:
    def __init__(self, manifest) -> None:
        self.root, self.manifest = "/runs/r1", manifest


def test_the_report_discloses_replaced_objects():
    class M:
        seed = None
        dry_run = False
        inventory = None
        engine = "ouroboros"
        bench = BenchIdentity(root="/b", expected_commit="d943e75", replaced_objects={"a" * 40: "b" * 40})

    notes = _disclosures([_Run(M())], 496, {}, 0, 0, 0)
    assert any("git-replaced" in n and "/runs/r1" in n for n in notes), notes
    M.bench = BenchIdentity(root="/b", expected_commit="d943e75")
    assert not any("git-replaced" in n for n in _disclosures([_Run(M())], 496, {}, 0, 0, 0))
