"""The audit's readers of the shim's evidence files (audit/inputs.py: `<id>.task`, `<id>.eval_refused`,
`<id>.eval_admission`) read them bounded, as the ledger does: a link is not followed, a FIFO is not waited
on, a file over the cap is not read; what cannot be read is "unknown" or no task at all, never a raise."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowork_adapter.audit.inputs import eval_admissions, eval_refusals, evidence_by_task
from cowork_adapter.score.resources import EVIDENCE_CAP

IDENT = "7-bb"
ADMITTED = {"agent_container_state": "running"}


def _evidence(root: Path) -> Path:
    folder = root / "custody" / "evidence"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{IDENT}.task").write_text("finalpool/task-a\n")
    return folder


def _plain(root: Path) -> Path:
    folder = _evidence(root)
    (folder / f"{IDENT}.eval_refused").write_text("admission_stopped\n")
    (folder / f"{IDENT}.eval_admission").write_text(json.dumps(ADMITTED) + "\n")
    return folder


def test_the_plain_files_are_read(tmp_path: Path) -> None:
    _plain(tmp_path)
    assert eval_refusals(tmp_path) == {"task-a": "admission_stopped"}
    assert eval_admissions(tmp_path) == {"task-a": "running"}


def test_a_task_file_behind_a_link_names_no_task(tmp_path: Path) -> None:
    folder = _plain(tmp_path)
    (folder / f"{IDENT}.task").unlink()
    (tmp_path / "elsewhere").write_text("finalpool/task-a\n")
    (folder / f"{IDENT}.task").symlink_to(tmp_path / "elsewhere")
    assert eval_refusals(tmp_path) == {} and eval_admissions(tmp_path) == {}


def test_evidence_behind_a_link_is_not_read(tmp_path: Path) -> None:
    folder = _evidence(tmp_path)
    (tmp_path / "refused").write_text("secret-cause\n")
    (tmp_path / "admission").write_text(json.dumps(ADMITTED) + "\n")
    (folder / f"{IDENT}.eval_refused").symlink_to(tmp_path / "refused")
    (folder / f"{IDENT}.eval_admission").symlink_to(tmp_path / "admission")
    # the refusal is still seen (its file stands there), its cause unread
    assert eval_refusals(tmp_path) == {"task-a": "unknown"}
    assert eval_admissions(tmp_path) == {"task-a": "unknown"}


def test_a_fifo_blocks_no_reader(tmp_path: Path) -> None:
    folder = _evidence(tmp_path)
    (folder / f"{IDENT}.task").unlink()
    # no writer on any of them: an open without O_NONBLOCK would wait forever (the test would hang)
    for suffix in (".task", ".eval_refused", ".eval_admission"):
        os.mkfifo(folder / f"{IDENT}{suffix}")
    assert evidence_by_task(tmp_path, ".eval_refused") == {}
    (folder / f"{IDENT}.task").unlink()
    (folder / f"{IDENT}.task").write_text("finalpool/task-a\n")
    assert eval_refusals(tmp_path) == {"task-a": "unknown"}
    assert eval_admissions(tmp_path) == {"task-a": "unknown"}


def test_files_over_the_cap_are_not_read(tmp_path: Path) -> None:
    folder = _evidence(tmp_path)
    line = (json.dumps(ADMITTED) + "\n").encode()
    over = EVIDENCE_CAP // len(line) + 1
    (folder / f"{IDENT}.eval_admission").write_bytes(line * over)
    (folder / f"{IDENT}.eval_refused").write_bytes(b"admission_stopped\n" + b"x" * EVIDENCE_CAP)
    assert eval_admissions(tmp_path) == {"task-a": "unknown"}
    assert eval_refusals(tmp_path) == {"task-a": "unknown"}
    (folder / f"{IDENT}.eval_admission").write_bytes(line * (EVIDENCE_CAP // len(line)))  # at the cap: read
    assert eval_admissions(tmp_path) == {"task-a": "running"}
    (folder / f"{IDENT}.task").write_bytes(b"finalpool/task-b\n" + b" " * EVIDENCE_CAP)  # over: no task
    assert evidence_by_task(tmp_path, ".eval_admission") == {}


def test_a_torn_last_admission_line_keeps_the_record_before_it(tmp_path: Path) -> None:
    folder = _evidence(tmp_path)
    (folder / f"{IDENT}.eval_admission").write_text(json.dumps(ADMITTED) + '\n{"agent_container_st')
    assert eval_admissions(tmp_path) == {"task-a": "running"}


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_KINDS = st.sampled_from(["regular", "link", "fifo", "over_cap"])


@settings(
    max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    task_kind=_KINDS,
    refused_kind=_KINDS,
    admission_kind=_KINDS,
    refused=st.binary(max_size=64),
    admission=st.lists(_VALUES, max_size=4),
    torn=st.binary(max_size=16),
)
def test_generated_evidence_is_read_only_when_plain_and_never_raises(
    tmp_path_factory, task_kind, refused_kind, admission_kind, refused, admission, torn
) -> None:
    root = tmp_path_factory.mktemp("run")
    folder = root / "custody" / "evidence"
    folder.mkdir(parents=True)
    outside = root / "outside"
    outside.mkdir()
    admission_bytes = b"".join(json.dumps(v).encode() + b"\n" for v in admission) + torn

    def place(name: str, kind: str, data: bytes) -> None:
        path = folder / name
        if kind == "regular":
            path.write_bytes(data)
        elif kind == "link":
            (outside / name).write_bytes(data)
            path.symlink_to(outside / name)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.write_bytes(data + b"\n" * (EVIDENCE_CAP + 1 - len(data)))

    place(f"{IDENT}.task", task_kind, b"finalpool/task-a\n")
    place(f"{IDENT}.eval_refused", refused_kind, refused)
    place(f"{IDENT}.eval_admission", admission_kind, admission_bytes)

    refusals, admissions = eval_refusals(root), eval_admissions(root)
    if task_kind != "regular":  # the task's name is only taken from a plain `.task` file
        assert refusals == {} and admissions == {}
        return
    assert set(refusals) == {"task-a"} and set(admissions) == {"task-a"}
    if refused_kind != "regular":
        assert refusals["task-a"] == "unknown"
    else:
        text = refused.decode("utf-8", "replace").strip()
        assert refusals["task-a"] == (text.splitlines()[0][:200] if text else "unknown")
    if admission_kind != "regular":
        assert admissions["task-a"] == "unknown"
    else:
        assert isinstance(admissions["task-a"], str)
