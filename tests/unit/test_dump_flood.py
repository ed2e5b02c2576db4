"""400,000 files and a 10,000-deep tree in one dump change nothing for its siblings (issue 37, 3).

The live ledger refresh listed and lstat'ed every entry of every dump several times and cached
them all (1.6 s of CPU per refresh at 400k files), under the lock the supervisor's publish waits
on. Here one run's dump holds 400,000 empty files and a 10,000-deep tree beside two honest
siblings, and the run's own refresh (RunProgress with its dump meter) is driven as the refresher
drives it. The cost is counted, not timed: the entries any refresh reads from the hostile dump
(every os.scandir entry and os.lstat call while the ledger is built) stay a small constant, the
meter visits at most its budget per refresh, the siblings' rows are written, and the hostile task
is found over its bound and its row says which.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)

from cowork_adapter.container import safetree
from cowork_adapter.report.build import build_report
from cowork_adapter.report.merge import load_runs
from cowork_adapter.run.dump_bounds import append_record
from cowork_adapter.run.progress import RunProgress
from cowork_adapter.runroot.dump_meter import Bounds, DumpMeter
from cowork_adapter.runroot.events import EventLog
from cowork_adapter.runroot.layout import RunRoot
from cowork_adapter.schemas.dump_bounds import DumpOverBound
from cowork_adapter.schemas.ledger import read_index
from cowork_adapter.vocab import DumpBound, TamperKind
from cowork_adapter.vocab import TaskStatus as S

FILES = 400_000
DEPTH = 10_000
BUDGET = 20_000


@pytest.fixture()
def base(tmp_path):
    """In memory where the host has it (/dev/shm): 400,000 creations on this disk cost minutes under
    load, and the disk's speed is not the subject (the counts are)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(dir=shm, prefix="cowork-test-flood-"))
    yield folder
    assert safetree.remove_tree(str(folder)).ok


