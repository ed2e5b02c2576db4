"""Issue 17 on the REAL pinned Cowork Bench: `cowork-adapter qualify` classifies the first 13 tasks of
the test bed's list ($COWORK_REAL_TASKS_FILE; the kulinar, moex, canvas and customer kinds all among them)
from the official evaluators' own verdicts, spending nothing. All 26 cost CI 13 minutes on two cores; the
whole list's classes, measured by hand, are in docs/testing.md.

One qualify run (module-scoped, shared by the tests here) puts every task through --engine oracle
(the task's ground truth in the workspace) and --engine nop (nothing done). Every task must land in
one of the four classes the evaluators can decide (none undetermined), and each class must rest on
what it says: a valid task's ground truth passed and its untouched workspace failed; an oracle
failure carries the evaluator's own words (or why the agent phase could not prepare the task); a
blocked task names the server that failed the inventory. Which task lands where is the test bed's
finding, not this file's (docs/testing.md gives the last counts). Neither run may hold a key file, read a
meter or leave anything labelled. The same run's inventory also proves that moex-finance (a
`uv run <script>` server) is started from a task-like working directory and lists its tools.
Needs the real-benchmark test bed (`bash testbed/realbench.sh up`); under CI=true its absence fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from realbench_env import CPUS, MEMORY, labelled_left, real_testbed

from cowork_adapter.custody.labels import run_label

# Three tasks at a time: the reference engines start no model and no Ouroboros server, so a task is
# its containers, preprocess and evaluator (docs/benchmarks.md: bench_qualify.py --real).
CONCURRENCY = "3"
QUALIFY_TASKS = 13
DECIDED = {"valid", "oracle_fails", "nop_passes", "environment_blocked"}


@pytest.fixture(scope="module")
def qualified(docker_host, tmp_path_factory) -> dict:
    bed = real_testbed()
    tasks = _all_tasks(bed.tasks_file)[:QUALIFY_TASKS]
    work = Path(tmp_path_factory.mktemp("realqualify"))
    task_file = work / "tasks.txt"
    task_file.write_text("".join(f"{t}\n" for t in tasks))
    root = work / "qualify"
    args = [
        sys.executable,
        "-m",
        "cowork_adapter",
        "qualify",
        "--repo-dir",
        str(bed.seed),
        "--bench-root",
        str(bed.bench),
        "--docker-host",
        docker_host,
        "--resource-root",
        str(work),
        "--run-root",
        str(root),
        "--base-image",
        bed.base_image,
        "--build-image",
        "--concurrency",
        CONCURRENCY,
        "--task-timeout",
        "600",
        "--min-free-gib",
        "1",
        "--min-root-free-gib",
        "1",
        "--cpus",
        CPUS,
        "--memory",
        MEMORY,
        "--task-file",
        str(task_file),
    ]
    # No provider key is in a reference run's environment: nothing could leak one.
    env = {k: v for k, v in os.environ.items() if "API_KEY" not in k} | bed.git_env
    proc = subprocess.run(args, capture_output=True, text=True, timeout=3600, env=env)
    return {"proc": proc, "root": root, "tasks": tasks, "host": docker_host, "bench": bed.bench}


def _all_tasks(tasks_file: Path) -> list[str]:
    return [line.strip() for line in tasks_file.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _validity(qualified: dict) -> dict:
    proc = qualified["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((qualified["root"] / "task_validity.json").read_text())


def test_every_task_of_the_test_bed_is_classified_from_the_evaluators_verdicts(qualified):
    table = _validity(qualified)
    rows = {row["instance_id"]: row for row in table["tasks"]}
    assert set(rows) == set(qualified["tasks"]), sorted(set(rows) ^ set(qualified["tasks"]))
    classes = {t: r["class"] for t, r in rows.items()}
    assert set(classes.values()) <= DECIDED, classes
    assert sum(table["counts"].values()) == len(qualified["tasks"]) and table["counts"]["undetermined"] == 0
    print(f"realbench qualify over {len(rows)} tasks: {table['counts']}")
    # The list holds tasks whose ground truth passes here (15 of 26 when first measured): none valid
    # would mean the environment failed, not the tasks (e.g. every server timing out in the inventory).
    assert table["counts"]["valid"] > 0, table["counts"]
    for task, row in rows.items():
        oracle, nop, klass = row["oracle"], row["nop"], row["class"]
        if klass == "valid":
            assert oracle["passed"] is True and nop["passed"] is False, (task, row)
            assert nop["status"] == "failed" and nop["reason"], (task, row)  # the evaluator's words for doing nothing
        elif klass == "oracle_fails":
            assert oracle["passed"] is not True and row["reason"], (task, row)
            if oracle["status"] == "failed":
                # The evaluator graded the ground truth and said False: its reason is its own output.
                assert oracle["passed"] is False and row["reason"] == oracle["reason"], (task, row)
            else:
                # No verdict: the row's status and reason code say why the task could not be prepared.
                assert row["reason"].startswith(f"{oracle['status']}: "), (task, row)
        elif klass == "nop_passes":
            assert oracle["passed"] is True and nop["passed"] is True, (task, row)
        else:
            assert row["reason"].startswith("mcp_server_failed:"), (task, row)
    # The page for people says the same, beside the JSON.
    page = (qualified["root"] / "task_validity.html").read_text()
    assert all(f"<td>{t}</td>" in page for t in rows)


@pytest.mark.parametrize("engine", ["oracle", "nop"])
def test_reference_runs_hold_no_key_read_no_meter_and_leave_nothing(qualified, engine):
    _validity(qualified)
    run_root = qualified["root"] / engine
    assert not (run_root / "private" / "agent.env").exists()
    kinds = {json.loads(line)["kind"] for line in (run_root / "events.jsonl").read_text().splitlines() if line}
    assert not {k for k in kinds if k.startswith("meter_")}, kinds
    assert labelled_left(qualified["host"], run_label(run_root)) == []
    rows = [json.loads(line) for line in (run_root / "result_index.jsonl").read_text().splitlines() if line.strip()]
    assert sorted(r["instance_id"] for r in rows) == sorted(qualified["tasks"])


def test_inventory_lists_moex_finance(qualified):
    """Issue 16 (a): moex-finance, a `uv run <script>` server, is healthy in the inventory (started
    from a task-like working directory under /workspace). The qualify run's selection needs it."""
    _validity(qualified)
    needing = [t for t in qualified["tasks"] if "moex-finance" in _needs(qualified["bench"], t)]
    assert needing, "the test bed's task set has no task needing moex-finance"
    manifest = json.loads((qualified["root"] / "oracle" / "run_manifest.json").read_text())
    moex = ((manifest.get("inventory") or {}).get("servers") or {}).get("moex-finance") or {}
    assert moex.get("health") == "ok" and moex.get("tool_count", 0) > 0, f"moex-finance: {moex}"


def _needs(bench: Path, task: str) -> list[str]:
    config = json.loads((bench / "tasks" / "finalpool" / task / "task_config.json").read_text())
    return list(config.get("needed_mcp_servers") or [])
