"""The demo's shared ground: the prepared demo root (bench, stub seed, meter stand-in), the checks
every scenario makes of custody and the campaign, and the bystander containers that prove the
cleanup removes only the run's own."""

from __future__ import annotations

import errno
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker

from ..container.safefile import REGULAR, open_nofollow
from ..custody.docker_ops import label_is_empty
from ..custody.labels import RUN_LABEL_KEY, run_label
from ..host.daemon import docker_client
from ..vocab import TaskStatus
from .bench_repo import materialize_bench
from .meter_standin import MeterStandin
from .pack_image import ensure_demo_pack_image
from .seed_repo import make_stub_seed

MODEL = "demo/stub-model"


BYSTANDER_IMAGE = "cowork-testbed/base:bookworm"


# The designed ledger outcome of each demo task under the stub engine.
DESIGNED = {
    "demo-csv-totals": TaskStatus.PASSED,
    "demo-wrong-answer": TaskStatus.FAILED,
    "demo-crm-postgres": TaskStatus.PASSED,
    "demo-deck-stateful": TaskStatus.PASSED,
    "demo-round-limit": TaskStatus.AGENT_FAILED,
    # The stub engine says its provider failed, but under --key-in-agent no gateway saw it fail: a
    # claim the host cannot check is the agent's (score/infra.py), never a rerun.
    "demo-provider-error": TaskStatus.AGENT_FAILED,
}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class DemoEnv:
    """Everything a scenario needs, made once per demo root."""

    root: Path
    docker_host: str
    bench: Path
    bench_commit: str
    seed: Path
    storage: Path
    pack_tag: str
    key: str
    meter: MeterStandin
    key_env: str = "COWORK_DEMO_PROVIDER_KEY"

    def run_args(
        self,
        name: str,
        tasks: list[str],
        *,
        campaign: str,
        budget_usd: float = 20,
        extra: list[str] | None = None,
        concurrency: int = 2,
    ) -> list[str]:
        args = [
            sys.executable,
            "-m",
            "cowork_adapter",
            "run",
            "--repo-dir",
            str(self.seed),
            "--bench-root",
            str(self.bench),
            "--bench-commit",
            self.bench_commit,
            "--docker-host",
            self.docker_host,
            "--resource-root",
            str(self.storage),
            "--run-root",
            str(self.run_root(name)),
            "--base-image",
            self.pack_tag,
            "--build-image",
            "--model",
            MODEL,
            "--max-steps",
            "20",
            "--task-timeout",
            "240",
            "--concurrency",
            str(concurrency),
            "--campaign-file",
            str(self.root / campaign),
            "--new-campaign",
            "--campaign-budget-usd",
            "50",
            "--budget-usd",
            str(budget_usd),
            "--budget-reserve-usd",
            "5",
            "--meter-url",
            self.meter.base_url,
            "--api-key-env",
            self.key_env,
            "--min-key-usd",
            "0",
            "--min-free-gib",
            "1",
            "--min-root-free-gib",
            "1",
            "--cpus",
            "1",
            "--memory",
            "2g",
        ]
        for task in tasks:
            args += ["--task", task]
        return args + key_route(list(extra or [])) + list(extra or [])

    def run_root(self, name: str) -> Path:
        return self.root / "runs" / name

    def launch(self, args: list[str], log_name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        env = {**os.environ, **(extra_env or {}), self.key_env: self.key}
        with open(self.root / f"{log_name}.log", "ab") as log:  # the child has its own copy of the descriptor
            return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def key_route(extra: list[str]) -> list[str]:
    """The demo's paid runs take the seed's path (--key-in-agent; its key is a stand-in that unlocks
    only the local meter) unless they name a route themselves: a route flag, or --provider-upstream-url,
    which only the default route takes (its stand-in provider). The default route has its own tests
    (tests/integration/test_provider_tls_run.py, test_default_route_runs.py)."""
    named = {"--llm-gateway", "--key-in-agent", "--llm-gateway-host", "--provider-upstream-url"}
    engine = extra[extra.index("--engine") + 1] if "--engine" in extra[:-1] else ""
    if named & set(extra) or engine in ("oracle", "nop"):
        return []
    return ["--key-in-agent"]


def prepare(root: Path, docker_host: str) -> DemoEnv:
    root.mkdir(parents=True)
    (root / "runs").mkdir()
    storage = root / "storage"
    storage.mkdir()
    bench = root / "bench-src"
    commit = materialize_bench(bench)
    seed = root / "seed"
    make_stub_seed(seed)
    tag, _image_id = ensure_demo_pack_image(docker_host)
    key = "demo-" + secrets.token_hex(16)  # a stand-in key: it unlocks only the local meter
    meter = MeterStandin(key, usage=5.0).start()
    meter.set_rate(0.0005)
    return DemoEnv(root, docker_host, bench, commit, seed, storage, tag, key, meter)


def wait_for(predicate: Callable[[], bool], timeout: float, step: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def agent_started(run_root: Path) -> bool:
    evidence = run_root / "custody" / "evidence"
    return evidence.is_dir() and any(p.suffix == ".task" for p in evidence.iterdir())


def read_rows(run_root: Path) -> dict[str, dict]:
    path = run_root / "result_index.jsonl"
    if not path.is_file():
        return {}
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {row["instance_id"]: row for row in rows}


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _holds(fd: int, needle: bytes, chunk: int = 1 << 20) -> bool:
    """True when the open regular file holds `needle`; only its data extents are read, so a
    20 GiB sparse file (the hostile engine's) costs nothing, and no chunk boundary hides a match."""
    size = os.fstat(fd).st_size
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole past offset
                return False
            start, end = offset, size  # a file system without extents: read the rest
        tail = b""
        os.lseek(fd, start, os.SEEK_SET)
        while start < end:
            data = os.read(fd, min(chunk, end - start))
            if not data:
                break
            if needle in tail + data:
                return True
            tail = data[-(len(needle) - 1) :] if len(needle) > 1 else b""
            start += len(data)
        offset = end
    return False


def files_containing(root: Path, needle: bytes) -> list[str]:
    """Files under `root` holding `needle`, read as an agent-written tree must be: no link
    followed, no FIFO or device opened, sparse files read by their data only."""
    found = []
    for top, _dirs, names in os.walk(root):  # os.walk never descends into a link to a directory
        for name in names:
            path = os.path.join(top, name)
            fd, kind, _cause = open_nofollow(path)
            if fd is None:
                continue
            try:
                if kind == REGULAR and _holds(fd, needle):
                    found.append(os.path.relpath(path, root))
            except OSError:
                continue
            finally:
                os.close(fd)
    return found


def key_leaks(run_root: Path, key: str) -> list[str]:
    """Files under the run root that contain the key's bytes (the answer must be none)."""
    return files_containing(run_root, key.encode())


def custody_checks(env: DemoEnv, run_root: Path) -> list[Check]:
    label = run_label(run_root)
    try:
        empty = label_is_empty(env.docker_host, label)
        detail = "" if empty else "labelled resources remain"
    except Exception as exc:  # noqa: BLE001 - unknown is reported, never passed
        empty, detail = False, f"{type(exc).__name__}: {exc}"
    leaks = key_leaks(run_root, env.key)
    return [
        Check("no container or network with the run's label remains", empty, detail),
        Check("the provider key appears in no file of the run root", not leaks, ", ".join(leaks[:5])),
    ]


def campaign_checks(env: DemoEnv, campaign: str, run_root: Path) -> list[Check]:
    record = read_json(env.root / campaign)
    runs = [r.get("run_root") for r in record.get("runs", [])]
    return [
        Check("the campaign is settled (no active_run)", record.get("active_run") is None),
        Check("the campaign history records the run", str(run_root) in runs),
    ]


def resource_checks(env: DemoEnv, name: str, rows: dict[str, dict]) -> list[Check]:
    """Each task's containers were measured before removal, and the launcher advised a concurrency
    (none before this first run of its campaign, one from the measured tasks after it)."""
    unmeasured = {
        t: r.get("resource_basis")
        for t, r in rows.items()
        if not (
            isinstance(r.get("peak_memory_bytes"), int)
            and r["peak_memory_bytes"] > 0
            and isinstance(r.get("cpu_seconds"), (int, float))
            and r["cpu_seconds"] > 0
        )
    }
    try:
        said = (env.root / f"{name}.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        said = ""
    return [
        Check(
            "every task's ledger row carries its containers' peak memory and CPU time",
            not unmeasured,
            str(unmeasured)[:300],
        ),
        Check(
            "before the campaign's first run the launcher says nothing is measured yet",
            "before this run, no task's resource use has been measured yet" in said,
        ),
        Check(
            "after it the launcher suggests a concurrency from the measured tasks",
            "after this run, suggested concurrency" in said,
        ),
    ]


def make_bystanders(docker_host: str, label: str) -> dict[str, list[str]]:
    """Containers and a network that look like the run's own: names like its containers', one with
    `label` itself and one with a near-identical label. Given the run root's path-only label
    (labels.path_label), the first is what another run at the same path carries (another host on the
    same daemon, or a run from before the per-run nonce): the run must never remove it."""
    client = docker_client(docker_host, 60)
    try:
        suffix = secrets.token_hex(4)
        near = client.containers.run(
            BYSTANDER_IMAGE,
            ["sleep", "3600"],
            detach=True,
            name=f"agent-1-{suffix}",
            labels={RUN_LABEL_KEY: label[:-1] + ("0" if label[-1] != "0" else "1")},
        )
        same_path = client.containers.run(
            BYSTANDER_IMAGE, ["sleep", "3600"], detach=True, name=f"agent-2-{suffix}", labels={RUN_LABEL_KEY: label}
        )
        network = client.networks.create(f"net-1-{suffix}")
        return {"containers": [near.id, same_path.id], "networks": [network.id]}  # type: ignore[list-item]  # created objects have ids
    finally:
        client.close()


def bystanders_alive(docker_host: str, bystanders: dict[str, list[str]]) -> bool:
    client = docker_client(docker_host, 60)
    try:
        for ident in bystanders["containers"]:
            if client.containers.get(ident).status != "running":
                return False
        for ident in bystanders["networks"]:
            client.networks.get(ident)
        return True
    except docker.errors.NotFound:
        return False
    finally:
        client.close()


def remove_bystanders(docker_host: str, bystanders: dict[str, list[str]]) -> None:
    client = docker_client(docker_host, 60)
    try:
        for ident in bystanders["containers"]:
            try:
                client.containers.get(ident).remove(force=True)
            except docker.errors.NotFound:
                pass
        for ident in bystanders["networks"]:
            try:
                client.networks.get(ident).remove()
            except docker.errors.NotFound:
                pass
    finally:
        client.close()
