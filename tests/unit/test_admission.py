"""Admission by load (admission.py): the pure decision, the /proc parsers and the timed ping."""

from __future__ import annotations

import pytest

from cowork_adapter.host.admission import (
    GIB,
    AdmissionLimits,
    HostLoad,
    decide,
    parse_loadavg,
    parse_mem_available,
    read_host_load,
    timed_ping,
)

LIMITS = AdmissionLimits(max_load_per_cpu=4.0, min_mem_available_bytes=2 * GIB, max_daemon_ping_sec=2.0)


def load(load1=2.0, cpus=2, mem=8 * GIB, ping=0.05):
    return HostLoad(load1=load1, cpus=cpus, mem_available_bytes=mem, daemon_ping_sec=ping)


def test_within_every_limit_admits():
    a = decide(load(), LIMITS)
    assert a.admit and a.waits == [] and a.sentence().startswith("admitting")


@pytest.mark.parametrize(
    "reading,says",
    [
        (load(load1=8.2), "load average 8.2 on 2 CPU(s) is 4.10 per CPU, over 4"),
        (load(mem=2 * GIB - 1), "MemAvailable 2.00 GiB is under 2.00 GiB"),
        (load(ping=2.5), "took 2.50 s to answer its ping, over 2 s"),
        (load(ping=None), "did not answer its ping"),
    ],
)
def test_each_reading_over_its_limit_waits_and_says_why(reading, says):
    a = decide(reading, LIMITS)
    assert not a.admit and len(a.waits) == 1 and says in a.waits[0]
    assert a.sentence().startswith("waiting for load: ")


def test_limits_are_inclusive_and_all_causes_are_listed():
    assert decide(load(load1=8.0, mem=2 * GIB, ping=2.0), LIMITS).admit
    a = decide(load(load1=30.0, mem=GIB, ping=None), LIMITS)
    assert len(a.waits) == 3


def test_unknown_load_or_memory_does_not_block_but_is_said():
    a = decide(
        HostLoad(
            load1=None, cpus=2, mem_available_bytes=None, daemon_ping_sec=0.1, problems=("/proc/loadavg unreadable",)
        ),
        LIMITS,
    )
    assert a.admit and "load average unknown" in a.notes and "MemAvailable unknown" in a.notes
    assert "/proc/loadavg unreadable" in a.sentence()


@pytest.mark.parametrize(
    "bad",
    [
        {"max_load_per_cpu": float("nan")},
        {"max_load_per_cpu": 0},
        {"max_daemon_ping_sec": float("inf")},
        {"min_mem_available_bytes": -1},
    ],
)
def test_nonsense_limits_are_refused(bad):
    with pytest.raises(ValueError):
        AdmissionLimits(**bad)


def test_proc_parsers():
    assert parse_loadavg("14.08 11.69 6.40 17/404 26505\n") == 14.08
    assert parse_mem_available("MemTotal: 24683652 kB\nMemAvailable:   22534792 kB\n") == 22534792 * 1024
    for bad in ("", "nan 1 1", "-1 0 0"):
        with pytest.raises((ValueError, IndexError)):
            parse_loadavg(bad)
    with pytest.raises(ValueError, match="no MemAvailable"):
        parse_mem_available("MemTotal: 1 kB\n")


def test_read_host_load_from_a_proc_tree(tmp_path):
    (tmp_path / "loadavg").write_text("9.00 1 1 1/1 1\n")
    (tmp_path / "meminfo").write_text("MemAvailable: 1048576 kB\n")
    reading = read_host_load(lambda: None, proc=tmp_path, cpus=3)
    assert (reading.load_per_cpu, reading.mem_available_bytes) == (3.0, GIB) and reading.daemon_ping_sec >= 0
    assert not decide(reading, LIMITS).admit  # 1 GiB free is under 2 GiB
    missing = read_host_load(lambda: None, proc=tmp_path / "absent", cpus=1)
    assert missing.load1 is None and len(missing.problems) == 2


def test_timed_ping_is_none_when_the_daemon_does_not_answer():
    ticks = iter([10.0, 10.25])
    assert timed_ping(lambda: None, clock=lambda: next(ticks)) == 0.25

    def refused():
        raise ConnectionRefusedError("no daemon")

    assert timed_ping(refused) is None
