"""The tool as the design runs it (issue 38): as an unprivileged user, against that user's rootless daemon.

Not in the main suite's testpaths: `.ci/run` runs this file as the test bed's rootless user
(`testbed/testbed.sh rootless exec`, DOCKER_HOST its daemon), after the main suite. Real parts: the
rootless dockerd inside RootlessKit, real PostgreSQL, the demo benchmark, the stub engine and the meter
stand-in. On a cgroup v1 host (this project's machines) that daemon enforces no limit: the run is refused
without --accept-unenforced-limits, and with it the manifest records what was not enforced.

The key's route: the scenarios take the demo's own route (--key-in-agent); one run is on the default
route (the key on the host, the gateway's socket bound in RootlessKit's network namespace by
gateway/nsbind.py): a real model call from inside its agent container reaches the stand-in provider with
the key, and no container of it holds the key.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from provider_calls import SEED_CALLS, addresses, in_container, running, task_ident  # tests/provider_calls.py

from cowork_adapter.container.safefile import REGULAR, open_nofollow
from cowork_adapter.custody.labels import RUN_LABEL_KEY, run_label
from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.demo.env import (
    DemoEnv,
    agent_started,
    custody_checks,
    files_containing,
    prepare,
    read_rows,
    wait_for,
)
from cowork_adapter.demo.scenarios import SCENARIOS
from cowork_adapter.gateway.run import NAMESPACE_DISCLOSURE
from cowork_adapter.host.daemon import docker_client
from cowork_adapter.host.daemon_kind import DaemonFacts, daemon_facts
from cowork_adapter.schemas.gateway import read_requests
from cowork_adapter.vocab import DaemonKind, ExitCode, TaskStatus

ACCEPT_ENV = "COWORK_ACCEPT_UNENFORCED_LIMITS"


@pytest.fixture(scope="module")
def facts() -> DaemonFacts:
    host = os.environ.get("DOCKER_HOST", "")
    found = daemon_facts(host)
    assert found.kind is DaemonKind.ROOTLESS, f"{host} is {found.describe()}: run this file as `.ci/run` does"
    assert found.owner_uid == os.geteuid() != 0, "run this file as the rootless daemon's own user"
    return found


@pytest.fixture(scope="module")
def world(facts: DaemonFacts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoEnv]:
    env = prepare(tmp_path_factory.mktemp("rootless") / "demo", os.environ["DOCKER_HOST"])
    try:
        yield env
    finally:
        env.meter.stop()


def accepted(facts: DaemonFacts) -> dict[str, str]:
    """The environment of a run that takes this daemon's limits as they are (the flag from its variable)."""
    return {ACCEPT_ENV: "1"} if facts.unenforced else {}


def manifest(run_root: Path) -> dict:
    return json.loads((run_root / "run_manifest.json").read_text())


def test_unenforced_limits_are_refused_then_accepted_and_recorded(world: DemoEnv, facts: DaemonFacts) -> None:
    args = world.run_args("limits", ["demo-csv-totals"], campaign="campaign-limits.json", concurrency=1)
    env = {k: v for k, v in os.environ.items() if k != ACCEPT_ENV}
    if facts.unenforced:
        refused = subprocess.run(
            args, env={**env, world.key_env: world.key}, capture_output=True, text=True, timeout=300
        )
        assert refused.returncode == ExitCode.REFUSED, refused.stderr
        assert "does not enforce" in refused.stderr and "--accept-unenforced-limits" in refused.stderr
        assert not world.run_root("limits").exists()  # refused before anything was written
    code = world.launch(args, "limits", accepted(facts)).wait(timeout=900)
    assert code == ExitCode.OK, (world.root / "limits.log").read_text()[-3000:]
    limits = manifest(world.run_root("limits"))["limits"]
    assert limits["daemon_kind"] == "rootless"
    assert limits["unenforced_limits"] == list(facts.unenforced)
    assert limits["accept_unenforced_limits"] is bool(facts.unenforced)


def test_the_pass_scenario_as_the_daemons_user(world: DemoEnv, facts: DaemonFacts, monkeypatch) -> None:
    # The demo's own scenario, unchanged: the folders it mounts are the user's, so its containers write them.
    for name, value in accepted(facts).items():
        monkeypatch.setenv(name, value)
    checks = SCENARIOS["pass"](world)
    failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    assert checks and not failed, failed


