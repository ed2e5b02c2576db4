"""Every vocabulary the adapter writes or reads, in one place.

Standard library only and Python 3.10 compatible: this module is copied into the task image
(the benchmark's interpreter may be 3.10) and imported by the host as `cowork_adapter.vocab`.
Members compare and serialise as their plain string values.
"""

from __future__ import annotations

from enum import Enum, IntEnum


class Vocab(str, Enum):
    """A str-valued enum whose str() and format() are the bare value (3.11 changed both)."""

    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]  # deliberately str's, as the docstring says

    @classmethod
    def values(cls) -> list[str]:
        return [m.value for m in cls]


class ExitCode(IntEnum):
    """Launcher and command exit codes (documented in docs/exit-codes.md)."""

    OK = 0
    FAILED = 1  # the run ended, but the runner failed or rows are infra_failed/not_attempted
    REFUSED = 2  # a typed refusal: bad input, a precondition unmet; nothing was started
    STOPPED = 3  # a stop reason (budget, meter, disk, signal, operator) ended the run
    SHIM_REFUSED = 75  # the docker shim refused a container creation (EX_TEMPFAIL)


class RunOutcome(Vocab):
    STARTED = "started"
    RUNNING = "running"
    REFUSED = "refused"
    NOTHING_REMAINING = "nothing_remaining"
    DRY_RUN = "dry_run"
    PROBE = "probe"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"  # runner finished, but some rows are infra_failed/not_attempted
    STOPPED = "stopped"
    CRASHED = "crashed"
    RECONCILED = "reconciled"  # campaign history only: an operator's guarded `campaign reconcile`


class StopReason(Vocab):
    """Why a run stopped before its runner finished by itself. The first cause wins."""

    BUDGET_METER_UNAVAILABLE = "budget_meter_unavailable"
    BUDGET_EXHAUSTED = "budget_exhausted"  # the key meter itself reports no remaining limit
    CAMPAIGN_BUDGET_RESERVE = "campaign_budget_reserve"
    RUN_BUDGET = "run_budget"
    GATEWAY_BUDGET = "gateway_budget"  # --llm-gateway: its sum of provider costs reached the run's allowance
    CAMPAIGN_PERSISTENCE_FAILED = "campaign_persistence_failed"
    DISK_RESERVE = "disk_reserve"
    ROOT_DISK_RESERVE = "root_disk_reserve"
    SIGNAL_SIGINT = "signal_2"
    SIGNAL_SIGTERM = "signal_15"
    STOP_REQUESTED = "stop_requested"  # `cowork-adapter stop` or an operator's stop file
    SUPERVISOR_ERROR = "supervisor_error"
    CUSTODY_BREACH = "custody_breach"  # the runner created a resource past the shim (no label)
    LAUNCHER_DIED = "launcher_died"  # the watchdog saw the launcher die and fenced the run itself
    DOCKER_DAEMON_LOST = "docker_daemon_lost"  # the daemon stopped answering, or restarted, mid-run
    # A shared campaign (--shared-campaign): another host wrote the campaign's stop, or this host's
    # lease could not be renewed (its claims may soon be released to another host: it must stop).
    CAMPAIGN_STOPPED = "campaign_stopped"
    HOST_LEASE_LOST = "host_lease_lost"
    # An operator released this host run's claims (`campaign release`) while its lease was lapsed:
    # the host came back (a suspended VM, a healed partition) and must settle and run nothing more.
    HOST_RUN_RELEASED = "host_run_released"
    RUNNER_FINISHED = "runner_finished"  # not a stop: recorded in the campaign history


class TaskStatus(Vocab):
    """A ledger row's status. Only the first three are settled (never retried)."""

    PASSED = "passed"
    FAILED = "failed"  # the agent finished and the official evaluator said False
    AGENT_FAILED = "agent_failed"  # the agent phase ended without success (incl. truncation)
    INFRA_FAILED = "infra_failed"
    ENVIRONMENT_BLOCKED = "environment_blocked"  # a needed MCP server failed the inventory
    NOT_ATTEMPTED = "not_attempted"

    @property
    def settled(self) -> bool:
        return self in (TaskStatus.PASSED, TaskStatus.FAILED, TaskStatus.AGENT_FAILED)


