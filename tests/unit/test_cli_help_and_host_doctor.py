"""`--help` is readable at 80 columns (no flag name cut), and `doctor` without the run flags checks
the host and says what else it needs, instead of a usage error."""

from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import typer

from cowork_adapter import cli
from cowork_adapter.errors import Refusal
from cowork_adapter.ops import doctor_host

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv" / "bin" / "python"
GIB = 1 << 30


def _commands() -> list[tuple[list[str], list[str]]]:
    """(command words, its long option names) for every command and group."""
    out = []

    def walk(group, words):
        out.append((words, []))
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                walk(command, words + [name])
            else:
                # A hidden flag (--stop-path, for benchmarks only) is left out of help on purpose.
                longs = [
                    o
                    for p in command.params
                    if not getattr(p, "hidden", False)
                    for o in getattr(p, "opts", ())
                    if o.startswith("--")
                ]
                out.append((words + [name], longs))

    walk(typer.main.get_command(cli.app), [])
    return out


COMMANDS = _commands()


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "COLUMNS": "80", "TERM": "xterm"}

    def one(words):
        done = subprocess.run(
            [str(PYTHON), "-m", "cowork_adapter", *words, "--help"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return done.stdout + done.stderr

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip((" ".join(w) for w, _ in COMMANDS), pool.map(one, (w for w, _ in COMMANDS)), strict=True))


@pytest.mark.parametrize("words,longs", COMMANDS, ids=[" ".join(w) or "(top)" for w, _ in COMMANDS])
def test_help_fits_80_columns_with_every_flag_name_whole(helps, words, longs):
    text = helps[" ".join(words)]
    assert "Usage:" in text, text
    assert "…" not in text, text
    assert all(len(line) <= 80 for line in text.splitlines()), max(text.splitlines(), key=len)
    for flag in longs:
        assert re.search(re.escape(flag) + r"(\s|$)", text), (flag, text)


@pytest.mark.parametrize("words", [w for w, _ in COMMANDS], ids=[" ".join(w) or "(top)" for w, _ in COMMANDS])
def test_help_names_the_page_that_says_more_and_the_page_exists(helps, words):
    # Issue 31: every command's help (and the top one) points to the page of the docs that says more.
    text = " ".join(helps[" ".join(words)].split())
    pages = re.findall(r"\b((?:docs/[\w-]+|README)\.md)\b", text)
    assert pages, text
    for page in pages:
        assert (REPO / page).is_file(), page


def test_the_benchmark_only_stop_path_flag_is_hidden_but_checked(helps, tmp_path):
    from cowork_adapter.config import RunConfig

    assert "--stop-path" not in helps["run"]
    (tmp_path / "seed").mkdir()
    (tmp_path / "bench").mkdir()
    flags = dict(
        repo_dir=tmp_path / "seed",
        bench_root=tmp_path / "bench",
        docker_host="unix:///d",
        run_root=tmp_path / "runs" / "r",
        dry_run=True,
    )
    assert RunConfig.from_flags(**flags).stop_path == "fast"
    assert RunConfig.from_flags(**flags, stop_path="runner_trap").stop_path == "runner_trap"
    with pytest.raises(Refusal, match="--stop-path: input should be 'fast' or 'runner_trap'"):
        RunConfig.from_flags(**flags, stop_path="slow")


@pytest.fixture
def stand_in_daemon(monkeypatch):
    monkeypatch.setattr(doctor_host, "docker_version", lambda host: {"Version": "20.10.24", "ApiVersion": "1.41"})
    monkeypatch.setattr(doctor_host, "daemon_info", lambda host: {"NCPU": 2, "MemTotal": 24 * GIB})
    monkeypatch.setattr(doctor_host, "free_bytes", lambda path: 300 * GIB)


def _cli(args, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(args)
    out = capsys.readouterr()
    return int(done.value.code), out.out, out.err


def test_doctor_without_run_flags_checks_the_host_and_says_what_else_it_needs(stand_in_daemon, capsys, tmp_path):
    code, out, err = _cli(
        ["doctor", "--docker-host", "unix:///stand-in.sock", "--resource-root", str(tmp_path)], capsys
    )
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert lines[0].startswith("OK    docker host: unix:///stand-in.sock answers")
    assert "OK    daemon resources: 2 CPUs and 24.0 GiB" in out
    assert "OK    host tools:" in out and f"OK    disk (resource root): {tmp_path} has 300.0 GiB" in out
    assert "OK    disk (/)" in out
    assert "--repo-dir" in lines[-1] and "--run-root" in lines[-1] and "--bench-root" in lines[-1]
    assert "Missing option" not in out + err
    assert list(tmp_path.iterdir()) == []


def test_doctor_without_a_daemon_named_fails_that_check_and_still_checks_the_rest(stand_in_daemon, capsys, monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(doctor_host, "free_bytes", lambda path: 10 * GIB)
    code, out, _ = _cli(["doctor"], capsys)
    assert code == 1
    assert "FAIL  docker host: no Docker daemon is named" in out and "export DOCKER_HOST" in out
    assert "below the --min-free-gib reserve of 200 GiB" in out and "OK    host tools" in out


def test_doctor_with_run_flags_still_checks_the_run(capsys, tmp_path):
    """The run flags keep the run's doctor: --repo-dir without --run-root is the host doctor, both
    given reach RunConfig (here refused for its missing --bench-root)."""
    code, _, err = _cli(
        ["doctor", "--repo-dir", str(tmp_path), "--run-root", str(tmp_path / "r"), "--docker-host", "unix:///x.sock"],
        capsys,
    )
    assert code == 2 and "--bench-root is required" in err
