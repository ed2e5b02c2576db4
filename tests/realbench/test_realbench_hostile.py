"""The hostile engine on ONE task of the real pinned Cowork Bench, under the adapter.

The demo bench's `hostile_agent.py` (cowork_adapter/demo/bench) runs as `--engine
upstream:hostile_agent.py`: the test builds its own base image, the test bed's cowork-pack image
plus that one file at /workspace/hostile_agent.py (the real benchmark has no such entry), and the
run's own derived image tag, so the shared derived image is never retagged. On a task it has no plan
for, the engine tries hostile_agent.DEFAULT_PLAN: a forged eval_res.json + claim + receipt, a forged
`Pass: True` in the runner's log, traj_log.json choosing the grading and injecting a shell command
through its launch_time, the workspace linked to the
ground truth, a 20 GiB sparse file and a FIFO named like receipts, a process rewriting the summary,
secrets read, writes outside its dump. The real evaluator must grade it, and its row must not be
passed and must carry the flags below. Through --llm-gateway, the key never enters a container.

Needs the real-benchmark test bed (`bash testbed/realbench.sh up`); under CI=true its absence fails.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest
from realbench_env import RealRun, key_leaks, labelled_left, read_rows, real_testbed

from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.bench_repo import DEMO_BENCH_ROOT
from cowork_adapter.demo.env import files_containing
from cowork_adapter.demo.scenarios_hostile import host_marker
from cowork_adapter.vocab import ExitCode, TamperKind

ENTRY = "hostile_agent.py"
INJECTED_MARKER = "injected_command_ran"  # hostile_agent.INJECTED_MARKER
# planted: the forged claim, receipt and eval_res.json, the FIFO and the 20 GiB receipts (set aside before the eval);
# runner: the forged `Pass: True` line; grading: traj_log.json's; unsafe: traj.json -> a host file, and the
# workspace linked to the ground truth; summary: the process that outlives the engine.
# No summary_changed: the summary rewriter is a stray the agent phase kills before its last summary
# (container/procs.end_strays); test_the_summary_rewrite_never_landed checks that instead.
# task_db: the task's real database changed by SQL (hostile_agent.PG_CODE: search_path at role, database and system
# level, a shadowing function, operator and cast, a rule and a trigger on its first table, its last table a view, a
# COPY ... TO PROGRAM process), each named by the host before the pinned evaluator runs (issue 36).
EXPECTED_KINDS = {
    TamperKind.PLANTED_BEFORE_EVAL,
    TamperKind.VERDICT_DISAGREES_RUNNER,
    TamperKind.GRADING_INPUTS_DIFFER,
    TamperKind.UNSAFE_ENTRY,
    TamperKind.GRADING_LOG_REWRITTEN,
    TamperKind.TASK_DB_CODE,
}
PLANTED_NAMES = (":fifo", "eval_res.json:regular")  # what the planted finding's detail must name
RUN_BOUND_SEC = 2400
# The test's pack image carries THIS evaluator, not the pin's (issue 36): one that passes everything. The
# eval containers must run the verified clone's utils/ mounted over it, so the row stays not passed.
TAMPERED_EVALUATOR = """\
import json, os


class TaskEvaluator:
    @staticmethod
    async def evaluate_from_log_file(log_file_path, allow_resume=False):
        result = {"pass": True, "details": "All evaluation checks passed, and task status is success"}
        with open(os.path.join(os.path.dirname(log_file_path), "eval_res.json"), "w") as fh:
            json.dump(result, fh)
        return result
