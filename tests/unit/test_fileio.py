"""fileio: the host side's atomic replace and exclusive create."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cowork_adapter import fileio
from cowork_adapter.fileio import create_exclusive, replace_atomic


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def tight_umask():
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


class Crash(BaseException):
    """Stands for our death between the temp write and the rename."""


def test_create_exclusive_never_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    target.write_text("first\n")
    with pytest.raises(FileExistsError):
        create_exclusive(target, "second\n")
    assert target.read_text() == "first\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]  # no temp left behind


def test_create_exclusive_refuses_a_dangling_symlink(tmp_path: Path) -> None:
    # A name taken by a link that points nowhere is still taken: nothing is created through it.
    link = tmp_path / "stop"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError):
        create_exclusive(link, "x\n")
    assert not (tmp_path / "elsewhere").exists()
    assert link.is_symlink()


def test_create_exclusive_refuses_when_the_name_appears_after_the_check(tmp_path: Path, monkeypatch) -> None:
    # Another writer wins between the early check and the link: the link still refuses.
    target = tmp_path / "stop"
    real_write_temp = fileio._write_temp

    def racing_write_temp(*args, **kwargs):
        tmp = real_write_temp(*args, **kwargs)
        target.write_text("operator\n")
        return tmp

    monkeypatch.setattr(fileio, "_write_temp", racing_write_temp)
    with pytest.raises(FileExistsError):
        create_exclusive(target, "launcher_died\n")
    assert target.read_text() == "operator\n"
    assert [p.name for p in tmp_path.iterdir()] == ["stop"]


def test_create_exclusive_writes_content_and_exact_mode(tmp_path: Path, tight_umask) -> None:
    create_exclusive(tmp_path / "a", "text\n")
    create_exclusive(tmp_path / "key.env", b"K=v\n", mode=0o600)
    create_exclusive(tmp_path / "docker", "#!/bin/sh\n", mode=0o755)
    assert (tmp_path / "a").read_text() == "text\n"
    assert mode_of(tmp_path / "a") == 0o644  # the umask 077 did not narrow it
    assert mode_of(tmp_path / "key.env") == 0o600
    assert mode_of(tmp_path / "docker") == 0o755


def test_create_exclusive_crash_before_link_leaves_no_file(tmp_path: Path, monkeypatch) -> None:
    def crash(*_args, **_kwargs):
        raise Crash()

    monkeypatch.setattr(fileio.os, "link", crash)
    with pytest.raises(Crash):
        create_exclusive(tmp_path / "stop", "reason\n")
    assert list(tmp_path.iterdir()) == []


def test_replace_atomic_replaces_content(tmp_path: Path) -> None:
    target = tmp_path / "run_manifest.json"
    replace_atomic(target, "{}\n")
    replace_atomic(target, b'{"a": 1}\n')
    assert target.read_text() == '{"a": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["run_manifest.json"]


def test_replace_atomic_crash_between_write_and_replace_keeps_old_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "result_index.jsonl"
    target.write_text("old\n")

    def crash(*_args, **_kwargs):
        raise Crash()

    monkeypatch.setattr(fileio.os, "replace", crash)
    with pytest.raises(Crash):
        replace_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["result_index.jsonl"]  # the temp was removed


def test_replace_atomic_killed_between_write_and_replace_keeps_old_file(tmp_path: Path) -> None:
    # A real death: no cleanup code runs. The old file stays whole; only a dot-temp is left.
    target = tmp_path / "campaign.json"
    target.write_text('{"spent": 1}\n')
    script = textwrap.dedent(f"""
        import os
        from cowork_adapter import fileio
        fileio.os.replace = lambda *a, **k: os._exit(9)
        fileio.replace_atomic({str(target)!r}, '{{"spent": 2}}\\n')
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == 9, proc.stderr
    assert target.read_text() == '{"spent": 1}\n'
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "campaign.json"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".campaign.json.") and leftovers[0].endswith(".tmp")


def test_replace_atomic_failed_write_keeps_old_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "monitor.json"
    target.write_text("old\n")

    def full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "write", full)
    with pytest.raises(OSError):
        replace_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["monitor.json"]


def test_replace_atomic_mode_bits(tmp_path: Path, tight_umask) -> None:
    private = tmp_path / "campaign.json"
    replace_atomic(private, "1\n", mode=0o600)
    assert mode_of(private) == 0o600
    replace_atomic(private, "2\n", mode=None)  # None: keep the replaced file's bits
    assert mode_of(private) == 0o600
    os.chmod(private, 0o640)
    replace_atomic(private, "3\n", mode=None)
    assert mode_of(private) == 0o640
    fresh = tmp_path / "new.json"
    replace_atomic(fresh, "x\n", mode=None)  # nothing to keep: the default, not narrowed by the umask
    assert mode_of(fresh) == fileio.DEFAULT_MODE
    replace_atomic(fresh, "y\n")  # the default mode is applied exactly
    assert mode_of(fresh) == 0o644


def test_create_exclusive_not_durable_waits_on_no_flush(tmp_path: Path, monkeypatch) -> None:
    # A stop marker must not wait on a busy disk: durable=False never calls fsync.
    def no_flush(_fd):
        raise AssertionError("fsync called for a non-durable marker")

    monkeypatch.setattr(fileio.os, "fsync", no_flush)
    create_exclusive(tmp_path / "stop", "campaign_budget_reserve\n", durable=False)
    assert (tmp_path / "stop").read_text() == "campaign_budget_reserve\n"
    with pytest.raises(AssertionError):
        create_exclusive(tmp_path / "durable", "x\n")  # the default does flush


def test_create_exclusive_in_place_never_overwrites_and_keeps_mode(tmp_path: Path, tight_umask) -> None:
    key = tmp_path / "agent.env"
    create_exclusive(key, "K=secret\n", mode=0o600, in_place=True)
    assert key.read_text() == "K=secret\n" and mode_of(key) == 0o600
    with pytest.raises(FileExistsError):
        create_exclusive(key, "K=other\n", mode=0o600, in_place=True)
    assert key.read_text() == "K=secret\n"


def test_create_exclusive_in_place_killed_mid_write_leaves_only_the_known_name(tmp_path: Path) -> None:
    # The key file is deleted by its exact name: a death mid-write must leave no copy elsewhere.
    key = tmp_path / "agent.env"
    script = textwrap.dedent(f"""
        import os
        from cowork_adapter import fileio
        fileio.os.write = lambda *a, **k: os._exit(9)
        fileio.create_exclusive({str(key)!r}, "K=secret\\n", mode=0o600, in_place=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == 9, proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["agent.env"]
    assert mode_of(key) == 0o600
