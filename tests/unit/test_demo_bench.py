"""The demo benchmark on the host: TaskConfig layout, evaluator contract, plans vs servers, the
deterministic commit, the seed, and the stateful deck server over the real mcp SDK.

The bench's own `utils` package is imported from a materialized copy (never from src, so no
bytecode lands in the package tree) and removed from sys.modules afterwards.
"""

from __future__ import annotations

import ast
import asyncio
import gzip
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cowork_adapter.demo.bench_repo import DEMO_BENCH_ROOT, expected_bench_commit, materialize_bench
from cowork_adapter.demo.policy import PLANS, Ending, plan_for

TASKS = sorted(p.name for p in (DEMO_BENCH_ROOT / "tasks" / "finalpool").iterdir() if p.is_dir())
SHORT_NAME = "demo/demo"
TO_DICT_KEYS = {
    "task_dir",
    "id",
    "needed_mcp_servers",
    "needed_local_tools",
    "task_root",
    "task_str",
    "log_file",
    "agent_workspace",
    "launch_time",
    "max_turns",
    "max_steps_under_single_turn_mode",
    "single_turn_mode",
    "cn_mode",
    "system_prompts",
    "initialization",
    "stop",
    "evaluation",
    "meta",
    "local_token_key_session",
}


@pytest.fixture(scope="module")
def bench_copy(tmp_path_factory) -> Path:
    return Path(tmp_path_factory.mktemp("bench")) / "repo"


@pytest.fixture(scope="module")
def bench(bench_copy):
    """(root, task_config module, evaluator module) of a materialized copy."""
    materialize_bench(bench_copy)
    sys.path.insert(0, str(bench_copy))
    try:
        task_config = importlib.import_module("utils.data_structures.task_config")
        evaluator = importlib.import_module("utils.evaluation.evaluator")
        yield bench_copy, task_config, evaluator
    finally:
        sys.path.remove(str(bench_copy))
        for name in [n for n in sys.modules if n == "utils" or n.startswith("utils.")]:
            del sys.modules[name]


@pytest.fixture
def in_bench(bench, monkeypatch):
    root = bench[0]
    monkeypatch.chdir(root)
    monkeypatch.setenv("PYTHON_BIN", sys.executable)  # graders run under the test interpreter
    shutil.rmtree(root / "dumps", ignore_errors=True)
    return bench


def _build(task_config, task: str):
    return task_config.TaskConfig.build(task, SHORT_NAME, {"dump_path": "./dumps/"}, True)


# ---- TaskConfig --------------------------------------------------------------------------------
def test_task_config_paths_and_dict(in_bench):
    root, task_config, _ = in_bench
    config = _build(task_config, "demo-csv-totals")
    task_root = root / "dumps" / "demo_demo" / "SingleUserTurn-demo-csv-totals"
    assert config.task_root == str(task_root)
    assert config.log_file == str(task_root / "traj_log.json")
    assert config.agent_workspace == str(task_root / "workspace")
    assert config.id == "demo-csv-totals"
    assert config.needed_mcp_servers == ["files"]
    assert "[demo-policy: demo-csv-totals]" in config.task_str
    assert len(config.launch_time.split()) == 3  # date, time, weekday
    assert config.agent_workspace in config.system_prompts.agent and "!!<<<<" not in config.system_prompts.agent
    assert config.initialization.workspace == "tasks/finalpool/demo-csv-totals/initial_workspace"
    assert config.initialization.process_command.endswith("-m tasks.finalpool.demo-csv-totals.preprocess.main")
    assert config.evaluation.groundtruth_workspace == "tasks/finalpool/demo-csv-totals/groundtruth_workspace"
    assert config.evaluation.evaluation_command.endswith("-m tasks.finalpool.demo-csv-totals.evaluation.main")
    data = config.to_dict()
    assert set(data) >= TO_DICT_KEYS
    assert set(data["evaluation"]) == {"groundtruth_workspace", "evaluation_command"}
    assert set(data["initialization"]) == {"workspace", "process_command"}
    assert set(data["system_prompts"]) == {"agent", "user"}
    assert data["stop"] == {"user_phrases": ["#### STOP"], "tool_names": ["local-claim_done"]}
    json.dumps(data)  # traj_log.json must be able to hold it


def test_sanitized_tree_has_no_evaluation_fields(in_bench, tmp_path, monkeypatch):
    root, task_config, _ = in_bench
    staged = tmp_path / "tasks" / "finalpool" / "demo-csv-totals"
    shutil.copytree(
        root / "tasks" / "finalpool" / "demo-csv-totals",
        staged,
        ignore=shutil.ignore_patterns("evaluation", "groundtruth_workspace"),
    )
    monkeypatch.chdir(tmp_path)
    config = _build(task_config, "demo-csv-totals")
    assert config.evaluation.groundtruth_workspace is None
    assert config.evaluation.evaluation_command is None
    assert config.initialization.process_command is not None


