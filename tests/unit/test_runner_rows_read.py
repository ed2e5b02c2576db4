"""The runner's summary.csv rows (score/context.py read_runner_rows) are read bounded, as every file of
the bench copy the runner's processes write: a link is not followed, a FIFO not waited on, a file over
the cap not read; the rows of a plain file are read as written."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowork_adapter.score.context import SUMMARY_CAP, read_runner_rows

HEADER = ["task", "status", "eval_pass", "duration_s"]


def _csv(rows: list[list[str]]) -> bytes:
    out = io.StringIO(newline="")
    writer = csv.writer(out)
    writer.writerow(HEADER)
    writer.writerows(rows)
    return out.getvalue().encode()


def _folder(bench: Path) -> Path:
    folder = bench / "benchmark_logs" / "fully_parallel_20260101_000000"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_a_plain_summary_is_read(tmp_path: Path) -> None:
    (_folder(tmp_path) / "summary.csv").write_bytes(_csv([["task-a", "success", "True", "12.5"]]))
    row = read_runner_rows(tmp_path)["task-a"]
    assert (row.status, row.eval_pass, row.duration_s) == ("success", "True", 12.5)


def test_a_summary_behind_a_link_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.csv").write_bytes(_csv([["task-a", "success", "True", "1"]]))
    (_folder(tmp_path) / "summary.csv").symlink_to(tmp_path / "elsewhere.csv")
    assert read_runner_rows(tmp_path) == {}


def test_a_fifo_in_place_of_the_summary_blocks_nothing(tmp_path: Path) -> None:
    os.mkfifo(_folder(tmp_path) / "summary.csv")  # no writer: an ordinary open would wait forever
    assert read_runner_rows(tmp_path) == {}


def test_a_summary_over_the_cap_is_not_read(tmp_path: Path) -> None:
    data = _csv([["task-a", "success", "True", "1"]])
    (_folder(tmp_path) / "summary.csv").write_bytes(data + b"\n" * (SUMMARY_CAP + 1 - len(data)))
    assert read_runner_rows(tmp_path) == {}
    (_folder(tmp_path) / "summary.csv").write_bytes(data + b"\n" * (SUMMARY_CAP - len(data)))  # at the cap: read
    assert set(read_runner_rows(tmp_path)) == {"task-a"}


_CELL = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12)


@settings(
    max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.lists(st.lists(_CELL, min_size=4, max_size=4), max_size=6), kind=st.sampled_from(["plain", "link"]))
def test_generated_summaries_are_read_only_when_plain(tmp_path_factory, rows, kind) -> None:
    bench = tmp_path_factory.mktemp("bench")
    data = _csv(rows)
    if kind == "plain":
        (_folder(bench) / "summary.csv").write_bytes(data)
    else:
        (bench / "outside.csv").write_bytes(data)
        (_folder(bench) / "summary.csv").symlink_to(bench / "outside.csv")
    got = read_runner_rows(bench)
    if kind == "link":
        assert got == {}
        return
    # what the csv module itself reads back of the same bytes (later rows win, blank task names skipped)
    expected = {}
    for rec in csv.DictReader(io.StringIO(data.decode("utf-8", "replace"), newline="")):
        if (rec.get("task") or "").strip():
            expected[(rec["task"] or "").strip()] = (rec.get("status") or "").strip()
    assert {task: row.status for task, row in got.items()} == expected
