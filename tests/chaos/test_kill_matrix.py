"""The seeded chaos matrix: the launcher SIGKILLed, by pid and by process group, in every phase.

Phases: preflight, the environment-inventory probe (pg-probe containers exist), image (a fresh
tag, so the derived image is being built), runner start, tasks in flight, stop (after a SIGTERM
began it), cleanup (after runner_exited, before cleanup) and settlement (a run that ends by itself
with every task receipted; after cleanup, the meter silenced so the final reading waits). Moments
get a seeded jitter inside each phase's window: the seed is printed, and COWORK_CHAOS_SEED=<n>
reproduces a run. After each kill the operator's steps
run for real (wait for the watchdog, `clear`, `--resume-from` on the same campaign) and every
check of cowork_adapter.demo.chaos must hold: no creation later than 5 s after the kill, no agent
beyond the blindness bound, nothing labelled left, bystanders untouched, no receipted task rerun,
one final row per task across the ancestry, campaign spend equal to the meter's delta.

One demo environment (bench, seed, cached image, meter stand-in) is shared by all kills.
"""

from __future__ import annotations

import pytest

from cowork_adapter.demo.chaos import PHASES, SEED_ENV, ChaosBench, chaos_seed, pick_moments
from cowork_adapter.demo.env import prepare

pytestmark = pytest.mark.docker

SEED = chaos_seed()
MOMENTS = pick_moments(SEED, PHASES)
print(f"chaos seed {SEED} (reproduce with {SEED_ENV}={SEED})")


@pytest.fixture(scope="module")
def bench(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("kill-matrix") / "root", docker_host)
    chaos = ChaosBench(env)
    yield chaos
    chaos.remove_fresh_images()
    env.meter.stop()


@pytest.mark.parametrize("index", range(len(MOMENTS)), ids=[f"{m.phase}-{m.how}" for m in MOMENTS])
def test_a_launcher_killed_in_any_phase_is_cleared_and_resumed_truthfully(bench, index):
    moment = MOMENTS[index]
    result = bench.kill_and_recover(moment, index)
    print(f"seed {SEED}: {result.name} hit {result.hit} after jitter {moment.jitter}s; seconds {result.seconds}")
    failed = [f"{c.name}: {c.detail}" for c in result.checks if not c.ok]
    assert len(result.checks) >= 8, [c.name for c in result.checks]
    assert not failed, f"{result.name} (seed {SEED}, {SEED_ENV}={SEED} reproduces): {failed}"
