"""The run's docker shim: the program the upstream runner calls instead of the docker CLI.

Standard library only; executed on the host as `python3 -I -S shim.py ARGS...` by the `docker`
wrapper that install_custody writes. Its run config is the JSON file named by COWORK_SHIM_CONFIG
(the wrapper sets it). What it does:

- creations (`run`, `create`, `container run`, `container create`) get the run label, a role
  label, the CPU/memory/swap/PIDs limits and `--pull=never`, inserted right after the
  subcommand (so before the image); `agent-*` containers also get `--env-file <agent_env_file>`,
  or, with the model gateway, `--env-file` of a per-task file holding the task's gateway token
  (`cwg1.<task>.<HMAC-SHA256 of the run label and the task under the run's gateway secret>`,
  minted here from the 0600 secret file the launcher wrote; the same scheme as gateway.mint_token).
  On the default route (the run serves the provider's host itself, gateway/tls.py) `agent-*`
  containers also get `--add-host <provider host>:<gateway address>`, the run's CA bundle mounted
  read-only and the variables that make their HTTP clients trust it (SSL_CERT_FILE, ...).
  `network create` gets the two labels only.
- a creation is refused (exit 75, one line on stderr) when the launcher that holds the run's
  custody is gone (its pid and start time, from the config, no longer name a living process),
  the stop file exists, the disk probe
  of the resource root fails or is below the reserve, the caller names another daemon, or the
  caller set a limit, the pull policy or a custody label itself (ours come first and docker
  keeps the last value, so theirs would win).
- an admitted creation is an in-flight creation until the real docker has its answer: the shim
  takes an exclusive flock on a fresh file under the config's `creations_dir` BEFORE it checks
  admission, then runs the real docker in a process group of its own, unmarked, holding that lock
  (inherited: it lasts while the request does, even if this shim is killed), so a stop of the
  runner does not kill a request the daemon would finish anyway, unseen. Cleanup waits for every
  such lock before its proof (custody/creations.py): a stop never proves a run empty while a
  creation it admitted is still landing. No lock, no creation: a lock that cannot be taken refuses
  it (fail closed).
- `exec agent-<id> …` records the --task_dir value; `exec eval-<id> … --phase eval` tells the
  eval phase whether `agent-<id>` still exists (COWORK_AGENT_CONTAINER_STATE).
- the task database `pg-<id>` (taskdb_probe.py, beside this file): read while the agent exec waits
  after preprocess, then at the first eval exec's start reset (the agent's processes, sessions and
  settings) and read again; both readings go to the evidence folder (issue 36).
- `rm`/`stop` (also `container rm|stop`) of a task's `agent-`/`eval-`/`pg-<id>` container first
  reads the daemon's own accounting of it (the stats API: the cgroup's peak memory and cumulative
  CPU time), because removal destroys that cgroup; one line per read goes to `<id>.resources.jsonl`.
  A failed read is recorded with its cause and never delays or blocks the command for long.
  With the model gateway, `rm` of `agent-<id>` first leaves `<id>.agent_removed` in the evidence
  directory: the gateway refuses that task's token from then on.
- every other command runs the real docker with its exact argv, output and exit code.

Evidence goes to the host-only evidence_dir; a failure to write it never changes an exit code.
The shim never prints argv and never logs environment values.

This file is the entry and its dispatch (creation, exec, rm/stop); each concern is a sibling module,
standard library only, that install_custody copies beside it (custody/bash_env.py SHIM_FILES, the one
list): shim_words (the vocabulary it mirrors), shim_argv (reading a command line), shim_admission,
shim_inflight (the in-flight creation locks), shim_dumps and shim_flags (rewriting a creation),
shim_daemon (the daemon's readings, rm/stop accounting), shim_agent and shim_seal (the agent and eval
execs), shim_taskdb, shim_io (evidence writes, the real docker), runroot/custody_evidence.py (what the
score reads alike), and the copies it loads: safefile, taskdb_probe, agent_exec, container_caps,
staging_mount.
"""

