"""The chaos matrix's pure parts: seeded moments, and the phase a run root says it is in."""

from __future__ import annotations

import json

from cowork_adapter.demo.chaos import PHASES, SEED_ENV, chaos_seed, pick_moments
from cowork_adapter.demo.chaos_watch import observed_phase


def test_a_seed_reproduces_its_moments_and_covers_every_phase_both_ways():
    first, again, other = pick_moments(7, PHASES), pick_moments(7, PHASES), pick_moments(8, PHASES)
    assert [(m.phase, m.how, m.jitter) for m in first] == [(m.phase, m.how, m.jitter) for m in again]
    assert [m.jitter for m in first] != [m.jitter for m in other]
    assert {(m.phase, m.how) for m in first} == {(p, h) for p in PHASES for h in ("pid", "group")}
    assert len(first) >= 12
    assert all(0.0 <= m.jitter <= 4.0 for m in first)


def test_the_seed_comes_from_the_environment_when_given(monkeypatch):
    monkeypatch.setenv(SEED_ENV, "12345")
    assert chaos_seed() == 12345
    monkeypatch.delenv(SEED_ENV)
    assert isinstance(chaos_seed(), int)


def _events(root, *kinds):
    (root / "events.jsonl").write_text("".join(json.dumps({"kind": k}) + "\n" for k in kinds))


def test_the_observed_phase_follows_what_the_run_wrote(tmp_path):
    root = tmp_path / "run"
    assert observed_phase(root) == "before_run_root"
    root.mkdir()
    (root / "run_manifest.json").write_text(json.dumps({"run_root": str(root)}))
    assert observed_phase(root) == "preflight"
    (root / "image_build.log").write_text("Step 1/9\n")
    assert observed_phase(root) == "image"
    (root / "run_manifest.json").write_text(json.dumps({"image": {"id": "sha256:ab"}}))
    assert observed_phase(root) == "probe"
    _events(root, "run_admitted", "watchdog_started", "runner_started")
    assert observed_phase(root) == "runner_start"
    (root / "custody" / "evidence").mkdir(parents=True)
    (root / "custody" / "evidence" / "agent-1.task").write_text("demo-csv-totals")
    assert observed_phase(root) == "in_flight"
    (root / "custody" / "stop").write_text("signal_15\n")  # the supervisor fenced for SIGTERM
    assert observed_phase(root) == "stop"
    _events(root, "runner_started", "stop_requested", "runner_exited")
    assert observed_phase(root) == "cleanup"
    _events(root, "runner_started", "runner_exited", "cleanup", "watchdog_exited")
    assert observed_phase(root) == "settlement"
    _events(root, "runner_started", "runner_exited", "cleanup", "settlement")
    assert observed_phase(root) == "finished"