def test_a_run_stopped_by_stop_leaves_nothing_and_its_containers_had_their_limits(
    world: DemoEnv, facts: DaemonFacts
) -> None:
    name = "stopped"
    run_root = world.run_root(name)
    args = world.run_args(name, ["demo-hang", "demo-csv-totals"], campaign="campaign-stop.json")
    proc = world.launch(args, name, accepted(facts))
    try:
        assert wait_for(lambda: agent_started(run_root), 300), (world.root / f"{name}.log").read_text()[-3000:]
        client = docker_client(world.docker_host)
        try:
            ours = client.containers.list(filters={"label": f"{RUN_LABEL_KEY}={run_label(run_root)}"})
            given = {c.attrs["HostConfig"].get("Memory") for c in ours}
        finally:
            client.close()
        # The limits are given to every container even where the daemon cannot enforce them.
        assert ours and given == {2 << 30}, given
        stopped = subprocess.run(
            [sys.executable, "-m", "cowork_adapter", "stop", str(run_root), "--timeout", "120"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert proc.wait(timeout=300) == ExitCode.STOPPED
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    assert manifest(run_root)["stop_reason"] == "signal_15"  # `stop` is SIGTERM to the launcher (ops/stop.py)
    assert set(read_rows(run_root)) == {"demo-hang", "demo-csv-totals"}
    failed = [f"{c.name}: {c.detail}" for c in custody_checks(world, run_root) if not c.ok]
    assert not failed, failed


def settled(run_root: Path, task: str) -> bool:
    row = read_rows(run_root).get(task, {})
    return not row.get("provisional") and row.get("status") in {s.value for s in TaskStatus if s.settled}


class CreatedWatch:
    """Every container the daemon creates with a run label, inspected as its `create` event arrives: the
    daemon's own account of its configuration and environment, and the host files bound into it, read for
    the key then. A task run to its end has its containers removed, so they are seen as they are made."""

    def __init__(self, docker_host: str, key: str) -> None:
        self.client = docker_client(docker_host)
        self.key = key.encode()
        self.seen: dict[str, tuple[str, list[str]]] = {}  # name -> (its run label, where the key was found)
        self.gone: list[str] = []  # removed before the inspect (a preflight's short container)
        self.errors: list[str] = []
        self.stopping = False
        # Opened here, before the run starts: no creation can come before the stream.
        self.stream = self.client.events(
            decode=True, filters={"type": "container", "event": "create", "label": RUN_LABEL_KEY}
        )
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        try:
            for event in self.stream:
                self._inspect(str(event["id"]))
        except Exception as exc:  # noqa: BLE001 - asserted empty unless the stream was closed by stop()
            if not self.stopping:
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _inspect(self, ident: str) -> None:
        try:
            attrs = self.client.api.inspect_container(ident)
        except docker.errors.NotFound:
            self.gone.append(ident)
            return
        leaks = ["docker inspect"] if self.key in json.dumps(attrs).encode() else []
        for mount in attrs.get("Mounts") or []:
            if mount.get("Type") == "bind":
                leaks += [f"{mount.get('Destination')}: {hit}" for hit in self._bound(Path(mount["Source"]))]
        self.seen[str(attrs["Name"]).lstrip("/")] = (str(attrs["Config"]["Labels"].get(RUN_LABEL_KEY)), leaks)

    def _bound(self, source: Path) -> list[str]:
        if source.is_dir():
            return files_containing(source, self.key)
        fd, kind, _cause = open_nofollow(str(source))  # a link is never followed, a FIFO never opened
        if fd is None:
            return []
        try:
            return [source.name] if kind == REGULAR and self.key in os.read(fd, 64 << 20) else []
        finally:
            os.close(fd)

    def stop(self) -> None:
        self.stopping = True
        self.stream.close()
        self.thread.join(timeout=60)
        self.client.close()


def test_a_task_on_the_default_route_ends_with_the_key_in_no_container(world: DemoEnv, facts: DaemonFacts) -> None:
    # No route flag: the default route, its socket bound inside RootlessKit's namespace; its upstream is a
    # chat stand-in on loopback (a test bed cannot reach OpenRouter). Two tasks in the one run: demo-hang
    # keeps its agent container up for the seed's calls to OpenRouter from inside it (the stub engine makes
    # none on this route), demo-csv-totals runs to an official pass; then `stop` ends the run.
    name = "default-route"
    run_root = world.run_root(name)
    log_path = world.root / f"{name}.log"
    provider = ChatStandin(host="127.0.0.1", cost_per_request=0.01).start()
    extra = ["--provider-upstream-url", f"http://127.0.0.1:{provider.port}/api/v1", "--task-timeout", "900"]
    args = world.run_args(name, ["demo-hang", "demo-csv-totals"], campaign="campaign-route.json", extra=extra)
    assert "--key-in-agent" not in args and "--llm-gateway-host" not in args
    watch = CreatedWatch(world.docker_host, world.key)
    client = docker_client(world.docker_host)
    proc = world.launch(args, name, accepted(facts))
    try:
        assert wait_for(lambda: task_ident(run_root, "demo-hang") is not None or proc.poll() is not None, 600), (
            log_path.read_text()[-3000:]
        )
        assert proc.poll() is None, log_path.read_text()[-3000:]
        ident = task_ident(run_root, "demo-hang")
        agent = f"agent-{ident}"
        assert wait_for(lambda: running(client, agent), 120), log_path.read_text()[-3000:]
        record = manifest(run_root)["llm_gateway"]
        assert record["route"] == "provider_tls" and record["listen_address"].endswith(":443"), record
        gateway_address = record["listen_address"].rsplit(":", 1)[0]

        # The seed's calls, from inside the agent container with its own token and CA variables:
        # openrouter.ai is this run's gateway, the run's CA verifies it, the stand-in answers with its cost.
        seen = json.loads(in_container(client, agent, SEED_CALLS))
        own = addresses(client, agent)
        assert seen["resolved"] == gateway_address, (seen, record)
        assert seen["ssl_cert_file"] == "/etc/cowork-adapter/provider-ca-bundle.pem", seen
        assert seen["chat"][0] == 200 and json.loads(seen["chat"][1])["usage"]["cost"] == 0.01, seen
        assert seen["models_no_token"][0] == 401 and seen["models"][0] == 200 and seen["key"][0] == 200, seen

        # The live index lists every selected task from the start: wait for demo-csv-totals' settled row.
        assert wait_for(lambda: settled(run_root, "demo-csv-totals") or proc.poll() is not None, 900), (
            log_path.read_text()[-3000:]
        )
        stopped = subprocess.run(
            [sys.executable, "-m", "cowork_adapter", "stop", str(run_root), "--timeout", "120"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert proc.wait(timeout=300) == ExitCode.STOPPED, log_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        watch.stop()
        provider.stop()
        client.close()
    log = log_path.read_text()
    assert "RootlessKit's network namespace" not in log and "the agent under test can read it" not in log

    record = manifest(run_root)["llm_gateway"]
    assert NAMESPACE_DISCLOSURE in record["disclosures"], record["disclosures"]
    # The gateway's rows: the container's three calls with its token, forwarded and answered 200, that task's
    # and from the container's own address; the token-less one refused there and never forwarded.
    rows = read_requests(run_root)
    answered = [(r.task, r.status, r.peer in own) for r in rows if r.refused is None]
    assert answered == [(ident, 200, True)] * 3, (rows, own)
    assert [r.status for r in rows if r.refused is not None] == [401], rows
    assert record["requests"] == sum(r.count for r in rows) and record["unlogged_refusals"] == 0, record
    # The stand-in received exactly the gateway's price look-up when it opened and those three, all with the key.
    upstream = provider.all_requests()
    assert [(r["method"], r["path"]) for r in upstream] == [
        ("GET", "/api/v1/models"),
        ("POST", "/api/v1/chat/completions"),
        ("GET", "/api/v1/models"),
        ("GET", "/api/v1/auth/key"),
    ], upstream
    with_key = hashlib.sha256(f"Bearer {world.key}".encode()).hexdigest()
    assert [r["auth_sha256"] for r in upstream] == [with_key] * 4

    assert manifest(run_root)["stop_reason"] == "signal_15"
    rows_by_task = read_rows(run_root)
    row = rows_by_task["demo-csv-totals"]
    assert row["status"] == "passed" and row["official_eval_status"] == "completed", row
    assert row["official_receipt"]["pass"] is True, row
    assert "demo-hang" in rows_by_task

    # The key is in no container of the run: its configuration and the files bound into it, as made.
    label = run_label(run_root)
    ours = {n: leaks for n, (owner, leaks) in watch.seen.items() if owner == label}
    assert not watch.errors, watch.errors
    assert agent in ours, (sorted(watch.seen), watch.gone)
    assert {n: leaks for n, leaks in ours.items() if leaks} == {}
    failed = [f"{c.name}: {c.detail}" for c in custody_checks(world, run_root) if not c.ok]
    assert not failed, failed
