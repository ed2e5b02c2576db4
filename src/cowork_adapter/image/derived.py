"""The derived task image: the benchmark's base image plus the agent seed, mcp-proxy and the entrypoint.

Python packages come from a wheelhouse resolved on the host (so builds work offline and behind
TLS-intercepting proxies) and every wheel's SHA-256 is recorded. The run always executes the
immutable image ID; a tag whose labels do not match the pins is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import docker
import docker.errors

from .. import __version__
from ..benchmark.provenance import sha256_bytes
from ..errors import Refusal
from ..host.daemon import docker_client
from ..schemas.manifest import ImageIdentity, WheelRecord
from .repairs import DETECT_LIMITS, LABEL_REPAIRS, label_value, prepare_repairs, repair_stage
from .steplines import StepLines
from .wheelhouse import build_wheelhouse

MCP_PROXY_PIN = "mcp-proxy==0.12.0"
# mcp-proxy 0.12 imports a symbol that the 2.x SDK removed: pin the SDK below 2.x.
MCP_SDK_PIN = "mcp==1.30.0"
SEED_REQUIREMENT_FILES = ("requirements-runtime.lock", "requirements.txt")
LABEL_SEED = "org.cowork-adapter.seed_sha"
LABEL_BENCH = "org.cowork-adapter.bench_sha"
LABEL_ADAPTER = "org.cowork-adapter.adapter_version"
LABEL_ENTRY = "org.cowork-adapter.entry_sha256"  # digest of the in-container code the image carries
LABEL_WHEELS = "org.cowork-adapter.wheels_sha256"
# The base image's immutable ID at build time: a base rebuilt under the same tag is another image.
LABEL_BASE_ID = "org.cowork-adapter.base_image_id"
CONTAINER_PKG = Path(__file__).resolve().parent.parent / "container"
ENTRY_NAME = "cowork_entry.py"

DOCKERFILE = """\
# Derived by cowork-adapter: the benchmark's own image plus the agent seed, mcp-proxy and the entrypoint.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG SEED_SHA
ARG BENCH_SHA
ARG ADAPTER_VERSION
ARG WHEELS_SHA256
ARG ENTRY_SHA256
COPY wheelhouse /tmp/cowork-wheelhouse
COPY seed /opt/ouroboros-src
COPY seed-requirements.txt /tmp/cowork-seed-requirements.txt
# Each environment is filled from the wheelhouse only (--no-index): nothing is fetched at build time.
COPY install-venv.sh /tmp/cowork-install-venv.sh
RUN sh /tmp/cowork-install-venv.sh /opt/ouroboros-venv /tmp/cowork-seed-requirements.txt \\
 && if [ -f /opt/ouroboros-src/pyproject.toml ] || [ -f /opt/ouroboros-src/setup.py ]; then \\
      /opt/ouroboros-venv/bin/python -m pip install --quiet --no-index --no-deps --no-build-isolation -e /opt/ouroboros-src; fi \\
 && if command -v git >/dev/null; then test "$(git -C /opt/ouroboros-src rev-parse HEAD)" = "$SEED_SHA" \\
      && test -z "$(git -C /opt/ouroboros-src status --porcelain)"; fi
RUN printf '%s\\n' "{proxy_pin}" "{sdk_pin}" > /tmp/cowork-proxy-requirements.txt \\
 && sh /tmp/cowork-install-venv.sh /opt/mcp-proxy-venv /tmp/cowork-proxy-requirements.txt \\
 && /opt/mcp-proxy-venv/bin/mcp-proxy --help >/dev/null
{repair_stage}COPY container /opt/cowork-adapter/cowork_container
COPY {entry} /workspace/{entry}
RUN rm -rf /tmp/cowork-wheelhouse /tmp/cowork-*.txt /tmp/cowork-install-venv.sh \\
 && mkdir -p /opt/ouroboros-data /opt/cowork-runtime \\
 && /opt/venv/bin/python3 -c "import sys; sys.path.insert(0, '/opt/cowork-adapter'); import cowork_container.entrypoint"
