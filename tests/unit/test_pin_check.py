"""Runner and evaluators unchanged, enforced (issue 27, deliverable 5), on real git checkouts of the demo bench.

A substitute (a skip-worktree file, a replace object) is accepted only for a path whose pinned blob
the object store lacks; the run's clone must hash, path by path, to the pinned commit's blobs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import zlib
from pathlib import Path

import pytest

from cowork_adapter.benchmark.pin_check import accepted_substitutes, pinned_paths, verify_copy
from cowork_adapter.benchmark.provenance import bench_identity, checked_bench, clone_at
from cowork_adapter.demo.bench_repo import materialize_bench
from cowork_adapter.errors import Refusal
from cowork_adapter.vocab import ExitCode, SubstituteKind

EVALUATOR = "tasks/finalpool/demo-csv-totals/evaluation/main.py"
SEED = "db/init.sql.gz"


def git(repo: Path, *args: str, data: bytes | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t.invalid",
    )
    out = subprocess.run(["git", "-C", str(repo), *args], input=data, env=env, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.decode().strip()


def loose(repo: Path, oid: str) -> Path:
    return repo / ".git" / "objects" / oid[:2] / oid[2:]


def blob_of(repo: Path, path: str) -> str:
    return git(repo, "rev-parse", f"HEAD:{path}")


def write_object(repo: Path, oid: str, kind: bytes, body: bytes) -> None:
    """Rewrite the loose object `oid` with other content under the same id (git does not re-hash it on read)."""
    target = loose(repo, oid)
    target.unlink()
    target.write_bytes(zlib.compress(b"%s %d\0" % (kind, len(body)) + body))


@pytest.fixture
def bench(tmp_path) -> tuple[Path, str]:
    root = tmp_path / "bench"
    return root, materialize_bench(root)


def seedless(root: Path) -> str:
    """The public snapshot's shape: the seed's blob is absent from the object store."""
    oid = blob_of(root, SEED)
    loose(root, oid).unlink()
    return oid


def refused(call, *phrases: str) -> str:
    with pytest.raises(Refusal) as caught:
        call()
    sentence = caught.value.sentence
    assert caught.value.exit_code == ExitCode.REFUSED == 2
    assert sentence.count(". ") == 0 and sentence.endswith("."), sentence  # one sentence
    for phrase in phrases:
        assert phrase in sentence, sentence
    return sentence


def test_an_untouched_clone_is_the_pin_file_for_file(bench, tmp_path):
    root, commit = bench
    _, subs = checked_bench(root, commit)
    assert subs == []
    clone_at(root, tmp_path / "copy", commit, subs)
    verified = verify_copy(tmp_path / "copy", commit, subs)
    tracked = git(root, "ls-files").splitlines()
    assert verified.files == len(tracked) and verified.substitutes == []
    assert verified.bytes == sum((root / p).stat().st_size for p in tracked)


def test_a_changed_evaluator_marked_skip_worktree_is_refused(bench):
    root, commit = bench
    (root / EVALUATOR).write_text("print('Pass: True')\n")
    git(root, "update-index", "--skip-worktree", EVALUATOR)
    assert git(root, "status", "--porcelain") == ""  # what `git status` alone let through
    refused(lambda: bench_identity(root, commit), EVALUATOR, "skip-worktree", "object store holds")


def test_a_replace_object_for_an_evaluator_blob_is_refused(bench):
    root, commit = bench
    forged = git(root, "hash-object", "-w", "--stdin", data=b"print('Pass: True')\n")
    git(root, "replace", blob_of(root, EVALUATOR), forged)
    refused(lambda: bench_identity(root, commit), EVALUATOR, "refs/replace/", "git replace -d")


def test_a_replaced_runner_or_commit_is_refused(bench):
    root, commit = bench
    forged = git(root, "hash-object", "-w", "--stdin", data=b"#!/bin/sh\nexit 0\n")
    git(root, "replace", blob_of(root, "run_parallel.sh"), forged)
    refused(lambda: bench_identity(root, commit), "run_parallel.sh")
    git(root, "replace", "-d", blob_of(root, "run_parallel.sh"))
    bench_identity(root, commit)  # undone: admitted again
    other = git(root, "commit-tree", "-m", "not the pin", f"{commit}^{{tree}}")
    git(root, "replace", commit, other)
    refused(lambda: bench_identity(root, commit), "no blob missing from the pinned tree")


def test_a_skip_worktree_stand_in_for_the_missing_seed_is_accepted_and_recorded(bench, tmp_path):
    root, commit = bench
    pinned = seedless(root)
    (root / SEED).write_bytes(b"stand-in")
    git(root, "update-index", "--skip-worktree", SEED)
    _, subs = checked_bench(root, commit)
    assert [(s.path, s.pinned_blob, s.kind) for s in subs] == [(SEED, pinned, SubstituteKind.SKIP_WORKTREE)]
    clone_at(root, tmp_path / "copy", commit, subs)
    verified = verify_copy(tmp_path / "copy", commit, subs)
    assert [(s.path, s.sha256) for s in verified.substitutes] == [(SEED, hashlib.sha256(b"stand-in").hexdigest())]
    assert "missing from the object store" in verified.substitutes[0].reason
    assert verified.files == len(git(root, "ls-files").splitlines()) - 1


def test_a_replace_object_for_the_missing_seed_is_accepted(bench, tmp_path):
    root, commit = bench
    pinned = seedless(root)
    standin = git(root, "hash-object", "-w", "--stdin", data=b"stand-in")
    git(root, "update-ref", f"refs/replace/{pinned}", standin)
    git(root, "checkout", "--", SEED)
    _, subs = checked_bench(root, commit)
    assert [(s.kind, s.replacement) for s in subs] == [(SubstituteKind.REPLACE_OBJECT, standin)]
    clone_at(root, tmp_path / "copy", commit, subs)
    verified = verify_copy(tmp_path / "copy", commit, subs)
    assert (tmp_path / "copy" / SEED).read_bytes() == b"stand-in"
    assert [s.sha256 for s in verified.substitutes] == [hashlib.sha256(b"stand-in").hexdigest()]


def test_a_missing_seed_nothing_stands_in_for_is_refused(bench):
    root, commit = bench
    seedless(root)
    refused(lambda: bench_identity(root, commit), SEED, "nothing stands in")


def test_the_clone_is_checked_whatever_the_checkout_said(bench, tmp_path):
    """What runs is the clone: a change there (content, an extra file, a link) is refused, the
    first paths named, whatever the operator's checkout looked like at preflight."""
    root, commit = bench
    copy = tmp_path / "copy"
    clone_at(root, copy, commit, [])
    (copy / "run_parallel.sh").write_text("exit 0\n")
    refused(lambda: verify_copy(copy, commit, []), "differs from the pinned commit", "at run_parallel.sh:")
    git(copy, "checkout", "--", "run_parallel.sh")
    (copy / "tasks" / "finalpool" / "demo-csv-totals" / "evaluation" / "helper.py").write_text("x = 1\n")
    (copy / EVALUATOR).unlink()
    (copy / EVALUATOR).symlink_to("/etc/hostname")
    sentence = refused(lambda: verify_copy(copy, commit, []), EVALUATOR, "evaluation/helper.py")
    assert "/etc/hostname" not in sentence


