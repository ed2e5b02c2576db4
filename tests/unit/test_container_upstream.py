"""Engine upstream:<entry>: the benchmark's own entry runs unchanged as a child."""

from __future__ import annotations

import json

from test_container_support import FAKE_KEY, SHORT, TASK, FakeBench, run_config, status_lines, write

UPSTREAM_MAIN = """
import argparse, json, os, sys
from utils.data_structures.task_config import TaskConfig
ap = argparse.ArgumentParser()
ap.add_argument("--task_dir"); ap.add_argument("--max_steps"); ap.add_argument("--phase")
a = ap.parse_args()
tc = TaskConfig.build(a.task_dir, agent_short_name="@SHORT@", global_task_config={"dump_path": "./dumps/"})
os.makedirs(tc.task_root, exist_ok=True)
json.dump({"config": tc.to_dict(), "status": "success"}, open(tc.log_file, "w"))
with open(os.path.join(os.environ["FAKE_ENV_DUMP"], "upstream.json"), "w") as fh:
    json.dump({"argv": sys.argv[1:], "has_key": os.environ.get("MODEL_API_KEY") == os.environ.get("LLM_API_KEY") != None}, fh)
print("debug key", os.environ.get("LLM_API_KEY"))
print("====== Status: success ======")
""".replace("@SHORT@", SHORT)  # Python source with braces of its own: one named slot, filled by replace


def test_upstream_engine_runs_child_and_writes_summary(tmp_path):
    bench = FakeBench(tmp_path, servers=(), config=run_config(engine="upstream:main_fake.py"))
    write(bench.root / "main_fake.py", UPSTREAM_MAIN)
    proc = bench.run("agent")
    assert proc.returncode == 0, proc.stderr
    assert status_lines(proc.stdout) == ["====== Status: success ======"]  # the child's own line only
    assert FAKE_KEY not in proc.stdout and "debug key [REDACTED]" in proc.stdout
    seen = json.loads((bench.envdump / "upstream.json").read_text())
    assert seen["has_key"] is True and seen["argv"][-2:] == ["--phase", "agent"]
    summary = bench.summary()
    assert summary["engine"] == "upstream:main_fake.py" and summary["bench_status"] == "success"
    assert summary["infra_failed"] is False


# Like the benchmark's main.py (CAMEL): no --phase option (argparse refuses it with exit 2); the
# dump is named <MODEL_PROVIDER>/<MODEL_NAME>; after the agent it grades in the same process, and
# without evaluation/ in the tree that in-process verdict is a bare "pass: True".
CAMEL_LIKE_MAIN = """
import argparse, json, os, sys
from utils.data_structures.task_config import TaskConfig
ap = argparse.ArgumentParser()
ap.add_argument("--task_dir"); ap.add_argument("--max_steps", type=int)
ap.add_argument("--eval_config"); ap.add_argument("--debug", action="store_true")
a = ap.parse_args()
short = os.environ["MODEL_PROVIDER"] + "/" + os.environ["MODEL_NAME"]
tc = TaskConfig.build(a.task_dir, agent_short_name=short, global_task_config={"dump_path": "./dumps/"})
os.makedirs(tc.task_root, exist_ok=True)
json.dump({"config": tc.to_dict(), "status": "success"}, open(tc.log_file, "w"))
with open(os.path.join(os.environ["FAKE_ENV_DUMP"], "upstream.json"), "w") as fh:
    json.dump({"argv": sys.argv[1:], "url": os.environ.get("MODEL_API_URL")}, fh)
print("====== Status: success ======")
json.dump({"pass": True, "details": "no evaluation command"}, open(os.path.join(tc.task_root, "eval_res.json"), "w"))
print("Pass:    True")
"""

# Like the benchmark's main_strands.py: takes --phase, needs LLM_BASE_URL and LLM_MODEL, and
# names its dump strands/<model> whatever MODEL_PROVIDER says.
STRANDS_LIKE_MAIN = """
import argparse, json, os, sys
from utils.data_structures.task_config import TaskConfig
ap = argparse.ArgumentParser()
ap.add_argument("--task_dir"); ap.add_argument("--max_steps", type=int)
ap.add_argument("--phase", choices=["all", "agent", "eval"], default="all")
a = ap.parse_args()
model = os.environ.get("LLM_MODEL") or os.environ.get("MODEL_NAME")
if not os.environ.get("LLM_BASE_URL") or not model:
    raise SystemExit("LLM_BASE_URL and LLM_MODEL must be set")
tc = TaskConfig.build(a.task_dir, agent_short_name="strands/" + model, global_task_config={"dump_path": "./dumps/"})
os.makedirs(tc.task_root, exist_ok=True)
json.dump({"config": tc.to_dict(), "status": "success"}, open(tc.log_file, "w"))
with open(os.path.join(os.environ["FAKE_ENV_DUMP"], "upstream.json"), "w") as fh:
    json.dump({"argv": sys.argv[1:], "url": os.environ["LLM_BASE_URL"]}, fh)
print("====== Status: success ======")
"""

