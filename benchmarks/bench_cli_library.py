"""Benchmark the command-line library itself: typer against click alone, for the same command.

The same `status RUN [--json]` command, written once with typer (as cli/ops.py declares it: plain help,
no rich, no completion) and once with click, each calling the real `status.status_command` on the
same finished synthetic run root of 20 tasks; then the same two apps with a `version` command that
does nothing but print. Each runs in a fresh interpreter, alternating, --repeat times after one
warm-up; printed are the CPU times (user + sys, from wait4) as min / median / max, the median ratio
click / typer, `python -c pass` and the installed `cowork-adapter status RUN` beside them, and the
load average. The package's bytecode is compiled first (as bench_startup.py does).

    .venv/bin/python benchmarks/bench_cli_library.py [--repeat 9]

click is not a dependency of the package (typer carries its own copy); this needs it installed in
the same environment (the test extras bring it).
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from synthetic_run import synth_run  # noqa: E402  (test support, not shipped)

TYPER_APP = """
import sys
from pathlib import Path
from typing import Annotated
import typer

app = typer.Typer(rich_markup_mode=None, add_completion=False, pretty_exceptions_enable=False)

@app.command()
def status(run_root: Annotated[Path, typer.Argument(help="Run root to inspect.")],
           as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False) -> None:
    from cowork_adapter.ops.status import status_command
    raise SystemExit(status_command(run_root, as_json))

@app.command()
def version() -> None:
    typer.echo("cowork-adapter 0")

app(prog_name="cowork-adapter")
"""

CLICK_APP = """
import sys
from pathlib import Path
import click

@click.group()
def app() -> None:
    pass

@app.command()
@click.argument("run_root", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def status(run_root: Path, as_json: bool) -> None:
    from cowork_adapter.ops.status import status_command
    raise SystemExit(status_command(run_root, as_json))

@app.command()
def version() -> None:
    click.echo("cowork-adapter 0")

app(prog_name="cowork-adapter")
"""


def _cpu(argv: list[str]) -> tuple[float, int]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def _spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="timed runs of each, alternating")
    args = parser.parse_args()
    if importlib.util.find_spec("click") is None:
        print("click is not installed here: install the test extras (pip install -e '.[test]')", file=sys.stderr)
        return 2
    package = Path(importlib.util.find_spec("cowork_adapter").origin).parent
    if not compileall.compile_dir(str(package), quiet=1):
        print(f"could not compile the bytecode of {package}", file=sys.stderr)
        return 2
    script = Path(sys.executable).with_name("cowork-adapter")
    print(f"load average {_load()}; {args.repeat} alternating runs each after one warm-up; CPU seconds")
    with tempfile.TemporaryDirectory(prefix="bench-cli-library-") as tmp:
        run = Path(tmp) / "run"
        synth_run(run, 20)
        for command in (["status", str(run)], ["version"]):
            contenders = {
                "typer": [sys.executable, "-c", TYPER_APP, *command],
                "click": [sys.executable, "-c", CLICK_APP, *command],
                "cowork-adapter": [str(script), *command],
                "python -c pass": [sys.executable, "-c", "pass"],
            }
            times: dict[str, list[float]] = {name: [] for name in contenders}
            codes = set()
            for argv in contenders.values():
                _cpu(argv)
            for _ in range(args.repeat):
                for name, argv in contenders.items():
                    cpu, code = _cpu(argv)
                    times[name].append(cpu)
                    codes.add((name, code))
            ratio = statistics.median(times["click"]) / statistics.median(times["typer"])
            label = " ".join(command[:1] + (["RUN"] if len(command) > 1 else []))
            print(
                f"{label}: "
                + "; ".join(f"{name} {_spread(v)}" for name, v in times.items())
                + f"; click/typer medians {ratio:.2f}; exit codes {sorted(codes)}"
            )
    print(f"load average {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
