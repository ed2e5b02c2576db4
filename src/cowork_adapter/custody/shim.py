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
  runner does not kill a request the daemon would finish anyway, unseen. Cleanup waits for every such lock before its proof (custody/creations.py): a stop
  never proves a run empty while a creation it admitted is still landing. No lock, no creation:
  a lock that cannot be taken refuses it (fail closed).
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
"""

import fcntl
import hashlib
import hmac
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

EXIT_REFUSED = 75  # EX_TEMPFAIL; the value of vocab.ExitCode.SHIM_REFUSED
EXIT_CANNOT_EXECUTE = 126

RUN_LABEL_KEY = "org.cowork-adapter.run"
ROLE_LABEL_KEY = "org.cowork-adapter.role"
CUSTODY_LABEL_PREFIX = "org.cowork-adapter."
ROLES_BY_PREFIX = {"agent": "agent", "eval": "eval", "pg": "pg", "helper": "helper"}
ROLE_NETWORK = "network"
ROLE_OTHER = "other"
STATE_ENV = "COWORK_AGENT_CONTAINER_STATE"
RUN_MARKER_ENV = "COWORK_RUN_LABEL"  # watchdog.RUN_MARKER_ENV: the run's processes carry it

# Refusal causes: the values of vocab.ShimRefusal (this file cannot import the package).
ADMISSION_STOPPED = "admission_stopped"
DISK_PROBE_FAILED = "disk_probe_failed"
DISK_RESERVE_REACHED = "disk_reserve_reached"
CONFIG_UNREADABLE = "config_unreadable"
FLAG_CONFLICT = "flag_conflict"
HOST_OVERRIDE = "host_override"
LAUNCHER_DEAD = "launcher_dead"
GATEWAY_TOKEN_FAILED = "gateway_token_failed"
CREATION_LOCK_FAILED = "creation_lock_failed"
DUMP_MOUNT_REFUSED = "dump_mount_refused"
TASK_UNKNOWN = "task_unknown"
STAGING_MOUNT_REFUSED = "staging_mount_refused"

# Container states: the values of vocab.ContainerState.
ABSENT, PRESENT, UNKNOWN = "absent", "present", "unknown"

CONFIG_KEYS = (
    "real_docker",
    "docker_host",
    "run_label",
    "limits",
    "stop_file",
    "resource_root",
    "min_free_bytes",
    "evidence_dir",
    "agent_env_file",
)
LIMIT_KEYS = ("cpus", "memory_bytes", "memory_swap_bytes", "pids_limit")
PROBE_TIMEOUT_SEC = 20
# One stats read per container before its removal: short, because the runner waits for it.
STATS_TIMEOUT_SEC = 5
# How a reading was taken (schemas.ledger and resources.py read these words).
STATS_METHOD = "daemon_stats_api"
MEASURED_ROLES = ("agent", "eval", "pg")
RM_BOOL_LONG = frozenset({"--force", "--volumes", "--link", "--help"})
RM_BOOL_SHORT = frozenset("fvl")
STOP_BOOL_LONG = frozenset({"--help"})
STOP_BOOL_SHORT: frozenset[str] = frozenset()

# docker's global options that take a value, and those that pick the daemon.
GLOBAL_VALUE_OPTIONS = frozenset(
    {"--config", "-c", "--context", "-H", "--host", "-l", "--log-level", "--tlscacert", "--tlscert", "--tlskey"}
)
DAEMON_OPTIONS = frozenset({"-H", "--host", "-c", "--context"})

# Boolean options per subcommand; every other option takes a value (pflag semantics).
RUN_BOOL_LONG = frozenset(
    {
        "--detach",
        "--interactive",
        "--tty",
        "--rm",
        "--init",
        "--privileged",
        "--publish-all",
        "--read-only",
        "--no-healthcheck",
        "--oom-kill-disable",
        "--sig-proxy",
        "--disable-content-trust",
        "--quiet",
        "--help",
        "--use-api-socket",
    }
)
RUN_BOOL_SHORT = frozenset("ditPq")
EXEC_BOOL_LONG = frozenset({"--detach", "--interactive", "--tty", "--privileged", "--help"})
EXEC_BOOL_SHORT = frozenset("dit")
NETWORK_BOOL_LONG = frozenset({"--attachable", "--ingress", "--internal", "--ipv6", "--config-only", "--help"})
NETWORK_BOOL_SHORT: frozenset[str] = frozenset()

# Options a creation may not carry: the shim sets them and docker keeps the last occurrence.
CONFLICTING_OPTIONS = frozenset(
    {
        "--cpus",
        "--memory",
        "-m",
        "--memory-swap",
        "--pids-limit",
        "--pull",
        "--label-file",
        # issue 37: the log bound and the capability set (--privileged would give back every capability)
        "--log-driver",
        "--log-opt",
        "--cap-add",
        "--privileged",
    }
)
# The gateway token (see cowork_adapter.gateway.server: same prefix, context and message layout).
TOKEN_PREFIX = "cwg1"
TOKEN_CONTEXT = b"cowork-gateway-token\0"
KEY_ENV_IN_AGENT = "COWORK_PROVIDER_KEY"
AGENT_REMOVED_SUFFIX = ".agent_removed"  # gateway.REVOKED_SUFFIX: this task's token is dead
# gateway/tls.py BUNDLE_IN_CONTAINER and CA_ENV_NAMES (this file cannot import the package).
PROVIDER_BUNDLE_TARGET = "/etc/cowork-adapter/provider-ca-bundle.pem"
PROVIDER_CA_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")

# Per-task dumps and the seal (issue 27). The eval phase reads these variables (container/evalphase.py).
DUMPS_TARGET = "/workspace/dumps"
DUMP_PREFIX = "SingleUserTurn-"
ENTRY_ENV = "COWORK_EVAL_ENTRY"  # first | repeat: whether an eval exec of this task came before
SUMMARY_SHA_ENV = "COWORK_AGENT_SUMMARY_SHA256"  # the adapter summary as the agent exec left it
BOUND_ENV = "COWORK_EVAL_BOUND_SEC"  # the eval phase's own bound; the shim's is a margin above it
BOUND_MARGIN_SEC = 60.0
# The agent exec as the host saw it (issue 36): the eval phase writes traj_log.json's launch_time and
# times from these (container/gradinglog.py STARTED_ENV ...), never from the agent's own file.
AGENT_STARTED_ENV = "COWORK_AGENT_STARTED_AT"
AGENT_ENDED_ENV = "COWORK_AGENT_ENDED_AT"
AGENT_MAX_STEPS_ENV = "COWORK_AGENT_MAX_STEPS"
AGENT_WINDOW_SUFFIX = ".agent_window.json"
KILL_GRACE_SEC = 5.0
SEAL_SCHEMA = "cowork_adapter.eval_seal.v1"
SEAL_SUFFIX = ".seal.json"
SEAL_HEAD_SUFFIX = ".seal-head.json"
HELD_SUMMARY_SUFFIX = ".agent_summary.json"
AGENT_EXEC_SUFFIX = ".agent_exec"  # one line per agent exec end: its exit code as the shim saw it
END_STRAYS_ENV = "COWORK_END_STRAYS"  # container/procs.py: the agent phase kills what the agent left running
HELD_SUMMARY_CAP = 1024 * 1024
CLAIM_NAME = "ouroboros_eval_claim.json"  # container/protocol.py names; this file cannot import it
RECEIPT_PREFIX = "ouroboros_eval_receipt-"
EVAL_RES_NAME = "eval_res.json"
SUMMARY_NAME = "ouroboros_summary.json"
OFFICIAL_NAMES = (CLAIM_NAME, EVAL_RES_NAME)


# ---------------------------------------------------------------- pure argv logic


def parse_options(args, bool_long, bool_short):
    """Split leading options from positionals: ([(name, value or None)], index of first positional)."""
    options = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return options, i + 1
        if not arg.startswith("-") or arg == "-":
            break
        if arg.startswith("--"):
            if "=" in arg:
                name, value = arg.split("=", 1)
                options.append((name, value))
                i += 1
            elif arg in bool_long:
                options.append((arg, None))
                i += 1
            else:
                options.append((arg, args[i + 1] if i + 1 < len(args) else None))
                i += 2
            continue
        cluster = arg[1:]
        i += 1
        for j, letter in enumerate(cluster):
            if letter in bool_short:
                options.append(("-" + letter, None))
                continue
            attached = cluster[j + 1 :]
            if attached:
                options.append(("-" + letter, attached[1:] if attached.startswith("=") else attached))
            else:
                options.append(("-" + letter, args[i] if i < len(args) else None))
                i += 1
            break
    return options, i


def option_value(options, *names):
    """The last value given to any of `names` (docker keeps the last), or None."""
    found = None
    for name, value in options:
        if name in names:
            found = value
    return found


def flag_value(args, flag):
    """The value of `flag` in a command's own arguments (`--flag v` or `--flag=v`), or None."""
    found = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg[len(flag) + 1 :]
    return found


