"""A base image rebuilt under the same tag invalidates the derived image built on the old one.

On the test-bed daemon: a derived image is built on base A (our own tag on the demo pack image);
then a different image (A plus one label, so another ID) takes the same base tag. Without
--build-image the run is refused in one sentence naming both IDs and writes nothing; with it the
derived image is rebuilt, its label and the manifest both naming the new base's ID.
"""

from __future__ import annotations

import io
import os
import secrets
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from cowork_adapter.demo.bench_repo import materialize_bench
from cowork_adapter.demo.env import read_json
from cowork_adapter.demo.pack_image import ensure_demo_pack_image
from cowork_adapter.demo.seed_repo import make_stub_seed
from cowork_adapter.image.derived import LABEL_BASE_ID


@pytest.fixture(scope="module")
def world(docker_host, tmp_path_factory):
    root = tmp_path_factory.mktemp("base-rebuild")
    bench, seed = root / "bench", root / "seed"
    commit = materialize_bench(bench)
    make_stub_seed(seed)
    _pack_tag, pack_id = ensure_demo_pack_image(docker_host)
    token = secrets.token_hex(4)
    base_tag, derived_tag = f"cowork-adapter-test-base:{token}", f"cowork-adapter-test-derived:{token}"
    client = docker.DockerClient(base_url=docker_host, timeout=600)
    client.images.get(pack_id).tag(base_tag)
    (root / "runs").mkdir()
    made: list[str] = []
    try:
        yield {
            "root": root,
            "bench": bench,
            "commit": commit,
            "seed": seed,
            "host": docker_host,
            "client": client,
            "pack_id": pack_id,
            "base_tag": base_tag,
            "derived_tag": derived_tag,
            "made": made,
            "token": token,
        }
    finally:
        for ref in (derived_tag, base_tag):  # only our own tags; shared images stay
            try:
                client.images.remove(ref, noprune=False)
            except docker.errors.ImageNotFound:
                pass
        for image_id in made:
            try:
                client.images.remove(image_id, noprune=False)
            except docker.errors.APIError:
                pass  # still tagged elsewhere or in use: not ours to force
        client.close()


def dry_run(w: dict, name: str, *, build: bool) -> tuple[subprocess.CompletedProcess, Path]:
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
        w["base_tag"],
        "--image",
        w["derived_tag"],
        "--model",
        "demo/stub-model",
        "--dry-run",
        "--min-free-gib",
        "1",
        "--min-root-free-gib",
        "1",
        "--task",
        "demo-csv-totals",
    ] + (["--build-image"] if build else [])
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    return subprocess.run(
        args, env=env, capture_output=True, text=True, timeout=1200, stdin=subprocess.DEVNULL
    ), run_root


def test_a_rebuilt_base_is_refused_without_build_image_and_rebuilt_with_it(world):
    client = world["client"]
    first, root_a = dry_run(world, "on-base-a", build=True)
    assert first.returncode == 0, first.stderr[-2000:]
    # The build is never silent: a timestamped line per step on stderr (and every 10 s within one).
    steps = [line for line in first.stderr.splitlines() if f"] building {world['derived_tag']}: Step " in line]
    assert steps and all(line.startswith("[") for line in steps), first.stderr[-2000:]
    image_a = read_json(root_a / "run_manifest.json")["image"]
    assert image_a["built"] is True and image_a["base_image_id"] == world["pack_id"]
    assert image_a["labels"][LABEL_BASE_ID] == world["pack_id"]

    # Base B: another image under the same base tag (the old derived image keeps base A's ID in its label).
    dockerfile = f"FROM {world['pack_id']}\nLABEL org.cowork-adapter.test.rebuilt={world['token']}\n"
    base_b, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=world["base_tag"], rm=True, pull=False)
    world["made"].append(base_b.id)
    assert base_b.id != world["pack_id"]

    refused, root_refused = dry_run(world, "on-base-b-refused", build=False)
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert f"was built on {world['pack_id'][:19]}, but {world['base_tag']} is now {base_b.id[:19]}" in lines[0]
    assert "--build-image" in lines[0]
    assert not root_refused.exists()
    assert client.images.get(world["derived_tag"]).id == image_a["id"]  # nothing was rebuilt or retagged

    rebuilt, root_b = dry_run(world, "on-base-b-rebuilt", build=True)
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    image_b = read_json(root_b / "run_manifest.json")["image"]
    assert image_b["built"] is True and image_b["id"] != image_a["id"]
    assert image_b["base_image_id"] == base_b.id and image_b["labels"][LABEL_BASE_ID] == base_b.id
    world["made"].append(image_a["id"])  # the first derived image, now untagged: ours to remove
