"""The reference engines' agent phase (oracle, nop) on the host: fake benchmark tree, no server,
no proxy, no key. Each ends as a successful agent; oracle's workspace holds the staged ground
truth, nop's only what the initial workspace and preprocess left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_container_support import TASK, FakeBench, run_config, status_lines, write

from cowork_adapter.container.reference import STAGE_DIR, place_groundtruth, staged_groundtruth
from cowork_adapter.container.runconfig import ConfigError, parse_run_config


def _bench(tmp_path: Path, engine: str) -> FakeBench:
    bench = FakeBench(tmp_path, servers=("notes",), config=run_config(engine=engine, agent_short_name=f"{engine}/m"))
    staged = bench.root / "configs" / STAGE_DIR / TASK
    write(staged / "note.txt", "the answer")
    write(staged / "hello.txt", "replaced by the ground truth")
    return bench


def _task_root(bench: FakeBench, engine: str) -> Path:
    return bench.root / "dumps" / f"{engine}_m" / f"SingleUserTurn-{TASK}"


@pytest.mark.parametrize("engine", ["oracle", "nop"])
def test_reference_engine_ends_as_a_successful_agent_without_key_or_server(tmp_path, engine):
    bench = _bench(tmp_path, engine)
    proc = bench.run("agent", COWORK_PROVIDER_KEY="")  # no key at all: still no failure
    assert proc.returncode == 0, proc.stderr
    assert status_lines(proc.stdout) == ["====== Status: success ======"]
    root = _task_root(bench, engine)
    summary = json.loads((root / "ouroboros_summary.json").read_text())
    assert summary["engine"] == engine and summary["bench_status"] == "success"
    assert summary["infra_failed"] is False and summary["reason_code"] is None
    assert summary["task_submission_started"] is False and summary["model_activity_observed"] is False
    assert summary["mcp_servers"] == []  # no proxy was started for a phase without an agent
    assert json.loads((root / "traj_log.json").read_text())["status"] == "success"
    assert (root / "preprocess.log").exists()  # the task's own preprocess ran
    assert not (bench.data / "settings.json").exists()  # no Ouroboros server was configured
    workspace = root / "workspace"
    if engine == "oracle":
        assert summary["oracle_groundtruth"] == {"state": "placed", "files": 2}
        assert (workspace / "note.txt").read_text() == "the answer"
        assert (workspace / "hello.txt").read_text() == "replaced by the ground truth"
    else:
        assert "oracle_groundtruth" not in summary
        assert not (workspace / "note.txt").exists()
        assert (workspace / "hello.txt").read_text() == "hello"


def test_oracle_without_a_staged_ground_truth_places_nothing_and_says_so(tmp_path):
    bench = FakeBench(tmp_path, servers=(), config=run_config(engine="oracle", agent_short_name="oracle/m"))
    proc = bench.run("agent")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((_task_root(bench, "oracle") / "ouroboros_summary.json").read_text())
    assert summary["oracle_groundtruth"] == {"state": "absent", "files": 0}
    assert summary["bench_status"] == "success"


@pytest.mark.parametrize("engine", ["oracle", "nop"])
def test_reference_engine_is_graded_once_by_the_official_evaluator(tmp_path, engine):
    bench = _bench(tmp_path, engine)
    assert bench.run("agent").returncode == 0
    proc = bench.run("eval", FAKE_EVAL_PASS="false")
    assert bench.eval_calls() == 1
    assert "False" in proc.stdout
    root = _task_root(bench, engine)
    assert list(root.glob("ouroboros_eval_receipt-*.json"))


def test_place_groundtruth_keeps_other_files(tmp_path):
    source, workspace = tmp_path / "gt", tmp_path / "ws"
    write(source / "sub" / "a.txt", "A")
    write(workspace / "b.txt", "B")
    assert place_groundtruth(str(source), str(workspace)) == {"state": "placed", "files": 1}
    assert (workspace / "sub" / "a.txt").read_text() == "A" and (workspace / "b.txt").read_text() == "B"
    assert staged_groundtruth("/workspace/configs/run.json", "t1") == f"/workspace/configs/{STAGE_DIR}/t1"
    assert staged_groundtruth("/workspace/configs/run.json", "../../etc") == f"/workspace/configs/{STAGE_DIR}/etc"


def test_run_config_accepts_the_reference_engines_only_by_name():
    for engine in ("oracle", "nop"):
        assert parse_run_config(run_config(engine=engine)).reference_engine
    assert not parse_run_config(run_config()).reference_engine
    with pytest.raises(ConfigError):
        parse_run_config(run_config(engine="oracle2"))
