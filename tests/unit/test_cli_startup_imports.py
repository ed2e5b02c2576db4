"""Start-up stays light: each command imports only what it uses (a structural guard, not a timing).

Every case runs the real command line in a fresh interpreter and lists which heavy libraries ended
up in sys.modules. pydantic, rich, docker, httpx, yaml and msgspec each cost tens to hundreds of
milliseconds to import; a command that does not use one must not pay for it. The time itself is
measured by benchmarks/bench_startup.py.

Below, the one list of the imports made inside a function anywhere in src/cowork_adapter (the demo and
the stub seed included), each with its reason; any other import stands at the top of its module, and a
new one inside a function fails `test_every_import_inside_a_function_is_listed_with_its_reason`.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic_run import one_task_audit_run, synth_run  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)

HEAVY = (
    "pydantic",
    "pydantic_core",
    "rich",
    "docker",
    "httpx",
    "yaml",
    "msgspec",
    "ahocorasick_rs",
    "markdown_it",
    "pygments",
)

DOCKER = "docker (with requests) takes ~0.2 s to import: only what talks to a daemon pays it"
HTTPX = (
    "httpx (the key meter, the gateway) takes ~0.3 s to import: only a paid run, doctor's meter check or a campaign "
    "command pays it"
)
PSYCOPG2 = "psycopg2 takes ~0.1 s to import: only a command that reads or writes a campaign database pays it"
NO_WRITERS = (
    "status imports this module and none of the writers (test_status_imports_none_of_the_writers_of_clear_and_stop)"
)
COMMAND = (
    "the command line imports a command's implementation only when that command runs (start-up of every other command)"
)
IN_CONTAINER = "the benchmark's own code, importable only inside the task container once its folder is on sys.path"
CRYPTOGRAPHY = (
    "cryptography (the default route's run CA) takes ~0.1 s to import: only a paid run on that route or doctor's "
    "check of it pays it"
)
ONE_PHASE = (
    "the container's entry point imports only the phase it runs: each phase is its own process in the task container"
)

# (file under src/cowork_adapter, the module as the import names it: "" for `import x`) -> why inside a function.
FUNCTION_IMPORTS = {
    ("cli/apps.py", "..config"): "the campaign URL check is config/'s (msgspec): only with --campaign-db",
    ("cli/campaign.py", "..campaign.commands"): COMMAND,
    ("cli/campaign.py", "..campaign.pg_store"): COMMAND,
    ("cli/campaign.py", "..campaign.release"): COMMAND,
    ("cli/ops.py", "..ops.campaign_status"): COMMAND,
    ("cli/ops.py", "..ops.clear"): COMMAND,
    ("cli/ops.py", "..ops.status"): COMMAND,
    ("cli/ops.py", "..ops.stop"): COMMAND,
    ("cli/readers.py", "..audit"): COMMAND,
    ("cli/readers.py", "..export"): COMMAND,
    ("cli/readers.py", "..report"): COMMAND,
    ("cli/readers.py", "..report.compare"): COMMAND,
    ("cli/ops.py", "..ops.trial_control"): COMMAND,
    ("cli/runs.py", "..run.trials"): COMMAND,
    ("cli/run_flags.py", "..config"): "RunConfig and the flag checks import msgspec: not for --help or a refused path",
    ("cli/runs.py", "..demo.scenarios"): COMMAND,
    ("cli/runs.py", "..ops.doctor"): COMMAND,
    ("cli/runs.py", "..run.launch"): COMMAND,
    ("cli/runs.py", "..run.qualify"): COMMAND,
    ("campaign/commands.py", "..custody.docker_ops"): DOCKER,
    ("campaign/records.py", ""): PSYCOPG2,  # import psycopg2
    ("campaign/records.py", ".pg_conn"): PSYCOPG2,
    (
        "campaign/records.py",
        ".store",
    ): "the store (a writer) only when the snapshot is read, not for the pure readers report/ uses",
    ("campaign/release.py", "..custody.docker_ops"): DOCKER,
    ("campaign/release.py", ".commands"): HTTPX,
    ("campaign/release.py", ".pg_store"): PSYCOPG2,
    ("container/bench.py", "utils.data_structures.task_config"): IN_CONTAINER,
    ("container/bench.py", "utils.evaluation.evaluator"): IN_CONTAINER,
    ("container/diagnostic.py", "utils.data_structures.task_config"): IN_CONTAINER,
    ("container/entrypoint.py", ".agent"): ONE_PHASE,
    ("container/entrypoint.py", ".evalphase"): ONE_PHASE,
    ("container/entrypoint.py", ".probes"): ONE_PHASE,
    (
        "container/yamlmini.py",
        "",
    ): "PyYAML is optional in the image: without it the stdlib subset parser reads the file",
    (
        "custody/shim_io.py",
        "",
    ): "safefile is a sibling copy beside the installed shim, on sys.path only once its folder is added",
    (
        "custody/shim_taskdb.py",
        "",
    ): "taskdb_probe is a sibling copy beside the installed shim, loaded as safefile is",
    (
        "demo/bench/hostile_agent.py",
        "",
    ): "psycopg2 is the benchmark venv's, in the task image: only the task database attacks need it",
    ("demo/bench/main.py", "mcp"): "mcp (~2 s) only when the stand-in benchmark opens its MCP sessions",
    ("demo/bench/main.py", "mcp.client.stdio"): "mcp (~2 s) only when the stand-in benchmark opens its MCP sessions",
    (
        "demo/bench/main.py",
        "mcp.client.streamable_http",
    ): "mcp (~2 s) only when the stand-in benchmark opens its MCP sessions",
    ("demo/bench/utils/mcp_config.py", ""): "PyYAML is optional where the stand-in benchmark runs",
    ("demo/scenarios.py", "rich.console"): "rich only to print the demo's verdict table",
    ("demo/scenarios.py", "rich.table"): "rich only to print the demo's verdict table",
    ("demo/stub_seed/stub_ouroboros/mcp_call.py", ""): "httpx and mcp only when the stub engine calls an MCP tool",
    ("demo/stub_seed/stub_ouroboros/mcp_call.py", "mcp"): "httpx and mcp only when the stub engine calls an MCP tool",
    (
        "demo/stub_seed/stub_ouroboros/mcp_call.py",
        "mcp.client.streamable_http",
    ): "mcp's client under either of its two names, whichever the installed version has",
    ("export/__init__.py", ".inspect_log"): "inspect_ai takes ~4 s to import: only the Inspect export pays it",
    ("host/daemon.py", ""): DOCKER,  # import docker
    ("host/daemon.py", "docker.errors"): DOCKER,
    ("host/daemon.py", "requests.exceptions"): DOCKER,
    ("host/resources.py", "..campaign.store"): NO_WRITERS,
    ("ops/clear.py", "..campaign.commands"): HTTPX,
    ("ops/clear.py", "..custody"): DOCKER,  # docker_ops
    ("ops/clear.py", "..gateway.run"): HTTPX,
    ("ops/run_view.py", "..campaign.pg_store"): PSYCOPG2,
    ("ops/run_view.py", "..campaign.store"): NO_WRITERS,
    ("ops/run_view.py", "..custody.docker_ops"): DOCKER,
    ("ops/stop.py", "..custody.stop_removal"): DOCKER,
    ("ops/doctor.py", "..campaign.meter"): HTTPX,
    ("ops/doctor.py", "..image.derived"): DOCKER,
    ("ops/doctor.py", "..run.launch"): DOCKER,
    ("ops/doctor.py", "..run.spending"): HTTPX,
    ("ops/doctor_probes.py", "..campaign.meter"): HTTPX,
    ("run/batch_runner.py", ""): DOCKER,  # import docker
    ("run/launch.py", "..gateway.run"): HTTPX,
    ("run/launch.py", "..gateway.tls"): CRYPTOGRAPHY,
    ("ops/doctor.py", "..run.daemon_check"): HTTPX,
    (
        "run/launch.py",
        ".run",
    ): "the run itself (httpx and rich through the meter and the live view): a refused preflight decides first",
    (
        "run/launch.py",
        ".spending",
    ): "the spending policies (httpx through the meter): a refused preflight decides first",
    ("run/live.py", "rich.console"): "rich (~0.15 s) only for the live view on a terminal",
    ("run/live.py", "rich.live"): "rich (~0.15 s) only for the live view on a terminal",
    ("run/live.py", "rich.table"): "rich (~0.15 s) only for the live view on a terminal",
    ("run/spending.py", "..campaign.pg_store"): PSYCOPG2,
    ("run/spending.py", "..campaign.shared"): PSYCOPG2,
    ("run/spending.py", ".shared_host"): PSYCOPG2,
    ("run/trial_money.py", ".spending"): "the spending policies (httpx through the meter): only a paid set reads them",
}


def _function_imports(src: Path) -> dict[tuple[str, str], list[str]]:
    """(file, module) -> where: every import statement inside a function (nested ones too)."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.ImportFrom):
                    module = "." * node.level + (node.module or "")
                elif isinstance(node, ast.Import):
                    module = ""
                else:
                    continue
                key = (path.relative_to(src).as_posix(), module)
                found.setdefault(key, []).append(f"{key[0]}:{node.lineno} in {func.name}")
    return found