import os
import sys
import time

try:  # inside the package (tests, the host's readers); beside the installed shim, its siblings are top-level
    from .shim_admission import admission_cause, load_config, refuse
    from .shim_agent import handle_agent_exec
    from .shim_argv import (
        EXEC_BOOL_LONG,
        EXEC_BOOL_SHORT,
        NETWORK_BOOL_LONG,
        NETWORK_BOOL_SHORT,
        RUN_BOOL_LONG,
        RUN_BOOL_SHORT,
        classify,
        flag_value,
        has_conflict,
        option_value,
        parse_options,
        role_for_name,
        task_id,
    )
    from .shim_daemon import agent_state, handle_remove
    from .shim_dumps import make_task_dump, rewrite_dump_mounts, task_of
    from .shim_flags import creation_flags, unrevoke, write_token_env
    from .shim_inflight import hold_creation_lock, release_creation_lock, run_creation
    from .shim_io import record, run_real
    from .shim_seal import handle_eval_exec
    from .shim_words import (
        CONFIG_UNREADABLE,
        CREATION_LOCK_FAILED,
        DUMP_MOUNT_REFUSED,
        FLAG_CONFLICT,
        GATEWAY_TOKEN_FAILED,
        HOST_OVERRIDE,
        ROLE_LABEL_KEY,
        ROLE_NETWORK,
        RUN_LABEL_KEY,
        STATE_ENV,
        TASK_UNKNOWN,
    )
except ImportError:  # run as `python3 -I -S shim.py`: -I keeps this folder off sys.path, where the siblings are
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from shim_admission import admission_cause, load_config, refuse  # type: ignore[no-redef,import-not-found]
    from shim_agent import handle_agent_exec  # type: ignore[no-redef,import-not-found]
    from shim_argv import (  # type: ignore[no-redef,import-not-found]
        EXEC_BOOL_LONG,
        EXEC_BOOL_SHORT,
        NETWORK_BOOL_LONG,
        NETWORK_BOOL_SHORT,
        RUN_BOOL_LONG,
        RUN_BOOL_SHORT,
        classify,
        flag_value,
        has_conflict,
        option_value,
        parse_options,
        role_for_name,
        task_id,
    )
    from shim_daemon import agent_state, handle_remove  # type: ignore[no-redef,import-not-found]
    from shim_dumps import make_task_dump, rewrite_dump_mounts, task_of  # type: ignore[no-redef,import-not-found]
    from shim_flags import creation_flags, unrevoke, write_token_env  # type: ignore[no-redef,import-not-found]
    from shim_inflight import (  # type: ignore[no-redef,import-not-found]
        hold_creation_lock,
        release_creation_lock,
        run_creation,
    )
    from shim_io import record, run_real  # type: ignore[no-redef,import-not-found]
    from shim_seal import handle_eval_exec  # type: ignore[no-redef,import-not-found]
    from shim_words import (  # type: ignore[no-redef,import-not-found]
        CONFIG_UNREADABLE,
        CREATION_LOCK_FAILED,
        DUMP_MOUNT_REFUSED,
        FLAG_CONFLICT,
        GATEWAY_TOKEN_FAILED,
        HOST_OVERRIDE,
        ROLE_LABEL_KEY,
        ROLE_NETWORK,
        RUN_LABEL_KEY,
        STATE_ENV,
        TASK_UNKNOWN,
    )


