"""Admission by load wired into a shared host's batch loop (issue 20, deliverable 4): the flags,
the wait loop over injected readings, the limits the loop reads from its config, and `status`.

The decision itself (admission.decide) is tested in test_admission.py; a real shared run on the
test bed waits and shows it in tests/integration/test_shared_campaign_run.py.
"""

from __future__ import annotations

import msgspec
import pytest
from test_campaign_db_flags import base, refused  # noqa: F401 (its fixture); same directory, on sys.path

from cowork_adapter.config import RunConfig
from cowork_adapter.host.admission import GIB, AdmissionLimits, HostLoad
from cowork_adapter.ops.run_view import read_run
from cowork_adapter.ops.status import build_status, render_status_text
from cowork_adapter.run.batch_runner import ADMISSION_FILE, state_writer, wait_for_admission
from cowork_adapter.schemas.admission import AdmissionState

DB = "postgresql://db.example:5432/campaigns"
SHARED = {"campaign_db": DB, "shared_campaign": True}


def test_admission_flags_reach_the_limits(base) -> None:
    cfg = RunConfig.from_flags(
        **base, **SHARED, max_load_per_cpu=0.5, min_mem_available_gib=1.5, max_daemon_ping_sec=0.25
    )
    assert cfg.hosts.admission_limits() == AdmissionLimits(
        max_load_per_cpu=0.5, min_mem_available_bytes=int(1.5 * GIB), max_daemon_ping_sec=0.25
    )
    assert (
        RunConfig.from_flags(**base, **SHARED).hosts.admission_limits() == AdmissionLimits()
    )  # admission.py's defaults
    assert "max_load_per_cpu" not in cfg.applied_config()  # where a task ran is not how it ran


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"campaign_db": DB, "max_load_per_cpu": 1.0}, "only meaningful with --shared-campaign"),
        ({"min_mem_available_gib": 0.0}, "only meaningful with --shared-campaign"),
        ({"max_daemon_ping_sec": float("nan")}, "only meaningful with --shared-campaign"),
        ({**SHARED, "max_load_per_cpu": 0.0}, "--max-load-per-cpu must be more than 0 and at most 1000, not 0."),
        ({**SHARED, "max_load_per_cpu": float("inf")}, "--max-load-per-cpu must be more than 0"),
        ({**SHARED, "min_mem_available_gib": -1.0}, "--min-mem-available-gib must be 0 to 65536 GiB, not -1."),
        ({**SHARED, "min_mem_available_gib": float("nan")}, "--min-mem-available-gib must be 0 to 65536 GiB"),
        ({**SHARED, "max_daemon_ping_sec": 0.0}, "--max-daemon-ping-sec must be more than 0 and at most 600"),
        ({**SHARED, "max_daemon_ping_sec": 601.0}, "--max-daemon-ping-sec must be more than 0 and at most 600"),
    ],
)
def test_bad_admission_flags_are_one_sentence(base, extra: dict, words: str) -> None:
    sentence = refused({**base, **extra})
    assert words in sentence and sentence.count(". ") == 0  # one sentence


def load(load1: float, ping: float | None = 0.01) -> HostLoad:
    return HostLoad(load1=load1, cpus=2, mem_available_bytes=8 * GIB, daemon_ping_sec=ping)


ONE_PER_CPU = AdmissionLimits(max_load_per_cpu=1.0)


class Loop:
    """The wait loop with its readings, clock, sleeps and records held here."""

    def __init__(self, readings: list[HostLoad], stop_after: int | None = None) -> None:
        self.readings, self.stop_after = list(readings), stop_after
        self.records: list[AdmissionState] = []
        self.sleeps = 0
        self.now = 100.0

    def sleep(self, sec: float) -> None:
        self.sleeps += 1
        self.now += sec

    def run(self, limits: AdmissionLimits = ONE_PER_CPU) -> bool:
        return wait_for_admission(
            lambda: self.readings.pop(0),
            limits,
            record=self.records.append,
            stopped=lambda: self.stop_after is not None and self.sleeps >= self.stop_after,
            sleep=self.sleep,
            clock=lambda: self.now,
            poll_sec=5.0,
        )


