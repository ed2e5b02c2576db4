"""Per-task dumps (issue 27): the task a runner id names, and a creation's mounts of the dumps folder
narrowed to its own task's dump (and the runner's staging copy to its task, staging_mount.py), or
refused. Standard library only; the only I/O is making the task's dump folder.
"""

import os

try:  # inside the package (tests, the host's readers); beside the installed shim, its siblings are top-level
    from ..runroot.custody_evidence import runner_digest
    from .shim_argv import RUN_BOOL_LONG, RUN_BOOL_SHORT, parse_options
    from .shim_io import load_sibling
    from .shim_words import DUMP_MOUNT_REFUSED, STAGING_MOUNT_REFUSED
except ImportError:
    from custody_evidence import runner_digest  # type: ignore[no-redef,import-not-found]
    from shim_argv import RUN_BOOL_LONG, RUN_BOOL_SHORT, parse_options  # type: ignore[no-redef,import-not-found]
    from shim_io import load_sibling  # type: ignore[no-redef,import-not-found]
    from shim_words import DUMP_MOUNT_REFUSED, STAGING_MOUNT_REFUSED  # type: ignore[no-redef,import-not-found]


# Issue 27: where the runner mounts the dumps in its containers, and a task dump's folder name (TaskConfig).
DUMPS_TARGET = "/workspace/dumps"
DUMP_PREFIX = "SingleUserTurn-"


def task_of(config, ident):
    """The task a runner id names: the runner's id is `<pid>-<first 8 hex of md5(task + newline)>`.

    None when the run has no task list (a config from before per-task dumps) or none matches."""
    tasks = config.get("task_names")
    if not tasks or not ident or "-" not in ident:
        return None
    digest = ident.rsplit("-", 1)[1]
    for task in tasks:
        if runner_digest(task) == digest:
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
            staging = load_sibling("staging_mount") if config.get("staging_root") else None
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