def handle_creation(config, argv, shape):
    at = shape["at"]
    network = shape["kind"] == "network_create"
    if network:
        options, first = parse_options(argv[at:], NETWORK_BOOL_LONG, NETWORK_BOOL_SHORT)
        positionals = argv[at + first :]
        name = positionals[0] if positionals else None
        role = ROLE_NETWORK
    else:
        options, _ = parse_options(argv[at:], RUN_BOOL_LONG, RUN_BOOL_SHORT)
        name = option_value(options, "--name")
        role = role_for_name(name)
    # Taken before admission is checked: a creation admitted before the run's fence is always
    # one that cleanup can see (and wait for); one checked after it is refused.
    lock = hold_creation_lock(config)
    cause = CREATION_LOCK_FAILED if lock is False else admission_cause(config)
    if cause is None and shape["host_override"]:
        cause = HOST_OVERRIDE
    if cause is None and has_conflict(options):
        cause = FLAG_CONFLICT
    if cause is None and not network and config.get("dumps_dir"):
        ident = task_id(name, role) if role in ("agent", "eval") else None
        task = task_of(config, ident)
        if role in ("agent", "eval") and task is None:
            cause = TASK_UNKNOWN
        else:
            rewritten, cause = rewrite_dump_mounts(config, argv[at:], role, task)
            if cause is None:
                argv = argv[:at] + rewritten
                if task is not None and not make_task_dump(config, task):
                    cause = DUMP_MOUNT_REFUSED
    token_env = None
    agent_ident = task_id(name, "agent") if not network and role == "agent" else None
    if cause is None and config.get("gateway_secret_file") and agent_ident is not None:
        token_env = write_token_env(config, agent_ident)
        if token_env is None:
            cause = GATEWAY_TOKEN_FAILED
        else:
            unrevoke(config, agent_ident)
    record(
        config,
        "creations.jsonl",
        {
            "ts": time.time(),
            "subcommand": shape["subcommand"],
            "name": name,
            "role": role,
            "admitted": cause is None,
            "cause": cause,
        },
    )
    if cause is not None:
        ident = task_id(name, "eval") if not network else None
        if ident is not None:
            record(config, ident + ".eval_refused", cause + "\n", once=True)
        release_creation_lock(lock)
        return refuse(cause)
    if network:
        flags = ["--label", RUN_LABEL_KEY + "=" + config["run_label"], "--label", ROLE_LABEL_KEY + "=" + role]
    else:
        flags = creation_flags(config, role, name)
        if token_env is not None:
            flags += ["--env-file", token_env]
    return run_creation(config, argv[:at] + flags + argv[at:], lock)


def handle_exec(config, argv, shape):
    at = shape["at"]
    options, first = parse_options(argv[at:], EXEC_BOOL_LONG, EXEC_BOOL_SHORT)
    rest = argv[at + first :]
    container, command = (rest[0], rest[1:]) if rest else (None, [])
    ident = task_id(container, "agent")
    if ident is not None:
        task_dir = flag_value(command, "--task_dir")
        if task_dir is not None:
            record(config, ident + ".task", task_dir + "\n", once=True)
        if config.get("dumps_dir"):
            return handle_agent_exec(
                config, argv, at, ident, task_of(config, ident), flag_value(command, "--max_steps")
            )
        return run_real(config, argv)
    ident = task_id(container, "eval")
    if ident is not None and flag_value(command, "--phase") == "eval":
        if config.get("dumps_dir"):
            return handle_eval_exec(config, argv, at, ident, command)
        state = agent_state(config, ident)
        record(config, ident + ".eval_admission", {"ts": time.time(), "agent_container_state": state})
        return run_real(config, argv[:at] + ["-e", STATE_ENV + "=" + state] + argv[at:])
    return run_real(config, argv)


def main(argv):
    config = load_config(os.environ.get("COWORK_SHIM_CONFIG", ""))
    if config is None:
        return refuse(CONFIG_UNREADABLE, "docker command")
    shape = classify(argv)
    if shape["kind"] in ("create", "network_create"):
        return handle_creation(config, argv, shape)
    if shape["kind"] == "exec":
        try:
            return handle_exec(config, argv, shape)
        except Exception:  # evidence is best effort: the runner's exec must still run
            return run_real(config, argv)
    if shape["kind"] == "remove":
        try:
            return handle_remove(config, argv, shape)
        except Exception:  # a reading is best effort: the removal must still run
            return run_real(config, argv)
    return run_real(config, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
