"""Every `benchmarks/bench_*.py` run as users run it, in its short mode, so none rots unseen.

Each script runs as a subprocess (`.venv/bin/python benchmarks/bench_x.py <flags>`, cwd the repo) with the
smallest flags it already has (one pair, one repeat, a tiny size, one task); the test asserts it exits 0 and
that its figure line (the ratio or min / median / max it exists to print) is there and parses. The figures
themselves are not judged: a time on a loaded 2-core machine holds nothing (docs/benchmarks.md).
`bench_admission_load.py` needs the real-benchmark test bed and runs in tests/realbench instead.
The entries are ordered longest first, so the file's tail is the quick ones.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from cowork_adapter.demo.bench_repo import materialize_bench

REPO = Path(__file__).resolve().parents[2]
PYTHON = REPO / ".venv" / "bin" / "python"
# Runs in tests/realbench (test_bench_admission_load_short.py): it loads the machine on purpose and needs
# the real-benchmark test bed.
ELSEWHERE = {"bench_admission_load.py"}
# One or more numbers separated by " / " (a spread: min / median [/ p99] / max), padded as the scripts pad.
NUMS = r"(?P<nums>-?\d+\.\d+(?:\s*/\s*-?\d+\.\d+)*)"
# A bound on one script's short run: a hang fails the test instead of eating CI's 90 minutes.
TIMEOUT_S = 900


@dataclass(frozen=True)
class Bench:
    script: str
    flags: tuple[str, ...]
    figure: str  # a regex naming the figure line; group `nums` holds the figure
    # The scripts that check a target exit 1 with this line when it is missed; a tiny size or a loaded
    # machine need not meet a target set for the full run, so that ending is a working script too (its
    # figure line is still required, and any other non-zero exit fails).
    missed: str | None = None


# Longest first (measured on this loaded machine, see docs/benchmarks.md), so xdist's worker ends on the quick
# ones. `{bench}` is a fresh demo bench checkout made by the test.
BENCHES = (
    Bench("bench_shared_run.py", ("--rounds", "1", "--tasks", "2"), r"two hosts / one host \(medians\): " + NUMS + "x"),
    Bench("bench_overhead.py", ("--pairs", "1", "--task", "demo-csv-totals"), r"runner ratio adapter / bare\s+" + NUMS),
    Bench(
        "bench_stop_latency.py",
        ("--phase", "0.5", "--path", "fast"),
        r"stop       stop decided → no labelled container\s+" + NUMS,
    ),
    Bench(
        "bench_qualify.py",
        ("--task", "demo-csv-totals", "--concurrency", "1"),
        r"both engines:\s+" + NUMS + " tasks/min",
    ),
    Bench("bench_launcher_kill.py", ("--kills", "1"), r"ratio max\(gone\) / bound: " + NUMS),
    Bench("bench_pin_check.py", ("--bench", "{bench}", "--repeat", "1"), r"A/B median of pairwise ratios\s+" + NUMS),
    Bench(
        "bench_multihost.py",
        ("--tasks", "8", "--task-sec", "0.01", "--batch", "2"),
        r"two hosts / one host: " + NUMS + "x",
    ),
    Bench(
        "bench_campaign_report.py",
        ("--tasks", "4", "--repeat", "1"),
        r"ratio campaign / one root, per pair\s+" + NUMS,
    ),
    Bench("bench_ledger_report.py", ("--tasks", "4", "--repeat", "1"), r"report RUN --output-dir DIR\s+" + NUMS),
    Bench(
        "bench_export.py", ("--size", "1M", "--repeat", "1"), r"ratio export / audit time\s+" + NUMS, "target missed"
    ),
    Bench("bench_audit.py", ("--size", "1M", "--repeat", "1"), r"ratio wc -l / audit time\s+" + NUMS, "target missed"),
    Bench("bench_admission.py", ("--samples", "2", "--interval", "0.1"), r"daemon ping \(s\):\s+" + NUMS),
    Bench("bench_gateway.py", ("--requests", "5"), r"ratio of medians " + NUMS),
    Bench("bench_cli_library.py", ("--repeat", "1"), r"click/typer medians " + NUMS),
    Bench("bench_startup.py", ("--repeat", "1"), r"slowest median CPU start-up " + NUMS + " s", "target is NOT met"),
)


def figure_numbers(pattern: str, stdout: str) -> list[float]:
    """The figure's numbers from the first line matching `pattern`; a spread must read min ≤ … ≤ max."""
    match = re.search(pattern, stdout)
    assert match is not None, f"no figure line /{pattern}/ in:\n{stdout[-3000:]}"
    numbers = [float(n) for n in re.split(r"\s*/\s*", match["nums"].strip())]
    assert numbers == sorted(numbers), f"the spread is not min ≤ median ≤ max: {match[0]!r}"
    return numbers


def test_every_bench_script_has_an_entry():
    """A new bench_*.py fails here until it has a short-mode entry (or is named as run elsewhere)."""
    scripts = {p.name for p in (REPO / "benchmarks").glob("bench_*.py")}
    listed = [b.script for b in BENCHES]
    assert len(listed) == len(set(listed)), "a script is listed twice"
    assert set(listed) | ELSEWHERE == scripts, (
        f"without a short-mode entry: {sorted(scripts - set(listed) - ELSEWHERE)}; "
        f"listed but gone: {sorted((set(listed) | ELSEWHERE) - scripts)}"
    )


def test_figure_parser_refuses_what_is_not_a_figure():
    """The parser the runs rely on: a missing line or a disordered spread is a failure, not a pass."""
    pattern = r"ratio x\s+" + NUMS
    assert figure_numbers(pattern, "ratio x   0.674 /   0.936 /   1.851\n") == [0.674, 0.936, 1.851]
    with pytest.raises(AssertionError, match="no figure line"):
        figure_numbers(pattern, "ratio x none\n")
    with pytest.raises(AssertionError, match="min ≤ median"):
        figure_numbers(pattern, "ratio x 2.0 / 1.0 / 3.0\n")


@pytest.mark.parametrize("bench", BENCHES, ids=[b.script for b in BENCHES])
def test_short_mode(bench: Bench, docker_host, tmp_path):
    bench_dir = tmp_path / "bench"
    if "{bench}" in bench.flags:
        materialize_bench(bench_dir)
    argv = [str(PYTHON), f"benchmarks/{bench.script}", *(f.replace("{bench}", str(bench_dir)) for f in bench.flags)]
    # No provider key reaches a benchmark; DOCKER_HOST names the test bed; the scripts' temporary
    # folders go under this test's tmp_path so a failed run leaves nothing elsewhere.
    env = {k: v for k, v in os.environ.items() if "API_KEY" not in k}
    env |= {"DOCKER_HOST": docker_host, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    said = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    if bench.missed is not None and proc.returncode == 1:
        assert bench.missed in proc.stdout, said
    else:
        assert proc.returncode == 0, said
    assert figure_numbers(bench.figure, proc.stdout), said