URL = "http://chat.invalid:9/v1"


def _short_for(engine: str) -> str:
    """The short name the host writes into the run config for `engine` (schemas.run_config)."""
    from run_flags import config_for  # tests/run_flags.py

    from cowork_adapter.schemas.run_config import agent_short_name

    cfg = config_for(engine=engine, model="fake/model-1", openai_compatible_base_url=URL)
    return agent_short_name(cfg)


def test_an_entry_without_phase_runs_unchanged_and_is_graded_once_officially(tmp_path):
    short = _short_for("upstream:main.py")
    assert short == "openai/fake/model-1"
    bench = FakeBench(tmp_path, servers=(), config=run_config(engine="upstream:main.py", agent_short_name=short))
    write(bench.root / "main.py", CAMEL_LIKE_MAIN)
    env = {"MODEL_PROVIDER": "openai", "MODEL_NAME": "fake/model-1", "MODEL_API_URL": URL}
    proc = bench.run("agent", **env)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads((bench.envdump / "upstream.json").read_text())
    assert "--phase" not in seen["argv"] and seen["url"] == URL
    # Its Status line reaches the runner; its groundtruth-less verdict cannot match `Pass:.*True`.
    assert status_lines(proc.stdout) == ["====== Status: success ======"]
    assert "Pass:" not in proc.stdout and "Pass =    True" in proc.stdout
    root = bench.root / "dumps" / "openai_fake_model-1" / f"SingleUserTurn-{TASK}"
    summary = json.loads((root / "ouroboros_summary.json").read_text())
    assert summary["bench_status"] == "success" and summary["infra_failed"] is False
    assert summary["upstream_phase_flag"] is False and summary["upstream_agent_verdict_set_aside"] is True
    assert not (root / "eval_res.json").exists() and (root / "upstream_agent_eval_res.json").exists()
    # The eval phase then grades the dump with the official evaluator, once.
    proc = bench.run("eval", FAKE_EVAL_PASS="false")
    assert bench.eval_calls() == 1 and proc.returncode == 1, proc.stdout + proc.stderr
    assert "Pass:    False" in proc.stdout
    from cowork_adapter.container.protocol import RECEIPT_PREFIX

    receipts = [json.loads(p.read_text()) for p in root.glob(f"{RECEIPT_PREFIX}*.json")]
    assert len(receipts) == 1 and receipts[0]["official_run"] is True


def test_a_phase_aware_entry_gets_phase_and_url_and_its_dump_is_where_the_adapter_looks(tmp_path):
    short = _short_for("upstream:main_strands.py")
    assert short == "strands/fake/model-1"
    bench = FakeBench(
        tmp_path, servers=(), config=run_config(engine="upstream:main_strands.py", agent_short_name=short)
    )
    write(bench.root / "main_strands.py", STRANDS_LIKE_MAIN)
    proc = bench.run(
        "agent", MODEL_PROVIDER="openai", MODEL_NAME="fake/model-1", LLM_MODEL="fake/model-1", LLM_BASE_URL=URL
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads((bench.envdump / "upstream.json").read_text())
    assert seen["argv"][-2:] == ["--phase", "agent"] and seen["url"] == URL
    root = bench.root / "dumps" / "strands_fake_model-1" / f"SingleUserTurn-{TASK}"
    summary = json.loads((root / "ouroboros_summary.json").read_text())
    assert summary["bench_status"] == "success" and summary["infra_failed"] is False
    assert summary["upstream_phase_flag"] is True
    proc = bench.run("eval")
    assert bench.eval_calls() == 1 and proc.returncode == 0 and "Pass:    True" in proc.stdout


def test_a_dump_written_elsewhere_is_named_in_the_error(tmp_path):
    """With the old short name (openai/<model>) the strands-like dump is not where the adapter
    looks: the summary says infra_failed and names the folder the engine wrote."""
    bench = FakeBench(
        tmp_path,
        servers=(),
        config=run_config(engine="upstream:main_strands.py", agent_short_name="openai/fake/model-1"),
    )
    write(bench.root / "main_strands.py", STRANDS_LIKE_MAIN)
    bench.run("agent", LLM_MODEL="fake/model-1", LLM_BASE_URL=URL)
    root = bench.root / "dumps" / "openai_fake_model-1" / f"SingleUserTurn-{TASK}"
    summary = json.loads((root / "ouroboros_summary.json").read_text())
    assert summary["infra_failed"] is True and "strands_fake_model-1" in summary["error"]