LABEL {l_seed}=$SEED_SHA {l_bench}=$BENCH_SHA {l_adapter}=$ADAPTER_VERSION {l_wheels}=$WHEELS_SHA256 {l_entry}=$ENTRY_SHA256
"""

INSTALL_VENV = """\
#!/bin/sh
# install-venv.sh DEST REQUIREMENTS: a virtual environment filled from the wheelhouse only.
# The benchmark's base may lack python3-venv (its own env is made by uv): fall back to uv then.
set -eu
dest=$1; reqs=$2
if /usr/bin/python3 -m venv "$dest" 2>/dev/null; then
  "$dest/bin/python" -m pip install --quiet --no-index --find-links /tmp/cowork-wheelhouse -r "$reqs"
elif command -v uv >/dev/null; then
  uv venv --quiet --python /usr/bin/python3 "$dest"
  uv pip install --quiet --python "$dest/bin/python" --no-index --find-links /tmp/cowork-wheelhouse -r "$reqs"
else
  echo "cannot create $dest: /usr/bin/python3 has no venv module and uv is absent" >&2
  exit 1
fi
"""

ENTRY_SCRIPT = '''\
"""cowork-adapter's engine entry for the benchmark runner (AGENT_ENTRY=cowork_entry.py)."""
import sys

sys.path.insert(0, "/opt/cowork-adapter")
from cowork_container.entrypoint import main  # noqa: E402

