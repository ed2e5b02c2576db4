"""The shim's admission of a container creation: its run config, read fail-closed, and why a creation may
not proceed now (a dead launcher, the stop file, the disk's bytes and inodes). Standard library only.
"""

import json
import os
import sys

try:  # inside the package (tests, the host's readers); beside the installed shim, its siblings are top-level
    from .shim_words import ADMISSION_STOPPED, DISK_PROBE_FAILED, DISK_RESERVE_REACHED, EXIT_REFUSED, LAUNCHER_DEAD
except ImportError:
    from shim_words import (  # type: ignore[no-redef,import-not-found]
        ADMISSION_STOPPED,
        DISK_PROBE_FAILED,
        DISK_RESERVE_REACHED,
        EXIT_REFUSED,
        LAUNCHER_DEAD,
    )


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


def refuse(cause, what="container creation"):
    """One line on stderr naming the cause (never the argv), and exit 75."""
    sys.stderr.write("docker shim: " + what + " refused: " + cause + "\n")
    sys.stderr.flush()
    return EXIT_REFUSED