def test_many_differences_name_the_first_three(bench, tmp_path):
    root, commit = bench
    copy = tmp_path / "copy"
    clone_at(root, copy, commit, [])
    tasks = sorted((copy / "tasks" / "finalpool").iterdir())
    for task in tasks:
        (task / "evaluation" / "main.py").write_text("print('Pass: True')\n")
    refused(lambda: verify_copy(copy, commit, []), f"(and {len(tasks) - 3} more)", tasks[0].name)


def test_a_blob_rewritten_in_the_object_store_is_refused_in_the_clone(bench, tmp_path):
    """`git status` and the skip-worktree/replace checks see nothing: the clone's bytes do differ."""
    root, commit = bench
    write_object(root, blob_of(root, EVALUATOR), b"blob", b"print('Pass: True')\n")
    _, subs = checked_bench(root, commit)
    assert subs == []
    clone_at(root, tmp_path / "copy", commit, [])
    assert (tmp_path / "copy" / EVALUATOR).read_text() == "print('Pass: True')\n"
    refused(lambda: verify_copy(tmp_path / "copy", commit, []), EVALUATOR)


def test_a_tree_rewritten_in_the_object_store_is_refused(bench):
    """The blob ids come from trees that hash to their ids, from the pinned commit down."""
    root, commit = bench
    tree = git(root, "rev-parse", f"{commit}:tasks/finalpool/demo-csv-totals/evaluation")
    forged = git(root, "hash-object", "-w", "--stdin", data=b"print('Pass: True')\n")
    body = b"100644 main.py\0" + bytes.fromhex(forged)
    write_object(root, tree, b"tree", body)
    refused(lambda: pinned_paths(root, commit), tree[:12], "does not hash to its id")


def test_paths_that_need_quoting_are_hashed(tmp_path):
    root = tmp_path / "odd"
    (root / "tasks" / "finalpool").mkdir(parents=True)
    for name in ('"quoted"', "new\nline", "back\\slash", "tab\there", "ünï"):
        (root / "tasks" / "finalpool" / name).write_text(name)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "pin")
    commit = git(root, "rev-parse", "HEAD")
    assert accepted_substitutes(root, commit) == []
    clone_at(root, tmp_path / "copy", commit, [])
    assert verify_copy(tmp_path / "copy", commit, []).files == 5
    (tmp_path / "copy" / "tasks" / "finalpool" / "new\nline").write_text("changed")
    refused(lambda: verify_copy(tmp_path / "copy", commit, []), "new\nline")