sys.exit(main())
'''


@dataclass(frozen=True)
class ImageRequest:
    tag: str
    base_image: str
    seed_dir: Path
    seed_head: str
    bench_commit: str
    base_image_id: str | None = None  # the ID `base_image` names now; None leaves the base unchecked


def container_digest() -> str:
    """SHA-256 over the in-container package: an image built from other entry code is another image."""
    digest = hashlib.sha256()
    for path in sorted(CONTAINER_PKG.rglob("*.py")):
        digest.update(path.relative_to(CONTAINER_PKG).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(ENTRY_SCRIPT.encode())
    return digest.hexdigest()


def expected_labels(req: ImageRequest) -> dict[str, str]:
    labels = {LABEL_SEED: req.seed_head, LABEL_BENCH: req.bench_commit, LABEL_ENTRY: container_digest()}
    if req.base_image_id is not None:
        labels[LABEL_BASE_ID] = req.base_image_id
    return labels


def label_mismatch(tag: str, labels: dict[str, str], req: ImageRequest) -> str | None:
    """One sentence naming the first label that does not match the pins, else None."""
    for key, want in expected_labels(req).items():
        if key == LABEL_BASE_ID and labels.get(key) != want:
            built_on = labels.get(key) or "an unrecorded base"
            return (
                f"image {tag} was built on {built_on[:19]}, but {req.base_image} is now {want[:19]}; "
                "pass --build-image to rebuild it"
            )
        have = labels.get(key)
        if have != want:
            shown = (have or "(none)")[:12]
            return f"image {tag} has label {key}={shown}, not {want[:12]}; pass --build-image to rebuild it"
    return None


def check_labels(tag: str, labels: dict[str, str], req: ImageRequest) -> None:
    mismatch = label_mismatch(tag, labels, req)
    if mismatch:
        raise Refusal("image", mismatch + ".")


def _client(docker_host: str) -> docker.DockerClient:
    return docker_client(docker_host, 120)


def inspect_image(docker_host: str, ref: str) -> dict | None:
    """The image's inspect record, None when absent; an unreachable daemon is a refusal."""
    try:
        return _client(docker_host).api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.DockerException as exc:
        raise Refusal("docker_host", f"the Docker daemon at {docker_host} did not answer: {exc}") from exc


def image_python(docker_host: str, base_image: str, run_label: str) -> tuple[str, list[str]]:
    """The base image's /usr/bin/python3 version ("3.11") and wheel platform tags, asked of the image."""
    probe = (
        "import json,sys,platform;"
        "print(json.dumps([f'{sys.version_info[0]}.{sys.version_info[1]}', platform.libc_ver()[1], platform.machine()]))"
    )
    try:
        out = _client(docker_host).containers.run(
            base_image,
            ["/usr/bin/python3", "-c", probe],
            remove=True,
            labels={"org.cowork-adapter.run": run_label},
            network_disabled=True,
            **DETECT_LIMITS,  # small fixed limits, like the repair detector's
        )
    except docker.errors.DockerException as exc:
        raise Refusal("image", f"the base image {base_image} could not run /usr/bin/python3: {exc}") from exc
    version, libc, machine = json.loads(out.decode().strip().splitlines()[-1])
    major, minor = (int(x) for x in (libc or "2.17").split(".")[:2])
    # Every manylinux tag this glibc can load, newest first, then the legacy aliases.
    platforms = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, 16, -1)]
    platforms += [f"manylinux2014_{machine}", f"linux_{machine}"]
    return version, platforms


def _pyproject(seed_dir: Path) -> dict:
    path = seed_dir / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise Refusal("image", f"the seed's pyproject.toml is not valid TOML: {exc}.") from exc


def _strings(value: object) -> list[str]:
    return [v.strip() for v in value if isinstance(v, str) and v.strip()] if isinstance(value, list) else []


def seed_requirements(seed_dir: Path) -> list[str]:
    """The seed's runtime requirements: its lock/requirements file, else pyproject [project].dependencies."""
    for name in SEED_REQUIREMENT_FILES:
        path = seed_dir / name
        if path.is_file():
            return [
                line.strip()
                for line in path.read_text().splitlines()
                if line.strip() and not line.lstrip().startswith(("#", "-e", "--"))
            ]
    return _strings(_pyproject(seed_dir).get("project", {}).get("dependencies"))


def seed_build_requirements(seed_dir: Path) -> list[str]:
    """pyproject [build-system].requires: the offline editable install (--no-build-isolation) needs
    them in the venv, since a Debian venv's own setuptools is older and has no `wheel`."""
    return _strings(_pyproject(seed_dir).get("build-system", {}).get("requires"))


def build_derived_image(
    docker_host: str,
    req: ImageRequest,
    context_dir: Path,
    log_path: Path,
    run_label: str,
    disk_ok: Callable[[], str | None],
    *,
    repair: bool = True,
    progress: TextIO | None = None,
) -> list[WheelRecord]:
    """Build `req.tag` from a fresh build context; returns the wheels it installed.

    `progress`: where to say each build step and, while one lasts, a line every 10 s (the
    launcher passes stderr; the full build output is in `log_path` either way).

    `disk_ok()` is asked between build steps and returns a refusal sentence when a disk reserve
    is crossed, which abandons the build (the daemon cancels it when the stream closes).
    """
    lines = StepLines(f"building {req.tag}", progress) if progress is not None else _NoLines()
    with lines:
        return _build(docker_host, req, context_dir, log_path, run_label, disk_ok, repair, lines)


class _NoLines(contextlib.nullcontext):
    def set(self, step: str) -> None:
        pass


def _build(
    docker_host: str,
    req: ImageRequest,
    context_dir: Path,
    log_path: Path,
    run_label: str,
    disk_ok: Callable[[], str | None],
    repair: bool,
    lines: StepLines | _NoLines,
) -> list[WheelRecord]:
    lines.set("cloning the seed into the build context")
    context_dir.mkdir(parents=True)
    seed_copy = context_dir / "seed"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(req.seed_dir), str(seed_copy)],
        check=True,
        timeout=600,
        capture_output=True,
    )
    subprocess.run(
        ["git", "-C", str(seed_copy), "checkout", "--quiet", "--detach", req.seed_head],
        check=True,
        timeout=120,
        capture_output=True,
    )
    shutil.rmtree(seed_copy / ".git" / "hooks", ignore_errors=True)
    seed_reqs = seed_requirements(seed_copy) + seed_build_requirements(seed_copy)
    (context_dir / "seed-requirements.txt").write_text("".join(f"{r}\n" for r in seed_reqs))
    python_version, platforms = image_python(docker_host, req.base_image, run_label)
    # Two resolutions into one wheelhouse: the seed and mcp-proxy live in separate venvs and may pin
    # different versions of the same package (a real seed pins its own mcp).
    wheels = {}
    lines.set("resolving the wheelhouse on the host (seed and mcp-proxy)")
    for group in (seed_reqs, [MCP_PROXY_PIN, MCP_SDK_PIN]):
        if group:
            for w in build_wheelhouse(
                group, context_dir / "wheelhouse", python_version=python_version, platforms=platforms
            ):
                wheels[w.filename] = w
    # Detected faults of the base image get a disclosed repair stage (none when nothing is found).
    # repair=False builds the image as the benchmark gives it (tests of detection and refusal).
    lines.set("checking the base image's MCP servers for known faults")
    repairs, checks, repair_wheels = (
        prepare_repairs(docker_host, req.base_image, run_label, context_dir, platforms) if repair else ([], [], [])
    )
    records = [WheelRecord(filename=w.filename, sha256=w.sha256, size=w.size) for _, w in sorted(wheels.items())]
    records += [WheelRecord(filename=w.filename, sha256=w.sha256, size=w.size) for w in repair_wheels]
    wheels_digest = _digest_of(records)
    shutil.copytree(CONTAINER_PKG, context_dir / "container", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (context_dir / ENTRY_NAME).write_text(ENTRY_SCRIPT)
    (context_dir / "install-venv.sh").write_text(INSTALL_VENV)
    (context_dir / "Dockerfile").write_text(
        DOCKERFILE.replace("{proxy_pin}", MCP_PROXY_PIN)
        .replace("{sdk_pin}", MCP_SDK_PIN)
        .replace("{repair_stage}", repair_stage(repairs))
        .replace("{entry}", ENTRY_NAME)
        .replace("{l_seed}", LABEL_SEED)
        .replace("{l_bench}", LABEL_BENCH)
        .replace("{l_adapter}", LABEL_ADAPTER)
        .replace("{l_wheels}", LABEL_WHEELS)
        .replace("{l_entry}", LABEL_ENTRY)
    )
    base_id = (inspect_image(docker_host, req.base_image) or {}).get("Id")
    if not base_id or (req.base_image_id is not None and base_id != req.base_image_id):
        raise Refusal("image", f"the base image {req.base_image} changed or vanished while the run started; run again.")
    buildargs = {
        "BASE_IMAGE": req.base_image,
        "SEED_SHA": req.seed_head,
        "BENCH_SHA": req.bench_commit,
        "ADAPTER_VERSION": __version__,
        "WHEELS_SHA256": wheels_digest,
        "ENTRY_SHA256": container_digest(),
    }
    api = docker.APIClient(base_url=docker_host, timeout=7200)
    lines.set("docker build started")
    with open(log_path, "a", encoding="utf-8") as log:
        stream = api.build(
            path=str(context_dir),
            tag=req.tag,
            buildargs=buildargs,
            pull=False,
            rm=True,
            forcerm=True,
            decode=True,
            labels={LABEL_REPAIRS: label_value(repairs, checks), LABEL_BASE_ID: base_id},
        )
        try:
            for chunk in stream:
                if "stream" in chunk:
                    log.write(chunk["stream"])
                    if chunk["stream"].startswith("Step "):
                        lines.set(chunk["stream"])
                if "error" in chunk:
                    log.write(chunk["error"] + "\n")
                    raise Refusal(
                        "image", f"building {req.tag} failed: {chunk['error'].strip()[:300]} (see {log_path})."
                    )
                reason = disk_ok()
                if reason:
                    raise Refusal("image", f"building {req.tag} stopped: {reason}")
        finally:
            stream.close()
    return records


def _digest_of(records: list[WheelRecord]) -> str:
    return sha256_bytes(
        "".join(f"{r.filename} {r.sha256}\n" for r in sorted(records, key=lambda r: r.filename)).encode()
    )


def resolve_image(docker_host: str, req: ImageRequest, *, built: bool, wheels: list[WheelRecord]) -> ImageIdentity:
    """The tag's immutable identity, refusing a missing image or labels that do not match the pins."""
    info = inspect_image(docker_host, req.tag)
    if info is None:
        raise Refusal("image", f"image {req.tag} is not present on the daemon; pass --build-image to build it.")
    image_id = info.get("Id")
    if not image_id:
        raise Refusal("image", f"the daemon returned no Id for image {req.tag}.")
    labels = (info.get("Config") or {}).get("Labels") or {}
    check_labels(req.tag, labels, req)
    # The base the image was built on (its label), checked above against what the base tag names now.
    base_id = labels.get(LABEL_BASE_ID) or (inspect_image(docker_host, req.base_image) or {}).get("Id")
    return ImageIdentity(
        tag=req.tag,
        id=image_id,
        base_image=req.base_image,
        base_image_id=base_id,
        labels=labels,
        wheels=wheels,
        built=built,
    )
