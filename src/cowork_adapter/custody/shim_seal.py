"""The seal of the official verdict (issue 27): the eval exec under the host's bound, what stood in the
task dump before it, then the claim, receipt and eval_res.json as the host reads them, written once to
`<id>.seal.json` in the evidence folder. Standard library only.
"""

import json
import os
import sys
import time

try:  # inside the package (tests, the host's readers); beside the installed shim, its siblings are top-level
    from ..runroot.custody_evidence import OFFICIAL_NAMES, RECEIPT_PREFIX, file_seal, read_seal_inputs
    from .shim_argv import flag_value
    from .shim_daemon import agent_state
    from .shim_dumps import task_dump_rel, task_of
    from .shim_io import evidence_path, load_safefile, record, run_child
    from .shim_taskdb import check_taskdb
    from .shim_words import (
        AGENT_ENDED_ENV,
        AGENT_MAX_STEPS_ENV,
        AGENT_STARTED_ENV,
        AGENT_WINDOW_SUFFIX,
        BOUND_ENV,
        ENTRY_ENV,
        SEAL_HEAD_SUFFIX,
        SEAL_SCHEMA,
        SEAL_SUFFIX,
        STATE_ENV,
        SUMMARY_SHA_ENV,
    )
except ImportError:
    from custody_evidence import (  # type: ignore[no-redef,import-not-found]
        OFFICIAL_NAMES,
        RECEIPT_PREFIX,
        file_seal,
        read_seal_inputs,
    )
    from shim_argv import flag_value  # type: ignore[no-redef,import-not-found]
    from shim_daemon import agent_state  # type: ignore[no-redef,import-not-found]
    from shim_dumps import task_dump_rel, task_of  # type: ignore[no-redef,import-not-found]
    from shim_io import evidence_path, load_safefile, record, run_child  # type: ignore[no-redef,import-not-found]
    from shim_taskdb import check_taskdb  # type: ignore[no-redef,import-not-found]
    from shim_words import (  # type: ignore[no-redef,import-not-found]
        AGENT_ENDED_ENV,
        AGENT_MAX_STEPS_ENV,
        AGENT_STARTED_ENV,
        AGENT_WINDOW_SUFFIX,
        BOUND_ENV,
        ENTRY_ENV,
        SEAL_HEAD_SUFFIX,
        SEAL_SCHEMA,
        SEAL_SUFFIX,
        STATE_ENV,
        SUMMARY_SHA_ENV,
    )


BOUND_MARGIN_SEC = 60.0


def official_entries(safefile, task_root, below):
    """The official-looking entries of a task dump (name, kind, size, sha256 of a regular file's bytes):
    what stood there before the eval exec. The digests let the host refuse to seal a planted record
    that the eval phase had not yet set aside (ledger.late_seal)."""
    _, entries = safefile.scan_dir(task_root, below=below)
    out = []
    for e in entries:
        if e.name in OFFICIAL_NAMES or e.name.startswith(RECEIPT_PREFIX):
            facts, _ = (
                file_seal(safefile, os.path.join(task_root, e.name), below) if e.kind == "regular" else ({}, None)
            )
            out.append({"name": e.name, "kind": e.kind, "bytes": e.size, "sha256": facts.get("sha256")})
    return out


def own_start_ticks():
    """This process's start time in clock ticks (field 22 of /proc/self/stat), or None."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            stat = handle.read().decode("utf-8", "replace")
        return int(stat[stat.rfind(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def agent_summary_sha(config, ident):
    """The summary digest the agent exec left (the last line of `<id>.agent_summary`), or ""."""
    path = evidence_path(config, ident + ".agent_summary")
    try:
        with open(path, "rb") as handle:
            lines = handle.read(1 << 20).splitlines()
        value = json.loads(lines[-1].decode("utf-8")) if lines else {}
    except (OSError, ValueError, TypeError, IndexError):
        return ""
    sha = value.get("sha256") if isinstance(value, dict) else None
    return sha if isinstance(sha, str) else ""


def agent_window_env(config, ident):
    """The eval exec's variables for the agent exec's window (empty when the host saw none)."""
    path = evidence_path(config, ident + AGENT_WINDOW_SUFFIX)
    try:
        with open(path, "rb") as handle:
            value = json.loads(handle.read(4096).decode("utf-8"))
        env = {AGENT_STARTED_ENV: repr(float(value["started_at"])), AGENT_ENDED_ENV: repr(float(value["ended_at"]))}
    except (OSError, TypeError, ValueError, KeyError, AttributeError):
        return {}
    steps = value.get("max_steps")
    if isinstance(steps, str) and steps.isdigit() and len(steps) < 10:
        env[AGENT_MAX_STEPS_ENV] = steps
    return env


def first_eval_entry(config, ident):
    """True for the first eval exec of `ident` in this run (a write-once marker), else False."""
    marker = evidence_path(config, ident + ".eval_entry")
    if marker is None:
        return True
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    except OSError:
        pass
    return True


def handle_eval_exec(config, argv, at, ident, command):
    """The eval exec under the host's seal: what stood in the dump before, the exec (bounded),
    then the claim, receipt and eval_res.json as the host reads them, written once to
    `<id>.seal.json` in the evidence folder, which no container mounts. Only the first entry is
    sealed: a repeat replays its receipt, and the ledger scores the first."""
    state = agent_state(config, ident)
    record(config, ident + ".eval_admission", {"ts": time.time(), "agent_container_state": state})
    first = first_eval_entry(config, ident)
    bound = float(config.get("eval_bound_sec") or 0) or None
    summary_sha = agent_summary_sha(config, ident)
    env_extra = {STATE_ENV: state, ENTRY_ENV: "first" if first else "repeat", SUMMARY_SHA_ENV: summary_sha}
    env_extra.update(agent_window_env(config, ident))
    if bound:
        env_extra[BOUND_ENV] = repr(bound)
    flags = []
    for name, value in sorted(env_extra.items()):
        flags += ["-e", name + "=" + value]
    safefile = load_safefile()
    task = task_of(config, ident)
    below = config["dumps_dir"]
    seal = None
    if first and task is not None and safefile is not None:
        task_root = os.path.join(below, task_dump_rel(config, task))
        seal = {
            "schema": SEAL_SCHEMA,
            "runner_id": ident,
            "task": task,
            "entry": "first",
            "task_dir_arg": flag_value(command, "--task_dir"),
            "agent_container_state": state,
            "agent_summary_sha256": summary_sha or None,
            "pre": official_entries(safefile, task_root, below),
            "started_at": time.time(),
            "shim_pid": os.getpid(),
            "shim_start_ticks": own_start_ticks(),
        }
        # The head, before the exec: if this shim dies during it, the host can still seal what the
        # eval container alone wrote (schemas/seal.py), knowing what stood there before.
        record(config, ident + SEAL_HEAD_SUFFIX, json.dumps(seal, sort_keys=True, indent=1) + "\n", once=True)
    if first and task is not None:
        check_taskdb(config, ident, task)
    code, hung = run_child(config, argv[:at] + flags + argv[at:], {}, bound + BOUND_MARGIN_SEC if bound else None)
    if seal is not None:
        try:  # the exec has run: never run it again, whatever the seal meets (no seal = not scored)
            seal.update(ended_at=time.time(), exit_code=code, hung=hung)
            seal.update(read_seal_inputs(safefile, task_root, below))
            record(config, ident + SEAL_SUFFIX, json.dumps(seal, sort_keys=True, indent=1) + "\n", once=True)
        except Exception:  # noqa: BLE001
            sys.stderr.write("docker shim: the eval seal could not be written\n")
    return code
