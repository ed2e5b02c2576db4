"""The demo's qualification scenarios, run for real: Docker, the runner, the stub engine, the meter stand-in.

Each scenario checks its own designed outcome (see cowork_adapter.demo.scenarios); a test passes only
when every check of its scenario passed, and prints the failing checks otherwise.
"""

from __future__ import annotations

import pytest

from cowork_adapter.demo.env import prepare
from cowork_adapter.demo.scenarios import SCENARIOS


@pytest.fixture(scope="module")
def demo_env(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("demo") / "root", docker_host)
    yield env
    env.meter.stop()


@pytest.mark.parametrize("name", ["pass", "sigterm", "budget-stop", "meter-outage", "resume", "kill9-reconcile", "kill9-random"])
def test_scenario_behaves_as_designed(demo_env, name):
    checks = SCENARIOS[name](demo_env)
    failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    assert checks, "a scenario must check something"
    assert not failed, f"scenario {name} failed checks: {failed}"