class OfficialEvalStatus(Vocab):
    COMPLETED = "completed"  # the evaluator returned a literal boolean pass
    DECLINED = "declined"  # the upstream status gate: pass null for a non-success status
    UNKNOWN = "unknown"
    INVALID = "invalid"
    UNREADABLE = "unreadable"
    UNREPORTED = "unreported"  # no eval_res.json
    NOT_RUN = "not_run"  # an attempt record proves the evaluator never ran


class PaidActivity(Vocab):
    OBSERVED = "observed"  # a token-bearing usage record exists
    NONE = "none"  # provably no submission to the model
    UNKNOWN = "unknown"


class BenchStatus(Vocab):
    """The status written to traj_log.json and the `Status:` line (the benchmark's words)."""

    SUCCESS = "success"
    FAILED = "failed"
    MAX_TURNS_REACHED = "max_turns_reached"


class UpstreamTaskStatus(Vocab):
    """The statuses the upstream code knows (utils/roles/task_agent.py TaskStatus): the eval phase
    hands the evaluator one of these and nothing else (any other value becomes `failed`)."""

    SUCCESS = "success"
    FAILED = "failed"
    MAX_TURNS_REACHED = "max_turns_reached"
    INTERRUPTED = "interrupted"


class AdapterStage(Vocab):
    INIT = "init"
    WORKSPACE = "workspace"
    PREPROCESS = "preprocess"
    MCP = "mcp"
    SERVER = "server"
    TASK = "task"
    FINISHED = "finished"


class AdapterReason(Vocab):
    """Reason codes the entrypoint itself assigns (runtime codes pass through as strings)."""

    CONFIG_INVALID = "config_invalid"
    MODEL_MISMATCH = "model_mismatch"
    MCP_CONFIG_MISSING = "mcp_config_missing"
    MCP_CONFIG_INVALID = "mcp_config_invalid"
    MCP_START_FAILED = "mcp_start_failed"
    PREPROCESS_FAILED = "preprocess_failed"
    SERVER_START_FAILED = "server_start_failed"
    TASK_CREATE_FAILED = "task_create_failed"
    SERVER_DIED = "server_died"
    WALL_CLOCK_TIMEOUT = "wall_clock_timeout"
    ENGINE_FAILED = "engine_failed"
    ADAPTER_CRASHED = "adapter_crashed"


# Runtime reason codes that mean the provider or transport failed: infrastructure, not the agent.
INFRA_RUNTIME_REASONS = frozenset({"llm_api_error", "provider_unavailable"})
# Runtime rails that truncate an attempt (a disclosed max_turns_reached, never a success).
TRUNCATION_RUNTIME_REASONS = frozenset(
    {
        "budget_exhausted",
        "round_limit",
        "finalization_grace",
        "deadline_local",
        "children_unabsorbed",
        "owner_requested_finalization",
    }
)


class EngineKind(Vocab):
    OUROBOROS = "ouroboros"
    UPSTREAM = "upstream"
    # Reference engines: no model, no key, no money. ORACLE writes the task's groundtruth_workspace
    # into the workspace; NOP changes nothing. Both end as a successful agent, then the official
    # evaluator grades the dump like any other.
    ORACLE = "oracle"
    NOP = "nop"


REFERENCE_ENGINES = frozenset({EngineKind.ORACLE.value, EngineKind.NOP.value})


class TaskValidityClass(Vocab):
    """What `qualify` concludes about a task from its evaluator's verdicts on oracle and nop."""

    VALID = "valid"  # the ground truth passes and doing nothing fails
    ORACLE_FAILS = "oracle_fails"  # the ground truth does not pass here (no agent could be sure to)
    NOP_PASSES = "nop_passes"  # doing nothing passes: the evaluator accepts an untouched workspace
    ENVIRONMENT_BLOCKED = "environment_blocked"  # a needed MCP server failed the inventory
    # The ground truth passed but the nop run gave no verdict (an infrastructure failure): whether
    # doing nothing passes is unknown, and is not guessed.
    UNDETERMINED = "undetermined"


class Phase(Vocab):
    AGENT = "agent"
    EVAL = "eval"
    ALL = "all"
    INVENTORY = "inventory"
    STATEFUL = "stateful"