def role_for_name(name):
    """agent-/eval-/pg-/helper- name prefixes are roles; anything else (or no name) is other."""
    if not name or "-" not in name:
        return ROLE_OTHER
    return ROLES_BY_PREFIX.get(name.split("-", 1)[0], ROLE_OTHER)


def task_id(name, prefix):
    """The runner's task id in `<prefix>-<id>`, when it is safe as a file name; else None."""
    if not name or not name.startswith(prefix + "-"):
        return None
    ident = name[len(prefix) + 1 :]
    return ident if SAFE_ID.match(ident) else None


def classify(argv):
    """What the command is: a dict with kind (create/network_create/exec/other) and positions.

    `at` is the index in argv right after the subcommand word (where flags are inserted).
    """
    globals_, i = [], 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        arg = argv[i]
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg
        globals_.append(name)
        i += 2 if (name in GLOBAL_VALUE_OPTIONS and "=" not in arg) else 1
    words = argv[i : i + 2]
    host_override = any(name in DAEMON_OPTIONS for name in globals_)
    kind, at = "other", None
    if words[:1] in (["run"], ["create"]):
        kind, at, sub = "create", i + 1, words[0]
    elif words in (["container", "run"], ["container", "create"]):
        kind, at, sub = "create", i + 2, " ".join(words)
    elif words == ["network", "create"]:
        kind, at, sub = "network_create", i + 2, "network create"
    elif words[:1] == ["exec"]:
        kind, at, sub = "exec", i + 1, "exec"
    elif words == ["container", "exec"]:
        kind, at, sub = "exec", i + 2, "container exec"
    elif words[:1] in (["rm"], ["stop"]):
        kind, at, sub = "remove", i + 1, words[0]
    elif words in (["container", "rm"], ["container", "stop"]):
        kind, at, sub = "remove", i + 2, " ".join(words)
    else:
        sub = None
    return {"kind": kind, "at": at, "subcommand": sub, "host_override": host_override}


