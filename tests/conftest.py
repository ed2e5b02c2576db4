"""Shared fixtures. Docker tests use the test bed's private daemon (testbed/testbed.sh up).

Outside CI a missing daemon skips the docker tests with a reason; under CI=true it is a failure:
the tests that matter most must never pass by not running.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DOCKER_HOST = "unix:///var/lib/cowork-testbed/docker.sock"


def _daemon_answers(host: str) -> bool:
    try:
        out = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            env={**os.environ, "DOCKER_HOST": host},
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and bool(out.stdout.strip())


@pytest.fixture(scope="session")
def docker_host() -> str:
    """DOCKER_HOST of a live daemon; fails under CI when there is none, skips otherwise."""
    host = os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST
    if _daemon_answers(host):
        return host
    message = f"no Docker daemon answers at {host}; run `testbed/testbed.sh up`"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


# The longest test files, longest first (from .ci/run's --durations in two CI rehearsals of 2026-12-05,
# each file's slowest tests summed; the first two take 15 to 20 minutes each on a loaded 2-core machine,
# the others 2 to 5): under `--dist loadfile` a long file handed out last runs alone at the end while the
# other workers sit idle (in a rehearsal with only the first three listed, the suite's last 8 minutes were
# two shared-campaign files and the real Ouroboros ones). Order only; every file still runs whole, in one
# worker.
LONGEST_FIRST = (
    "tests/integration/test_demo_scenarios.py",
    "tests/chaos/test_kill_matrix.py",
    "tests/integration/test_inventory.py",
    "tests/integration/test_daemon_restart.py",
    "tests/integration/test_benchmarks_short.py",
    "tests/integration/test_shared_campaign_faults.py",
    "tests/integration/test_shared_campaign_run.py",
    "tests/integration/test_real_ouroboros_gateway.py",
    "tests/integration/test_real_ouroboros.py",
    "tests/integration/test_qualify_demo.py",
    "tests/integration/test_demo_progress_tmux.py",
    "tests/integration/test_demo_bench_bare.py",
    "tests/unit/test_path_fuzz.py",
    "tests/integration/test_demo_hostile.py",
    "tests/integration/test_base_image_rebuild.py",
    "tests/integration/test_shared_campaign_release.py",
    "tests/integration/test_diagnostic_demo.py",
    "tests/integration/test_inspect_view_trials.py",
)


def _rank(item) -> int:
    path = Path(str(item.fspath)).resolve()
    for rank, rel in enumerate(LONGEST_FIRST):
        if path == REPO / rel:
            return rank
    return len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_rank)  # stable: the order within a file, and of the other files, is kept
    # Tests under tests/integration and tests/chaos need the daemon: mark them so `-m "not docker"`
    # gives a fast unit run.
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "integration" in parts or "chaos" in parts or "realbench" in parts:
            item.add_marker(pytest.mark.docker)
