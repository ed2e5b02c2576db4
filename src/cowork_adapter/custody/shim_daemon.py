"""The daemon's own readings of a task's containers: whether agent-<id> exists, and before `rm`/`stop`
destroys a container's cgroup, its stats (peak memory, CPU time) and state (the kernel's OOM kills).
Standard library only: HTTP over the daemon's socket (the shim has no Docker client library).
"""

import http.client
import json
import socket
import subprocess
import time

try:  # inside the package (tests, the host's readers); beside the installed shim, its siblings are top-level
    from .shim_argv import (
        RM_BOOL_LONG,
        RM_BOOL_SHORT,
        STOP_BOOL_LONG,
        STOP_BOOL_SHORT,
        parse_options,
        role_for_name,
        task_id,
    )
    from .shim_io import docker_env, record, run_real
    from .shim_words import ABSENT, AGENT_REMOVED_SUFFIX, PRESENT, UNKNOWN
except ImportError:
    from shim_argv import (  # type: ignore[no-redef,import-not-found]
        RM_BOOL_LONG,
        RM_BOOL_SHORT,
        STOP_BOOL_LONG,
        STOP_BOOL_SHORT,
        parse_options,
        role_for_name,
        task_id,
    )
    from shim_io import docker_env, record, run_real  # type: ignore[no-redef,import-not-found]
    from shim_words import ABSENT, AGENT_REMOVED_SUFFIX, PRESENT, UNKNOWN  # type: ignore[no-redef,import-not-found]


PROBE_TIMEOUT_SEC = 20
# One stats read per container before its removal: short, because the runner waits for it.
STATS_TIMEOUT_SEC = 5
# How a reading was taken (schemas.ledger and resources.py read these words).
STATS_METHOD = "daemon_stats_api"
MEASURED_ROLES = ("agent", "eval", "pg")
# The daemon's answers the shim reads (a container's stats or inspect): a few kilobytes, bounded all the same.
ANSWER_CAP = 1 << 20
ADDRESS_UNSUPPORTED = "daemon_address_unsupported"  # ssh:// and TLS daemons: no reading