def has_conflict(options):
    """True when the caller set a limit, the pull policy, a label file or a custody label."""
    for name, value in options:
        if name in CONFLICTING_OPTIONS:
            return True
        if name in ("--label", "-l") and (value or "").startswith(CUSTODY_LABEL_PREFIX):
            return True
    return False


def creation_flags(config, role, name):
    """The flags the shim inserts into a container creation."""
    limits = config["limits"]
    flags = [
        "--label",
        RUN_LABEL_KEY + "=" + config["run_label"],
        "--label",
        ROLE_LABEL_KEY + "=" + role,
        "--cpus",
        format_cpus(limits["cpus"]),
        "--memory",
        str(int(limits["memory_bytes"])),
        "--memory-swap",
        str(int(limits["memory_swap_bytes"])),
        "--pids-limit",
        str(int(limits["pids_limit"])),
        "--pull=never",
    ]
    flags += hardening_flags(config, role)
    agent = role == "agent" and bool(name) and name.startswith("agent-")
    if config.get("agent_env_file") and agent:
        flags += ["--env-file", config["agent_env_file"]]
    if config.get("provider_address") and agent:
        flags += provider_flags(config)
    if role == "eval" and bool(name) and name.startswith("eval-"):
        for volume in config.get("eval_mounts") or []:  # the pinned evaluator code, read-only
            flags += ["--volume", volume]
    return flags


