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


@pytest.mark.parametrize(
    "name", ["pass", "sigterm", "budget-stop", "meter-outage", "resume", "kill9-reconcile", "kill9-random"]
)
def test_scenario_behaves_as_designed(demo_env, name):
    checks = SCENARIOS[name](demo_env)
    failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    assert checks, "a scenario must check something"
    assert not failed, f"scenario {name} failed checks: {failed}"


def test_hostile_load_scenario_leaves_the_honest_sibling_served(demo_env):
    """Issue 37's load scenario (cowork_adapter.demo.scenarios_load): an honest engine needing its
    model through the gateway beside agents that starve the gateway, drop streams, flood their
    output, fill their dumps and plant nested JSON; on the same demo world as the scenarios above."""
    from cowork_adapter.demo.scenarios_load import TASKS, scenario_hostile_load

    checks = scenario_hostile_load(demo_env)
    for check in checks:
        print(f"{'PASS' if check.ok else 'FAIL'} {check.name}: {check.detail}")
    failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    assert len(checks) >= len(TASKS) + 12, "the scenario must check every task, the commands and the host"
    assert not failed, f"scenario hostile-load failed checks: {failed}"


def test_compare_scenario_runs_two_trial_sets_and_compares_them(demo_env):
    """Issue 39: the stub engine and `nop`, `run --trials 2` each over two demo tasks, then `report` over a
    trial set and `compare` (cowork_adapter.demo.scenarios_compare); on the same demo world as above."""
    from cowork_adapter.demo.scenarios_compare import K, scenario_compare

    checks = scenario_compare(demo_env)
    for check in checks:
        print(f"{'PASS' if check.ok else 'FAIL'} {check.name}: {check.detail}")
    failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    assert len(checks) >= 2 * (3 + K) + 5, "the scenario must check both sets, the report and the comparison"
    assert not failed, f"scenario compare failed checks: {failed}"