class ReceiptCause(Vocab):
    """Why an eval receipt or an eval_res.json reading is what it is."""

    EVALUATED = "evaluated"
    RAISED = "raised"
    UNCLAIMED_PRIOR_RESULT = "unclaimed_prior_result"
    PREPARATION_ERROR = "preparation_error"
    FILE_ABSENT = "file_absent"
    OS_ERROR = "os_error"
    UTF8_ERROR = "utf8_error"
    JSON_ERROR = "json_error"
    NOT_OBJECT = "not_object"
    PASS_MISSING = "pass_missing"
    PASS_NOT_BOOLEAN = "pass_not_boolean"
    STATUS_GATE = "status_gate"
    PASS_NULL_UNLINKED = "pass_null_unlinked"  # pass null without the exact upstream gate shape
    LOG_PATH_MISMATCH = "log_path_mismatch"  # TaskConfig's log file is not the claimed one
    LOG_NOT_REGULAR = "log_not_regular"  # traj_log.json is a link, FIFO, device or over its cap: not evaluated
    EVAL_HUNG = "eval_hung"  # the evaluator ran past the adapter's bound: killed, no verdict
    # A link in the agent's workspace leads out of its dump (to the ground truth, say): not evaluated.
    WORKSPACE_LINK_OUTSIDE_DUMP = "workspace_link_outside_dump"


class EvalRefusal(Vocab):
    """Why an eval re-entry did not evaluate (printed without `Status:`/`Pass:`)."""

    CLAIM_UNREADABLE = "claim_unreadable"
    BINDING_MISMATCH = "binding_mismatch"
    UNFINISHED_CLAIM = "unfinished_claim"


class TamperKind(Vocab):
    """What the host saw the agent under test try against its score, its siblings or the host.

    Each is a flag on the task's ledger row and a line in the report's tampering section; none
    ever makes a verdict, and a task so flagged is never `passed` unless its sealed verdict is.
    """

    UNSEALED_VERDICT = "unsealed_verdict"  # official records in the dump that no host seal covers
    PLANTED_BEFORE_EVAL = "planted_before_eval"  # claim/receipt/eval_res.json there before the first eval exec
    SEALED_FILE_CHANGED = "sealed_file_changed"  # a file the seal covers differs from its sealed bytes
    VERDICT_DISAGREES_RUNNER = "verdict_disagrees_runner"  # sealed verdict vs the runner's Pass: / summary.csv
    UNSAFE_ENTRY = "unsafe_entry"  # a link, FIFO, device, socket or oversize file where a record was read
    OUTSIDE_OWN_DUMP = "outside_own_dump"  # a write, or a mount asked for, outside the task's own dump
    GRADING_INPUTS_DIFFER = "grading_inputs_differ"  # traj_log.json's grading inputs differ from the task tree's
    SUMMARY_CHANGED = "summary_changed"  # the adapter summary changed after the agent phase ended
    EVAL_HUNG = "eval_hung"  # the eval phase reached the adapter's bound (the runner has none)
    # traj_log.json held a value the host's log replaced: launch_time or times outside the agent
    # exec the host saw, a status the upstream code does not know, a changed config field (issue 36).
    GRADING_LOG_REWRITTEN = "grading_log_rewritten"
    # An infrastructure failure said only by what the agent can write (its summary, a missing summary
    # or traj_log.json, a dead server or entrypoint), with no cause the host saw: agent_failed, never rerun.
    UNVERIFIED_INFRA_CLAIM = "unverified_infra_claim"

    TASK_DB_CODE = "task_db_code"  # the agent's code or settings in its task's database (score/taskdb.py)
    TASK_DB_UNCHECKED = "task_db_unchecked"  # the task's database could not be reset or compared
    UNREADABLE_DUMP = "unreadable_dump"  # the task's files could not be read at all: its row says only that
    DUMP_OVER_BOUND = "dump_over_bound"  # the dump passed a bound (bytes, entries, depth) while the task ran


class DumpBound(Vocab):
    """The bounds on what one task may leave in its dump while it runs (runroot/dump_meter.py)."""

    BYTES = "bytes"  # disk blocks used, --dump-max-gib
    ENTRIES = "entries"  # files, folders, links... below the dump, --dump-max-entries
    DEPTH = "depth"  # folder levels below the dump, --dump-max-depth


