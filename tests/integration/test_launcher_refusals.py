"""`cowork-adapter run` refusals, through the real CLI on real git checkouts and a real daemon.

Each case perturbs exactly one input of an invocation that is otherwise admitted (the control
dry run proves that), and must exit 2 with one sentence on stderr, create no run root, and leave
a reused run root byte-for-byte unchanged. Dry runs are used: every refusal here happens before
any paid machinery starts, and a dry run needs no key.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from cowork_adapter.demo.bench_repo import materialize_bench
from cowork_adapter.demo.pack_image import ensure_demo_pack_image
from cowork_adapter.demo.seed_repo import make_stub_seed

CLI_TIMEOUT_S = 600  # the control may build the derived image when the demo bench changed


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t.invalid",
    )
    out = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def tree_digest(root: Path) -> str:
    """A digest of every path, mode and file content under `root` (what "unchanged" means)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root)).encode()
        stat = path.lstat()
        digest.update(rel + b"\0" + str(stat.st_mode).encode() + b"\0")
        if path.is_file() and not path.is_symlink():
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def world(docker_host, tmp_path_factory):
    root = tmp_path_factory.mktemp("refusals")
    bench = root / "bench"
    commit = materialize_bench(bench)
    seed = root / "seed"
    make_stub_seed(seed)
    pack_tag, pack_id = ensure_demo_pack_image(docker_host)
    (root / "runs").mkdir()
    mismatch_tag = f"cowork-adapter-test-mismatch:{secrets.token_hex(4)}"
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    client.images.get(pack_id).tag(mismatch_tag)  # a real image whose labels name no seed
    try:
        yield {
            "root": root,
            "bench": bench,
            "commit": commit,
            "seed": seed,
            "pack": pack_tag,
            "docker_host": docker_host,
            "mismatch_tag": mismatch_tag,
        }
    finally:
        client.images.remove(mismatch_tag, noprune=True)  # only our tag; the image stays
        client.close()


def base_args(w: dict, run_root: Path, **over) -> list[str]:
    values = {
        "--repo-dir": str(w["seed"]),
        "--bench-root": str(w["bench"]),
        "--bench-commit": w["commit"],
        "--docker-host": w["docker_host"],
        "--resource-root": str(w["root"]),
        "--run-root": str(run_root),
        "--base-image": w["pack"],
        "--model": "demo/stub-model",
    }
    values.update(over)
    args = [sys.executable, "-m", "cowork_adapter", "run"]
    for flag, value in values.items():
        args += [flag, value]
    return args + [
        "--dry-run",
        "--build-image",
        "--min-free-gib",
        "1",
        "--min-root-free-gib",
        "1",
        "--cpus",
        "1",
        "--memory",
        "2g",
        "--task",
        "demo-csv-totals",
    ]


def run_cli(args: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}  # only the flag names the daemon
    return subprocess.run(
        args, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL
    )


def assert_refused(out: subprocess.CompletedProcess, *phrases: str) -> None:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("cowork-adapter:"), lines[0]
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


def test_control_invocation_is_admitted(world):
    run_root = world["root"] / "runs" / "control"
    out = run_cli(base_args(world, run_root))
    assert out.returncode == 0, out.stderr
    assert (run_root / "run_manifest.json").is_file()


def test_reused_run_root_is_refused_and_untouched(world):
    run_root = world["root"] / "runs" / "reused"
    (run_root / "dumps").mkdir(parents=True)
    (run_root / "run_manifest.json").write_text('{"earlier": "run"}\n')
    (run_root / "dumps" / "traj_log.json").write_text("[1, 2, 3]\n")
    before = tree_digest(run_root)
    siblings = sorted(p.name for p in run_root.parent.iterdir())
    out = run_cli(base_args(world, run_root))
    assert_refused(out, "already exists")
    assert tree_digest(run_root) == before
    assert sorted(p.name for p in run_root.parent.iterdir()) == siblings


def _fresh(world: dict, name: str) -> Path:
    run_root = world["root"] / "runs" / name
    assert not run_root.exists()
    return run_root


def _refused_without_root(world: dict, name: str, args: list[str], *phrases: str) -> None:
    run_root = world["root"] / "runs" / name
    out = run_cli(args)
    assert_refused(out, *phrases)
    assert not run_root.exists(), f"a refused invocation created {run_root}"


def test_dirty_seed_is_refused(world):
    seed = world["root"] / "seed-dirty"
    make_stub_seed(seed)
    (seed / "notes.txt").write_text("an uncommitted file\n")
    run_root = _fresh(world, "dirty-seed")
    _refused_without_root(
        world, "dirty-seed", base_args(world, run_root, **{"--repo-dir": str(seed)}), "uncommitted changes"
    )


def test_seed_that_is_not_a_repository_is_refused(world):
    seed = world["root"] / "seed-plain"
    shutil.copytree(world["seed"], seed, ignore=shutil.ignore_patterns(".git"))
    run_root = _fresh(world, "plain-seed")
    _refused_without_root(
        world, "plain-seed", base_args(world, run_root, **{"--repo-dir": str(seed)}), "not a git repository"
    )


def test_benchmark_at_another_commit_is_refused(world):
    bench = world["root"] / "bench-moved"
    git(world["root"], "clone", "-q", str(world["bench"]), str(bench))
    git(bench, "commit", "-q", "--allow-empty", "-m", "a later commit")
    assert git(bench, "rev-parse", "HEAD") != world["commit"]
    run_root = _fresh(world, "moved-bench")
    _refused_without_root(
        world, "moved-bench", base_args(world, run_root, **{"--bench-root": str(bench)}), "not at the pinned commit"
    )


def test_dirty_benchmark_is_refused(world):
    bench = world["root"] / "bench-dirty"
    git(world["root"], "clone", "-q", str(world["bench"]), str(bench))
    runner = bench / "run_parallel.sh"
    runner.write_text(runner.read_text() + "\n# a local edit\n")
    run_root = _fresh(world, "dirty-bench")
    _refused_without_root(
        world, "dirty-bench", base_args(world, run_root, **{"--bench-root": str(bench)}), "uncommitted changes"
    )


def test_missing_base_image_is_refused(world):
    run_root = _fresh(world, "no-base")
    _refused_without_root(
        world,
        "no-base",
        base_args(world, run_root, **{"--base-image": "cowork-pack:doesnotexist"}),
        "cowork-pack:doesnotexist",
        "not present",
    )


def test_image_with_mismatching_labels_is_refused_without_build(world):
    run_root = _fresh(world, "mismatch")
    args = [a for a in base_args(world, run_root) if a != "--build-image"] + ["--image", world["mismatch_tag"]]
    _refused_without_root(world, "mismatch", args, world["mismatch_tag"], "label")


def test_empty_docker_host_is_refused(world):
    run_root = _fresh(world, "no-host")
    _refused_without_root(world, "no-host", base_args(world, run_root, **{"--docker-host": ""}), "Docker")