def test_every_import_inside_a_function_is_listed_with_its_reason() -> None:
    """An import belongs at the top of its module unless start-up time needs it elsewhere: a new one
    inside a function is listed above with its reason, and an entry nothing uses any more is dropped."""
    import cowork_adapter

    found = _function_imports(Path(cowork_adapter.__file__).parent)
    unlisted = sorted(where for key, places in found.items() if key not in FUNCTION_IMPORTS for where in places)
    assert unlisted == [], (
        "imports inside functions missing from FUNCTION_IMPORTS (move them to the top): " + "; ".join(unlisted)
    )
    stale = sorted(set(FUNCTION_IMPORTS) - set(found))
    assert stale == [], f"FUNCTION_IMPORTS entries no function imports any more: {stale}"


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
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, app, *args],
        input=json.dumps(HEAVY),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.fixture()
def run_root(tmp_path: Path) -> Path:
    """A finished run of one task whose tool log reads the ground truth (one finding to report)."""
    return one_task_audit_run(tmp_path / "run")


def test_version_imports_no_heavy_library() -> None:
    got = _run("version")
    assert got["code"] == 0 and got["out"].startswith("cowork-adapter "), got
    assert got["heavy"] == [], got["heavy"]


@pytest.mark.parametrize(
    "words",
    [
        [],
        ["run"],
        ["doctor"],
        ["qualify"],
        ["demo"],
        ["audit"],
        ["report"],
        ["status"],
        ["stop"],
        ["clear"],
        ["version"],
        ["campaign"],
        ["campaign", "show"],
        ["campaign", "reconcile"],
        ["export"],
    ],
)
def test_every_help_is_plain_text_without_rich_or_a_command_library(words: list[str]) -> None:
    """Help is click's plain text (its panels kept as sections): rendering it through rich cost ~0.2 s."""
    got = _run(*words, "--help")
    assert got["code"] == 0 and "Usage:" in got["out"], got
    assert got["heavy"] == [], got["heavy"]