def hardening_flags(config, role):
    """Issue 37: a bounded log for every container, and the capabilities its role does not need
    dropped (container_caps.py); nothing for a config from before these bounds."""
    caps = _load_sibling("container_caps")
    if caps is None:
        return []
    return caps.log_flags(config) + caps.cap_flags(config, role)


def provider_flags(config):
    """The provider's host resolves to the gateway, whose certificate the run CA signed: trusted here."""
    source = "source=" + config["provider_ca_bundle"]
    if "," in source or '"' in source:  # --mount is one CSV record: a field holding a comma is quoted
        source = '"' + source.replace('"', '""') + '"'
    flags = ["--add-host", config["provider_host"] + ":" + config["provider_address"]]
    for target in [PROVIDER_BUNDLE_TARGET, *(config.get("provider_ca_targets") or [])]:
        flags += ["--mount", "type=bind," + source + ",target=" + target + ",readonly"]
    for name in PROVIDER_CA_ENV:
        flags += ["-e", name + "=" + PROVIDER_BUNDLE_TARGET]
    return flags


def gateway_token(secret, run_label, task):
    """The task's token for the run's gateway: it names the task, and only the gateway can check it."""
    mac = hmac.new(secret, TOKEN_CONTEXT + run_label.encode() + b"\0" + task.encode(), hashlib.sha256).hexdigest()
    return TOKEN_PREFIX + "." + task + "." + mac


def write_token_env(config, task):
    """The per-task env file with the task's gateway token (0600, next to the secret, never mounted).

    Returns its path, or None when it cannot be made (the creation is then refused: fail closed)."""
    secret_file = config["gateway_secret_file"]
    try:
        with open(secret_file, encoding="ascii") as handle:
            secret = bytes.fromhex(handle.read().strip())
        if len(secret) < 16:
            return None
        path = os.path.join(os.path.dirname(secret_file), "agent-" + task + ".env")
        data = (KEY_ENV_IN_AGENT + "=" + gateway_token(secret, config["run_label"], task) + "\n").encode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return path
    except (OSError, ValueError, TypeError):
        return None


def unrevoke(config, task):
    """A new agent-<task> holds the task's token again: a revocation left by an earlier `rm` of that
    name (a runner that clears a name before it creates it) is set aside, kept under a dated name."""
    path = evidence_path(config, task + AGENT_REMOVED_SUFFIX)
    if path is None:
        return
    try:
        os.rename(path, f"{path}.before-{time.time_ns()}")
    except OSError:
        pass


def format_cpus(cpus):
    """`2` rather than `2.0`; docker accepts both, humans read the first."""
    value = float(cpus)
    return str(int(value)) if value.is_integer() else repr(value)


# ---------------------------------------------------------------- I/O at the edges


def load_config(path):
    """The run config, or None when it is missing, unreadable or incomplete (fail closed)."""
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(config, dict) or any(key not in config for key in CONFIG_KEYS):
        return None
    limits = config.get("limits")
    if not isinstance(limits, dict) or any(key not in limits for key in LIMIT_KEYS):
        return None
    if not config["real_docker"] or not config["docker_host"] or not config["run_label"]:
        return None
    try:  # numbers must be numbers: a malformed limit must not become a traceback mid-creation
        float(limits["cpus"])
        for key in ("memory_bytes", "memory_swap_bytes", "pids_limit"):
            int(limits[key])
        int(config["min_free_bytes"])
    except (TypeError, ValueError):
        return None
    return config