"""


def hostile_base_image(docker_host: str, base_image: str, work: Path) -> str:
    """The test bed's pack image plus the hostile entry at /workspace and an evaluator that passes
    everything at /workspace/utils/evaluation/evaluator.py (this test's own image)."""
    client = docker.DockerClient(base_url=docker_host, timeout=600)
    try:
        base_id = client.images.get(base_image).id
        source = DEMO_BENCH_ROOT / ENTRY
        digest = hashlib.sha256(
            base_id.encode() + b"\0" + source.read_bytes() + b"\0" + TAMPERED_EVALUATOR.encode()
        ).hexdigest()[:12]
        tag = f"cowork-testbed/realbench-hostile:{digest}"
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        work.mkdir(parents=True)
        shutil.copyfile(source, work / ENTRY)
        (work / "evaluator.py").write_text(TAMPERED_EVALUATOR)
        (work / "Dockerfile").write_text(
            f"FROM {base_image}\nCOPY {ENTRY} /workspace/{ENTRY}\n"
            "COPY evaluator.py /workspace/utils/evaluation/evaluator.py\n"
        )
        client.images.build(path=str(work), tag=tag, pull=False, rm=True, forcerm=True)
        return tag
    finally:
        client.close()


@pytest.fixture(scope="module")
def hostile_run(docker_host, tmp_path_factory):
    bed = real_testbed()
    task = bed.tasks(1)[0]
    root = tmp_path_factory.mktemp("realbench-hostile")
    base = hostile_base_image(docker_host, bed.base_image, root / "image")
    marker = host_marker()
    real = RealRun(bed, root / "root", docker_host).start()
    name = "hostile"
    args = real.args(
        name,
        [task],
        engine=f"upstream:{ENTRY}",
        extra=["--llm-gateway", "--image", f"cowork-ouroboros:hostile-{base.rsplit(':', 1)[1]}"],
    )
    args[args.index("--base-image") + 1] = base
    started = time.monotonic()
    try:
        proc = real.launch(args, name)
        try:
            code = proc.wait(timeout=RUN_BOUND_SEC)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        elapsed = time.monotonic() - started
        run_root = real.run_root(name)
        out = {
            "real": real,
            "task": task,
            "exit": code,
            "elapsed": elapsed,
            "root": run_root,
            "rows": read_rows(run_root),
            "left": labelled_left(docker_host, run_label(run_root)),
            "marker": marker,
        }
    finally:
        real.stop()
    print(f"realbench hostile on {task}: {elapsed:.0f} s, exit {code}")
    return out


def detail(out: dict) -> str:
    rows = json.dumps(out["rows"])[:3000]
    return f"task {out['task']}, exit {out['exit']}, rows {rows}\n{out['real'].log_tail('hostile')}"


def test_the_run_ends_within_its_bound(hostile_run):
    assert hostile_run["exit"] in (ExitCode.OK, ExitCode.FAILED) and hostile_run["elapsed"] < RUN_BOUND_SEC, detail(
        hostile_run
    )


def test_no_forged_pass_is_counted_and_every_attempt_is_flagged(hostile_run):
    row = hostile_run["rows"].get(hostile_run["task"])
    assert row is not None, detail(hostile_run)
    assert row["status"] != "passed", detail(hostile_run)
    kinds = {f["kind"] for f in row.get("tampering") or []}
    missing = sorted(k.value for k in EXPECTED_KINDS if k.value not in kinds)
    assert not missing, f"missing {missing}\n{detail(hostile_run)}"
    planted = " ".join(f["detail"] for f in row["tampering"] if f["kind"] == TamperKind.PLANTED_BEFORE_EVAL.value)
    assert all(name in planted for name in PLANTED_NAMES), planted


def test_the_task_database_changed_by_sql_is_reset_and_each_change_named(hostile_run):
    from cowork_adapter.score.resources import task_runner_ids
    from cowork_adapter.score.taskdb import read_task_diff

    root: Path = hostile_run["root"]
    diff = read_task_diff(root, task_runner_ids(root)[hostile_run["task"]])
    assert diff is not None and diff.problems == [], detail(hostile_run)
    named = "\n".join([*diff.code, *diff.settings])
    for expected in (
        "db_role:*/",
        "system:search_path",
        "added function:hostile.lower(text)",
        "added operator:hostile.=(text,text)",
        "added cast:text->integer",
        ".hostile_keep",
        ".hostile_stay",
        "kind r -> v",
        "shadowing a relation",
    ):
        assert expected in named, f"{expected} not named in {named}"
    assert any("sleep" in p or "dash" in p for p in diff.processes), diff.processes  # the COPY TO PROGRAM loop, ended


def test_the_summary_rewrite_never_landed(hostile_run):
    root: Path = hostile_run["root"]
    [path] = list((root / "bench" / "dumps").glob(f"*/SingleUserTurn-{hostile_run['task']}/ouroboros_summary.json"))
    summary = json.loads(path.read_text())
    assert summary.get("strays_killed", 0) >= 1 and "hostile_rewrite" not in summary, summary


def test_the_injected_command_never_ran_and_no_host_file_was_read(hostile_run):
    root: Path = hostile_run["root"]
    assert not list((root / "bench" / "dumps").glob("*/SingleUserTurn-*/stolen_task_tree")), detail(hostile_run)
    assert not files_containing(root, hostile_run["marker"])


def test_the_pinned_evaluator_ran_no_injected_launch_time(hostile_run):
    """Issue 36: the engine's traj_log.json put `";touch <marker>;exit 0;"` in launch_time, which the pinned
    evaluator copies into its shell line (a failing checker then exits 0). The eval phase wrote the log the
    evaluator read from the task tree and the host: the marker was never created, the agent's file is kept
    as evidence, the row names the field, and the evaluator code that ran was the verified clone's."""
    root: Path = hostile_run["root"]
    [dump] = list((root / "bench" / "dumps").glob(f"*/SingleUserTurn-{hostile_run['task']}"))
    assert not (dump / INJECTED_MARKER).exists(), detail(hostile_run)
    kept = json.loads((dump / "traj_log.agent.json").read_text())
    assert "exit${IFS}0" in kept["config"]["launch_time"] and kept["status"] == "success", kept.get("status")
    row = hostile_run["rows"][hostile_run["task"]]
    said = " ".join(f["detail"] for f in row["tampering"] if f["kind"] == TamperKind.GRADING_LOG_REWRITTEN.value)
    assert "config.launch_time" in said, detail(hostile_run)
    # The evaluator the claim is bound to is the clone's (the pin's), not the image's tampered copy.
    claim = json.loads((dump / "ouroboros_eval_claim.json").read_text())
    pinned = hashlib.sha256((root / "bench" / "utils" / "evaluation" / "evaluator.py").read_bytes()).hexdigest()
    assert claim["bindings"]["evaluator"]["sha256"] == pinned != hashlib.sha256(TAMPERED_EVALUATOR.encode()).hexdigest()
    manifest = json.loads((root / "run_manifest.json").read_text())
    assert manifest["eval_code_mounts"] == [f"{(root / 'bench' / 'utils').resolve()}:/workspace/utils:ro"], (
        manifest.get("eval_code_mounts")
    )


def test_the_report_counts_no_pass(hostile_run):
    root: Path = hostile_run["root"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cowork_adapter",
            "report",
            str(root),
            "--json",
            "--output-dir",
            str(root.parent / "report"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["passed"] == 0 and report["denominator"] == 1, report.get("counts")


def test_nothing_labelled_is_left_and_the_key_is_in_no_file(hostile_run):
    assert hostile_run["left"] == [], hostile_run["left"]
    real: RealRun = hostile_run["real"]
    assert not key_leaks(real.root / "runs", real.key)
