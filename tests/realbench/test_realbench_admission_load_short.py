"""`benchmarks/bench_admission_load.py` in its short mode, on the real-benchmark test bed.

The main suite's tests/integration/test_benchmarks_short.py runs every other benchmark script short; this one
needs the real bench's MCP servers (COWORK_REAL_BENCH, COWORK_REAL_BASE_IMAGE), so it runs here: one level
(no added load), one sample, as users run the script. The figure is not judged (a time on a loaded machine
holds nothing); the script must exit 0 and print its summary row, which must parse.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from realbench_env import real_testbed
from test_benchmarks_short import PYTHON, REPO, TIMEOUT_S

FLAGS = ("--levels", "0", "--level-sec", "1", "--min-samples", "1", "--quiet-sec", "1")
# The summary's first row: reached load per CPU -> worst adapter-path ratio / worst CAMEL first-connect ratio.
ROW = r"summary: [^\n]*\n\s+(?P<load>\d+\.\d+) -> (?P<adapter>\d+\.\d+) / (?P<camel>\d+\.\d+)"


@pytest.fixture(scope="module")
def bed():
    return real_testbed()


def test_bench_admission_load_short_mode(bed, docker_host, tmp_path):
    env = {k: v for k, v in os.environ.items() if "API_KEY" not in k}
    env |= {
        "DOCKER_HOST": docker_host,
        "COWORK_REAL_BENCH": str(bed.bench),
        "COWORK_REAL_BASE_IMAGE": bed.base_image,
        "TMPDIR": str(tmp_path),
    }
    argv = [str(PYTHON), "benchmarks/bench_admission_load.py", *FLAGS]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    said = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, said
    match = re.search(ROW, proc.stdout)
    assert match is not None, said
    assert all(float(match[name]) >= 0 for name in ("load", "adapter", "camel")), said
    assert "rule (adapter path within 0.5 of its bound" in proc.stdout, said
