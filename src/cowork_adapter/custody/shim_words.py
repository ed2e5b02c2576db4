"""The docker shim's words: labels, roles, refusal causes, states, variables and evidence file names.

Standard library only, like every file of the shim (custody/shim.py says how it runs). The shim cannot
import the package, so these mirror vocab.py, labels.py and the container's names; tests/unit/test_shim_install.py
compares each with its original.
"""

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
AGENT_REMOVED_SUFFIX = ".agent_removed"  # gateway.REVOKED_SUFFIX: this task's token is dead
# Per-task dumps and the seal (issue 27). The eval phase reads these variables (container/evalphase.py).
ENTRY_ENV = "COWORK_EVAL_ENTRY"  # first | repeat: whether an eval exec of this task came before
SUMMARY_SHA_ENV = "COWORK_AGENT_SUMMARY_SHA256"  # the adapter summary as the agent exec left it
BOUND_ENV = "COWORK_EVAL_BOUND_SEC"  # the eval phase's own bound; the shim's is a margin above it
# The agent exec as the host saw it (issue 36): the eval phase writes traj_log.json's launch_time and
# times from these (container/gradinglog.py STARTED_ENV ...), never from the agent's own file.
AGENT_STARTED_ENV = "COWORK_AGENT_STARTED_AT"
AGENT_ENDED_ENV = "COWORK_AGENT_ENDED_AT"
AGENT_MAX_STEPS_ENV = "COWORK_AGENT_MAX_STEPS"
AGENT_WINDOW_SUFFIX = ".agent_window.json"
# The shim's evidence of one task, under its runner id (runroot/layout.py names the seal's files too).
SEAL_SCHEMA = "cowork_adapter.eval_seal.v1"
SEAL_SUFFIX = ".seal.json"
SEAL_HEAD_SUFFIX = ".seal-head.json"
HELD_SUMMARY_SUFFIX = ".agent_summary.json"
END_STRAYS_ENV = "COWORK_END_STRAYS"  # container/procs.py: the agent phase kills what the agent left running
