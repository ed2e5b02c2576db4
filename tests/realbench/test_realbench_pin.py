"""The real pinned benchmark passes the check against its pin (issue 27, deliverable 5).

A dry run of the real adapter on the test bed's checkout (testbed/realbench.sh): the one substitute
is the stand-in for the seed the public snapshot lacks (db/init.sql.gz, skip-worktree), accepted
because the object store lacks its blob; every other file of the run's clone hashes to its pinned
blob, and the manifest says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from realbench_env import CPUS, MEMORY, real_testbed

SEED_BLOB = "db/init.sql.gz"
SEED_BLOB_SHA = "915a69fd8fddb8fd90121c9d4f73601a2dedf8e2"  # testbed/realbench.sh: missing from the snapshot


@pytest.fixture(scope="module")
def bed():
    return real_testbed()


def test_a_dry_run_on_the_real_benchmark_verifies_the_clone_against_the_pin(bed, docker_host, tmp_path):
    run_root = tmp_path / "runs" / "pin"
    run_root.parent.mkdir()
    task = bed.tasks(1)[0]
    args = [
        sys.executable,
        "-m",
        "cowork_adapter",
        "run",
        "--repo-dir",
        str(bed.seed),
        "--bench-root",
        str(bed.bench),
        "--docker-host",
        docker_host,
        "--resource-root",
        str(tmp_path),
        "--run-root",
        str(run_root),
        "--base-image",
        bed.base_image,
        "--build-image",
        "--model",
        "demo/stub-model",
        "--dry-run",
        "--min-free-gib",
        "1",
        "--min-root-free-gib",
        "1",
        "--cpus",
        CPUS,
        "--memory",
        MEMORY,
        "--task",
        task,
    ]
    env = {**{k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}, **bed.git_env}
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-3000:]
    manifest = json.loads((run_root / "run_manifest.json").read_text())
    verified = manifest["bench_verified"]
    tracked = subprocess.run(["git", "-C", str(bed.bench), "ls-files", "-z"], capture_output=True, check=True).stdout
    assert verified["files"] == tracked.count(b"\0") - 1  # every path but the seed, byte for byte
    assert [(s["path"], s["pinned_blob"], s["kind"]) for s in verified["substitutes"]] == [
        (SEED_BLOB, SEED_BLOB_SHA, "skip_worktree")
    ]
    assert "missing from the object store" in verified["substitutes"][0]["reason"]
    assert manifest["bench"]["dataset_size"] == 496
    print(f"verified {verified['files']} files, {verified['bytes']} bytes in {verified['seconds']} s")