def flood(dump: Path) -> None:
    fd = os.open(dump, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(FILES):
            os.close(os.open(f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
        os.mkdir("deep", dir_fd=fd)
        level = os.open("deep", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        for _ in range(DEPTH):
            os.mkdir("d", dir_fd=level)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=level)
            os.close(level)
            level = child
        os.close(level)
    finally:
        os.close(fd)


class Reads:
    """Entries read from below `hostile` by os.scandir and os.lstat while it is installed."""

    def __init__(self, monkeypatch, hostile: Path):
        self.count = 0
        real_scandir, real_lstat = os.scandir, os.lstat
        hostile_ino = os.stat(hostile).st_ino

        def counted(entries):
            with entries:
                for entry in entries:
                    self.count += 1
                    yield entry

        def scandir(path=".", *args, **kw):
            target = os.fstat(path).st_ino if isinstance(path, int) else None
            entries = real_scandir(path, *args, **kw)
            if target == hostile_ino or (isinstance(path, (str, Path)) and str(path).startswith(str(hostile))):
                return _Closing(counted(entries), entries)
            return entries

        def lstat(path, *args, **kw):
            if (
                str(path).startswith(str(hostile))
                or kw.get("dir_fd") is not None
                and os.fstat(kw["dir_fd"]).st_ino == hostile_ino
            ):
                self.count += 1
            return real_lstat(path, *args, **kw)

        monkeypatch.setattr(os, "scandir", scandir)
        monkeypatch.setattr(os, "lstat", lstat)


class _Closing:
    def __init__(self, gen, entries):
        self.gen, self.entries = gen, entries

    def __iter__(self):
        return self.gen

    def __next__(self):
        return next(self.gen)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.entries.close()


def test_a_flooded_dump_costs_its_siblings_nothing(base, monkeypatch):
    root = base / "run"
    manifest = synth.write_manifest(root, ["b", "hostile", "c"])
    manifest = manifest.replace(
        budgets=manifest.budgets.replace(dump_max_gib=8.0, dump_max_entries=200_000, dump_max_depth=128)
    )
    (root / "run_manifest.json").write_text(manifest.to_json(), encoding="utf-8")  # as launch records them
    for task, verdict in (("b", True), ("c", False)):
        dump = synth.dump_dir(root, task)
        synth.write_start_evidence(dump, usage_rows=2)
        synth.write_summary(dump, synth.summary("success"))
        synth.write_traj_log(dump, "success")
        synth.write_eval(dump, {"pass": verdict, "details": "x"})
    hostile = synth.dump_dir(root, "hostile")
    synth.write_start_evidence(hostile, usage_rows=1)
    flood(hostile)

    found = []
    progress = RunProgress(
        root,
        EventLog(RunRoot(root).events),
        meter=DumpMeter(Bounds.of(8.0, 200_000, 128), budget=BUDGET),
        on_over=found.append,
    )
    progress._started.update({"b", "hostile", "c"})  # as the shim's evidence would say (custody)
    ticks = 0
    reads = Reads(monkeypatch, hostile)
    while not found and ticks < 40:
        progress.refresh(live=True, interruption_cause="in_progress")
        assert progress.meter.visited_last_tick <= BUDGET
        ticks += 1
    meter_reads = reads.count
    assert [(o.task, o.bound) for o in found] == [("hostile", DumpBound.ENTRIES)]
    assert found[0].measured == 200_001

    # The ledger's own reading of the hostile dump: a few named entries per refresh, not a listing.
    reads.count = 0
    for _ in range(3):
        rows = {r.instance_id: r for r in progress.refresh(live=True, interruption_cause="in_progress")}
    assert reads.count <= 3 * 40, reads.count
    assert meter_reads <= ticks * BUDGET + ticks * 40
    assert (rows["b"].status, rows["c"].status) == (S.PASSED, S.FAILED)

    # The run's record of the stop: the hostile row says which bound; the siblings are unchanged.
    over = found[0]
    RunRoot(root).evidence.mkdir(parents=True)  # custody makes it at the run's start
    append_record(
        root,
        DumpOverBound(
            task=over.task,
            bound=over.bound,
            limit=over.limit,
            measured=over.measured,
            at="2026-01-01T00:00:00Z",
            containers_stopped=1,
        ),
    )
    progress.refresh(live=False, interruption_cause="runner_exited")
    final = {r.instance_id: r for r in read_index(RunRoot(root).result_index)}
    assert (final["b"].status, final["c"].status) == (S.PASSED, S.FAILED)
    assert (final["hostile"].status, final["hostile"].reason_code) == (S.AGENT_FAILED, "dump_over_bound:entries")
    assert [f.kind for f in final["hostile"].tampering] == [TamperKind.DUMP_OVER_BOUND]
    assert "200,001" in final["hostile"].tampering[0].detail
    report = build_report(load_runs([root]), concurrency=1)
    assert any("1 task of run" in d and "--dump-max-entries 200000" in d for d in report["disclosures"]), report[
        "disclosures"
    ]


def test_the_meter_finds_a_deep_tree_at_the_depth_bound_without_walking_it(base):
    dump = base / "dump"
    dump.mkdir()
    fd = os.open(dump, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(DEPTH):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    meter = DumpMeter(Bounds.of(8.0, 200_000, 128), budget=50)
    found, ticks = [], 0
    while not found:
        found = meter.tick({"t": dump})
        ticks += 1
        assert meter.visited_last_tick <= 50
    assert [(o.bound, o.measured) for o in found] == [(DumpBound.DEPTH, 129)]
    assert ticks == 3  # 128 levels at 50 entries a tick: the walk never went past the bound
    assert meter.tick({"t": dump}) == []  # reported once


def test_the_byte_bound_counts_disk_blocks_not_a_sparse_file_s_claim(base):
    dump = base / "dump"
    dump.mkdir()
    with open(dump / "sparse", "wb") as fh:
        fh.truncate(1 << 40)  # claims a terabyte, takes nothing
    (dump / "real").write_bytes(b"x" * (2 << 20))
    meter = DumpMeter(Bounds(max_bytes=1 << 20, max_entries=100, max_depth=8))
    found = meter.tick({"t": dump})
    assert [(o.task, o.bound) for o in found] == [("t", DumpBound.BYTES)]
    assert found[0].measured >= 2 << 20
