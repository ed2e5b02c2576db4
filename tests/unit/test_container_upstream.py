"""Engine upstream:<entry>: the benchmark's own entry runs unchanged as a child."""

from __future__ import annotations

import json

from test_container_support import FAKE_KEY, SHORT, FakeBench, run_config, status_lines, write

UPSTREAM_MAIN = '''
import argparse, json, os, sys
from utils.data_structures.task_config import TaskConfig
ap = argparse.ArgumentParser()
ap.add_argument("--task_dir"); ap.add_argument("--max_steps"); ap.add_argument("--phase")
a = ap.parse_args()
tc = TaskConfig.build(a.task_dir, agent_short_name="%s", global_task_config={"dump_path": "./dumps/"})
os.makedirs(tc.task_root, exist_ok=True)
json.dump({"config": tc.to_dict(), "status": "success"}, open(tc.log_file, "w"))
with open(os.path.join(os.environ["FAKE_ENV_DUMP"], "upstream.json"), "w") as fh:
    json.dump({"argv": sys.argv[1:], "has_key": os.environ.get("MODEL_API_KEY") == os.environ.get("LLM_API_KEY") != None}, fh)
print("debug key", os.environ.get("LLM_API_KEY"))
print("====== Status: success ======")
''' % SHORT


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