def test_the_run_help_keeps_its_flags_grouped_by_panel() -> None:
    out = _run("run", "--help")["out"]
    headings = [line[:-1] for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings == [
        "Locations",
        "Selection",
        "Agent",
        "Mode",
        "Money",
        "Hosts",
        "Disk",
        "Provider",
        "Image",
        "Container limits",
        "Options",
    ], headings
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


@pytest.mark.parametrize(
    "args",
    [
        ["status", "/nonexistent/run"],
        ["audit", "--run-dir", "/nonexistent/run"],
        ["report", "/nonexistent/run"],
        ["stop", "/nonexistent/run"],
        ["export", "/nonexistent/run", "--output-dir", "/tmp/nowhere"],
    ],
)
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


@pytest.mark.parametrize(
    "args",
    [
        ["audit", "--help"],
        ["run", "--help"],
        ["campaign", "show", "--help"],
        ["status", "--help"],
        ["audit", "--no-such-flag"],
        ["status"],
        ["campaign", "--help"],
        ["no-such-command"],
        ["version"],
    ],
)
def test_converting_only_the_invoked_command_changes_no_output(args: list[str]) -> None:
    """The slimmed app prints, refuses and exits exactly as the whole app does."""
    slim, whole = _run(*args), _run(*args, app="whole")
    assert (slim["code"], slim["out"], slim["err"]) == (whole["code"], whole["out"], whole["err"])


def test_status_imports_none_of_the_writers_of_clear_and_stop(tmp_path: Path) -> None:
    """`status` imports ops/recorded.py for the clear hints and ops/run_view.py for the run's view, not what writes:
    the atomic writer (and secrets with it), the manifest writer, the campaign."""
    synth_run(tmp_path / "run", 5)
    probe = (
        "import contextlib, io, sys\nfrom cowork_adapter import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        cli.main(sys.argv[1:])\n    except SystemExit as exc:\n        code = exc.code\n"
        "print(code, sorted(m for m in sys.modules if m.startswith('cowork_adapter')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "status", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    code, listed = done.stdout.split(" ", 1)
    loaded = set(json.loads(listed.replace("'", '"')))
    assert code == "0" and "cowork_adapter.ops.recorded" in loaded, done.stdout  # the hints are read
    assert "cowork_adapter.ops.clear" not in loaded, done.stdout  # clear itself (it writes) is not
    writers = {
        m
        for m in loaded
        if m in ("cowork_adapter.fileio", "cowork_adapter.runroot.manifest") or m.startswith("cowork_adapter.campaign")
    }
    assert writers == set(), writers
