"""What every admitted container gets beyond its limits (issue 37): a bounded log and fewer capabilities.

Standard library only: the docker shim loads this file as a sibling copy (install_custody writes it
beside shim.py); the launcher imports it for the same constants (the manifest, the docs' table).

- The log: without a bound, whatever a container's processes write to its main process's output
  (any root process in it can open /proc/1/fd/1) lands in the daemon's json-file log on the host's
  disk without end. Every container gets the json-file driver with `max-size` and `max-file`: at
  most LOG_MAX_FILES files of the configured size, the oldest dropped. json-file, not `local`,
  because `docker logs` then reads the same file the daemon's default would have written.
- Capabilities: Docker's default set keeps CAP_MKNOD (an agent makes device nodes in its dump,
  which is a folder of the host), CAP_NET_RAW, CAP_SETFCAP and others no task of the benchmark
  needs. Measured on the test bed (docs/security.md): the demo bench's tasks and the real
  benchmark's tasks ran with TASK_DROP dropped. A task container keeps what its root user needs to
  work in files the image's other users own and to signal what it started (CHOWN, DAC_OVERRIDE,
  FOWNER, SETUID, SETGID, KILL); the task's PostgreSQL keeps what its entrypoint needs to hand its
  data folder to the postgres user and switch to it (the same, KILL aside, for `docker stop` is
  the daemon's). A run may keep a dropped capability (`--container-cap-add`), recorded in the
  manifest; it is dropped from no role then.
"""

# Docker's default capability set (moby's oci/caps/defaults.go), without the CAP_ prefix.
DOCKER_DEFAULT_CAPS = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "NET_RAW",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
TASK_KEEP = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL")
PG_KEEP = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID")
TASK_DROP = tuple(c for c in DOCKER_DEFAULT_CAPS if c not in TASK_KEEP)
PG_DROP = tuple(c for c in DOCKER_DEFAULT_CAPS if c not in PG_KEEP)

LOG_DRIVER = "json-file"
LOG_MAX_FILES = 2
DEFAULT_LOG_MAX_BYTES = 10 * 1024 * 1024  # per file: at most 20 MiB of log per container


def normal_cap(name):
    """`cap_net_raw` / `CAP_NET_RAW` / `net_raw` as Docker's `NET_RAW`; None when it is no default capability."""
    word = str(name).strip().upper()
    word = word[4:] if word.startswith("CAP_") else word
    return word if word in DOCKER_DEFAULT_CAPS else None


def dropped_for(role, keep=()):
    """The capabilities a container of `role` loses: pg its own set, every other role the task set,
    less what the run keeps (`keep`, normalised names)."""
    base = PG_DROP if role == "pg" else TASK_DROP
    kept = {normal_cap(c) for c in keep}
    return [c for c in base if c not in kept]


def cap_flags(config, role):
    """`--cap-drop` flags for a creation; none for a config from before (no `cap_keep` key)."""
    keep = config.get("cap_keep")
    if keep is None:
        return []
    flags = []
    for cap in dropped_for(role, keep):
        flags += ["--cap-drop", cap]
    return flags


def log_flags(config):
    """The bounded json-file log for a creation; none for a config from before (no `log_max_bytes`)."""
    size = config.get("log_max_bytes")
    if not size:
        return []
    return ["--log-driver", LOG_DRIVER, "--log-opt", f"max-size={int(size)}", "--log-opt", f"max-file={LOG_MAX_FILES}"]
