"""The real-benchmark test bed, as the tests see it (testbed/realbench.sh).

`real_testbed()` returns the paths `testbed/realbench.sh up` prepared: the pinned Cowork Bench
checkout (with its disclosed stand-in seed), the Ouroboros 6.97.2 checkout, the task list and the
cowork-pack-compatible image. It reads the COWORK_REAL_* variables the script prints and, when they
are unset, asks `testbed/realbench.sh env`. Under CI=true a missing test bed is a FAILURE: these
tests must never pass by not running. Elsewhere it skips with the command that builds it.

`RealRun` starts the real `cowork-adapter run` on it, with the meter and chat stand-ins.
"""

from __future__ import annotations

import csv
import ipaddress
import json
import os
import secrets
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import docker
import pytest

from cowork_adapter.custody.labels import RUN_LABEL_KEY
from cowork_adapter.demo.chat_standin import DEFAULT_MODEL_ID, ChatStandin
from cowork_adapter.demo.env import (
    files_containing,
    read_rows,  # noqa: F401  one reader of a ledger by task, the demo's (tests import it from here too)
)
from cowork_adapter.demo.meter_standin import MeterStandin

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "testbed" / "realbench.sh"
SMOKE_TASKS = 5  # the suite's task count: the first lines of the task list
# Per-container limits the suite asks for (2-CPU daemons: one CPU each at concurrency 2).
CPUS, MEMORY = "1", "4g"
WANT_LIMITS = {"NanoCpus": 1_000_000_000, "Memory": 4 << 30, "MemorySwap": 4 << 30, "PidsLimit": 512}
KEY_ENV = "COWORK_REAL_PROVIDER_KEY"