def free_bytes(path):
    """Free bytes available to unprivileged users on the file system of `path` (statvfs)."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


# host/disk.py's MIN_FREE_INODE_FRACTION (this program imports nothing of the package).
MIN_FREE_INODE_FRACTION = 0.05


def inodes_short(path):
    """True when the file system of `path` has fewer inodes available (f_favail) than its inode
    reserve (host/disk.py: a dump of empty files takes inodes, not bytes); False without a table."""
    stats = os.statvfs(path)
    return stats.f_files > 0 and stats.f_favail < stats.f_files * MIN_FREE_INODE_FRACTION


def launcher_alive(pid, ticks):
    """Whether `pid` is still the launcher that started at clock tick `ticks` and has not exited.

    The same reading as container/procs.process_alive (this file cannot import the package):
    field 22 of /proc/<pid>/stat is the start time, field 3 the state; a zombie runs no code.
    Anything unreadable is dead (fail closed).
    """
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as handle:
            stat = handle.read().decode("utf-8", "replace")
    except (OSError, TypeError, ValueError):
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] in ("Z", "X", "x"):
        return False
    return ticks is None or fields[19] == str(ticks)


def admission_cause(config):
    """Why a creation may not proceed now (dead launcher, stop file, disk), or None to admit it."""
    # Checked first and on every creation: this holds even when the watchdog itself was killed.
    if config.get("launcher_pid") is not None and not launcher_alive(
        config["launcher_pid"], config.get("launcher_start_ticks")
    ):
        return LAUNCHER_DEAD
    if os.path.lexists(config["stop_file"]):
        return ADMISSION_STOPPED
    try:
        free = free_bytes(config["resource_root"])
        inodes_out = inodes_short(config["resource_root"])
    except (OSError, TypeError, ValueError):
        return DISK_PROBE_FAILED
    if free < int(config["min_free_bytes"]) or inodes_out:
        return DISK_RESERVE_REACHED
    return None


def write_once(path, text):
    """Create `path` with `text` unless it exists (the first cause is kept). Never raises."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return
    try:
        os.write(fd, text.encode("utf-8"))
    except OSError:
        pass
    finally:
        os.close(fd)


def append_line(path, record):
    """Append one JSON line (a single write of a short line, so lines never interleave). Never raises."""
    try:
        data = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except (OSError, TypeError, ValueError):
        return
    try:
        os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)


def evidence_path(config, file_name):
    directory = config.get("evidence_dir")
    return os.path.join(directory, file_name) if directory else None


def record(config, file_name, record_or_text, once=False):
    path = evidence_path(config, file_name)
    if path is None:
        return
    if once:
        write_once(path, record_or_text)
    else:
        append_line(path, record_or_text)


def docker_env(config):
    """The environment for the real docker: the run's daemon, no context that could override it."""
    env = dict(os.environ)
    env.pop("DOCKER_CONTEXT", None)
    env["DOCKER_HOST"] = config["docker_host"]
    return env


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
    conn = daemon_connection(config["docker_host"], timeout)
    if conn is None:
        reading["cause"] = "daemon_address_unsupported"
        return reading
    try:
        conn.request("GET", f"/containers/{container}/stats?stream=false&one-shot=true")
        answer = conn.getresponse()
        body = answer.read()
        status = answer.status
    except (OSError, http.client.HTTPException, ValueError) as exc:
        reading["cause"] = "stats_read_failed:" + type(exc).__name__
        return reading
    finally:
        conn.close()
    if status != 200:
        reading["cause"] = "container_absent" if status == 404 else f"stats_http_{status}"
        return reading
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        data = None
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
    conn = daemon_connection(config["docker_host"], timeout)
    if conn is None:
        out["state_cause"] = "daemon_address_unsupported"
        return out
    try:
        conn.request("GET", f"/containers/{container}/json")
        answer = conn.getresponse()
        body = answer.read(1 << 20)
        status = answer.status
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out["state_cause"] = "inspect_failed:" + type(exc).__name__
        return out
    finally:
        conn.close()
    if status != 200:
        out["state_cause"] = "container_absent" if status == 404 else f"inspect_http_{status}"
        return out
    try:
        data = json.loads(body.decode("utf-8"))
        state = data.get("State")
    except (UnicodeDecodeError, ValueError, AttributeError):
        data, state = {}, None
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


def refuse(cause, what="container creation"):
    """One line on stderr naming the cause (never the argv), and exit 75."""
    sys.stderr.write("docker shim: " + what + " refused: " + cause + "\n")
    sys.stderr.flush()
    return EXIT_REFUSED


def run_real(config, argv):
    """Replace this process with the real docker (exact argv tail, output and exit code)."""
    try:
        os.execve(config["real_docker"], [config["real_docker"]] + argv, docker_env(config))
    except OSError:
        sys.stderr.write("docker shim: cannot execute the real docker\n")
        return EXIT_CANNOT_EXECUTE


