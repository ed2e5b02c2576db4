"""Two launchers that need the same missing derived image at once build it once (the build lock).

On the test-bed daemon: two dry runs with --build-image and our own --image tag start together.
Without the lock both find the tag missing, both build, and the later build retags the tag under
the run that finished first, whose manifest then names an image the tag no longer points at. With
it one builds while the other waits, then finds the image current and uses it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import docker
import pytest

from cowork_adapter.demo.bench_repo import materialize_bench
from cowork_adapter.demo.env import read_json
from cowork_adapter.demo.pack_image import ensure_demo_pack_image
from cowork_adapter.demo.seed_repo import make_stub_seed


@pytest.fixture(scope="module")
def world(docker_host, tmp_path_factory):
    root = tmp_path_factory.mktemp("build-lock")
    bench, seed = root / "bench", root / "seed"
    commit = materialize_bench(bench)
    make_stub_seed(seed)
    pack_tag, _ = ensure_demo_pack_image(docker_host)
    (root / "runs").mkdir()
    tag = f"cowork-adapter-test-lock:{secrets.token_hex(4)}"
    client = docker.DockerClient(base_url=docker_host, timeout=600)
    try:
        yield {
            "root": root,
            "bench": bench,
            "commit": commit,
            "seed": seed,
            "host": docker_host,
            "pack_tag": pack_tag,
            "tag": tag,
            "client": client,
        }
    finally:
        try:
            client.images.remove(tag, noprune=False)  # only our own tag
        except docker.errors.ImageNotFound:
            pass
        client.close()


def start_dry_run(w: dict, name: str) -> subprocess.Popen:
    run_root = w["root"] / "runs" / name
    args = [
        sys.executable,
        "-m",
        "cowork_adapter",
        "run",
        "--repo-dir",
        str(w["seed"]),
        "--bench-root",
        str(w["bench"]),
        "--bench-commit",
        w["commit"],
        "--docker-host",
        w["host"],
        "--resource-root",
        str(w["root"]),
        "--run-root",
        str(run_root),
        "--base-image",
        w["pack_tag"],
        "--image",
        w["tag"],
        "--build-image",
        "--model",
        "demo/stub-model",
        "--dry-run",
        "--min-free-gib",
        "1",
        "--min-root-free-gib",
        "1",
        "--task",
        "demo-csv-totals",
    ]
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    return subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )


def test_two_launchers_needing_one_missing_image_build_it_once(world):
    procs = {name: start_dry_run(world, name) for name in ("first", "second")}
    outs = {name: proc.communicate(timeout=1500) for name, proc in procs.items()}
    for name, proc in procs.items():
        assert proc.returncode == 0, outs[name][1][-2000:]
    images = {name: read_json(world["root"] / "runs" / name / "run_manifest.json")["image"] for name in procs}
    assert sorted(image["built"] for image in images.values()) == [False, True], images
    building = [name for name in procs if f"] building {world['tag']}: Step " in outs[name][1]]
    assert len(building) == 1, {name: out[1][-1500:] for name, out in outs.items()}
    current = world["client"].images.get(world["tag"]).id
    assert images["first"]["id"] == images["second"]["id"] == current  # both name the image the tag holds