class InfraCause(Vocab):
    """What the host itself saw make an attempt an infrastructure failure (score/infra.py). An
    infra_failed row names one; only such rows are rerun by --resume-from."""

    PG_FAIL = "pg_fail"  # the runner's own row: the task's PostgreSQL never became ready, before any agent
    DAEMON_LOST = "daemon_lost"  # the run stopped because the Docker daemon stopped answering or restarted
    RUN_STOPPED = "run_stopped"  # the run was stopped (signal, stop, budget, disk...) before it finished
    OOM_KILLED = "oom_killed"  # the kernel OOM-killed a process of the agent container (read before its removal)
    EXEC_LOST = "exec_lost"  # the agent exec ended with docker's own failure code (125-127): it never ran
    EXEC_CUT = "exec_cut"  # the shim saw the agent exec begin and never end: the runner or the shim was killed
    PROVIDER_ERRORS = "provider_errors"  # the gateway logged 5xx/429/transport failures for the task's token
    NO_MODEL_ANSWER = (
        "no_model_answer"  # gateway + Ouroboros: no model answer reached the task, so nothing the agent chose ran
    )
    NO_AGENT = "no_agent"  # oracle / nop: no agent ran, so the adapter's own failure stands
    EVAL_NO_VERDICT = "eval_no_verdict"  # the agent phase succeeded, nothing was tampered, the eval gave no verdict
    LEGACY_UNVERIFIED = "legacy_unverified"  # a run from before the shim recorded host facts: read as it was


class ContainerState(Vocab):
    ABSENT = "absent"
    PRESENT = "present"
    UNKNOWN = "unknown"


class DiagnosticOutcome(Vocab):
    """What the opt-in residual-state diagnostic observed (audit only, never a score)."""

    CHECKS_PASSED = "checks_passed"  # the unchanged checker exited 0 on the state the agent left
    CHECKS_FAILED = "checks_failed"
    INELIGIBLE = "ineligible"
    UNAVAILABLE = "unavailable"  # no checker command could be rebuilt: never a pass
    TIMEOUT = "timeout"  # the cap was reached and the process group was proven dead
    UNKNOWN = "unknown"  # the process group's death could not be proven
    DIAGNOSTIC_ERROR = "diagnostic_error"
    DISABLED = "disabled"
    NOT_APPLICABLE = "not_applicable"  # the official evaluator returned a boolean verdict


class DiagnosticReason(Vocab):
    """Why a diagnostic is ineligible or unavailable, or how it ended without a report."""

    OFFICIAL_NOT_COMPLETED = "official_not_completed"
    LOG_CHANGED_OR_UNREADABLE = "log_changed_or_unreadable"
    NOT_SAME_ATTEMPT_STATUS_GATE_DECLINE = "not_same_attempt_status_gate_decline"
    ADAPTER_SUMMARY_UNAVAILABLE = "adapter_summary_unavailable"
    ADAPTER_SUMMARY_NOT_LINKED = "adapter_summary_not_linked"
    # The summary is not the one the host saw when the agent exec ended (custody/shim.py): the
    # agent may have rewritten it, so nothing in it may make the diagnostic eligible.
    ADAPTER_SUMMARY_CHANGED = "adapter_summary_changed_after_agent_phase"
    INFRASTRUCTURE_OUTCOME = "infrastructure_outcome"
    NO_TASK_SUBMISSION = "no_task_submission"
    STOP_REASON_NOT_ELIGIBLE = "stop_reason_not_eligible"
    NO_AGENT_ACTIVITY = "no_agent_activity"
    AGENT_ACTIVITY_UNKNOWN = "agent_activity_unknown"
    AGENT_TERMINATION_UNPROVEN = "agent_termination_unproven"
    OFFICIAL_CLAIM_NOT_LINKED = "official_claim_not_linked"
    SAVED_CONFIG_UNSUPPORTED = "saved_config_unsupported"
    SAVED_CONFIG_NOT_LINKED = "saved_config_not_linked"
    NO_EVAL_COMMAND = "no_eval_command"
    SPAWN_ERROR = "spawn_error"  # + ":<exception type>"
    NO_FINAL_REPORT = "no_final_report"
    EXCEPTION = "exception"  # + ":<exception type>"
    CAP_REACHED = "diagnostic_cap_reached"
    GROUP_DEATH_UNCONFIRMED = "process_group_death_unconfirmed"


# The agent stops a residual-state diagnostic may follow: a time, round or budget rail.
DIAGNOSTIC_STOP_REASONS = frozenset({"deadline_local", "wall_clock_timeout", "round_limit", "budget_exhausted"})
# The diagnostic attempt's log files in a task dump: <prefix><attempt>.log (named here so the
# host-side audit can count them without importing the diagnostic runner).
DIAGNOSTIC_LOG_PREFIX = "ouroboros_diagnostic_log-"


