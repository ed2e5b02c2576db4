"""`cowork-adapter demo`: qualification runs of the whole pipeline that spend nothing.

Each scenario runs the real `cowork-adapter run` as a child process on the bundled demo
benchmark, with the stub engine (a plainly named stand-in for Ouroboros) and the local stand-in
for the provider's key meter, then checks its own designed outcome and prints a verdict table.
Exit 0 only when every scenario behaved as designed.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import docker

from ..custody.docker_ops import label_is_empty
from ..custody.labels import RUN_LABEL_KEY, path_label, run_label
from ..vocab import DemoScenario, ExitCode, TaskStatus
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
    "demo-provider-error": TaskStatus.INFRA_FAILED,
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
        self, name: str, tasks: list[str], *, campaign: str, budget_usd: float = 20, extra: list[str] | None = None,
        concurrency: int = 2,
    ) -> list[str]:
        args = [
            sys.executable, "-m", "cowork_adapter", "run",
            "--repo-dir", str(self.seed), "--bench-root", str(self.bench), "--bench-commit", self.bench_commit,
            "--docker-host", self.docker_host, "--resource-root", str(self.storage),
            "--run-root", str(self.run_root(name)), "--base-image", self.pack_tag, "--build-image",
            "--model", MODEL, "--max-steps", "20", "--task-timeout", "240", "--concurrency", str(concurrency),
            "--campaign-file", str(self.root / campaign), "--new-campaign", "--campaign-budget-usd", "50",
            "--budget-usd", str(budget_usd), "--budget-reserve-usd", "5",
            "--meter-url", self.meter.base_url, "--api-key-env", self.key_env, "--min-key-usd", "0",
            "--min-free-gib", "1", "--min-root-free-gib", "1", "--cpus", "1", "--memory", "2g",
        ]
        for task in tasks:
            args += ["--task", task]
        return args + list(extra or [])

    def run_root(self, name: str) -> Path:
        return self.root / "runs" / name

    def launch(self, args: list[str], log_name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        env = {**os.environ, **(extra_env or {}), self.key_env: self.key}
        log = open(self.root / f"{log_name}.log", "ab")
        return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


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
            tail = data[-(len(needle) - 1):] if len(needle) > 1 else b""
            start += len(data)
        offset = end
    return False


def files_containing(root: Path, needle: bytes) -> list[str]:
    """Files under `root` holding `needle`, read as an agent-written tree must be: no link
    followed, no FIFO or device opened, sparse files read by their data only."""
    from ..container.safefile import REGULAR, open_nofollow

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


def scenario_pass(env: DemoEnv) -> list[Check]:
    name, campaign = "pass", "campaign-pass.json"
    proc = env.launch(env.run_args(name, list(DESIGNED), campaign=campaign), name)
    code = proc.wait(timeout=1800)
    run_root = env.run_root(name)
    rows = read_rows(run_root)
    manifest = read_json(run_root / "run_manifest.json")
    checks = [Check("the launcher exits 1: the provider-error task is infrastructure", code == ExitCode.FAILED, f"exit {code}")]
    for task, want in DESIGNED.items():
        got = rows.get(task, {}).get("status")
        checks.append(Check(f"{task} is {want}", got == want.value, f"got {got}"))
    checks.append(Check("the manifest records the immutable image ID", str((manifest.get("image") or {}).get("id", "")).startswith("sha256:")))
    checks += resource_checks(env, name, rows)
    checks += custody_checks(env, run_root) + campaign_checks(env, campaign, run_root)
    return checks


def resource_checks(env: DemoEnv, name: str, rows: dict[str, dict]) -> list[Check]:
    """Each task's containers were measured before removal, and the launcher advised a concurrency
    (none before this first run of its campaign, one from the measured tasks after it)."""
    unmeasured = {t: r.get("resource_basis") for t, r in rows.items()
                  if not (isinstance(r.get("peak_memory_bytes"), int) and r["peak_memory_bytes"] > 0
                          and isinstance(r.get("cpu_seconds"), (int, float)) and r["cpu_seconds"] > 0)}
    try:
        said = (env.root / f"{name}.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        said = ""
    return [
        Check("every task's ledger row carries its containers' peak memory and CPU time", not unmeasured,
              str(unmeasured)[:300]),
        Check("before the campaign's first run the launcher says nothing is measured yet",
              "before this run, no task's resource use has been measured yet" in said),
        Check("after it the launcher suggests a concurrency from the measured tasks",
              "after this run, suggested concurrency" in said),
    ]


def scenario_sigterm(env: DemoEnv) -> list[Check]:
    name, campaign = "sigterm", "campaign-sigterm.json"
    run_root = env.run_root(name)
    bystanders = make_bystanders(env.docker_host, path_label(run_root))  # its own label is drawn at its start
    try:
        proc = env.launch(env.run_args(name, ["demo-hang", "demo-csv-totals"], campaign=campaign), name)
        started = wait_for(lambda: agent_started(run_root), 300)
        time.sleep(3)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=600)
        manifest = read_json(run_root / "run_manifest.json")
        checks = [
            Check("an agent container was running when SIGTERM arrived", started),
            Check("the launcher exits 3 (stopped)", code == ExitCode.STOPPED, f"exit {code}"),
            Check("the stop reason is signal_15", manifest.get("stop_reason") == "signal_15", str(manifest.get("stop_reason"))),
            Check("every selected task has a ledger row", set(read_rows(run_root)) == {"demo-hang", "demo-csv-totals"}),
        ]
        checks += custody_checks(env, run_root) + campaign_checks(env, campaign, run_root)
        checks.append(Check("look-alike bystanders on the same daemon survive", bystanders_alive(env.docker_host, bystanders)))
    finally:
        remove_bystanders(env.docker_host, bystanders)
    return checks


def scenario_budget_stop(env: DemoEnv) -> list[Check]:
    name, campaign = "budget-stop", "campaign-budget.json"
    run_root = env.run_root(name)
    rate = 0.25  # USD per second on the stand-in meter while this scenario runs
    # The invocation budget is above the campaign boundary, so the campaign reserve must stop it.
    proc = env.launch(env.run_args(name, ["demo-hang", "demo-csv-totals"], campaign=campaign, budget_usd=100), name)
    started = wait_for(lambda: agent_started(run_root), 300)
    base = env.meter.state()["usage"]
    env.meter.add_usage(38.0)  # jump close to the boundary, then climb steadily across it
    env.meter.set_rate(rate)
    try:
        code = proc.wait(timeout=600)
    finally:
        env.meter.set_rate(0.0005)
    manifest = read_json(run_root / "run_manifest.json")
    record = read_json(env.root / campaign)
    spent = record.get("last_usage", 0) - record.get("usage_baseline", 0) + record.get("prior_spend_usd", 0)
    boundary = 50 - 5  # ceiling − reserve
    overshoot_bound = rate * 15 + rate * 5  # one poll interval plus one read slice of spending
    checks = [
        Check("an agent was running when spending climbed", started, f"usage at climb {base:.2f}"),
        Check("the launcher exits 3 (stopped)", code == ExitCode.STOPPED, f"exit {code}"),
        Check("the stop reason is campaign_budget_reserve", manifest.get("stop_reason") == "campaign_budget_reserve",
              str(manifest.get("stop_reason"))),
        Check("campaign spending is within one poll's spend of the boundary",
              boundary <= spent <= boundary + overshoot_bound, f"spent ${spent:.2f}, boundary ${boundary}"),
    ]
    return checks + custody_checks(env, run_root) + campaign_checks(env, campaign, run_root)


def scenario_meter_outage(env: DemoEnv) -> list[Check]:
    name, campaign = "meter-outage", "campaign-outage.json"
    run_root = env.run_root(name)
    proc = env.launch(env.run_args(name, ["demo-hang"], campaign=campaign), name)
    started = wait_for(lambda: agent_started(run_root), 300)
    silenced_at = time.monotonic()
    env.meter.silence(True)
    try:
        code = proc.wait(timeout=600)
    finally:
        env.meter.silence(False)
    elapsed = time.monotonic() - silenced_at
    manifest = read_json(run_root / "run_manifest.json")
    monitor = read_json(run_root / "monitor.json")
    checks = [
        Check("an agent was running when the meter went silent", started),
        Check("the launcher exits 3 (stopped)", code == ExitCode.STOPPED, f"exit {code}"),
        Check("the stop reason is budget_meter_unavailable", manifest.get("stop_reason") == "budget_meter_unavailable",
              str(manifest.get("stop_reason"))),
        Check("it stopped within the blindness bound plus cleanup time", elapsed <= 30 + 15 + 120, f"{elapsed:.0f}s"),
        Check("monitor.json keeps the rejected readings", bool((monitor.get("meter") or {}).get("rejected"))),
    ]
    return checks + custody_checks(env, run_root)


SCENARIOS: dict[str, Callable[[DemoEnv], list[Check]]] = {
    DemoScenario.PASS.value: scenario_pass,
    DemoScenario.SIGTERM.value: scenario_sigterm,
    DemoScenario.BUDGET_STOP.value: scenario_budget_stop,
    DemoScenario.METER_OUTAGE.value: scenario_meter_outage,
}


def make_bystanders(docker_host: str, label: str) -> dict[str, list[str]]:
    """Containers and a network that look like the run's own: names like its containers', one with
    `label` itself and one with a near-identical label. Given the run root's path-only label
    (labels.path_label), the first is what another run at the same path carries (another host on the
    same daemon, or a run from before the per-run nonce): the run must never remove it."""
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    try:
        suffix = secrets.token_hex(4)
        near = client.containers.run(
            BYSTANDER_IMAGE, ["sleep", "3600"], detach=True, name=f"agent-1-{suffix}",
            labels={RUN_LABEL_KEY: label[:-1] + ("0" if label[-1] != "0" else "1")},
        )
        same_path = client.containers.run(BYSTANDER_IMAGE, ["sleep", "3600"], detach=True,
                                          name=f"agent-2-{suffix}", labels={RUN_LABEL_KEY: label})
        network = client.networks.create(f"net-1-{suffix}")
        return {"containers": [near.id, same_path.id], "networks": [network.id]}
    finally:
        client.close()


def bystanders_alive(docker_host: str, bystanders: dict[str, list[str]]) -> bool:
    client = docker.DockerClient(base_url=docker_host, timeout=60)
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
    client = docker.DockerClient(base_url=docker_host, timeout=60)
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


def table_label(scenario: str, check: str) -> tuple[str, str]:
    """(scenario column, check column). A scenario of several runs names each run in its checks
    ("[diagnostic-on] ..."), so the table tells its runs apart."""
    if check.startswith("[") and "] " in check:
        run, text = check[1:].split("] ", 1)
        return (f"{scenario} ({run})" if run != scenario else scenario), text
    return scenario, check


def run_demo(*, run_root: Path, docker_host: str | None, scenario: str) -> int:
    """Prepare the demo once, run the chosen scenario(s), print the verdict table."""
    from rich.console import Console
    from rich.table import Table

    docker_host = docker_host or os.environ.get("DOCKER_HOST", "")
    if not docker_host:
        print("cowork-adapter: the demo needs a Docker daemon: pass --docker-host or set DOCKER_HOST.", file=sys.stderr)
        return ExitCode.REFUSED
    if run_root.exists():
        print(f"cowork-adapter: the demo root {run_root} already exists; every demo needs a new root.", file=sys.stderr)
        return ExitCode.REFUSED
    names = list(SCENARIOS) if scenario == DemoScenario.ALL.value else [scenario]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"cowork-adapter: the demo scenario {unknown[0]} is not available yet.", file=sys.stderr)
        return ExitCode.REFUSED
    from .heartbeat import DemoHeartbeat

    heartbeat = DemoHeartbeat(len(names)).start()
    results: dict[str, list[Check]] = {}
    try:
        heartbeat.preparing()
        env = prepare(run_root.resolve(), docker_host)
        try:
            for index, name in enumerate(names, 1):
                heartbeat.scenario(index, name)
                try:
                    results[name] = SCENARIOS[name](env)
                except Exception as exc:  # noqa: BLE001 - a broken scenario is a failed verdict, not a crash
                    results[name] = [Check("the scenario ran to its end", False, f"{type(exc).__name__}: {exc}")]
                passed = sum(c.ok for c in results[name])
                heartbeat.scenario_done(name, passed, len(results[name]) - passed)
        finally:
            env.meter.stop()
    finally:
        heartbeat.close()
    table = Table(title=f"cowork-adapter demo ({run_root})")
    for column in ("scenario", "check", "verdict", "detail"):
        table.add_column(column)
    for name, checks in results.items():
        for check in checks:
            table.add_row(*table_label(name, check.name), "PASS" if check.ok else "FAIL", check.detail)
    Console(width=160).print(table)
    ok = all(c.ok for checks in results.values() for c in checks)
    (run_root / "demo_verdicts.json").write_text(json.dumps(
        {n: [c.__dict__ for c in cs] for n, cs in results.items()}, indent=2) + "\n")
    print(f"demo verdict: {'PASS' if ok else 'FAIL'} ({sum(c.ok for cs in results.values() for c in cs)} of "
          f"{sum(len(cs) for cs in results.values())} checks)")
    return ExitCode.OK if ok else ExitCode.FAILED


# Scenarios that live in their own modules import Check/DemoEnv from here, so they register last.
from .scenarios_diagnostic import scenario_diagnostic  # noqa: E402
from .scenarios_hostile import scenario_hostile  # noqa: E402
from .scenarios_inventory import scenario_environment  # noqa: E402
from .scenarios_recovery import scenario_kill9_reconcile, scenario_resume  # noqa: E402

SCENARIOS[DemoScenario.DIAGNOSTIC.value] = scenario_diagnostic
SCENARIOS[DemoScenario.ENVIRONMENT.value] = scenario_environment
SCENARIOS[DemoScenario.HOSTILE.value] = scenario_hostile
SCENARIOS[DemoScenario.RESUME.value] = scenario_resume
SCENARIOS[DemoScenario.KILL9_RECONCILE.value] = scenario_kill9_reconcile


def scenario_kill9_random(env: DemoEnv) -> list[Check]:
    # demo/chaos.py imports this module (Check, DemoEnv, bystanders), so it is imported when played.
    from .chaos import scenario_kill9_random as play

    return play(env)


SCENARIOS[DemoScenario.KILL9_RANDOM.value] = scenario_kill9_random
