"""The shim's evidence files have one reader in the ledger (score/resources.py's evidence_lines): the task's
resource use and the host's facts (score/infra.py) read the same `<id>.resources.jsonl` through it, so both
take the same readings, and neither follows a link, blocks on a FIFO or reads past its cap."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowork_adapter.score import resources
from cowork_adapter.score.infra import read_host_facts
from cowork_adapter.score.resources import EVIDENCE_CAP, READINGS_SUFFIX, evidence_lines, read_task_resources

MIB = 2**20
IDENT = "5-aa"
OOM = {"container": f"agent-{IDENT}", "role": "agent", "oom_killed": True, "memory_peak_bytes": 300 * MIB, "cpu_ns": 7}


def _evidence(root: Path) -> Path:
    folder = root / "custody" / "evidence"
    folder.mkdir(parents=True)
    (folder / f"{IDENT}.task").write_text("finalpool/task-a\n")
    (folder / "creations.jsonl").write_text(json.dumps({"name": f"agent-{IDENT}", "role": "agent", "admitted": True}))
    return folder


def _both(root: Path) -> tuple[int | None, bool]:
    """(the task's peak memory as its row records it, whether the host saw an OOM kill)."""
    use = read_task_resources(root)["task-a"]
    host = read_host_facts(root, {"task-a": IDENT}, recorded=True, gateway=False, engine=None)["task-a"]
    return use.peak_memory_bytes, host.oom_killed


def test_both_readers_take_the_same_readings(tmp_path: Path) -> None:
    folder = _evidence(tmp_path)
    (folder / (IDENT + READINGS_SUFFIX)).write_text(json.dumps(OOM) + "\n" + '{"torn')
    assert _both(tmp_path) == (300 * MIB, True)


def test_a_link_in_place_of_the_readings_is_read_by_neither(tmp_path: Path) -> None:
    folder = _evidence(tmp_path)
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(json.dumps(OOM) + "\n")
    (folder / (IDENT + READINGS_SUFFIX)).symlink_to(elsewhere)
    assert _both(tmp_path) == (None, False)
    assert read_task_resources(tmp_path)["task-a"].basis.startswith("unknown: ")


def test_a_fifo_in_place_of_the_readings_blocks_neither(tmp_path: Path) -> None:
    folder = _evidence(tmp_path)
    os.mkfifo(folder / (IDENT + READINGS_SUFFIX))  # no writer: an open without O_NONBLOCK would wait forever
    assert _both(tmp_path) == (None, False)


def test_readings_over_the_cap_are_read_by_neither(tmp_path: Path) -> None:
    folder = _evidence(tmp_path)
    line = (json.dumps(OOM) + "\n").encode()
    (folder / (IDENT + READINGS_SUFFIX)).write_bytes(line * (EVIDENCE_CAP // len(line) + 1))
    assert _both(tmp_path) == (None, False)
    (folder / (IDENT + READINGS_SUFFIX)).write_bytes(line * (EVIDENCE_CAP // len(line)))  # at the cap: read
    assert _both(tmp_path) == (300 * MIB, True)


def test_a_task_file_behind_a_link_names_no_task(tmp_path: Path) -> None:
    folder = _evidence(tmp_path)
    (folder / f"{IDENT}.task").unlink()
    (tmp_path / "task").write_text("finalpool/task-a\n")
    (folder / f"{IDENT}.task").symlink_to(tmp_path / "task")
    assert resources.task_runner_ids(tmp_path) == {}


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def _not_an_object(data: bytes) -> bool:
    try:
        return not isinstance(json.loads(data), dict)
    except ValueError:
        return True


# A line is a JSON value (one line: json.dumps escapes every newline) or bytes that are no JSON object.
_LINES = st.lists(
    st.one_of(
        _VALUES,
        st.binary(max_size=24).filter(lambda b: b"\n" not in b and b"\r" not in b and _not_an_object(b)),
    ),
    max_size=12,
)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lines=_LINES)
def test_evidence_lines_keeps_exactly_the_objects_among_generated_lines(tmp_path: Path, lines: list) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"\n".join(v if isinstance(v, bytes) else json.dumps(v).encode() for v in lines))
    assert evidence_lines(path) == [v for v in lines if isinstance(v, dict)]
