"""A task the runner's own `timeout` kills still leaves its summary, its logs and a truthful row.

demo-hang's stub plan never finishes; the runner's `timeout -k 30 $TASK_TIMEOUT` sends SIGTERM to the
entrypoint, which must still persist everything before the hard kill.
"""

from __future__ import annotations

import json

import pytest

from cowork_adapter.demo.env import prepare, read_rows


@pytest.fixture(scope="module")
def hang_run(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("timeout") / "root", docker_host)
    try:
        args = env.run_args("hang", ["demo-hang"], campaign="campaign.json", extra=["--task-timeout", "75"])
        code = env.launch(args, "hang").wait(timeout=900)
        yield env.run_root("hang"), code
    finally:
        env.meter.stop()


def test_timeout_killed_task_keeps_its_summary_and_logs(hang_run):
    run_root, code = hang_run
    row = read_rows(run_root)["demo-hang"]
    dump = run_root / "bench" / "dumps" / "ouroboros_demo_stub-model" / "SingleUserTurn-demo-hang"
    summary = json.loads((dump / "ouroboros_summary.json").read_text())
    assert summary["reason_code"] == "wall_clock_timeout"
    assert summary["task_submission_started"] is True and summary["truncated"] is True
    assert summary["infra_failed"] is False  # the model was working: a truncation, not infrastructure
    assert (dump / "traj_log.json").is_file()
    assert (dump / "ouroboros" / "tools.jsonl").stat().st_size > 0
    assert (dump / "ouroboros" / "events.jsonl").stat().st_size > 0
    # The ledger says what happened: the agent ran out of time; the status gate declined to grade.
    assert row["status"] == "agent_failed" and row["reason_code"] == "wall_clock_timeout"
    assert row["official_eval_status"] == "declined"
    assert row["paid_activity"] == "observed"
    assert code == 0, "every row is settled and nothing stopped the run"