def test_a_host_within_its_limits_claims_at_once_and_writes_nothing() -> None:
    loop = Loop([load(1.0)])
    assert loop.run() is True
    assert loop.records == [] and loop.sleeps == 0


def test_a_host_over_its_limit_waits_says_so_once_and_says_when_it_ends(capsys) -> None:
    loop = Loop([load(5.0), load(6.0), load(3.0, ping=None), load(1.0)])
    assert loop.run() is True
    assert loop.sleeps == 3 and not loop.readings  # a reading per poll until one admits
    start, end = loop.records
    assert start.waiting and start.sentence == (
        "waiting for load: load average 5.0 on 2 CPU(s) is 2.50 per CPU, over 1"
    )
    assert not end.waiting and end.waited_sec == 15.0 and end.sentence.startswith("admitting")
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": ", 1)[1][:30] for line in out] == [
        "waiting for load: load average",
        "wait for load ended after 15 s",
    ]


def test_a_stop_while_waiting_ends_the_wait_without_a_claim() -> None:
    loop = Loop([load(5.0)] * 5, stop_after=2)
    assert loop.run() is False
    assert [r.waiting for r in loop.records] == [True, False]
    assert loop.records[1].sentence == "the run was stopped while waiting for load"


def test_the_loop_reads_its_limits_and_daemon_from_its_one_config(tmp_path, monkeypatch) -> None:
    """The launcher writes the run's admission flags and daemon into the batch loop's config
    (shared_runner.json, a BatchRunnerConfig); the loop reads that file alone, whatever DOCKER_HOST says."""
    from pathlib import Path
    from types import SimpleNamespace

    from cowork_adapter.run.shared_host import SharedHost
    from cowork_adapter.schemas.multihost import BatchRunnerConfig

    monkeypatch.setenv("DOCKER_HOST", "unix:///elsewhere.sock")
    run_root = tmp_path / "storage" / "run-1"
    run_root.mkdir(parents=True)
    cfg = RunConfig.from_flags(
        repo_dir=tmp_path / "seed",
        bench_root=tmp_path / "bench",
        run_root=run_root,
        docker_host="unix:///run/d.sock",
        campaign_db="postgresql://db/c",
        shared_campaign=True,
        max_load_per_cpu=0.5,
        min_mem_available_gib=1.0,
        max_daemon_ping_sec=1.0,
        new_campaign=True,
    )
    run = SimpleNamespace(cfg=cfg, bench_copy=run_root / "bench", stop_file=run_root / "custody" / "stop")
    argv, _env = SharedHost(run, claims=None, run_id="r1", host="h").runner({})
    config = msgspec.json.decode(Path(argv[-1]).read_bytes(), type=BatchRunnerConfig)
    assert AdmissionLimits(**msgspec.structs.asdict(config.admission)) == AdmissionLimits(0.5, GIB, 1.0)
    assert config.docker_host == "unix:///run/d.sock" and config.run_id == "r1"


def test_status_shows_a_wait_while_the_run_lives_and_not_after(tmp_path) -> None:
    import synthetic_run as synth

    synth.write_manifest(tmp_path, ["a"], outcome="started")
    record = state_writer(tmp_path)
    record(
        AdmissionState(
            waiting=True,
            sentence="waiting for load: the Docker daemon did not answer its ping",
            since="2026-12-02T07:00:00Z",
        )
    )
    assert msgspec.json.decode((tmp_path / ADMISSION_FILE).read_bytes(), type=AdmissionState).waiting
    files = read_run(tmp_path)
    status = build_status(files, launcher_alive=True)
    assert status["admission"]["waiting"] is True
    lines = render_status_text(status, files.monitor)
    assert any(line.strip().startswith("waiting for load: the Docker daemon did not answer its ping") for line in lines)
    gone = render_status_text(build_status(files, launcher_alive=False), files.monitor)
    assert not any("waiting for load" in line for line in gone)  # a dead run waits for nothing
    record(
        AdmissionState(
            waiting=False,
            sentence="admitting: load, memory and daemon within limits",
            since="2026-12-02T07:01:00Z",
            waited_sec=60.0,
        )
    )
    files = read_run(tmp_path)
    assert not any(
        "waiting for load" in line
        for line in render_status_text(build_status(files, launcher_alive=True), files.monitor)
    )
