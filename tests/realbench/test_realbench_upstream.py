"""The benchmark's OWN engines, unchanged, under the adapter on the real pinned Cowork Bench.

The first 2 of the Ouroboros suite's 5 tasks (test_realbench_ouroboros.py; fewer, to keep CI near an
hour on two cores: a real task takes minutes even with a stand-in model), at concurrency 2, through
`--engine upstream:main.py` (CAMEL) and `--engine upstream:main_strands.py` (Strands), against the
chat and meter stand-ins. Each engine must be handed the stand-in's base URL and model in the
variables it reads, call it, and every task must be graded by the official evaluator with a
receipt; nothing labelled is left and the key is in no file.

Needs the real-benchmark test bed (`bash testbed/realbench.sh up`); under CI=true its absence fails.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
from realbench_env import RealRun, key_leaks, labelled_left, read_rows, real_testbed

from cowork_adapter.custody.labels import run_label
from cowork_adapter.vocab import ExitCode

SETTLED = {"passed", "failed", "agent_failed"}
ENGINES = ["upstream:main.py", "upstream:main_strands.py"]
UPSTREAM_TASKS = 2
DUMP_PREFIX = {"upstream:main.py": "openai_", "upstream:main_strands.py": "strands_"}  # where each writes


@pytest.fixture(scope="module", params=ENGINES, ids=["main", "main_strands"])
def engine_run(request, docker_host, tmp_path_factory):
    bed = real_testbed()
    tasks = bed.tasks(UPSTREAM_TASKS)
    real = RealRun(bed, tmp_path_factory.mktemp("realbench-upstream") / "root", docker_host).start()
    name = "upstream"
    started = time.monotonic()
    try:
        proc = real.launch(real.args(name, tasks, engine=request.param), name)
        code = proc.wait(timeout=3600)
        elapsed = time.monotonic() - started
        out = {
            "engine": request.param,
            "real": real,
            "tasks": tasks,
            "exit": code,
            "root": real.run_root(name),
            "rows": read_rows(real.run_root(name)),
            "chat": dict(real.chat.counts),
            "left": labelled_left(docker_host, run_label(real.run_root(name))),
        }
    finally:
        real.stop()
    print(f"realbench {request.param}: {elapsed:.0f} s, exit {code}, chat requests {out['chat']}")
    return out


def detail(out: dict) -> str:
    return f"engine {out['engine']}, exit {out['exit']}\n{out['real'].log_tail('upstream')}"


def test_every_task_is_graded_with_a_receipt(engine_run):
    out = engine_run
    rows = out["rows"]
    assert set(rows) == set(out["tasks"]), f"rows {sorted(rows)}\n{detail(out)}"
    statuses = {t: (r["status"], r["official_eval_status"], r.get("reason_code")) for t, r in rows.items()}
    assert all(r["status"] in SETTLED and r["official_eval_status"] == "completed" for r in rows.values()), (
        f"{statuses}\n{detail(out)}"
    )
    problems = []
    for task, row in rows.items():
        receipt = row["official_receipt"]
        path = Path(receipt.get("path") or "")
        if not path.is_absolute():
            path = Path(row.get("attempt_run_root") or out["root"]) / path
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != receipt.get("sha256"):
            problems.append(f"{task}: receipt {path} missing or not the row's")
    assert not problems, problems
    assert out["exit"] == ExitCode.OK, detail(out)


def test_each_tasks_dump_is_where_the_engine_writes_it(engine_run):
    # main.py writes dumps/openai_<model>/, main_strands.py dumps/strands_<model>/: the adapter must
    # look where each writes, or the receipts above would not have been found.
    root = engine_run["root"]
    for task in engine_run["tasks"]:
        dumps = sorted(p.parent.name for p in (root / "bench" / "dumps").glob(f"*/SingleUserTurn-{task}"))
        assert dumps and all(d.startswith(DUMP_PREFIX[engine_run["engine"]]) for d in dumps), (task, dumps)


def test_the_engine_called_the_configured_model_endpoint(engine_run):
    # The stand-in counts every request it answered: an engine that never reached it (no base URL,
    # or a built-in fake model) leaves it at zero.
    assert sum(engine_run["chat"].values()) >= len(engine_run["tasks"]), (engine_run["chat"], detail(engine_run))


def test_nothing_labelled_is_left_and_the_key_is_in_no_file(engine_run):
    assert engine_run["left"] == [], engine_run["left"]
    real: RealRun = engine_run["real"]
    assert not key_leaks(real.root / "runs", real.key)
