"""The demo benchmark's `cowork-pack`-shaped image, built once per machine.

Layout, as in the real benchmark image: /opt/venv (python3 -m venv, packages from a host-built
wheelhouse, installed --no-index), the benchmark tree at /workspace (main.py, demo_policy.py,
utils/, tasks/, configs/, db/, scripts/), the MCP servers at /opt/local_servers, WORKDIR
/workspace. The tag is `cowork-pack:<first 7 of the demo bench commit>`; the image is rebuilt only
when that tag is missing or its content-hash label differs from the current inputs.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import tempfile
from pathlib import Path

import docker

from ..host.daemon import docker_client
from ..image.build_lock import build_lock
from ..image.wheelhouse import build_wheelhouse, records_json
from .bench_repo import materialize_bench

PACK_REPOSITORY = "cowork-pack"
# mcp 1.x for the servers and the demo engine; psycopg2 for the crm server, preprocess and graders.
PACK_REQUIREMENTS = ["mcp==1.30.0", "psycopg2-binary==2.9.13", "PyYAML==6.0.4"]
# The deliberately broken `quotes` server's own environment: the 2.x SDK it cannot start under,
# as the benchmark's lock-less servers resolve it today (the derived image detects and repairs it).
BROKEN_SERVER_REQUIREMENTS = ["mcp==2.3.0"]
BROKEN_SERVER_VENV = "/opt/local_servers/quotes/.venv"
CONTAINER_PYTHON = "3.11"  # Debian bookworm's python3
LABEL_HASH = "org.cowork-adapter.pack.hash"
LABEL_COMMIT = "org.cowork-adapter.pack.bench-commit"
LABEL_WHEELS = "org.cowork-adapter.pack.wheels-sha256"
WHEELS_FILE_IN_IMAGE = "/opt/cowork-pack/wheels.json"
DOCKER_TIMEOUT_S = 900

_DOCKERFILE = """\
FROM {base}
COPY wheelhouse /tmp/wheelhouse
RUN python3 -m venv /opt/venv \\
 && /opt/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check -q \\
      --find-links /tmp/wheelhouse {requirements} \\
 && rm -rf /tmp/wheelhouse
COPY wheels.json {wheels_file}
COPY bench/ /workspace/
COPY bench/local_servers/ /opt/local_servers/
COPY wheelhouse-broken /tmp/wheelhouse-broken
RUN python3 -m venv {broken_venv} \\
 && {broken_venv}/bin/pip install --no-index --no-cache-dir --disable-pip-version-check -q \\
      --find-links /tmp/wheelhouse-broken {broken_requirements} \\
 && rm -rf /tmp/wheelhouse-broken
ENV PYTHONDONTWRITEBYTECODE=1
WORKDIR /workspace
"""


def container_platforms() -> list[str]:
    """pip platform tags a Debian 12 (glibc 2.36) container on this machine's architecture runs."""
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    return [f"manylinux_2_{minor}_{arch}" for minor in (36, 34, 28, 17)] + [f"manylinux2014_{arch}"]


def _dockerfile(base_image: str) -> str:
    return _DOCKERFILE.format(
        base=base_image,
        requirements=" ".join(PACK_REQUIREMENTS),
        wheels_file=WHEELS_FILE_IN_IMAGE,
        broken_venv=BROKEN_SERVER_VENV,
        broken_requirements=" ".join(BROKEN_SERVER_REQUIREMENTS),
    )


def _content_hash(base_image_id: str, bench_commit: str, dockerfile: str, platforms: list[str]) -> str:
    payload = {
        "base": base_image_id,
        "bench_commit": bench_commit,
        "dockerfile": dockerfile,
        "requirements": PACK_REQUIREMENTS,
        "broken_server_requirements": BROKEN_SERVER_REQUIREMENTS,
        "python": CONTAINER_PYTHON,
        "platforms": platforms,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def ensure_demo_pack_image(docker_host: str, *, base_image: str = "cowork-testbed/base:bookworm") -> tuple[str, str]:
    """(tag, image id) of the demo pack image, building it only when missing or out of date.

    Needs the base image on the daemon (never pulled) and, on the first build, `pip download`
    access from the host (the wheelhouse is cached afterwards).
    """
    client = docker_client(docker_host, DOCKER_TIMEOUT_S)
    try:
        base_id = client.images.get(base_image).id
        with tempfile.TemporaryDirectory(prefix="cowork-pack-") as tmp:
            context = Path(tmp)
            commit = materialize_bench(context / "bench")
            shutil.rmtree(context / "bench" / ".git")
            tag = f"{PACK_REPOSITORY}:{commit[:7]}"
            platforms = container_platforms()
            dockerfile = _dockerfile(base_image)
            content_hash = _content_hash(base_id, commit, dockerfile, platforms)  # type: ignore[arg-type]  # an image present has an id
            # One builder per tag on this machine: a second caller (another test worker, another
            # demo) waits here and then finds the image current instead of building it again.
            with build_lock(tag):
                current = _existing(client, tag)
                if current is not None and current.labels.get(LABEL_HASH) == content_hash:
                    return tag, current.id
                records = build_wheelhouse(
                    PACK_REQUIREMENTS, context / "wheelhouse", python_version=CONTAINER_PYTHON, platforms=platforms
                )
                records += build_wheelhouse(
                    BROKEN_SERVER_REQUIREMENTS,
                    context / "wheelhouse-broken",
                    python_version=CONTAINER_PYTHON,
                    platforms=platforms,
                )
                wheels_json = records_json(records)
                (context / "wheels.json").write_text(wheels_json)
                (context / "Dockerfile").write_text(dockerfile)
                labels = {
                    LABEL_HASH: content_hash,
                    LABEL_COMMIT: commit,
                    LABEL_WHEELS: hashlib.sha256(wheels_json.encode()).hexdigest(),
                }
                image, _logs = client.images.build(
                    path=str(context), tag=tag, labels=labels, pull=False, rm=True, forcerm=True
                )
                return tag, image.id  # type: ignore[return-value]  # a built image has an id
    finally:
        client.close()


def _existing(client: docker.DockerClient, tag: str):
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
