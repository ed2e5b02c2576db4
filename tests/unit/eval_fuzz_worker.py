"""One long-lived eval-phase process for the fuzzer (test_eval_fuzz.py): the REAL eval phase and the
REAL evaluator of one bench tree, run in-process per request so hundreds of dumps cost seconds.

    python eval_fuzz_worker.py <bench root> <reply fd> [<stub dir>]

Requests are JSON lines on stdin, replies JSON lines on the reply fd:
* {"op": "honest", "task": T, "short": S, "launch": L}: the config an honest engine writes in the
  sanitized agent container (the bench's own TaskConfig, evaluation fields None, launch time L);
* {"op": "eval", "task": T, "env": {...}}: one eval entry (the environment the shim gives it), then
  {"code": exit code, "out": what it printed}.
cwd is the bench root, as /workspace is in the eval container. The evaluator's own children get
stdin/stdout of this process, which the test points at a log file. `<stub dir>` (the pinned upstream
tree only) holds stand-ins for the modules the evaluator's imports name but never call (camel,
termcolor): put on sys.path AFTER the bench root, so every module of the tree is its own.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys


def main() -> int:
    root, reply_fd = sys.argv[1], int(sys.argv[2])
    os.chdir(root)
    sys.path.insert(0, root)
    if len(sys.argv) > 3:
        sys.path.append(sys.argv[3])
    from cowork_adapter.container import bench, evalphase

    reply = os.fdopen(reply_fd, "w")
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "honest":
            config = bench.build_task_config(request["task"], request["short"]).to_dict()
            built = config["launch_time"]
            config = json.loads(json.dumps(config, default=str))
            config["evaluation"] = {"evaluation_command": None, "groundtruth_workspace": None}
            config["launch_time"] = request["launch"]
            prompts = config.get("system_prompts") or {}
            config["system_prompts"] = {
                k: v.replace(built, request["launch"]) if isinstance(v, str) else v for k, v in prompts.items()
            }
            answer = {"config": config}
        else:
            os.environ.update(request["env"])
            out = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()):
                code = evalphase.run_eval(request["task"], out=out)
            for name in request["env"]:
                os.environ.pop(name, None)
            answer = {"code": code, "out": out.getvalue()}
        reply.write(json.dumps(answer) + "\n")
        reply.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
