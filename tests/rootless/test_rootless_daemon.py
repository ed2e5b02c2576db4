"""The tool as the design runs it (issue 38): as an unprivileged user, against that user's rootless daemon.

Not in the main suite's testpaths: `.ci/run` runs this file as the test bed's rootless user
(`testbed/testbed.sh rootless exec`, DOCKER_HOST its daemon), after the main suite. Real parts: the
rootless dockerd inside RootlessKit, real PostgreSQL, the demo benchmark, the stub engine and the meter
stand-in. On a cgroup v1 host (this project's machines) that daemon enforces no limit: the run is refused
without --accept-unenforced-limits, and with it the manifest records what was not enforced.

What the key's route is here: until the default route's rootless listener (gateway/route_check.py, branch
b38-route) is in the tree, the default route is refused before anything is built (asserted), and the
scenarios take the demo's own route, --key-in-agent; with it, the default-route test runs a task on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cowork_adapter.custody.labels import RUN_LABEL_KEY, run_label
from cowork_adapter.demo.env import DemoEnv, agent_started, custody_checks, prepare, read_rows, wait_for
from cowork_adapter.demo.scenarios import SCENARIOS
from cowork_adapter.host.daemon import docker_client
from cowork_adapter.host.daemon_kind import DaemonFacts, daemon_facts
from cowork_adapter.vocab import DaemonKind, ExitCode

ACCEPT_ENV = "COWORK_ACCEPT_UNENFORCED_LIMITS"
ROUTE_TRIAL = Path(__file__).resolve().parents[2] / "src" / "cowork_adapter" / "gateway" / "route_check.py"


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


def test_the_default_route_is_decided_before_the_image_build(world: DemoEnv, facts: DaemonFacts) -> None:
    name = "default-route"
    args = [
        a for a in world.run_args(name, ["demo-csv-totals"], campaign="campaign-route.json") if a != "--key-in-agent"
    ]
    proc = world.launch(args, name, accepted(facts))
    code = proc.wait(timeout=900)
    log = (world.root / f"{name}.log").read_text()
    if not ROUTE_TRIAL.is_file():
        # Without the rootless listener the route cannot reach a container: refused, naming why.
        assert code == ExitCode.REFUSED, log[-3000:]
        assert "RootlessKit's network namespace" in log and "needs root" not in log
        assert not world.run_root(name).exists()
        return
    # With it, the route is the run's to open: past the preflight (the route's own end-to-end test on this
    # daemon is the gateway's, tests/integration/test_provider_tls_run.py).
    assert "RootlessKit's network namespace" not in log and world.run_root(name).exists(), log[-3000:]
