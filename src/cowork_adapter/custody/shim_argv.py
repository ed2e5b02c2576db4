"""The shim's pure reading of a docker command line: which subcommand it is, its options (docker's
pflag rules: boolean options take no value, every other one does), the containers' roles and task ids.
Standard library only; nothing here touches a file or a process.
"""

try:  # inside the package (tests, the host's readers); beside the installed shim, its siblings are top-level
    from ..runroot.custody_evidence import SAFE_ID
    from .shim_words import CUSTODY_LABEL_PREFIX, ROLE_OTHER, ROLES_BY_PREFIX
except ImportError:
    from custody_evidence import SAFE_ID  # type: ignore[no-redef,import-not-found]
    from shim_words import CUSTODY_LABEL_PREFIX, ROLE_OTHER, ROLES_BY_PREFIX  # type: ignore[no-redef,import-not-found]


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
