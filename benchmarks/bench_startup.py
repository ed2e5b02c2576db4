"""Benchmark the start-up of each `cowork-adapter` command, side by side with `python -c pass`.

Runs the installed console script (the interpreter next to this one, as a user runs it) for each
command below, alternating with a bare `python -c pass`, --repeat times each after one warm-up, and
prints per command the wall time and the CPU time (user + sys, from wait4) as min / median / max, with
the bare interpreter's next to it. CPU time is the steadier figure on a shared machine: it does not
count the time the process waited for a processor.

The package's bytecode is compiled first (compileall, as `pip install` does for a regular install;
an editable install writes it on its first run): without it every run would compile the modules it
imports from source, which no user's second run does, and with PYTHONDONTWRITEBYTECODE set (as in
some shells and CI jobs) every run would. The load average is printed before and after.

Commands: `--help`, `version`, `run --help`, `status RUN` (a finished synthetic run root of 20 tasks), `audit --run-dir
RUN --output FILE` (a one-task run with one finding; start-up plus a trivial audit), and a path refusal.
Target (issue 18): start-up under 0.2 s.

    .venv/bin/python benchmarks/bench_startup.py [--repeat 9]
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The synthetic run roots are test support (tests/synthetic_run.py), not part of the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from synthetic_run import one_task_audit_run, synth_run  # noqa: E402

TARGET_SEC = 0.2


def _timed(argv: list[str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit code) of one child process, its output thrown away."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def _run_root(folder: Path) -> Path:
    """A finished one-task run root whose tool log reads the ground truth."""
    return one_task_audit_run(folder / "run")


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="timed runs of each command, alternating")
    args = parser.parse_args()
    script = Path(sys.executable).with_name("cowork-adapter")
    if not script.exists():
        print(f"no console script at {script}: install the package (pip install -e .)", file=sys.stderr)
        return 2
    bare = [sys.executable, "-c", "pass"]
    package = Path(importlib.util.find_spec("cowork_adapter").origin).parent
    if not compileall.compile_dir(str(package), quiet=1):
        print(f"could not compile the bytecode of {package}", file=sys.stderr)
        return 2
    print(f"load average {_load()}; bytecode of {package} compiled")
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        root = _run_root(Path(tmp))
        synthetic = Path(tmp) / "synthetic"
        synth_run(synthetic, 20)
        outputs = iter(range(10**6))
        commands = {
            "--help": lambda: ["--help"],
            "version": lambda: ["version"],
            "run --help": lambda: ["run", "--help"],
            "status RUN": lambda: ["status", str(synthetic)],
            "audit --run-dir RUN --output F": lambda: [
                "audit",
                "--run-dir",
                str(root),
                "--output",
                f"{tmp}/audit-{next(outputs)}.json",
            ],
            "status /missing (refused)": lambda: ["status", f"{tmp}/missing"],
        }
        print(f"{args.repeat} alternating runs each after one warm-up; seconds as min / median / max")
        print(f"{'command':32} {'wall':>23} {'cpu':>23}   python -c pass: wall / cpu (medians)")
        worst = 0.0
        for name, argv in commands.items():
            _timed([str(script), *argv()])
            _timed(bare)
            walls, cpus, bare_walls, bare_cpus, codes = [], [], [], [], set()
            for _ in range(args.repeat):
                wall, cpu, code = _timed([str(script), *argv()])
                walls.append(wall), cpus.append(cpu), codes.add(code)
                wall, cpu, _ = _timed(bare)
                bare_walls.append(wall), bare_cpus.append(cpu)
            worst = max(worst, statistics.median(cpus))
            print(
                f"{name:32} {_spread(walls):>23} {_spread(cpus):>23}   "
                f"{statistics.median(bare_walls):.3f} / {statistics.median(bare_cpus):.3f}   exit {sorted(codes)}"
            )
    print(f"load average {_load()}")
    verdict = "met" if worst < TARGET_SEC else "NOT met"
    print(f"slowest median CPU start-up {worst:.3f} s: the {TARGET_SEC} s target is {verdict}")
    return 0 if worst < TARGET_SEC else 1


if __name__ == "__main__":
    raise SystemExit(main())