def agent_state(config, ident):
    """Whether `agent-<ident>` exists: the name filter matches substrings, so compare exactly."""
    wanted = "agent-" + ident
    try:
        done = subprocess.run(
            [config["real_docker"], "ps", "-a", "--filter", "name=" + wanted, "--format", "{{.Names}}"],
            env=docker_env(config),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_SEC,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return UNKNOWN
    if done.returncode != 0:
        return UNKNOWN
    names = [line.strip().lstrip("/") for line in done.stdout.splitlines()]
    return PRESENT if wanted in names else ABSENT


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the daemon's unix socket (the standard library has no such connection)."""

    def __init__(self, path, timeout):
        http.client.HTTPConnection.__init__(self, "localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def daemon_connection(docker_host, timeout):
    """An HTTP connection to the daemon at `docker_host` (unix:// or plain tcp://), else None."""
    if docker_host.startswith("unix://"):
        return _UnixHTTPConnection(docker_host[len("unix://") :], timeout)
    if docker_host.startswith("tcp://"):
        hostport = docker_host[len("tcp://") :].split("/", 1)[0]
        host, _, port = hostport.rpartition(":")
        try:
            return http.client.HTTPConnection(host or hostport, int(port) if port else 2375, timeout=timeout)
        except ValueError:
            return None
    return None  # ssh:// and TLS daemons: no reading rather than a second client stack


def daemon_get_json(config, path, cap, timeout=STATS_TIMEOUT_SEC):
    """(HTTP status, the answer's JSON or None when it is not JSON, None) of one GET of `path` from the
    run's daemon, reading at most `cap` bytes of the answer; (None, None, failure) when no answer came:
    ADDRESS_UNSUPPORTED, or the type name of the error met. Never raises."""
    conn = daemon_connection(config["docker_host"], timeout)
    if conn is None:
        return None, None, ADDRESS_UNSUPPORTED
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        body = answer.read(cap)
        status = answer.status
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return None, None, type(exc).__name__
    finally:
        conn.close()
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        data = None
    return status, data, None


def parse_stats(data):
    """(peak memory bytes, cpu ns, memory usage bytes, cause) from one stats API answer.

    A value the daemon did not give is None with a cause, never 0: a stopped container's answer
    is all zeros (its cgroup is gone), and cgroup v2 daemons report usage but no peak.
    """
    if not isinstance(data, dict):
        return None, None, None, "stats_unreadable"
    if str(data.get("read", "")).startswith("0001-"):
        return None, None, None, "container_not_running"
    memory = data.get("memory_stats") if isinstance(data.get("memory_stats"), dict) else {}
    cpu = (data.get("cpu_stats") or {}).get("cpu_usage") if isinstance(data.get("cpu_stats"), dict) else None
    total = cpu.get("total_usage") if isinstance(cpu, dict) else None
    cpu_ns = total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else None
    usage = memory.get("usage")
    usage = usage if isinstance(usage, int) and not isinstance(usage, bool) and usage > 0 else None
    peak = memory.get("max_usage")
    peak = peak if isinstance(peak, int) and not isinstance(peak, bool) and peak > 0 else None
    cause = None
    if peak is None:
        cause = "daemon_reports_no_peak" if usage is not None else "no_memory_stats"
    elif cpu_ns is None:
        cause = "no_cpu_stats"
    return peak, cpu_ns, usage, cause


def read_stats(config, container, timeout=STATS_TIMEOUT_SEC):
    """One reading of `container` from the daemon: a dict for <id>.resources.jsonl. Never raises."""
    reading = {
        "ts": time.time(),
        "container": container,
        "method": STATS_METHOD,
        "memory_peak_bytes": None,
        "cpu_ns": None,
        "memory_usage_bytes": None,
        "cause": None,
    }
    path = f"/containers/{container}/stats?stream=false&one-shot=true"
    status, data, failure = daemon_get_json(config, path, ANSWER_CAP, timeout)
    if failure is not None:
        reading["cause"] = failure if failure == ADDRESS_UNSUPPORTED else "stats_read_failed:" + failure
        return reading
    if status != 200:
        reading["cause"] = "container_absent" if status == 404 else f"stats_http_{status}"
        return reading
    peak, cpu_ns, usage, cause = parse_stats(data)
    reading.update(memory_peak_bytes=peak, cpu_ns=cpu_ns, memory_usage_bytes=usage, cause=cause)
    return reading


def cgroup_oom_kills(pid, container_id):
    """How many processes the kernel's OOM killer ended in the memory cgroup of `pid` (the container's
    main process, on a local daemon), or None. The daemon's own State.OOMKilled covers only the main
    process, and the agent phase runs in an exec. Read from /proc/<pid>/cgroup (checked to name the
    container's id, so a reused pid is never read) and the cgroup's memory.oom_control (v1) or
    memory.events (v2): kernel files no container can write."""
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as handle:
            lines = handle.read(1 << 16).decode("ascii", "replace").splitlines()
    except (OSError, ValueError, TypeError):
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3 or container_id not in parts[2] or ".." in parts[2]:
            continue
        if "memory" in parts[1].split(","):
            path = "/sys/fs/cgroup/memory" + parts[2] + "/memory.oom_control"
        elif parts[0] == "0" and parts[1] == "":
            path = "/sys/fs/cgroup" + parts[2] + "/memory.events"
        else:
            continue
        try:
            with open(path, "rb") as handle:
                fields = dict(x.split(None, 1) for x in handle.read(1 << 12).decode("ascii").splitlines() if " " in x)
            return int(fields["oom_kill"])
        except (OSError, ValueError, KeyError):
            continue
    return None


def read_state(config, container, timeout=STATS_TIMEOUT_SEC):
    """{"oom_killed", "oom_kills", "state_exit_code", "state_cause"} of `container`, read before its
    removal (the daemon forgets a removed container): the daemon's inspect and, on a local daemon,
    the kernel's OOM-kill count of its memory cgroup. None values with a cause when the daemon gave
    no answer; never raises."""
    out = {"oom_killed": None, "oom_kills": None, "state_exit_code": None, "state_cause": None}
    status, data, failure = daemon_get_json(config, f"/containers/{container}/json", ANSWER_CAP, timeout)
    if failure is not None:
        out["state_cause"] = failure if failure == ADDRESS_UNSUPPORTED else "inspect_failed:" + failure
        return out
    if status != 200:
        out["state_cause"] = "container_absent" if status == 404 else f"inspect_http_{status}"
        return out
    if not isinstance(data, dict):
        data = {}
    state = data.get("State")
    if not isinstance(state, dict) or not isinstance(state.get("OOMKilled"), bool):
        out["state_cause"] = "state_unreadable"
        return out
    code = state.get("ExitCode")
    pid, ident = state.get("Pid"), data.get("Id")
    kills = None
    if (
        config["docker_host"].startswith("unix://")
        and isinstance(pid, int)
        and pid > 0
        and isinstance(ident, str)
        and len(ident) >= 12
    ):
        kills = cgroup_oom_kills(pid, ident)
    out.update(
        oom_killed=state["OOMKilled"] or bool(kills),
        oom_kills=kills,
        state_exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
    )
    return out


def handle_remove(config, argv, shape):
    """Read each task container's accounting before `rm`/`stop` destroys it, then run the command."""
    at = shape["at"]
    removing = shape["subcommand"].endswith("rm")
    if removing:
        _, first = parse_options(argv[at:], RM_BOOL_LONG, RM_BOOL_SHORT)
    else:
        _, first = parse_options(argv[at:], STOP_BOOL_LONG, STOP_BOOL_SHORT)
    for container in argv[at + first :]:
        role = role_for_name(container)
        ident = task_id(container, role) if role in MEASURED_ROLES else None
        if ident is None:
            continue
        if role == "agent" and removing and config.get("gateway_secret_file"):
            # The task's gateway token dies with its container: the gateway refuses a token whose
            # task has this marker (gateway.REVOKED_SUFFIX). Written first: the removal decided it.
            record(config, ident + AGENT_REMOVED_SUFFIX, f"{time.time():f}\n", once=True)
        reading = read_stats(config, container)
        reading.update(role=role, command=shape["subcommand"])
        if role == "agent":  # whether the kernel OOM-killed in it: a host fact for the infra rule
            reading.update(read_state(config, container))
        record(config, ident + ".resources.jsonl", reading)
    return run_real(config, argv)
