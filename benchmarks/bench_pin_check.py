"""Benchmark the benchmark part of a run's preflight, with and without the check against the pin.

What a run does with the operator's benchmark checkout before the image (launcher._admitted):
the checkout's identity (`git status`, and with pin_check its substitutes), the run's clone, the
upstream hashes, and, with pin_check, the clone hashed path by path against the pinned commit
(pin_check.verify_copy). On the real Cowork Bench (5,456 paths, 496 tasks) the clone and the check
are what cost.

In one run, alternating, --repeat times each after one warm-up: A = identity + clone + hashes +
verify_copy (this adapter), B = the same without verify_copy. Prints wall seconds min / median /
max of each, the median of the pairwise ratios A/B and the verification's own seconds. With
`--once` it does one A (or, in an adapter without pin_check, one B) and exits: the form for timing
the whole process from outside, before and after the change, side by side.

    .venv/bin/python benchmarks/bench_pin_check.py --bench "$COWORK_REAL_BENCH" [--repeat 5] [--once]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cowork_adapter.benchmark import provenance

try:
    from cowork_adapter.benchmark.pin_check import verify_copy
except ImportError:  # an adapter from before the check: only B can run
    verify_copy = None


def head(bench: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(bench), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def preflight(bench: Path, commit: str, dest: Path, *, verify: bool) -> float:
    """One benchmark preflight into `dest`; returns verify_copy's own seconds (0 when not run)."""
    if hasattr(provenance, "checked_bench"):
        _, substitutes = provenance.checked_bench(bench, commit)
        provenance.clone_at(bench, dest, commit, substitutes)
    else:
        provenance.bench_identity(bench, commit)
        provenance.clone_at(bench, dest, commit)
    spent = 0.0
    if verify:
        started = time.perf_counter()
        verify_copy(dest, commit, substitutes)
        spent = time.perf_counter() - started
    provenance.upstream_hashes(dest, provenance.dataset_ids(bench))
    return spent


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, required=True, help="a benchmark checkout at its pinned commit")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--once", action="store_true", help="one preflight (with the check when this adapter has it)")
    args = parser.parse_args()
    bench = args.bench.resolve()
    commit = head(bench)
    with tempfile.TemporaryDirectory(prefix="bench-pin-") as tmp:
        if args.once:
            preflight(bench, commit, Path(tmp) / "copy", verify=verify_copy is not None)
            return 0
        if verify_copy is None:
            print("this adapter has no pin_check: run it with --once for the before figure", file=sys.stderr)
            return 2
        walls: dict[str, list[float]] = {"A": [], "B": []}
        own: list[float] = []
        for i in range(args.repeat + 1):
            for name in ("A", "B"):
                dest = Path(tmp) / f"copy-{name}-{i}"
                started = time.perf_counter()
                spent = preflight(bench, commit, dest, verify=name == "A")
                wall = time.perf_counter() - started
                shutil.rmtree(dest)
                if i:  # the first pair warms the page cache
                    walls[name].append(wall)
                    if name == "A":
                        own.append(spent)
    ratios = [a / b for a, b in zip(walls["A"], walls["B"], strict=True)]
    print(f"load {' '.join(f'{x:.1f}' for x in os.getloadavg())}; {args.repeat} pairs; bench {bench} at {commit[:12]}")
    print(f"A identity+clone+verify+hashes  s min/median/max  {spread(walls['A'])}")
    print(f"B identity+clone+hashes         s min/median/max  {spread(walls['B'])}")
    print(f"verify_copy alone               s min/median/max  {spread(own)}")
    print(f"A/B median of pairwise ratios   {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
