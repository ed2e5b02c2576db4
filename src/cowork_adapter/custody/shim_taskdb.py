"""The shim's hooks for the task database (issue 36): the baseline read while the agent exec waits after
preprocess, then the reset and second read before the first eval exec (taskdb_probe.py, a sibling copy).
Standard library only.
"""

import json
import os
import time

try:  # inside the package (tests, the host's readers); beside the installed shim, its siblings are top-level
    from .shim_dumps import task_dump_rel
    from .shim_io import docker_env, evidence_path, load_safefile, record
except ImportError:
    from shim_dumps import task_dump_rel  # type: ignore[no-redef,import-not-found]
    from shim_io import docker_env, evidence_path, load_safefile, record  # type: ignore[no-redef,import-not-found]


TASKDB_ACK_ENV = "COWORK_TASKDB_ACK"  # taskdb_probe.ACK_ENV: the agent phase waits for the baseline


def _load_taskdb():
    """custody/taskdb_probe.py, copied beside this program (install_custody); None if it is missing."""
    if load_safefile() is None:  # puts this folder on sys.path
        return None
    try:
        import taskdb_probe  # type: ignore[import-not-found]  # noqa: PLC0415 - a sibling copy, as safefile
    except ImportError:
        return None
    return taskdb_probe


def start_taskdb_watch(config, ident, task):
    """The task database's baseline, read from the host while the agent exec waits after
    preprocess (issue 36); None when this run has no per-task dumps or the probe is missing."""
    probe = _load_taskdb()
    if probe is None or task is None or not config.get("dumps_dir") or evidence_path(config, "") is None:
        return None
    task_root = os.path.join(config["dumps_dir"], task_dump_rel(config, task))
    return probe.BaselineWatch(
        config["real_docker"],
        docker_env(config),
        ident,
        task,
        task_root,
        lambda name, text: record(config, name, text, once=True),
    ).start()


def check_taskdb(config, ident, task):
    """Before the first eval exec: the task database reset and read again (taskdb_probe.eval_check).
    A missing probe is itself recorded: the ledger then cannot clear the task's database."""
    probe = _load_taskdb()
    if probe is None:
        record(
            config,
            ident + ".taskdb.json",
            json.dumps(
                {
                    "schema": "cowork_adapter.taskdb_eval.v1",
                    "runner_id": ident,
                    "task": task,
                    "reset": {
                        "started_at": time.time(),
                        "errors": ["the task database probe is missing beside the shim"],
                    },
                }
            )
            + "\n",
            once=True,
        )
        return
    probe.eval_check(
        config["real_docker"],
        docker_env(config),
        ident,
        task,
        evidence_path(config, probe.baseline_file(ident)),
        lambda name, text: record(config, name, text, once=True),
    )