def hold_creation_lock(config):
    """(fd, path) of a fresh lock file under creations_dir, flocked by this process; None when the
    config names no creations_dir (a config from before in-flight tracking); False when the lock
    cannot be made. Blocking: a cleanup that opened the file first holds it only while it unlinks
    it, and by then the run is fenced, so the admission check that follows refuses."""
    directory = config.get("creations_dir")
    if not directory:
        return None
    path = os.path.join(directory, f"{os.getpid()}-{os.urandom(6).hex()}.lock")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        release_creation_lock((None, path))
        return False
    return fd, path


def release_creation_lock(lock):
    if not lock:
        return
    fd, path = lock
    try:
        os.unlink(path)
    except OSError:
        pass
    if fd is not None:
        os.close(fd)


FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run_creation(config, argv, lock):
    """Run the real docker for an admitted creation in a process group of its own, holding `lock`
    until it ends; its exit code as a shell reports it.

    The docker is neither in the runner's group nor marked as the run's (RUN_MARKER_ENV removed),
    so neither the supervisor's stop of the runner group nor the watchdog's sweep of marked
    processes cuts the request short: it keeps the inherited lock until the daemon has answered,
    and the cleanup then sees what it made. This shim may die meanwhile; the lock does not."""
    if not lock:
        return run_real(config, argv)
    fd, _ = lock
    env = docker_env(config)
    env.pop(RUN_MARKER_ENV, None)
    # A signal sent to this process itself (a `timeout` around the docker command) is the
    # caller's to the docker it runs, as it was when the shim replaced itself by docker. The
    # handlers are set before the docker starts, so a signal in between is not the shim's death
    # (the caller would see -15, not 143): it is kept and forwarded once the docker runs.
    child = None
    early = []

    def forward(sig, _frame):
        if child is None:
            early.append(sig)
        else:
            child.send_signal(sig)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    try:
        child = subprocess.Popen([config["real_docker"]] + argv, env=env, pass_fds=(fd,), process_group=0)
    except OSError:
        release_creation_lock(lock)
        sys.stderr.write("docker shim: cannot execute the real docker\n")
        return EXIT_CANNOT_EXECUTE
    for sig in early:
        child.send_signal(sig)
    code = child.wait()
    release_creation_lock(lock)
    return 128 - code if code < 0 else code


# ---------------------------------------------------------------- per-task dumps (pure)


def task_of(config, ident):
    """The task a runner id names: the runner's id is `<pid>-<first 8 hex of md5(task + newline)>`.

    None when the run has no task list (a config from before per-task dumps) or none matches."""
    tasks = config.get("task_names")
    if not tasks or not ident or "-" not in ident:
        return None
    digest = ident.rsplit("-", 1)[1]
    for task in tasks:
        if hashlib.md5((task + "\n").encode("utf-8")).hexdigest()[:8] == digest:
            return task
    return None


def task_dump_rel(config, task):
    """`<short_>/SingleUserTurn-<task>`: the task's dump below the dumps folder, as TaskConfig places it."""
    return config["dump_short"].replace("/", "_") + "/" + DUMP_PREFIX + task


def _volume_parts(spec):
    """(source, target, rest) of a `-v` value `src:dst[:opts]`, or None for an anonymous volume."""
    parts = spec.split(":")
    if len(parts) < 2:
        return None
    return parts[0], parts[1], parts[2:]


def _touches_dumps(config, path):
    """Whether a mount source is the dumps folder or inside it (compared as real paths: the runner
    spells it `$(pwd)/dumps`, which bash gives as the physical path)."""
    if not path:
        return False
    base = os.path.realpath(config["dumps_dir"])
    path = os.path.realpath(path)
    return path == base or path.startswith(base + "/")


