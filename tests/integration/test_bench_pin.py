"""Runner and evaluators unchanged, enforced, through the real CLI on the demo bench (issue 27, deliverable 5).

Dry runs on a real daemon: a stand-in is accepted only for a blob the object store lacks (the
database seed, as in the public snapshot); a changed evaluator or runner hidden from `git status`
(skip-worktree, a replace object, an object rewritten in the store) is refused with exit 2 and one
sentence naming the path, before anything starts.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path

import pytest
from test_launcher_refusals import assert_refused, base_args, git, run_cli

from cowork_adapter.demo.bench_repo import materialize_bench
from cowork_adapter.demo.pack_image import ensure_demo_pack_image
from cowork_adapter.demo.seed_repo import make_stub_seed

EVALUATOR = "tasks/finalpool/demo-csv-totals/evaluation/main.py"
SEED = "db/init.sql.gz"
FORGED = b"print('Pass: True')\n"


@pytest.fixture(scope="module")
def world(docker_host, tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-pin")
    seed = root / "seed"
    make_stub_seed(seed)
    pack_tag, _ = ensure_demo_pack_image(docker_host)
    (root / "runs").mkdir()
    return {
        "root": root,
        "seed": seed,
        "pack": pack_tag,
        "docker_host": docker_host,
        "commit": materialize_bench(root / "pristine"),
    }


def checkout(world: dict, name: str) -> Path:
    """A fresh operator checkout of the demo bench at the pinned commit."""
    bench = world["root"] / name
    assert materialize_bench(bench) == world["commit"]
    return bench


def loose(bench: Path, path: str) -> Path:
    oid = git(bench, "rev-parse", f"HEAD:{path}")
    return bench / ".git" / "objects" / oid[:2] / oid[2:]


def dry_run(world: dict, bench: Path, name: str):
    run_root = world["root"] / "runs" / name
    w = {**world, "bench": bench}
    return run_root, run_cli(base_args(w, run_root))


def refused_before_the_root(world: dict, bench: Path, name: str, *phrases: str) -> None:
    run_root, out = dry_run(world, bench, name)
    assert_refused(out, *phrases)
    assert not run_root.exists(), f"a refused invocation created {run_root}"


def test_a_stand_in_for_the_missing_seed_is_accepted_and_recorded(world):
    bench = checkout(world, "seedless")
    loose(bench, SEED).unlink()  # the public snapshot's shape: the store lacks the seed's blob
    (bench / SEED).write_bytes(b"stand-in seed")
    git(bench, "update-index", "--skip-worktree", SEED)
    run_root, out = dry_run(world, bench, "seedless")
    assert out.returncode == 0, out.stderr
    manifest = json.loads((run_root / "run_manifest.json").read_text())
    verified = manifest["bench_verified"]
    assert [(s["path"], s["kind"], s["sha256"]) for s in verified["substitutes"]] == [
        (SEED, "skip_worktree", hashlib.sha256(b"stand-in seed").hexdigest())
    ]
    assert verified["files"] == len(git(bench, "ls-files").splitlines()) - 1
    assert (run_root / "bench" / SEED).read_bytes() == b"stand-in seed"


def test_a_changed_evaluator_marked_skip_worktree_is_refused(world):
    bench = checkout(world, "evaluator-skip")
    (bench / EVALUATOR).write_bytes(FORGED)
    git(bench, "update-index", "--skip-worktree", EVALUATOR)
    assert git(bench, "status", "--porcelain") == ""
    refused_before_the_root(world, bench, "evaluator-skip", EVALUATOR, "skip-worktree")


def test_a_replace_object_for_an_evaluator_is_refused(world):
    bench = checkout(world, "evaluator-replace")
    (bench / "forged.py").write_bytes(FORGED)
    forged = git(bench, "hash-object", "-w", "forged.py")
    (bench / "forged.py").unlink()
    git(bench, "replace", git(bench, "rev-parse", f"HEAD:{EVALUATOR}"), forged)
    # The checkout's own file is untouched (status clean); a clone taking refs/replace/ gets FORGED.
    assert git(bench, "status", "--porcelain") == ""
    refused_before_the_root(world, bench, "evaluator-replace", EVALUATOR, "refs/replace/")


def test_a_changed_runner_marked_skip_worktree_is_refused(world):
    bench = checkout(world, "runner-skip")
    (bench / "run_parallel.sh").write_text("#!/usr/bin/env bash\necho 'Pass: True'\n")
    git(bench, "update-index", "--skip-worktree", "run_parallel.sh")
    refused_before_the_root(world, bench, "runner-skip", "run_parallel.sh", "skip-worktree")


def test_a_runner_rewritten_in_the_object_store_is_refused_in_the_runs_clone(world):
    """Nothing in the checkout shows it (git status is clean, no substitute): the clone's bytes do."""
    bench = checkout(world, "runner-forged")
    body = b"#!/usr/bin/env bash\necho 'Pass: True'\n"
    target = loose(bench, "run_parallel.sh")
    target.unlink()
    target.write_bytes(zlib.compress(b"blob %d\0" % len(body) + body))
    run_root, out = dry_run(world, bench, "runner-forged")
    assert_refused(out, "run's benchmark clone differs from the pinned commit", "run_parallel.sh")
    manifest = json.loads((run_root / "run_manifest.json").read_text())
    assert manifest["outcome"] == "refused" and manifest["exit_code"] == 2
    assert manifest["refusal"]["stage"] == "bench" and "run_parallel.sh" in manifest["refusal"]["sentence"]
    assert manifest["bench_verified"] is None
    # Nothing started: no image resolved, no runner command, the forged runner only in the clone.
    assert manifest["image"] is None and manifest["official_command"] == []
    assert (run_root / "bench" / "run_parallel.sh").read_bytes() == body
