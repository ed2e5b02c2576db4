"""Demo scenario `diagnostic`, run for real: Docker, the runner, the stub engine, the meter stand-in.

One run with --diagnostic-eval-on-truncation on demo-truncated-correct (declined officially, checked
by the diagnostic, visible only in the audit) and one run without the flag (no diagnostic file).
"""

from __future__ import annotations

from cowork_adapter.demo.env import prepare
from cowork_adapter.demo.scenarios_diagnostic import scenario_diagnostic


def test_diagnostic_scenario_behaves_as_designed(docker_host, tmp_path):
    env = prepare(tmp_path / "root", docker_host)
    try:
        checks = scenario_diagnostic(env)
    finally:
        env.meter.stop()
    failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    assert len(checks) >= 10, "the scenario must check both runs"
    assert not failed, f"scenario diagnostic failed checks: {failed}"