@dataclass(frozen=True)
class RealTestbed:
    bench: Path
    seed: Path
    tasks_file: Path
    base_image: str
    git_env: dict[str, str]

    def tasks(self, n: int = SMOKE_TASKS) -> list[str]:
        ids = [
            line.strip()
            for line in self.tasks_file.read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
        assert len(ids) >= n, f"{self.tasks_file} lists {len(ids)} tasks, fewer than {n}"
        return ids[:n]


def _missing(message: str):
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def real_testbed() -> RealTestbed:
    names = ("COWORK_REAL_BENCH", "COWORK_REAL_OUROBOROS_SEED", "COWORK_REAL_TASKS_FILE", "COWORK_REAL_BASE_IMAGE")
    values = {n: os.environ.get(n, "").strip() for n in names + ("COWORK_REAL_GIT_ENV",)}
    if not all(values[n] for n in names):
        out = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            _missing(
                f"the real-benchmark test bed is not up ({out.stderr.strip()[-300:]}); "
                f"run `bash testbed/realbench.sh up` after `testbed/testbed.sh up`"
            )
        for line in out.stdout.splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            if name in values and not values[name]:
                values[name] = shlex.split(value)[0] if value else ""
    bed = RealTestbed(
        bench=Path(values["COWORK_REAL_BENCH"]),
        seed=Path(values["COWORK_REAL_OUROBOROS_SEED"]),
        tasks_file=Path(values["COWORK_REAL_TASKS_FILE"]),
        base_image=values["COWORK_REAL_BASE_IMAGE"],
        git_env=dict(item.split("=", 1) for item in shlex.split(values["COWORK_REAL_GIT_ENV"])),
    )
    for path in (bed.bench / "run_parallel.sh", bed.seed / "server.py", bed.tasks_file):
        if not path.is_file():
            _missing(
                f"the real-benchmark test bed is incomplete: {path} is missing; run `bash testbed/realbench.sh up`"
            )
    return bed


def host_address_for_containers(docker_host: str) -> str:
    """The host's address on the default bridge (containers on any bridge network reach it)."""
    override = os.environ.get("COWORK_STANDIN_HOST_ADDR", "").strip()
    if override:
        return override
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    try:
        config = ((client.networks.get("bridge").attrs.get("IPAM") or {}).get("Config") or [{}])[0]
    finally:
        client.close()
    if config.get("Gateway"):
        return config["Gateway"]
    return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


@dataclass
class RealRun:
    """Runs of the real adapter on the real test bed, sharing one meter, chat stand-in and campaign."""

    bed: RealTestbed
    root: Path
    docker_host: str
    key: str = field(default_factory=lambda: "real-" + secrets.token_hex(16))
    meter: MeterStandin | None = None
    chat: ChatStandin | None = None
    base_url: str = ""

    def start(self) -> RealRun:
        (self.root / "runs").mkdir(parents=True)
        (self.root / "storage").mkdir()
        self.meter = MeterStandin(self.key, usage=5.0).start()
        self.meter.set_rate(0.0005)
        self.chat = ChatStandin(host="0.0.0.0", port=0, model_id=DEFAULT_MODEL_ID).start()
        self.base_url = f"http://{host_address_for_containers(self.docker_host)}:{self.chat.port}/v1"
        return self

    def stop(self) -> None:
        for part in (self.chat, self.meter):
            if part is not None:
                part.stop()

    def run_root(self, name: str) -> Path:
        return self.root / "runs" / name

    def args(
        self,
        name: str,
        tasks: list[str],
        *,
        engine: str = "ouroboros",
        extra: list[str] | None = None,
        openrouter_route: bool = False,
    ) -> list[str]:
        """The run's argv; `openrouter_route`: the engine keeps the seed's OpenRouter route (no
        OpenAI-compatible endpoint), for the default route and its baseline (the test adds how
        openrouter.ai reaches the stand-in)."""
        args = [
            sys.executable,
            "-m",
            "cowork_adapter",
            "run",
            "--repo-dir",
            str(self.bed.seed),
            "--bench-root",
            str(self.bed.bench),
            "--docker-host",
            self.docker_host,
            "--resource-root",
            str(self.root / "storage"),
            "--run-root",
            str(self.run_root(name)),
            "--base-image",
            self.bed.base_image,
            "--build-image",
            "--engine",
            engine,
            "--model",
            DEFAULT_MODEL_ID,
            "--max-steps",
            "20",
            "--task-timeout",
            "600",
            "--concurrency",
            "2",
            "--max-workers",
            "2",
            "--task-review-mode",
            "off",
            *(
                ()
                if openrouter_route
                else (
                    "--credential-setting",
                    "OPENAI_COMPATIBLE_API_KEY",
                    "--openai-compatible-base-url",
                    self.base_url,
                )
            ),
            "--campaign-file",
            str(self.root / "campaign.json"),
            "--new-campaign",
            "--campaign-budget-usd",
            "50",
            "--budget-usd",
            "20",
            "--budget-reserve-usd",
            "5",
            "--meter-url",
            self.meter.base_url,
            "--api-key-env",
            KEY_ENV,
            "--min-key-usd",
            "0",
            "--min-free-gib",
            "1",
            "--min-root-free-gib",
            "1",
            "--cpus",
            CPUS,
            "--memory",
            MEMORY,
            # A needed server that fails the inventory becomes an environment_blocked row instead of
            # a refusal, so one broken server cannot hide every other check; the suite asserts none.
            "--accept-environment-blocked",
        ]
        for task in tasks:
            args += ["--task", task]
        return args + list(extra or [])

    def launch(self, args: list[str], log_name: str) -> subprocess.Popen:
        env = {**os.environ, **self.bed.git_env, KEY_ENV: self.key}
        with open(self.root / f"{log_name}.log", "ab") as log:  # the child has its own copy of the descriptor
            return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log_tail(self, log_name: str, chars: int = 4000) -> str:
        path = self.root / f"{log_name}.log"
        return path.read_text(errors="replace")[-chars:] if path.is_file() else "(no log)"


# ---------------------------------------------------------------- reading a run root


def summary_tasks(run_root: Path) -> set[str]:
    done = set()
    for path in (run_root / "bench" / "benchmark_logs").glob("fully_parallel_*/summary.csv"):
        with path.open(newline="") as fh:
            done |= {row["task"] for row in csv.DictReader(fh)}
    return done


def started_tasks(run_root: Path) -> set[str]:
    evidence = run_root / "custody" / "evidence"
    return {p.read_text().strip() for p in evidence.glob("*.task")} if evidence.is_dir() else set()


def started_ids(run_root: Path) -> set[str]:
    """The runner's ids (`<pid>-<hex>`, as in `agent-<id>`) of the agents given their task: the
    shim writes `<id>.task` when the runner execs the agent with its task directory."""
    evidence = run_root / "custody" / "evidence"
    return {p.stem for p in evidence.glob("*.task")} if evidence.is_dir() else set()


def runner_pid(run_root: Path) -> int | None:
    path = run_root / "events.jsonl"
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        event = json.loads(line)
        if event.get("kind") == "runner_started" or event.get("event") == "runner_started":
            return int((event.get("data") or event)["pid"])
    return None


def key_leaks(root: Path, key: str) -> list[str]:
    # Read as an agent-written tree must be (no link, FIFO or 20 GiB sparse file followed or read whole).
    return [str(root / rel) for rel in files_containing(root, key.encode())]


def labelled_left(docker_host: str, label: str) -> list[str]:
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    try:
        flt = {"label": f"{RUN_LABEL_KEY}={label}"}
        return (
            [f"container {c.name}" for c in client.containers.list(all=True, filters=flt)]
            + [f"network {n.name}" for n in client.networks.list(filters=flt)]
            + [f"volume {v.name}" for v in client.volumes.list(filters=flt)]
        )
    finally:
        client.close()
