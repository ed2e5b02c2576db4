"""Task selection: the task-file format, explicit selection and the dataset check."""

from __future__ import annotations

import pytest

from cowork_adapter.benchmark.selection import (
    MAX_TASK_FILE_BYTES,
    explicit_selection,
    read_task_file,
    validate_against_dataset,
)
from cowork_adapter.errors import Refusal

# (name, file bytes, expected ids or None, words the refusal sentence must contain)
CASES = [
    ("plain", b"a\nb\nc\n", ["a", "b", "c"], ()),
    ("no trailing newline", b"a\nb", ["a", "b"], ()),
    ("blank lines and comments", b"\n# header\na\n\n   \n#b\nc\n", ["a", "c"], ()),
    ("whitespace stripped", b"  a  \n\tb\t\n", ["a", "b"], ()),
    ("crlf", b"a\r\nb\r\n", ["a", "b"], ()),
    ("indented comment", b"   # note\na\n", ["a"], ()),
    ("utf-8 bom", b"\xef\xbb\xbfa\nb\n", ["a", "b"], ()),
    ("allowed characters", b"Task_1.v2-x\n0lead\n", ["Task_1.v2-x", "0lead"], ()),
    ("order kept", b"z\na\nm\n", ["z", "a", "m"], ()),
    ("duplicate", b"a\nb\na\nb\n", None, ("line 3", "'a'", "line 1")),
    ("duplicate after comment", b"# x\na\n\na\n", None, ("line 4", "line 2")),
    ("leading dot", b"a\n.hidden\n", None, ("line 2", ".hidden")),
    ("slash", b"../etc\n", None, ("line 1",)),
    ("space inside", b"a b\n", None, ("line 1",)),
    ("inline comment", b"a # why\n", None, ("line 1",)),
    ("non-ascii id", "tâche\n".encode(), None, ("line 1",)),
    ("non-utf8", b"a\n\xff\xfe\n", None, ("UTF-8",)),
    ("empty file", b"", None, ("no task ids",)),
    ("only comments and blanks", b"# a\n\n  \n", None, ("no task ids",)),
]


@pytest.mark.parametrize("name,content,expected,words", CASES, ids=[c[0] for c in CASES])
def test_task_file_table(tmp_path, name, content, expected, words):
    path = tmp_path / "tasks.txt"
    path.write_bytes(content)
    if expected is not None:
        assert read_task_file(path) == expected
        return
    with pytest.raises(Refusal) as info:
        read_task_file(path)
    assert info.value.stage == "selection"
    assert "\n" not in info.value.sentence
    for word in words:
        assert word in info.value.sentence, (word, info.value.sentence)


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(Refusal, match="does not exist"):
        read_task_file(tmp_path / "absent.txt")


def test_directory_is_refused(tmp_path):
    with pytest.raises(Refusal, match="directory"):
        read_task_file(tmp_path)


def test_unreadable_file_is_refused(tmp_path, monkeypatch):
    # Tests run as root here, where a mode-0 file stays readable: simulate the OS refusal.
    path = tmp_path / "t.txt"
    path.write_text("a\n")

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(type(path), "open", denied)
    with pytest.raises(Refusal, match=r"cannot be read \(Permission denied\)"):
        read_task_file(path)


def test_oversized_file_is_refused(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"a\n" * (MAX_TASK_FILE_BYTES // 2 + 1))
    with pytest.raises(Refusal, match="larger than 1 MiB"):
        read_task_file(path)


def test_no_selectors_means_no_explicit_selection():
    assert explicit_selection(None, None) is None
    assert explicit_selection([], None) is None


def test_tasks_then_file_in_order(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("c\nd\n")
    assert explicit_selection(["b", "a"], path) == ["b", "a", "c", "d"]


def test_duplicate_across_task_and_file_is_refused(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("c\na\n")
    with pytest.raises(Refusal, match="both --task and --task-file") as info:
        explicit_selection(["a"], path)
    assert info.value.stage == "selection"


def test_duplicate_task_flag_is_refused():
    with pytest.raises(Refusal, match="twice"):
        explicit_selection(["a", "a"], None)


def test_invalid_task_flag_is_refused():
    with pytest.raises(Refusal, match="not a task id"):
        explicit_selection([".x"], None)


def test_dataset_check_names_at_most_three():
    validate_against_dataset(["a", "b"], ["a", "b", "c"])
    with pytest.raises(Refusal) as info:
        validate_against_dataset(["a", "x1", "x2", "x3", "x4", "x5"], ["a"])
    sentence = info.value.sentence
    assert info.value.stage == "selection"
    assert sentence.startswith("5 selected tasks are not in the pinned dataset")
    assert "'x1', 'x2', 'x3'" in sentence and "x4" not in sentence and "2 more" in sentence


def test_dataset_check_single_unknown():
    with pytest.raises(Refusal, match=r"^1 selected task is not in the pinned dataset: 'zz'\.$"):
        validate_against_dataset(["zz"], ["a"])