def test_stale_eval_res_is_deleted(in_bench):
    _, task_config, _ = in_bench
    config = _build(task_config, "demo-hang")
    os.makedirs(config.task_root)
    stale = Path(config.task_root) / "eval_res.json"
    stale.write_text('{"pass": true}')
    _build(task_config, "demo-hang")
    assert not stale.exists()


# ---- evaluator ---------------------------------------------------------------------------------
def _dump(task_config, task: str, status: str, files: dict) -> str:
    config = _build(task_config, task)
    os.makedirs(config.agent_workspace)
    for name, text in files.items():
        Path(config.agent_workspace, name).write_text(text)
    log = {"config": config.to_dict(), "status": status, "start_time": "t0", "end_time": "t1"}
    Path(config.log_file).write_text(json.dumps(log))
    return config.log_file


def _evaluate(evaluator, log_file: str) -> dict:
    return asyncio.run(evaluator.TaskEvaluator.evaluate_from_log_file(log_file))


def test_missing_log_file_writes_nothing(in_bench):
    root, _, evaluator = in_bench
    log_file = root / "dumps" / "demo_demo" / "SingleUserTurn-demo-hang" / "traj_log.json"
    log_file.parent.mkdir(parents=True)
    result = _evaluate(evaluator, str(log_file))
    assert result["pass"] is False and result["failure"] == "log_file_not_found"
    assert not (log_file.parent / "eval_res.json").exists()


@pytest.mark.parametrize("status", ["max_turns_reached", "failed", "interrupted"])
def test_status_gate_does_not_grade_and_writes_null(in_bench, status):
    _, task_config, evaluator = in_bench
    # A correct answer on disk: only the gate can make pass null.
    answer = (DEMO_BENCH_ROOT / "tasks/finalpool/demo-csv-totals/groundtruth_workspace/totals.json").read_text()
    log_file = _dump(task_config, "demo-csv-totals", status, {"totals.json": answer})
    result = _evaluate(evaluator, log_file)
    expected = {"pass": None, "details": f"Task status: {status}, only SUCCESS counts as pass; pass is null"}
    assert result == expected
    assert json.loads(Path(log_file).with_name("eval_res.json").read_text()) == expected
    assert "config" in json.loads(Path(log_file).read_text())  # the grader never ran


def test_success_runs_the_task_grader_which_overwrites_the_log(in_bench, capsys):
    _, task_config, evaluator = in_bench
    answer = (DEMO_BENCH_ROOT / "tasks/finalpool/demo-csv-totals/groundtruth_workspace/totals.json").read_text()
    log_file = _dump(task_config, "demo-csv-totals", "success", {"totals.json": answer})
    result = _evaluate(evaluator, log_file)
    assert result["pass"] is True
    out = capsys.readouterr().out
    assert "== Evaluation STDOUT ==" in out and "[PASS] grand_total" in out
    summary = json.loads(Path(log_file).read_text())
    assert summary["total_passed"] == summary["total_checks"] and summary["critical_failed"] == []
    assert json.loads(Path(log_file).with_name("eval_res.json").read_text())["pass"] is True
    # The overwritten log can no longer be graded, exactly like upstream.
    assert _evaluate(evaluator, log_file)["failure"] == "evaluation_error"


def test_wrong_answer_fails_with_the_grader_output(in_bench):
    _, task_config, evaluator = in_bench
    log_file = _dump(task_config, "demo-wrong-answer", "success", {"answer.txt": "227\n"})
    result = _evaluate(evaluator, log_file)
    assert result["pass"] is False
    assert "[FAIL] total quantity is 237" in result["failure"]


# ---- plans versus tasks and servers ------------------------------------------------------------
def _server_tools() -> dict[str, set[str]]:
    """Tool names per server `name`, read from each yaml's server source (decorated @mcp.tool())."""
    tools = {}
    for path in sorted((DEMO_BENCH_ROOT / "configs" / "mcp_servers").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        script = raw["params"]["args"][0].replace("${local_servers_paths}", str(DEMO_BENCH_ROOT / "local_servers"))
        tree = ast.parse(Path(script).read_text())
        tools[raw["name"]] = {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef)
            and any(isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "tool" for d in node.decorator_list)
        }
    return tools


def test_every_task_has_its_plan_and_every_plan_its_task():
    assert set(TASKS) == set(PLANS)
    assert len(TASKS) >= 7


@pytest.mark.parametrize("task", TASKS)
def test_plan_uses_only_declared_servers_and_defined_tools(task):
    base = DEMO_BENCH_ROOT / "tasks" / "finalpool" / task
    plan = plan_for((base / "docs" / "task.md").read_text())
    assert plan.tag == task
    needed = json.loads((base / "task_config.json").read_text())["needed_mcp_servers"]
    tools = _server_tools()
    assert plan.steps, "every plan makes at least one tool call"
    for step in plan.steps:
        assert step.server in needed, f"{task}: {step.server} is not in needed_mcp_servers"
        assert step.tool in tools[step.server], f"{task}: {step.server} has no tool {step.tool}"