def rewrite_dump_mounts(config, args, role, task):
    """(args with the dumps mount narrowed to the task's own dump, refusal cause or None).

    `args` are the creation's own options and positionals (after the subcommand). The runner mounts
    the whole dumps folder read-write into every agent and eval container; here an agent or eval
    container of a known task gets only `<dumps>/<short_>/SingleUserTurn-<task>` at the same path
    inside, so no container can read or write another task's dump. Any other mount of the dumps
    folder or of /workspace/dumps, a `--mount` or `--volumes-from` touching them, is refused."""
    options, first = parse_options(args, RUN_BOOL_LONG, RUN_BOOL_SHORT)
    out = list(args)
    i = 0
    while i < first:
        arg = args[i]
        name, attached = (arg.split("=", 1) + [None])[:2] if arg.startswith("--") else (arg, None)
        if name in ("-v", "--volume", "--mount", "--volumes-from"):
            value_at = i if attached is not None else i + 1
            value = attached if attached is not None else (args[i + 1] if i + 1 < len(args) else "")
            if name == "--volumes-from":
                return args, DUMP_MOUNT_REFUSED
            staging = _load_sibling("staging_mount") if config.get("staging_root") else None
            if name == "--mount":
                if DUMPS_TARGET in value or config["dumps_dir"] in value:
                    return args, DUMP_MOUNT_REFUSED
                if staging is not None and staging.mount_touches(value, config["staging_root"]):
                    return args, STAGING_MOUNT_REFUSED
            else:
                if staging is not None:  # issue 37: the runner's staging copy, narrowed to the task
                    value, refused = staging.narrowed(value, config["staging_root"], task)
                    if refused:
                        return args, STAGING_MOUNT_REFUSED
                    out[value_at] = ("--volume=" + value) if attached is not None else value
                parts = _volume_parts(value)
                if parts is not None:
                    source, target, rest = parts
                    to_dumps = target.rstrip("/") == DUMPS_TARGET or target.startswith(DUMPS_TARGET + "/")
                    if to_dumps or _touches_dumps(config, source):
                        exact = target.rstrip("/") == DUMPS_TARGET and os.path.realpath(source) == os.path.realpath(
                            config["dumps_dir"]
                        )
                        if not exact or role not in ("agent", "eval") or task is None:
                            return args, DUMP_MOUNT_REFUSED
                        rel = task_dump_rel(config, task)
                        narrowed = ":".join(
                            [config["dumps_dir"].rstrip("/") + "/" + rel, DUMPS_TARGET + "/" + rel] + rest
                        )
                        out[value_at] = ("--volume=" + narrowed) if attached is not None else narrowed
            i = value_at + 1
            continue
        i += 1
    # Checked again on the parsed result (clusters such as `-dv SRC:DST` included): every mount
    # left that touches the dumps must be the task's own, or the creation is refused.
    parsed, _ = parse_options(out, RUN_BOOL_LONG, RUN_BOOL_SHORT)
    own = None if task is None else task_dump_rel(config, task)
    for name, value in parsed:
        if name in ("-v", "--volume") and value:
            parts = _volume_parts(value)
            if parts is None:
                continue
            source, target, _ = parts
            if (target.startswith(DUMPS_TARGET) or _touches_dumps(config, source)) and (
                own is None or target.rstrip("/") != DUMPS_TARGET + "/" + own
            ):
                return args, DUMP_MOUNT_REFUSED
    return out, None


def make_task_dump(config, task):
    """Create the task's dump folder on the host (the mount's source) without following a link.

    Every folder above it is the host's own (never mounted), so plain makedirs is enough; a
    non-directory there refuses the creation."""
    path = os.path.join(config["dumps_dir"], task_dump_rel(config, task))
    try:
        os.makedirs(path, mode=0o755, exist_ok=True)
        return not os.path.islink(path) and os.path.isdir(path)
    except OSError:
        return False


# ---------------------------------------------------------------- the seal of the official verdict


def _load_safefile():
    """container/safefile.py, copied beside this program (install_custody); None if it is missing."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        import safefile  # type: ignore[import-not-found]  # noqa: PLC0415 - a sibling copy, found only once sys.path holds this folder
    except ImportError:
        return None
    return safefile


def _load_sibling(name):
    """A module copied beside this program (install_custody: agent_exec, container_caps); None if missing."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        return __import__(name)
    except ImportError:
        return None


