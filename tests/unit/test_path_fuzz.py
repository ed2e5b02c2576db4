"""Bad paths in every path argument of every command: exit 2, one sentence, no traceback, no hang.

Each case runs the real console entry (`python -m cowork_adapter ...`) in a subprocess, in a fresh
case directory that holds one object of every bad class: a symbolic link loop, a dangling symbolic
link (whose target must never be created), a named pipe (a reader would block for ever), a
directory, a regular file, a run root whose ledger is a named pipe, a run root whose report folder
holds a dangling `report.md` link. Paths with a 300-byte component and /proc paths need no object.
The case directory's listing (links not followed) must be unchanged afterwards.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv" / "bin" / "python"
# An answer, not a hang: a refusal that never ends meets the 60 s subprocess timeout and has no exit
# code, which the test's `returncode == 2` fails on. How fast a refusal is belongs to benchmarks/, not
# here (a bound in seconds failed once at load 8 with nothing wrong).
LONG = "a" * 300

# Path classes by what the argument expects (each value is relative to the case directory, or absolute).
COMMON = {
    "loop": "loop",
    "long name": LONG,
    "long name inside": f"{LONG}/x",
    "dangling link": "dangling",
    "through a dangling link": "dangling/x",
    "proc": "/proc/self/cwd",
    "proc child": "/proc/self/cwd/x",
    "through a file": "f/x",
}
FILE_IN = {**COMMON, "fifo": "fifo", "directory": "d", "dev": "/dev/null"}
DIR_IN = {**COMMON, "fifo": "fifo", "file": "f", "dev": "/dev/null"}
RUN_ROOT_IN = {**DIR_IN, "empty directory": "d", "fifo ledger": "fifo-run", "dangling manifest": "dangling-run"}
NEW_FILE = {**COMMON, "existing file": "f", "directory": "d", "fifo": "fifo", "missing parent": "absent/out.json"}
OUTPUT_DIR = {**COMMON, "file": "f", "fifo": "fifo", "dangling report.md": "trap"}
NEW_DIR = {**COMMON, "file": "f", "fifo": "fifo", "link to a directory": "dirlink"}

RUN_FLAGS = [
    "--repo-dir",
    "seed",
    "--bench-root",
    "bench",
    "--run-root",
    "runs/new",
    "--docker-host",
    "unix:///nonexistent/docker.sock",
    "--dry-run",
]


def _run_with(flag: str, value: str, base: list[str] = RUN_FLAGS) -> list[str]:
    args = list(base)
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    return args


# (command line with {p} for the bad path, its path classes)
SLOTS: dict[str, tuple[list[str], dict[str, str]]] = {
    "status": (["status", "{p}"], RUN_ROOT_IN),
    "stop": (["stop", "{p}", "--timeout", "1"], RUN_ROOT_IN),
    "clear": (["clear", "{p}", "--operator-note", "checked"], RUN_ROOT_IN),
    "clear --campaign-file": (
        ["clear", "good-run", "--operator-note", "checked", "--campaign-file", "{p}"],
        {k: v for k, v in FILE_IN.items()},
    ),
    "report": (["report", "{p}"], RUN_ROOT_IN),
    "report --output-dir": (["report", "good-run", "--output-dir", "{p}"], OUTPUT_DIR),
    "compare": (["compare", "{p}", "--against", "good-run"], RUN_ROOT_IN),
    "compare --against": (["compare", "good-run", "--against", "{p}"], RUN_ROOT_IN),
    # compare writes comparison.*, not report.md: a folder holding one is no refusal for it.
    "compare --output-dir": (
        ["compare", "good-run", "--against", "good-run", "--output-dir", "{p}"],
        {k: v for k, v in OUTPUT_DIR.items() if "report.md" not in k},
    ),
    "export": (["export", "{p}", "--output-dir", "out-logs"], RUN_ROOT_IN),
    # The export writes no report.md: a folder holding one (even a dangling link) is no refusal for it.
    "export --output-dir": (
        ["export", "good-run", "--output-dir", "{p}"],
        {k: v for k, v in OUTPUT_DIR.items() if "report.md" not in k},
    ),
    "audit --run-dir": (["audit", "--run-dir", "{p}"], RUN_ROOT_IN),
    "audit --output": (["audit", "--run-dir", "good-run", "--output", "{p}"], NEW_FILE),
    "campaign show": (["campaign", "show", "--campaign-file", "{p}"], FILE_IN),
    "campaign reconcile --campaign-file": (
        [
            "campaign",
            "reconcile",
            "--campaign-file",
            "{p}",
            "--run-root",
            "good-run",
            "--operator-note",
            "x",
            "--docker-host",
            "unix:///nonexistent/docker.sock",
        ],
        FILE_IN,
    ),
    "campaign reconcile --run-root": (
        [
            "campaign",
            "reconcile",
            "--campaign-file",
            "campaign.json",
            "--run-root",
            "{p}",
            "--operator-note",
            "x",
            "--docker-host",
            "unix:///nonexistent/docker.sock",
        ],
        {k: v for k, v in DIR_IN.items()},
    ),
    "demo --run-root": (["demo", "--run-root", "{p}", "--docker-host", "unix:///nonexistent/docker.sock"], NEW_DIR),
}
# `doctor` without --repo-dir/--run-root checks the host, and the disk of --resource-root.
SLOTS["doctor (host only) --resource-root"] = (
    ["doctor", "--docker-host", "unix:///nonexistent/docker.sock", "--resource-root", "{p}"],
    DIR_IN,
)
for command in ("run", "doctor"):
    SLOTS[f"{command} --run-root"] = ([command, *_run_with("--run-root", "{p}")], NEW_DIR)
    SLOTS[f"{command} --repo-dir"] = ([command, *_run_with("--repo-dir", "{p}")], DIR_IN)
    SLOTS[f"{command} --bench-root"] = ([command, *_run_with("--bench-root", "{p}")], DIR_IN)
    SLOTS[f"{command} --resource-root"] = ([command, *_run_with("--resource-root", "{p}")], DIR_IN)
    SLOTS[f"{command} --task-file"] = ([command, *_run_with("--task-file", "{p}")], FILE_IN)
    SLOTS[f"{command} --campaign-file"] = ([command, *_run_with("--campaign-file", "{p}")], FILE_IN)
    SLOTS[f"{command} --resume-from"] = ([command, *_run_with("--resume-from", "{p}")], DIR_IN)
    SLOTS[f"{command} --task-validity"] = ([command, *_run_with("--task-validity", "{p}")], FILE_IN)
    SLOTS[f"{command} --provider-standin-bundle"] = (
        [
            command,
            *_run_with("--provider-standin-bundle", "{p}"),
            "--key-in-agent",
            "--provider-standin-address",
            "192.0.2.1",
        ],
        FILE_IN,
    )
QUALIFY_FLAGS = RUN_FLAGS[:-1]  # qualify takes run's places, and no --dry-run
for flag, kinds in (
    ("--run-root", NEW_DIR),
    ("--repo-dir", DIR_IN),
    ("--bench-root", DIR_IN),
    ("--resource-root", DIR_IN),
    ("--task-file", FILE_IN),
):
    SLOTS[f"qualify {flag}"] = (["qualify", *_run_with(flag, "{p}", QUALIFY_FLAGS)], kinds)


@dataclass(frozen=True)
class Case:
    slot: str
    kind: str
    path: str

    @property
    def name(self) -> str:
        return f"{self.slot} | {self.kind}"


CASES = [Case(slot, kind, path) for slot, (_, kinds) in SLOTS.items() for kind, path in kinds.items()]


def _make_case_dir(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "loop").symlink_to("loop")
    (root / "dangling").symlink_to("nowhere")
    os.mkfifo(root / "fifo")
    (root / "d").mkdir()
    (root / "f").write_text("x\n")
    (root / "dirlink").symlink_to("d")
    (root / "seed").mkdir()
    (root / "bench").mkdir()
    (root / "runs").mkdir()
    good = root / "good-run"
    good.mkdir()
    (good / "run_manifest.json").write_text("{}\n")
    fifo_run = root / "fifo-run"
    fifo_run.mkdir()
    (fifo_run / "run_manifest.json").write_text("{}\n")
    os.mkfifo(fifo_run / "result_index.jsonl")
    dangling_run = root / "dangling-run"
    dangling_run.mkdir()
    (dangling_run / "events.jsonl").write_text("")
    (dangling_run / "run_manifest.json").symlink_to("gone.json")
    trap = root / "trap"
    trap.mkdir()
    (trap / "report.md").symlink_to("written-through.md")


def _listing(folder: Path) -> list[tuple[str, int, int, int]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            out.append((os.path.relpath(os.path.join(dirpath, name), folder), st.st_mode, st.st_size, st.st_mtime_ns))
    return sorted(out)


@dataclass
class Outcome:
    returncode: int | None
    stdout: str
    stderr: str
    before: list
    after: list


def _play(case: Case, case_dir: Path) -> Outcome:
    _make_case_dir(case_dir)
    template, _ = SLOTS[case.slot]
    argv = [a.replace("{p}", case.path) for a in template]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(case_dir),
        "COLUMNS": "200",
        "OPENROUTER_API_KEY": "sk-or-v1-FAKE-TEST-KEY-0000000000",
    }
    before = _listing(case_dir)
    try:
        done = subprocess.run(
            [str(PYTHON), "-m", "cowork_adapter", *argv],
            cwd=case_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        result = (done.returncode, done.stdout, done.stderr)
    except subprocess.TimeoutExpired:
        result = (None, "", "timed out after 60 s")
    return Outcome(*result, before, _listing(case_dir))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("pathfuzz")
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores on the test machine
        futures = {c.name: pool.submit(_play, c, root / f"case{i}") for i, c in enumerate(CASES)}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_path_is_refused_in_one_sentence_and_writes_nothing(outcomes, case):
    out = outcomes[case.name]
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("cowork-adapter: ") and lines[0].rstrip().endswith("."), lines[0]
    assert out.stdout == ""
    assert out.after == out.before


def test_every_path_option_of_every_command_is_fuzzed():
    """A new path option must join SLOTS: every typer parameter typed Path is named by a slot."""
    import typer

    from cowork_adapter import cli

    root = typer.main.get_command(cli.app)
    found = set()

    def walk(group, prefix):
        for name, command in getattr(group, "commands", {}).items():
            if hasattr(command, "commands"):
                walk(command, prefix + [name])
                continue
            for param in command.params:
                if "Path" in repr(getattr(param, "type", "")) or param.name in {
                    "run_root",
                    "run_roots",
                    "run_dir",
                    "output",
                    "output_dir",
                    "campaign_file",
                    "repo_dir",
                    "bench_root",
                    "resource_root",
                    "task_file",
                    "resume_from",
                    "task_validity",
                }:
                    found.add((" ".join(prefix + [name]), param.name))

    walk(root, [])
    covered = set()
    for template, _ in SLOTS.values():
        words = [w for w in template if not w.startswith("-") and w != "{p}"]
        command = " ".join(words[:2] if words[0] == "campaign" else words[:1])
        flag_index = template.index("{p}") - 1
        flag = template[flag_index]
        param = flag.lstrip("-").replace("-", "_") if flag.startswith("--") else None
        covered.add((command, param))
    missing = []
    for command, param in sorted(found):
        if (command, param) in covered:
            continue
        if param in {"run_root", "run_roots"} and (command, None) in covered:
            continue  # the positional run root of status, stop, clear, report
        missing.append((command, param))
    assert not missing, missing
