"""Demo scenario `hostile`, run for real: Docker, the demo runner, the hostile engine, the gateway.

One run of ten tasks at concurrency 3 (cowork_adapter.demo.scenarios_hostile has the table of
attacks and expected outcomes): no forged pass is counted, every attempt is flagged on its row,
the honest sibling keeps its sealed pass, nothing hangs, no host file is read, the run settles.
"""

from __future__ import annotations

import time

from cowork_adapter.demo.env import prepare
from cowork_adapter.demo.scenarios_hostile import EXPECTED, scenario_hostile


def test_hostile_scenario_behaves_as_designed(docker_host, tmp_path):
    env = prepare(tmp_path / "root", docker_host)
    started = time.monotonic()
    try:
        checks = scenario_hostile(env)
    finally:
        env.meter.stop()
    print(f"hostile scenario: {time.monotonic() - started:.0f} s")
    failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    assert len(checks) >= 2 * len(EXPECTED) + 8, "the scenario must check every task and the host"
    assert not failed, f"scenario hostile failed checks: {failed}"
