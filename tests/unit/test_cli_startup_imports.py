"""Start-up stays light: each command imports only what it uses (a structural guard, not a timing).

Every case runs the real command line in a fresh interpreter and lists which heavy libraries ended
up in sys.modules. pydantic, rich, docker, httpx, yaml and msgspec each cost tens to hundreds of
milliseconds to import; a command that does not use one must not pay for it. The time itself is
measured by benchmarks/bench_startup.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic_run import one_task_audit_run, synth_run  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)

HEAVY = ("pydantic", "pydantic_core", "rich", "docker", "httpx", "yaml", "msgspec", "ahocorasick_rs",
         "markdown_it", "pygments")

# Runs the command line in-process, then prints the exit code and the heavy top-level modules loaded.
_PROBE = """
import contextlib, io, json, sys
from cowork_adapter import cli
if sys.argv[1] == "whole":
    cli._app_for = lambda args: cli.app  # the whole app, as before commands were converted one by one
out, err = io.StringIO(), io.StringIO()
try:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        cli.main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.stdin.read())))
print(json.dumps({"code": code, "heavy": heavy, "out": out.getvalue(), "err": err.getvalue()}))
"""


def _run(*args: str, app: str = "slim") -> dict:
    env = {**os.environ, "COLUMNS": "80", "TERM": "xterm"}
    done = subprocess.run([sys.executable, "-c", _PROBE, app, *args], input=json.dumps(HEAVY), env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


@pytest.fixture()
def run_root(tmp_path: Path) -> Path:
    """A finished run of one task whose tool log reads the ground truth (one finding to report)."""
    return one_task_audit_run(tmp_path / "run")


def test_version_imports_no_heavy_library() -> None:
    got = _run("version")
    assert got["code"] == 0 and got["out"].startswith("cowork-adapter "), got
    assert got["heavy"] == [], got["heavy"]


@pytest.mark.parametrize("words", [[], ["run"], ["doctor"], ["qualify"], ["demo"], ["audit"], ["report"],
                                   ["status"], ["stop"], ["clear"], ["version"], ["campaign"],
                                   ["campaign", "show"], ["campaign", "reconcile"], ["export"]])
def test_every_help_is_plain_text_without_rich_or_a_command_library(words: list[str]) -> None:
    """Help is click's plain text (its panels kept as sections): rendering it through rich cost ~0.2 s."""
    got = _run(*words, "--help")
    assert got["code"] == 0 and "Usage:" in got["out"], got
    assert got["heavy"] == [], got["heavy"]


def test_the_run_help_keeps_its_flags_grouped_by_panel() -> None:
    out = _run("run", "--help")["out"]
    headings = [line[:-1] for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings == ["Locations", "Selection", "Agent", "Mode", "Money", "Disk", "Provider", "Image",
                        "Container limits", "Options"], headings
    assert out.index("--repo-dir") < out.index("Selection:") < out.index("--task-file") < out.index("Agent:")


def test_the_audit_imports_its_decoder_and_search_only(run_root: Path, tmp_path: Path) -> None:
    output = tmp_path / "audit.json"
    got = _run("audit", "--run-dir", str(run_root), "--output", str(output), "--workers", "1")
    assert got["code"] == 0, got
    assert "groundtruth" in output.read_text()  # the audit really ran and found the planted read
    assert got["heavy"] == ["ahocorasick_rs", "msgspec"], got["heavy"]


def test_status_reads_its_files_with_msgspec_only(tmp_path: Path) -> None:
    """`status` of a finished run whose launcher is gone: it names the `clear` line, yet imports neither
    the meter's HTTP client nor docker nor rich nor pydantic: its records are msgspec Structs."""
    synth_run(tmp_path / "run", 5)
    got = _run("status", str(tmp_path / "run"))
    assert got["code"] == 0 and "cowork-adapter clear" in got["out"], got
    assert got["heavy"] == ["msgspec"], got["heavy"]


def test_status_of_a_paid_run_reads_its_campaign_with_msgspec_only(tmp_path: Path) -> None:
    """A paid run's status also reads the campaign's active run (the launcher's pid): still no pydantic."""
    import shutil

    run = tmp_path / "run"
    synth_run(run, 5)
    campaign = tmp_path / "campaign.json"
    shutil.copy(Path(__file__).parent / "pydantic_written" / "campaign.json", campaign)
    manifest = json.loads((run / "run_manifest.json").read_text())
    (run / "run_manifest.json").write_text(json.dumps({**manifest, "campaign_file": str(campaign)}))
    got = _run("status", str(run))
    assert got["code"] == 0 and "cowork-adapter clear" in got["out"], got
    assert got["heavy"] == ["msgspec"], got["heavy"]


@pytest.mark.parametrize("args", [["status", "/nonexistent/run"], ["audit", "--run-dir", "/nonexistent/run"],
                                  ["report", "/nonexistent/run"], ["stop", "/nonexistent/run"],
                                  ["export", "/nonexistent/run", "--output-dir", "/tmp/nowhere"]])
def test_a_refused_path_imports_no_heavy_library(args: list[str]) -> None:
    """A path refusal is decided before the command's implementation is imported."""
    got = _run(*args)
    assert got["code"] == 2 and "does not exist" in got["err"], got
    assert got["heavy"] == [], got["heavy"]


def test_run_flags_are_declared_without_pydantic() -> None:
    """`run --help` lists the run flags from defaults.py; RunConfig is built only by a run."""
    got = _run("run", "--help")
    assert got["code"] == 0 and "--budget-usd" in got["out"], got
    assert "pydantic" not in got["heavy"], got["heavy"]


@pytest.mark.parametrize("args", [["audit", "--help"], ["run", "--help"], ["campaign", "show", "--help"],
                                  ["status", "--help"], ["audit", "--no-such-flag"], ["status"],
                                  ["campaign", "--help"], ["no-such-command"], ["version"]])
def test_converting_only_the_invoked_command_changes_no_output(args: list[str]) -> None:
    """The slimmed app prints, refuses and exits exactly as the whole app does."""
    slim, whole = _run(*args), _run(*args, app="whole")
    assert (slim["code"], slim["out"], slim["err"]) == (whole["code"], whole["out"], whole["err"])


def test_status_imports_none_of_the_writers_of_clear_and_stop(tmp_path: Path) -> None:
    """`status` imports ops/recorded.py for the clear hints and control.py for the run's view, not what writes:
    the atomic writer (and secrets with it), the manifest writer, the campaign."""
    synth_run(tmp_path / "run", 5)
    probe = ("import contextlib, io, sys\nfrom cowork_adapter import cli\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    try:\n        cli.main(sys.argv[1:])\n    except SystemExit as exc:\n        code = exc.code\n"
             "print(code, sorted(m for m in sys.modules if m.startswith('cowork_adapter')))")
    done = subprocess.run([sys.executable, "-c", probe, "status", str(tmp_path / "run")], capture_output=True,
                          text=True, timeout=120, check=True)
    code, listed = done.stdout.split(" ", 1)
    loaded = set(json.loads(listed.replace("'", '"')))
    assert code == "0" and "cowork_adapter.ops.recorded" in loaded, done.stdout  # the hints are read
    assert "cowork_adapter.ops.clear" not in loaded, done.stdout  # clear itself (it writes) is not
    writers = {m for m in loaded if m in ("cowork_adapter.fileio", "cowork_adapter.runroot.manifest")
               or m.startswith("cowork_adapter.campaign")}
    assert writers == set(), writers