class ShimRefusal(Vocab):
    """Why the docker shim refused a container creation (exit 75)."""

    ADMISSION_STOPPED = "admission_stopped"
    DISK_PROBE_FAILED = "disk_probe_failed"
    DISK_RESERVE_REACHED = "disk_reserve_reached"
    CONFIG_UNREADABLE = "config_unreadable"  # the shim cannot read its run config: fail closed
    FLAG_CONFLICT = "flag_conflict"  # the caller set a limit, pull policy or custody label itself
    HOST_OVERRIDE = "host_override"  # the caller named another daemon (-H/--host/--context)
    LAUNCHER_DEAD = "launcher_dead"  # the launcher that holds the run's custody is not alive
    GATEWAY_TOKEN_FAILED = "gateway_token_failed"  # --llm-gateway: the task's token could not be minted
    CREATION_LOCK_FAILED = "creation_lock_failed"  # the in-flight lock (custody/creations) could not be taken
    DUMP_MOUNT_REFUSED = "dump_mount_refused"  # a mount of the dumps folder other than the task's own dump
    TASK_UNKNOWN = "task_unknown"  # an agent/eval container whose runner id names no task of the run
    STAGING_MOUNT_REFUSED = "staging_mount_refused"  # the runner's staging copy mounted otherwise than narrowable


class MeterPhase(Vocab):
    STARTUP = "startup"
    POLL = "poll"
    FINAL = "final"
    RECONCILE = "reconcile"


class EventKind(Vocab):
    """Record types of the append-only events.jsonl."""

    RUN_ADMITTED = "run_admitted"
    RUNNER_STARTED = "runner_started"
    TASK_STARTED = "task_started"
    TASK_FINISHED = "task_finished"  # the runner's summary.csv row appeared
    METER_READING = "meter_reading"  # accepted and saved
    METER_REJECTED = "meter_rejected"
    METER_CONFIRMED = "meter_confirmed"  # the acceptance that ended a run of rejected reads
    DISK_READING = "disk_reading"
    STOP_REQUESTED = "stop_requested"
    RUNNER_EXITED = "runner_exited"
    CLEANUP = "cleanup"
    SETTLEMENT = "settlement"
    RUN_FINISHED = "run_finished"
    WATCHDOG_STARTED = "watchdog_started"
    WATCHDOG_FENCED = "watchdog_fenced"  # the launcher died: admission fenced by the watchdog
    WATCHDOG_RUNNER_STOPPED = "watchdog_runner_stopped"
    WATCHDOG_CLEANUP = "watchdog_cleanup"
    WATCHDOG_EXITED = "watchdog_exited"
    DAEMON_LOST = "daemon_lost"
    DEAD_RUN_CLEARED = "dead_run_cleared"  # `cowork-adapter clear` finished a dead run's custody
    SHARED_HOST = "shared_host"  # --shared-campaign: registration, claims released, a fence, a campaign stop
    STOP_CLEARED = "stop_cleared"  # a stop removed the run's containers itself (StopPath.FAST), proven or not


class StopPath(Vocab):
    """How a stop leaves no container with the run's label."""

    # Fence, signal the runner group, remove the run's containers by exact label in parallel and
    # wait for the admitted creations, proven by a fresh listing; then the group is proven gone.
    FAST = "fast"
    # The old path, kept for bench_stop_latency.py only: signal the runner group and wait for its
    # own EXIT trap to remove its containers one by one (SIGKILL after the grace).
    RUNNER_TRAP = "runner_trap"


class ProbeKind(Vocab):
    INVENTORY = "inventory"
    STATEFUL = "stateful"


class ServerHealth(Vocab):
    OK = "ok"
    FAILED = "failed"
    REPAIRED = "repaired"


class RepairFault(Vocab):
    """A known reproducibility fault of the benchmark image that the derived image repairs."""

    MCP_SDK_2X = "mcp_sdk_2x"  # a server's own environment resolves the mcp SDK 2.x
    PSYCOPG2_MISSING = "psycopg2_missing"  # a server's sources import psycopg2, its environment lacks it
    CHROMIUM_MISSING = "chromium_missing"  # the browser server has no Chromium


class DemoScenario(Vocab):
    PASS = "pass"
    SIGTERM = "sigterm"
    BUDGET_STOP = "budget-stop"
    METER_OUTAGE = "meter-outage"
    KILL9_RECONCILE = "kill9-reconcile"
    KILL9_RANDOM = "kill9-random"  # seeded SIGKILLs over run phases, each cleared and resumed
    RESUME = "resume"
    DIAGNOSTIC = "diagnostic"
    ENVIRONMENT = "environment"  # inventory, repair and refusal of a broken MCP server
    HOSTILE = "hostile"  # an engine that attacks its own score, a sibling task and the host
    HOSTILE_LOAD = "hostile-load"  # an honest engine needing its model beside agents starving shared parts
    COMPARE = "compare"  # two configurations, two trials each (run --trials), compared task by task
    ALL = "all"