def test_round_limit_plan_is_longer_than_the_default_round_limit():
    plan = PLANS["demo-round-limit"]
    assert plan.ending == Ending.ROUND_LIMIT and len(plan.steps) > 100


def test_every_task_has_the_upstream_layout():
    for task in TASKS:
        base = DEMO_BENCH_ROOT / "tasks" / "finalpool" / task
        for rel in (
            "task_config.json",
            "docs/task.md",
            "docs/agent_system_prompt.md",
            "preprocess/main.py",
            "evaluation/main.py",
            "groundtruth_workspace",
        ):
            assert (base / rel).exists(), f"{task}: missing {rel}"
        assert "!!<<<<||||workspace_dir||||>>>>!!" in (base / "docs/agent_system_prompt.md").read_text()


# ---- the repository and the seed ---------------------------------------------------------------
def test_materialize_gives_the_same_sha_twice(tmp_path):
    first = materialize_bench(tmp_path / "a")
    second = materialize_bench(tmp_path / "b")
    assert first == second == expected_bench_commit()
    assert len(first) == 40
    modes = subprocess.run(
        ["git", "-C", str(tmp_path / "a"), "ls-tree", "HEAD", "run_parallel.sh", "demo_policy.py"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert "100755 blob" in modes.splitlines()[1] and "100644 blob" in modes.splitlines()[0]
    with pytest.raises(FileExistsError):
        materialize_bench(tmp_path / "a")


def test_changed_content_changes_the_sha(tmp_path, monkeypatch):
    import cowork_adapter.demo.bench_repo as bench_repo

    original = materialize_bench(tmp_path / "a")
    policy = tmp_path / "policy.py"
    policy.write_text(bench_repo.POLICY_SOURCE.read_text() + "\n# changed\n")
    monkeypatch.setattr(bench_repo, "POLICY_SOURCE", policy)
    assert materialize_bench(tmp_path / "b") != original


def test_seed_is_reproducible_and_holds_the_demo_schema(bench):
    root = bench[0]
    committed = (DEMO_BENCH_ROOT / "db" / "init.sql.gz").read_bytes()
    (root / "db" / "init.sql.gz").unlink()
    subprocess.run([sys.executable, str(root / "db" / "make_init_sql.py")], check=True, timeout=30)
    assert (root / "db" / "init.sql.gz").read_bytes() == committed
    sql = gzip.decompress(committed).decode()
    assert "CREATE TABLE crm.customers" in sql and "CREATE TABLE crm.notes" in sql


def test_runner_keeps_the_contract_markers():
    text = (DEMO_BENCH_ROOT / "run_parallel.sh").read_text()
    assert "set -uo pipefail" in text
    assert text.index('export PATH="/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin') < text.index("$(which docker")
    for marker in (
        "task,status,eval_pass,duration_s",
        "timeout -k 30",
        "trap cleanup_all EXIT",
        "'Status: success'",
        "'Pass:.*True'",
        "--phase eval",
        "benchmark_logs/index.csv",
    ):
        assert marker in text
    subprocess.run(["bash", "-n", str(DEMO_BENCH_ROOT / "run_parallel.sh")], check=True, timeout=30)


# ---- the stateful server, over the real mcp SDK ------------------------------------------------
async def _deck_calls(workspace: Path, one_session: bool) -> list:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=[str(DEMO_BENCH_ROOT / "local_servers" / "deck" / "server.py")],
        env={**os.environ, "DECK_OUTPUT_DIR": str(workspace), "PYTHONDONTWRITEBYTECODE": "1"},
        cwd=str(workspace),
    )
    steps = [s for s in PLANS["demo-deck-stateful"].steps if s.server == "deck"]
    errors = []

    async def call(session, step):
        result = await session.call_tool(step.tool, dict(step.arguments))
        errors.append(bool(result.isError))

    if one_session:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for step in steps:
                await call(session, step)
    else:  # what a client that starts a fresh server per call would do
        for step in steps:
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                await call(session, step)
    return errors


def test_deck_needs_one_server_process_for_all_calls(tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    assert asyncio.run(asyncio.wait_for(_deck_calls(one, one_session=True), 60)) == [False] * 5
    deck = json.loads((one / "q3_review.deck.json").read_text())
    assert [s["heading"] for s in deck["slides"]] == ["Revenue", "Costs", "Outlook"]
    assert len(set(deck["served_by"])) == 1 and len(deck["served_by"]) == 5

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    errors = asyncio.run(asyncio.wait_for(_deck_calls(fresh, one_session=False), 90))
    assert errors[0] is False and all(errors[1:])  # every call after create misses the deck
    assert not (fresh / "q3_review.deck.json").exists()
