"""Issue 17 on the REAL pinned Cowork Bench: `cowork-adapter qualify` classifies the suite's tasks
from the official evaluators' own verdicts, spending nothing.

The first 4 tasks of the test bed's list (2 valid and 2 oracle_fails when measured) go through --engine oracle (the task's ground truth in the
workspace) and --engine nop (nothing done) at concurrency 2. Every task must land in one of the four
classes the evaluators can decide (none undetermined), an oracle failure must carry the evaluator's
own [FAIL] line, and neither run may hold a key file, read a meter or leave anything labelled.
Needs the real-benchmark test bed (`bash testbed/realbench.sh up`); under CI=true its absence fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cowork_adapter.custody.labels import run_label

from realbench_env import CPUS, MEMORY, labelled_left, real_testbed

QUALIFY_TASKS = 4  # CI time; `cowork-adapter qualify` over all 26 is measured by hand (README)
DECIDED = {"valid", "oracle_fails", "nop_passes", "environment_blocked"}


def test_qualify_classifies_every_task_from_the_evaluators_verdicts(docker_host, tmp_path):
    bed = real_testbed()
    tasks = bed.tasks(QUALIFY_TASKS)
    root = tmp_path / "qualify"
    args = [sys.executable, "-m", "cowork_adapter", "qualify", "--repo-dir", str(bed.seed),
            "--bench-root", str(bed.bench), "--docker-host", docker_host, "--resource-root", str(tmp_path),
            "--run-root", str(root), "--base-image", bed.base_image, "--build-image", "--concurrency", "2",
            "--task-timeout", "600", "--min-free-gib", "1", "--min-root-free-gib", "1",
            "--cpus", CPUS, "--memory", MEMORY]
    for task in tasks:
        args += ["--task", task]
    # No provider key is in a reference run's environment: nothing could leak one.
    env = {k: v for k, v in os.environ.items() if "API_KEY" not in k} | bed.git_env
    proc = subprocess.run(args, capture_output=True, text=True, timeout=2400, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = json.loads((root / "task_validity.json").read_text())
    rows = {row["instance_id"]: row for row in table["tasks"]}
    assert set(rows) == set(tasks), sorted(rows)
    classes = {t: r["class"] for t, r in rows.items()}
    assert set(classes.values()) <= DECIDED, classes
    print(f"realbench qualify: {table['counts']}")
    for task, row in rows.items():
        if row["class"] == "oracle_fails":
            assert "[FAIL]" in (row.get("reason") or ""), (task, row)
    for run in ("oracle", "nop"):
        run_root = root / run
        assert not (run_root / "private" / "agent.env").exists()
        kinds = {json.loads(line)["kind"] for line in (run_root / "events.jsonl").read_text().splitlines() if line}
        assert not {k for k in kinds if k.startswith("meter_")}, kinds
        assert labelled_left(docker_host, run_label(run_root)) == []