class AuditFindingReason(Vocab):
    """Why the offline audit flags a tool-call argument for manual review (never a verdict)."""

    ANSWER_SOURCE_REFERENCE = "answer_source_reference"  # groundtruth, the upstream repository
    EVALUATOR_REFERENCE = "evaluator_reference"  # an evaluation/ path segment
    EVAL_RECORD_REFERENCE = "eval_record_reference"  # eval_res.json, eval/diagnostic records
    DIRECT_DATABASE_ACCESS = "direct_database_access"  # a PostgreSQL client in a shell/code tool


class AuditGapReason(Vocab):
    """Evidence the offline audit could not read or count; every gap is explicit in audit.json."""

    MISSING_MANIFEST = "missing_manifest"
    MISSING_RESULT_INDEX = "missing_result_index"
    MISSING_MONITOR = "missing_monitor"
    MISSING_TASK_DUMP = "missing_task_dump"
    MISSING_LOG = "missing_log"
    UNREADABLE_LOG = "unreadable_log"
    UNREADABLE_RECORD = "unreadable_record"  # a small JSON file (manifest, claim, receipt) failed
    MALFORMED_LINE = "malformed_line"
    OVERSIZED_LINE = "oversized_line"  # longer than the audit's line bound: skipped, not parsed
    UNKNOWN_TOKENS = "unknown_tokens"
    UNKNOWN_COST = "unknown_cost"
    # A link, FIFO, device, socket or over-cap file where a log, record or dump was to be read:
    # never opened or followed (container.safefile), and a tampering flag (TamperKind.UNSAFE_ENTRY).
    UNSAFE_ENTRY = "unsafe_entry"


class ClaimState(Vocab):
    """A task of a shared campaign's selection (PostgreSQL store): who may run it."""

    OPEN = "open"  # no host holds it; the next claim may take it
    CLAIMED = "claimed"  # one live host run holds it
    SETTLED = "settled"  # a receipt settled it (passed, failed, agent_failed): never run again anywhere


class HostRunState(Vocab):
    """A host's run in a shared campaign."""

    LIVE = "live"  # renewing its lease; its claims are its own
    FINISHED = "finished"  # ended by its own launcher; unsettled claims went back to open
    FENCED = "fenced"  # lease expired and its processes proven gone; its claims went back to open
    # Lease expired and an operator released it from another machine (`campaign release`): its
    # processes were NOT proven gone there; its daemon's label was (or the operator attests it).
    RELEASED = "released"


class ReleaseFence(Vocab):
    """What stood for a fence proof when an operator released a lapsed host run (`campaign release`)."""

    LABEL_EMPTY = "docker_label_empty"  # its daemon answered: nothing with the run's exact label
    LABEL_CLEANED = "docker_label_cleaned"  # its daemon answered: the label's objects removed, relist empty
    ATTESTED = "operator_attested"  # no daemon reachable: the operator's --confirm-fenced is the evidence


class Capability(Vocab):
    """Docker's default capability set (without CAP_): what `--container-cap-add` may keep. The docker
    shim cannot import this module; custody/container_caps.py spells the same words (a test compares)."""

    AUDIT_WRITE = "AUDIT_WRITE"
    CHOWN = "CHOWN"
    DAC_OVERRIDE = "DAC_OVERRIDE"
    FOWNER = "FOWNER"
    FSETID = "FSETID"
    KILL = "KILL"
    MKNOD = "MKNOD"
    NET_BIND_SERVICE = "NET_BIND_SERVICE"
    NET_RAW = "NET_RAW"
    SETFCAP = "SETFCAP"
    SETGID = "SETGID"
    SETPCAP = "SETPCAP"
    SETUID = "SETUID"
    SYS_CHROOT = "SYS_CHROOT"


class DaemonKind(Vocab):
    """Which Docker daemon a run used (host/daemon_kind.py; the manifest's limits.daemon_kind)."""

    ROOTFUL = "rootful"  # dockerd as root, in this host's own namespaces
    ROOTLESS = "rootless"  # dockerd inside RootlessKit's user and network namespaces, run by an unprivileged user