def file_seal(safefile, path, below):
    """{kind, bytes, sha256} of one dump file as the host reads it: no link, no FIFO, capped."""
    got = safefile.read_bytes(path, cap=safefile.RECORD_CAP, below=below)
    return {
        "kind": got.kind,
        "bytes": got.size,
        "sha256": hashlib.sha256(got.data).hexdigest() if got.ok else None,
    }, got


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


def read_seal_inputs(safefile, task_root, below):
    """What the host seals after an eval exec: the claim, its receipt, eval_res.json, the verdict."""
    claim_facts, claim = file_seal(safefile, os.path.join(task_root, CLAIM_NAME), below)
    attempt, evidence = None, {}
    try:
        value = safefile.loads(claim.data) if claim.ok else None  # nesting bounded before parsing
    except (UnicodeDecodeError, ValueError):
        value = None
    if isinstance(value, dict) and isinstance(value.get("attempt_id"), str) and SAFE_ID.match(value["attempt_id"]):
        attempt = value["attempt_id"]
        evidence = value.get("evidence") if isinstance(value.get("evidence"), dict) else {}
    receipt_facts, verdict = None, None
    if attempt is not None:
        receipt_facts, receipt = file_seal(safefile, os.path.join(task_root, RECEIPT_PREFIX + attempt + ".json"), below)
        try:
            rec = safefile.loads(receipt.data) if receipt.ok else None
        except (UnicodeDecodeError, ValueError):
            rec = None
        if isinstance(rec, dict) and rec.get("attempt_id") == attempt:
            returned = rec.get("returned")
            verdict = {
                "official_run": rec.get("official_run") is True,
                "raised": rec.get("raised"),
                "cause": str(rec.get("cause"))[:200],
                "pass": returned.get("pass")
                if isinstance(returned, dict) and isinstance(returned.get("pass"), bool)
                else None,
            }
    eval_facts, _ = file_seal(safefile, os.path.join(task_root, EVAL_RES_NAME), below)
    grading = evidence.get("grading_inputs_differ")
    rewritten = evidence.get("grading_log_rewritten")
    planted = evidence.get("planted_before_eval")
    return {
        "attempt_id": attempt,
        "claim": claim_facts,
        "receipt": receipt_facts,
        "eval_res": eval_facts,
        "verdict": verdict,
        "grading_inputs_differ": [str(x)[:100] for x in grading][:20] if isinstance(grading, list) else [],
        "grading_log_rewritten": [str(x)[:100] for x in rewritten][:40] if isinstance(rewritten, list) else [],
        "planted_moved": [str(x)[:200] for x in planted][:50] if isinstance(planted, list) else [],
    }


def run_child(config, argv, env_extra, bound):
    """Run the real docker with `argv` as this shim's child (same process group, so a stop of the
    runner's group reaches it too); SIGTERM/SIGINT/SIGHUP sent to the shim alone are passed on.
    Returns (exit code as a shell reports it, hung): past `bound` seconds the child gets SIGTERM,
    then SIGKILL after a grace, and `hung` is True."""
    env = docker_env(config)
    env.update(env_extra)
    try:
        child = subprocess.Popen([config["real_docker"]] + argv, env=env)
    except OSError:
        sys.stderr.write("docker shim: cannot execute the real docker\n")
        return EXIT_CANNOT_EXECUTE, False
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, lambda sig, _frame: child.send_signal(sig))
    hung = False
    try:
        code = child.wait(timeout=bound)
    except subprocess.TimeoutExpired:
        hung = True
        child.terminate()
        try:
            code = child.wait(timeout=KILL_GRACE_SEC)
        except subprocess.TimeoutExpired:
            child.kill()
            code = child.wait()
    return (128 - code if code < 0 else code), hung


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
    bounds = _load_sibling("agent_exec") if config.get("agent_bound_sec") else None
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
        safefile = _load_safefile()
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
    safefile = _load_safefile()
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


TASKDB_ACK_ENV = "COWORK_TASKDB_ACK"  # taskdb_probe.ACK_ENV: the agent phase waits for the baseline


def _load_taskdb():
    """custody/taskdb_probe.py, copied beside this program (install_custody); None if it is missing."""
    if _load_safefile() is None:  # puts this folder on sys.path
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
