"""The command line: every flag and selection refusal, through the real console entry.

Each refusal case runs `python -m cowork_adapter run ...` in a subprocess (all cases at once, two
at a time) and must exit 2 with exactly one stderr line `cowork-adapter: <sentence>`, print
nothing on stdout and create nothing: the run root and its parent stay absent and the case
directory's listing is unchanged. The wiring tests (test_cli_wiring.py) call `main()` in-process with stand-in
implementations to check that each command hands the right values to the right function.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv" / "bin" / "python"
FAKE_KEY = "sk-or-v1-FAKE-TEST-KEY-0000000000"


@dataclass
class Case:
    name: str
    args: list[str] = field(default_factory=list)  # appended to the base run flags
    words: str = ""  # must appear in the stderr line
    drop: tuple[str, ...] = ()  # base flags to leave out
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)  # inputs written before the snapshot


def _dup_file() -> dict[str, bytes]:
    return {"tasks.txt": b"a\nb\n# c\na\n"}


CASES = [
    # --- usage errors (click level) ---
    Case("missing repo dir", drop=("--repo-dir",), words="Missing option '--repo-dir'"),
    Case("missing run root", drop=("--run-root",), words="Missing option '--run-root'"),
    Case("unknown flag", ["--run-id", "x"], words="No such option: --run-id"),
    Case("concurrency not a number", ["--concurrency", "two"], words="--concurrency"),
    Case("safety mode not a choice", ["--safety-mode", "medium"], words="--safety-mode"),
    Case("probe not a choice", ["--probe", "all"], words="--probe"),
    Case("task review mode not a choice", ["--task-review-mode", "maybe"], words="--task-review-mode"),
    # --- required with an environment fallback ---
    Case("missing bench root", drop=("--bench-root",), words="--bench-root is required (or set COWORK_BENCH_ROOT)"),
    Case("empty docker host", ["--docker-host", ""], drop=("--docker-host",), words="--docker-host is empty"),
    Case("unset docker host", drop=("--docker-host",), words="--docker-host is empty"),
    Case("empty DOCKER_HOST", drop=("--docker-host",), env={"DOCKER_HOST": ""}, words="--docker-host is empty"),
    # --- single values ---
    Case("short bench commit", ["--bench-commit", "d943e75"], words="--bench-commit"),
    Case("concurrency 0", ["--concurrency", "0"], words="--concurrency must be at least 1"),
    Case("max steps 0", ["--max-steps", "0"], words="--max-steps must be at least 1"),
    Case("task timeout 0", ["--task-timeout", "0"], words="--task-timeout must be greater than 0"),
    Case("mcp tool timeout 0", ["--mcp-tool-timeout", "0"], words="--mcp-tool-timeout must be greater than 0"),
    Case("review slots negative", ["--review-slots", "-1"], words="--review-slots must be at least 0"),
    Case("review max cycles word", ["--review-max-cycles", "two"], words="--review-max-cycles"),
    Case("max workers 0", ["--max-workers", "0"], words="--max-workers must be at least 1"),
    Case("per task cost 0", ["--per-task-cost-usd", "0"], words="--per-task-cost-usd must be greater than 0"),
    Case("budget 0", ["--budget-usd", "0"], words="--budget-usd must be greater than 0"),
    Case("budget nan", ["--budget-usd", "nan"], words="--budget-usd must be a finite number"),
    Case("budget inf", ["--budget-usd", "inf"], words="--budget-usd must be a finite number"),
    Case("campaign budget 0", ["--campaign-budget-usd", "0"], words="--campaign-budget-usd must be greater than 0"),
    Case("prior spend negative", ["--prior-spend-usd", "-1"], words="--prior-spend-usd must be at least 0"),
    Case("reserve negative", ["--budget-reserve-usd", "-1"], words="--budget-reserve-usd must be at least 0"),
    Case("blindness 20", ["--meter-blindness-sec", "20"], words="--meter-blindness-sec must be greater than 20"),
    Case("blindness nan", ["--meter-blindness-sec", "nan"], words="--meter-blindness-sec must be a finite number"),
    Case("blindness inf", ["--meter-blindness-sec", "inf"], words="--meter-blindness-sec must be a finite number"),
    Case("min free negative", ["--min-free-gib", "-1"], words="--min-free-gib must be at least 0"),
    Case("min root free negative", ["--min-root-free-gib", "-1"], words="--min-root-free-gib must be at least 0"),
    Case("min key negative", ["--min-key-usd", "-1"], words="--min-key-usd must be at least 0"),
    Case("meter url", ["--meter-url", "openrouter.ai"], words="--meter-url"),
    Case("compatible url", ["--openai-compatible-base-url", "ftp://x"], words="--openai-compatible-base-url"),
    Case("api key env name", ["--api-key-env", "MY-KEY"], words="--api-key-env 'MY-KEY'"),
    Case("credential setting name", ["--credential-setting", "a b"], words="--credential-setting"),
    Case("engine", ["--engine", "camel"], words="--engine 'camel'"),
    Case("engine entry with a path", ["--engine", "upstream:x/main.py"], words="--engine"),
    Case("model with spaces", ["--model", "a b"], words="--model"),
    Case("cpus 0", ["--cpus", "0"], words="--cpus must be greater than 0"),
    Case("cpus nan", ["--cpus", "nan"], words="--cpus must be a finite number"),
    Case("memory syntax", ["--memory", "16 gigs"], words="--memory '16 gigs'"),
    Case("memory too small", ["--memory", "1m"], words="Docker's minimum"),
    Case("pids limit 15", ["--pids-limit", "15"], words="--pids-limit must be at least 16"),
    # --- combinations ---
    Case("paid run without campaign", drop=("--campaign-file",), words="a paid run needs --campaign-file"),
    Case(
        "prior spend without campaign",
        ["--dry-run", "--prior-spend-usd", "0"],
        drop=("--campaign-file",),
        words="--prior-spend-usd is only meaningful with --campaign-file",
    ),
    Case(
        "reserve equals ceiling",
        ["--budget-reserve-usd", "100", "--campaign-budget-usd", "100"],
        words="--budget-reserve-usd (100) must be below --campaign-budget-usd (100)",
    ),
    Case(
        "reserve above ceiling",
        ["--budget-reserve-usd", "200", "--campaign-budget-usd", "150"],
        words="must be below --campaign-budget-usd",
    ),
    Case(
        "campaign db password in the query",
        ["--campaign-db", "postgresql://db/c?password=hunter2"],
        drop=("--campaign-file",),
        words="--campaign-db must not carry a password",
    ),
    Case(
        "campaign db password among parameters",
        ["--campaign-db", "postgres://u@db:5432/c?sslmode=require&PassWord=hunter2"],
        drop=("--campaign-file",),
        words="--campaign-db must not carry a password",
    ),
    Case(
        "campaign db password name encoded",
        ["--campaign-db", "postgresql://db/c?pass%77ord=hunter2"],
        drop=("--campaign-file",),
        words="--campaign-db must not carry a password",
    ),
    Case(
        "campaign db ssl key password",
        ["--campaign-db", "postgresql://db/c?sslpassword=hunter2"],
        drop=("--campaign-file",),
        words="--campaign-db must not carry a password",
    ),
    Case(
        "campaign db password in the user part",
        ["--campaign-db", "postgresql://u:hunter2@db/c"],
        drop=("--campaign-file",),
        words="--campaign-db must not carry a password",
    ),
    Case("resume from itself", ["--resume-from", "{case}/storage/run"], words="--resume-from"),
    Case("resume from twice", ["--resume-from", "{case}/old", "--resume-from", "{case}/old/"], words="twice"),
    # --- the provider key ---
    Case("key as a value", ["--model", FAKE_KEY], words="the provider key must not appear on the command line"),
    Case("key inside an element", [f"--or-provider=x{FAKE_KEY}"], words="must not appear on the command line"),
    Case(
        "key of a named variable",
        ["--api-key-env", "OTHER_KEY", "--task", "other-secret-123"],
        env={"OTHER_KEY": "other-secret-123"},
        words="must not appear on the command line",
    ),
    Case("key before a usage error", ["--concurrency", FAKE_KEY], words="must not appear on the command line"),
    # --- selection (item 2) ---
    Case("task file missing", ["--task-file", "{case}/absent.txt"], words="does not exist"),
    Case(
        "task file not utf-8",
        ["--task-file", "{case}/tasks.txt"],
        files={"tasks.txt": b"a\n\xff\n"},
        words="not valid UTF-8",
    ),
    Case("task file invalid id", ["--task-file", "{case}/tasks.txt"], files={"tasks.txt": b"a\n.b\n"}, words="line 2"),
    Case(
        "task file duplicate",
        ["--task-file", "{case}/tasks.txt"],
        files=_dup_file(),
        words="line 4 repeats task 'a', first listed on line 1",
    ),
    Case(
        "task file empty",
        ["--task-file", "{case}/tasks.txt"],
        files={"tasks.txt": b"# nothing\n\n"},
        words="lists no task ids",
    ),
    Case("task file is a directory", ["--task-file", "{case}"], words="is a directory"),
    Case("task id invalid", ["--task", "a/b"], words="--task 'a/b' is not a task id"),
    Case("task twice", ["--task", "a", "--task", "a"], words="selected twice"),
    Case(
        "task and file overlap",
        ["--task", "b", "--task-file", "{case}/tasks.txt"],
        files={"tasks.txt": b"a\nb\n"},
        words="both --task and --task-file",
    ),
]
assert len({c.name for c in CASES}) == len(CASES)


def _base_flags(case_dir: Path) -> dict[str, str]:
    return {
        "--repo-dir": str(case_dir / "seed"),
        "--bench-root": str(case_dir / "bench"),
        "--run-root": str(case_dir / "storage" / "run"),
        "--docker-host": "unix:///nonexistent/docker.sock",
        "--campaign-file": str(case_dir / "campaign.json"),
    }


def _listing(folder: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*"))


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    before: list
    after: list
    run_root: Path


def _play(case: Case, case_dir: Path) -> Outcome:
    case_dir.mkdir(parents=True)
    for name, content in case.files.items():
        (case_dir / name).write_bytes(content)
    argv = []
    for flag, value in _base_flags(case_dir).items():
        if flag not in case.drop:
            argv += [flag, value]
    argv += [a.replace("{case}", str(case_dir)) for a in case.args]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(case_dir),
        "OPENROUTER_API_KEY": FAKE_KEY,
        "COLUMNS": "200",
        **case.env,
    }
    before = _listing(case_dir)
    done = subprocess.run(
        [str(PYTHON), "-m", "cowork_adapter", "run", *argv],
        cwd=case_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Outcome(done.returncode, done.stdout, done.stderr, before, _listing(case_dir), case_dir / "storage" / "run")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("refusals")
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores on the test machine
        futures = {c.name: pool.submit(_play, c, root / f"case{i}") for i, c in enumerate(CASES)}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_refusal_is_one_line_and_writes_nothing(outcomes, case):
    out = outcomes[case.name]
    assert out.returncode == 2, (out.returncode, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("cowork-adapter: ") and lines[0].strip() != "cowork-adapter:"
    assert case.words in lines[0], lines[0]
    assert out.stdout == ""
    assert FAKE_KEY not in out.stderr and "other-secret-123" not in out.stderr and "hunter2" not in out.stderr
    assert not out.run_root.exists() and not out.run_root.parent.exists()
    assert out.after == out.before


def test_valid_flags_pass_validation_in_a_subprocess(tmp_path):
    """The control: the same base flags without a fault get past validation (to the launcher),
    so the refusals above are caused by their faults."""
    fake = tmp_path / "fakepkg"
    fake.mkdir()
    # The launcher is someone else's module: a sitecustomize hook puts a stand-in in sys.modules,
    # where the command's lazy import finds it first.
    (fake / "sitecustomize.py").write_text(
        "import sys, types\n"
        "m = types.ModuleType('cowork_adapter.run.launch')\n"
        "def execute_run(cfg, argv):\n"
        "    print('REACHED', cfg.run_root, cfg.selection.task_ids, cfg.is_paid)\n"
        "    return 0\n"
        "m.execute_run = execute_run\n"
        "sys.modules['cowork_adapter.run.launch'] = m\n"
    )
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    argv = [x for kv in _base_flags(case_dir).items() for x in kv] + ["--task", "t1"]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(fake), "OPENROUTER_API_KEY": FAKE_KEY}
    done = subprocess.run(
        [str(PYTHON), "-m", "cowork_adapter", "run", *argv],
        cwd=case_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.strip() == f"REACHED {case_dir / 'storage' / 'run'} ('t1',) True"


def test_no_arguments_prints_help_and_exits_zero():
    done = subprocess.run(
        [str(PYTHON), "-m", "cowork_adapter"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", ""), "COLUMNS": "200"},
    )
    assert done.returncode == 0 and "Usage" in done.stdout and "run" in done.stdout
