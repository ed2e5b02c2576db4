"""The agent exec under the host's supervision: its window, its end as the shim saw it, the adapter
summary it left, and with issue 37's bounds its output cap, time bound and leftovers ended
(agent_exec.py). Standard library only.
"""

import json
import os
import signal
import subprocess
import sys
import time

try:  # inside the package (tests, the host's readers); beside the installed shim, its siblings are top-level
    from ..runroot.custody_evidence import AGENT_EXEC_SUFFIX, SUMMARY_NAME, file_seal
    from .shim_dumps import task_dump_rel
    from .shim_io import FORWARDED_SIGNALS, docker_env, load_safefile, load_sibling, record, run_child
    from .shim_taskdb import TASKDB_ACK_ENV, start_taskdb_watch
    from .shim_words import AGENT_WINDOW_SUFFIX, END_STRAYS_ENV, EXIT_CANNOT_EXECUTE, HELD_SUMMARY_SUFFIX
except ImportError:
    from custody_evidence import AGENT_EXEC_SUFFIX, SUMMARY_NAME, file_seal  # type: ignore[no-redef,import-not-found]
    from shim_dumps import task_dump_rel  # type: ignore[no-redef,import-not-found]
    from shim_io import (  # type: ignore[no-redef,import-not-found]
        FORWARDED_SIGNALS,
        docker_env,
        load_safefile,
        load_sibling,
        record,
        run_child,
    )
    from shim_taskdb import TASKDB_ACK_ENV, start_taskdb_watch  # type: ignore[no-redef,import-not-found]
    from shim_words import (  # type: ignore[no-redef,import-not-found]
        AGENT_WINDOW_SUFFIX,
        END_STRAYS_ENV,
        EXIT_CANNOT_EXECUTE,
        HELD_SUMMARY_SUFFIX,
    )


HELD_SUMMARY_CAP = 1024 * 1024


def handle_agent_exec(config, argv, at, ident, task, max_steps=None):
    """The agent exec (told to end, inside its container, what the agent left running), then the
    adapter summary's digest and bytes as they were when the exec ended: the ledger and the eval
    phase's diagnostic trust only that summary (the agent may rewrite the file later). Its start and
    end go to `<id>.agent_window.json` (the first exec's, written once): the eval phase's launch_time.

    With the host-side bounds (agent_exec.py) its output is relayed under a cap, it is ended at its
    bound whatever happens inside, and every process it left in the container is killed once it ends
    (one kill(-1) inside the container), whether or not agent.py got there."""
    started = time.time()
    watch = start_taskdb_watch(config, ident, task)
    extra = ["-e", END_STRAYS_ENV + "=1"] + (["-e", TASKDB_ACK_ENV + "=1"] if watch is not None else [])
    inner = argv[:at] + extra + argv[at:]
    bounds = load_sibling("agent_exec") if config.get("agent_bound_sec") else None
    if bounds is None:
        code, _ = run_child(config, inner, {}, None)
    else:
        code = run_bounded_agent_exec(config, bounds, inner, ident)
    record(
        config,
        ident + AGENT_WINDOW_SUFFIX,
        json.dumps({"started_at": started, "ended_at": time.time(), "max_steps": max_steps}) + "\n",
        once=True,
    )
    # The exec's end as this shim saw it, first and apart from the summary's facts (nothing the agent
    # left can keep it from being written): a host fact of the ledger's infra rule (score/infra.py).
    record(config, ident + AGENT_EXEC_SUFFIX, {"ts": time.time(), "task": task, "exit": code})
    try:  # the baseline's record, even when none came (a task with no marker is never cleared)
        if watch is not None:
            watch.finish()
    except Exception:  # noqa: BLE001
        pass
    try:  # evidence only: the exec has run and its exit code stands whatever happens here
        safefile = load_safefile()
        if safefile is not None and task is not None:
            task_root = os.path.join(config["dumps_dir"], task_dump_rel(config, task))
            facts, got = file_seal(safefile, os.path.join(task_root, SUMMARY_NAME), config["dumps_dir"])
            record(config, ident + ".agent_summary", dict(facts, ts=time.time(), task=task))
            if got.ok and got.size <= HELD_SUMMARY_CAP:
                # The bytes themselves, host-only: the ledger classifies from them, not from a file
                # the agent's leftover processes could rewrite before the container is removed.
                record(config, ident + HELD_SUMMARY_SUFFIX, got.data.decode("utf-8", "replace"), once=True)
    except Exception:  # noqa: BLE001
        pass
    return code


def run_bounded_agent_exec(config, bounds, argv, ident):
    """The agent exec under agent_exec.py's bounds; its exit code as a shell reports it. What the
    bounds did goes to `<id>.agent_exec.jsonl` (evidence only)."""
    started = time.time()
    try:
        child = subprocess.Popen(
            [config["real_docker"]] + argv, env=docker_env(config), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError:
        sys.stderr.write("docker shim: cannot execute the real docker\n")
        return EXIT_CANNOT_EXECUTE
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, lambda sig, _frame: child.send_signal(sig))
    bounds.ignore_sigpipe()
    cap = bounds.OutputCap(config.get("agent_output_cap_bytes", bounds.DEFAULT_CAP_BYTES))
    bound = float(config["agent_bound_sec"])
    try:
        code, hung = bounds.relay(
            child, {"stdout": (child.stdout, 1), "stderr": (child.stderr, 2)}, cap, time.monotonic() + bound
        )
    except Exception:  # noqa: BLE001 - the exec has started: never let main() run it a second time
        code, hung = bounds.end_child(child), True
    killed = bounds.run_kill_leftovers(config["real_docker"], docker_env(config), "agent-" + ident)
    code = 128 - code if code < 0 else code
    record(
        config,
        ident + ".agent_exec.jsonl",
        dict(
            cap.facts(),
            ts=time.time(),
            started_at=started,
            bound_sec=bound,
            hung=hung,
            exit_code=code,
            leftovers_kill=killed,
        ),
    )
    return code
