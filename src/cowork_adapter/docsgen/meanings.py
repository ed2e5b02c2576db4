"""What each member of the operator-facing vocabularies means, one line per member.

docs/reference.md is generated from these tables (docsgen/reference.py). A member added to its enum in
container/vocab.py without a line here fails tests/unit/test_docs_reference.py, naming the table and the
member: add one line `Enum.MEMBER: M(meaning, money, score, next command),` to the table below, then run
`python -m cowork_adapter.docsgen`. Each text is one sentence or fragment, written for an operator.
"""

from __future__ import annotations

from typing import NamedTuple

from ..runroot import layout
from ..vocab import AuditFindingReason, DaemonKind, ExitCode, StopReason, TamperKind, TaskStatus


class M(NamedTuple):
    meaning: str
    money: str  # what it does to the money already spent and to come
    score: str  # what it does to the score (pass@1 over the denominator)
    next: str  # the next command (RUN_ROOT: the run root concerned)


_EVIDENCE = f"{layout.CUSTODY}/{layout.EVIDENCE}"  # where the shim keeps its host-only evidence
_RESUME = "`cowork-adapter run ... --run-root NEW --resume-from RUN_ROOT`"
_SPENT = "Spending stops; what was spent stays spent and is settled from the final meter reading."

EXIT_CODES: dict[ExitCode, M] = {
    ExitCode.OK: M(
        "Completed: every selected task settled, or a dry run, a probe with every server usable, nothing remaining.",
        "The campaign is settled from the final meter reading.",
        "Every row settled (passed, failed, agent_failed).",
        "`cowork-adapter report RUN_ROOT`",
    ),
    ExitCode.FAILED: M(
        "Incomplete: the run ended with infra_failed, not_attempted or environment_blocked rows, cleanup unproven, "
        "settlement not recorded, or a crash.",
        "Settled when cleanup was proven; otherwise the campaign keeps the run as its active run until `clear` or "
        "`campaign reconcile`.",
        "Unsettled rows count as not passed; a resume may attempt them again.",
        "`cowork-adapter status RUN_ROOT`, then " + _RESUME,
    ),
    ExitCode.REFUSED: M(
        "Refused: one sentence on stderr names the cause; nothing was started.",
        "Nothing is spent.",
        "No score.",
        "Fix what the sentence names and repeat with a new run root.",
    ),
    ExitCode.STOPPED: M(
        "Stopped: a stop reason ended the run (budget, meter, disk, signal, `stop`, a lost daemon).",
        _SPENT,
        "Tasks in flight end infra_failed (`interrupted:<reason>`), those not started not_attempted.",
        "`cowork-adapter status RUN_ROOT`; fix the cause, then " + _RESUME,
    ),
    ExitCode.SHIM_REFUSED: M(
        "The docker shim refused a container creation (the runner sees it, not the operator's shell).",
        "No container, so no spending for it.",
        "The task whose container was refused ends infra_failed or not_attempted.",
        "`cowork-adapter status RUN_ROOT` (the run's stop reason says why)",
    ),
}

STOP_REASONS: dict[StopReason, M] = {
    StopReason.BUDGET_METER_UNAVAILABLE: M(
        "No accepted key-meter reading within --meter-blindness-sec: the run cannot see its spending.",
        "Spending stops; the run is closed at its final reading, or without one at the last accepted reading with the "
        "meter's error (the next reading counts the rest).",
        "Tasks in flight end infra_failed, the rest not_attempted.",
        "Check the meter URL and network, then " + _RESUME,
    ),
    StopReason.BUDGET_EXHAUSTED: M(
        "The key meter reports no remaining limit on the key.",
        _SPENT,
        "As any stop: in flight infra_failed, the rest not_attempted.",
        "Raise the key's limit at the provider, then " + _RESUME,
    ),
    StopReason.CAMPAIGN_BUDGET_RESERVE: M(
        "The campaign's spending reached its ceiling minus the reserve.",
        _SPENT + " The campaign admits no more runs.",
        "As any stop: in flight infra_failed, the rest not_attempted.",
        "`cowork-adapter campaign show --campaign-file F`; a new campaign (new ceiling) is a new baseline",
    ),
    StopReason.RUN_BUDGET: M(
        "This invocation's spending reached --budget-usd.",
        _SPENT,
        "As any stop: in flight infra_failed, the rest not_attempted.",
        _RESUME + " with a new --budget-usd",
    ),
    StopReason.GATEWAY_BUDGET: M(
        "The run's gateway summed provider costs up to the run's allowance and fenced itself.",
        _SPENT,
        "As any stop: in flight infra_failed, the rest not_attempted.",
        _RESUME + " with a new --budget-usd",
    ),
    StopReason.CAMPAIGN_PERSISTENCE_FAILED: M(
        "The campaign record could not be written (disk full or read-only, the database gone).",
        "The campaign keeps its last good content and this run as its active run.",
        "As any stop: in flight infra_failed, the rest not_attempted.",
        "Free the disk or restore the database, then `cowork-adapter campaign reconcile ...`, then " + _RESUME,
    ),
    StopReason.DISK_RESERVE: M(
        "Free space on the resource root fell below --min-free-gib.",
        _SPENT,
        "As any stop: in flight infra_failed, the rest not_attempted.",
        "Free space on the resource root, then " + _RESUME,
    ),
    StopReason.ROOT_DISK_RESERVE: M(
        "Free space on / fell below --min-root-free-gib.",
        _SPENT,
        "As any stop: in flight infra_failed, the rest not_attempted.",
        "Free space on / (Docker's images and layers), then " + _RESUME,
    ),
    StopReason.SIGNAL_SIGINT: M(
        "The launcher received SIGINT (Ctrl-C).",
        _SPENT,
        "As any stop: in flight infra_failed, the rest not_attempted.",
        _RESUME,
    ),
    StopReason.SIGNAL_SIGTERM: M(
        "The launcher received SIGTERM.",
        _SPENT,
        "As any stop: in flight infra_failed, the rest not_attempted.",
        _RESUME,
    ),
    StopReason.STOP_REQUESTED: M(
        "`cowork-adapter stop` or an operator's stop file asked the run to stop.",
        _SPENT,
        "As any stop: in flight infra_failed, the rest not_attempted.",
        _RESUME,
    ),
    StopReason.SUPERVISOR_ERROR: M(
        "The supervisor itself failed (a bug or an unexpected host error); custody still cleaned up.",
        _SPENT,
        "As any stop: in flight infra_failed, the rest not_attempted.",
        f"Read `{layout.CONSOLE_LOG}` and `{layout.EVENTS}`, then " + _RESUME,
    ),
    StopReason.CUSTODY_BREACH: M(
        "The runner created a Docker object without the run's label (past the shim).",
        _SPENT,
        "As any stop; the run is not trustworthy until the breach is explained.",
        f"Read `{layout.EVENTS}` and the daemon's objects; do not resume before the cause is known",
    ),
    StopReason.LAUNCHER_DIED: M(
        "The launcher died; its watchdog fenced the run and removed its containers.",
        "Spending stops within --meter-blindness-sec; the campaign keeps the run as its active run.",
        "Tasks in flight end infra_failed, the rest not_attempted, once `clear` rebuilds the ledger.",
        "`cowork-adapter clear RUN_ROOT --operator-note '...'`, then " + _RESUME,
    ),
    StopReason.DOCKER_DAEMON_LOST: M(
        "The Docker daemon stopped answering for over 10 s, exited or restarted.",
        _SPENT + " With the daemon still silent, custody stays unproven and the campaign keeps the active run.",
        "As any stop: in flight infra_failed, the rest not_attempted.",
        "Bring the daemon back; `cowork-adapter clear RUN_ROOT ...` if custody is unproven, then " + _RESUME,
    ),
    StopReason.CAMPAIGN_STOPPED: M(
        "Another host of the shared campaign wrote the campaign's stop (a campaign-wide budget crossing).",
        _SPENT + " No host is admitted afterwards.",
        "This host settles its claims by their receipts and gives the rest back.",
        "`cowork-adapter status --campaign-db URL --campaign-name NAME`",
    ),
    StopReason.HOST_LEASE_LOST: M(
        "This host could not renew its lease in the campaign database (its claims may go to another host).",
        _SPENT,
        "Unsettled claims go back to open for another host.",
        "Restore the database connection, then run the host again with a new run root",
    ),
    StopReason.HOST_RUN_RELEASED: M(
        "An operator released this host run (`campaign release`) while its lease was lapsed; it came back and must run "
        "nothing more.",
        _SPENT + " It settles nothing.",
        "Its claims already belong to other hosts; it scores nothing.",
        "Nothing for this host; `cowork-adapter status --campaign-db URL --campaign-name NAME`",
    ),
    StopReason.RUNNER_FINISHED: M(
        "Not a stop: the runner finished by itself (recorded in the campaign history).",
        "Settled from the final meter reading.",
        "Every row as the runner left it.",
        "`cowork-adapter report RUN_ROOT`",
    ),
}

TASK_STATUSES: dict[TaskStatus, M] = {
    TaskStatus.PASSED: M(
        "The official evaluator returned true under a host seal.",
        "Its spending counts as any attempt's.",
        "Passed; settled, never retried.",
        "None: settled.",
    ),
    TaskStatus.FAILED: M(
        "The agent finished and the official evaluator returned false.",
        "Its spending counts as any attempt's.",
        "Not passed; settled, never retried.",
        "None: settled.",
    ),
    TaskStatus.AGENT_FAILED: M(
        "The agent phase ended without success (its own failure or a time, round or budget rail).",
        "Its spending counts as any attempt's.",
        "Not passed; settled, never retried.",
        "None: settled.",
    ),
    TaskStatus.INFRA_FAILED: M(
        "The attempt began but our side or the environment broke it (interrupted, pg_fail, no verdict, eval_hung).",
        "What it spent is spent (read from the meter, never from rows).",
        "Not passed, stays in the denominator; unsettled: a resume attempts it again.",
        _RESUME,
    ),
    TaskStatus.ENVIRONMENT_BLOCKED: M(
        "A server the task needs failed the environment check; the task was never handed to the runner.",
        "Nothing spent on it.",
        "Not passed, stays in the denominator; unsettled.",
        "`cowork-adapter run ... --probe inventory` to see the failing server",
    ),
    TaskStatus.NOT_ATTEMPTED: M(
        "Selected and never started (a stop, a budget, a crash before its turn).",
        "Nothing spent on it.",
        "Not passed, stays in the denominator; unsettled: a resume runs it.",
        _RESUME,
    ),
}

AUDIT_FINDING_REASONS: dict[AuditFindingReason, M] = {
    AuditFindingReason.ANSWER_SOURCE_REFERENCE: M(
        "A tool-call argument names ground truth or the upstream repository.",
        "None.",
        "None: never changes a verdict; read the call.",
        "`cowork-adapter report RUN_ROOT` (the finding's task, file and line)",
    ),
    AuditFindingReason.EVALUATOR_REFERENCE: M(
        "A tool-call argument names an evaluation/ path.",
        "None.",
        "None: never changes a verdict; read the call.",
        "`cowork-adapter report RUN_ROOT` (the finding's task, file and line)",
    ),
    AuditFindingReason.EVAL_RECORD_REFERENCE: M(
        "A tool-call argument names eval_res.json or the eval/diagnostic records.",
        "None.",
        "None: never changes a verdict (a verdict scores only under a host seal).",
        "`cowork-adapter report RUN_ROOT` (the finding's task, file and line)",
    ),
    AuditFindingReason.DIRECT_DATABASE_ACCESS: M(
        "A shell or code tool ran a PostgreSQL client directly instead of the task's MCP server.",
        "None.",
        "None: never changes a verdict; judge whether the task allowed it.",
        "`cowork-adapter report RUN_ROOT` (the finding's task, file and line)",
    ),
}

TAMPER_KINDS: dict[TamperKind, M] = {
    TamperKind.UNSEALED_VERDICT: M(
        "Official records in the dump that no host seal covers.",
        "None.",
        "The unsealed verdict never scores; the task is passed only by a sealed one.",
        "Read the task's dump and the report's Tampering section",
    ),
    TamperKind.PLANTED_BEFORE_EVAL: M(
        "A claim, receipt or eval_res.json stood in the dump before the first eval exec (renamed `planted-*`).",
        "None.",
        "Never honoured; the sealed verdict of the real eval scores.",
        "Read the task's `planted-*` files",
    ),
    TamperKind.SEALED_FILE_CHANGED: M(
        "A file the seal covers differs from its sealed bytes.",
        "None.",
        "The changed verdict does not score; the task is not passed.",
        f"Read the task's dump against `{_EVIDENCE}/<id>{layout.SEAL_SUFFIX}`",
    ),
    TamperKind.VERDICT_DISAGREES_RUNNER: M(
        "The sealed verdict differs from the runner's Pass: line or summary.csv.",
        "None.",
        "The sealed verdict scores; the runner's words do not.",
        "Read the task's agent log for a printed Pass: line",
    ),
    TamperKind.UNSAFE_ENTRY: M(
        "A link, FIFO, device, socket or oversize file where a record or log was read (never opened or followed).",
        "None.",
        "What it stood for is not read; a record that cannot be read is no verdict.",
        "Read the report's audit gaps for the path",
    ),
    TamperKind.OUTSIDE_OWN_DUMP: M(
        "A write, or a mount asked for, outside the task's own dump.",
        "None.",
        "A flag only; the write stayed in the container's own layer.",
        f"Read the task's shim evidence (`{_EVIDENCE}/{layout.CREATIONS_LOG}`)",
    ),
    TamperKind.GRADING_LOG_REWRITTEN: M(
        "traj_log.json said something the host did not record (a launch time, status, times or config field); the eval "
        "phase wrote the evaluator's log from host facts, the agent's kept as traj_log.agent.json.",
        "None.",
        "Graded on the host's log; the agent's values reach no evaluator.",
        "Read the task's traj_log.agent.json and the claim's evidence",
    ),
    TamperKind.UNVERIFIED_INFRA_CLAIM: M(
        "An infrastructure failure only the agent's own files or a dead server of its own said happened; the host saw "
        "no cause (score/infra.py).",
        "None.",
        "Scored agent_failed, settled: --resume-from never reruns it.",
        "Read the row's reason and the task's agent log",
    ),
    TamperKind.TASK_DB_CODE: M(
        "The agent's code or settings in its task's PostgreSQL (functions, operators, casts, views or rules where "
        "tables stood, triggers, search_path or role, database or system settings, processes left running), found by "
        "comparing the catalog with its state after preprocess.",
        "None.",
        "The task is not scored passed, whatever the evaluator said.",
        f"Read `{_EVIDENCE}/<id>{layout.TASKDB_SUFFIX}` (the objects are named)",
    ),
    TamperKind.TASK_DB_UNCHECKED: M(
        "The task's PostgreSQL could not be reset and compared before the eval (no baseline after preprocess, a late "
        "one, or a failed step).",
        "None.",
        "The task is not scored passed: an unchecked database could hold the agent's code.",
        f"Read `{_EVIDENCE}/<id>{layout.TASKDB_SUFFIX}` for the step that failed",
    ),
    TamperKind.GRADING_INPUTS_DIFFER: M(
        "traj_log.json's grading inputs differ from the task tree's (the evaluator got the task tree's).",
        "None.",
        "Graded on the task tree's inputs, not the agent's.",
        "Read the task's traj_log.json",
    ),
    TamperKind.SUMMARY_CHANGED: M(
        "The adapter summary changed after the agent phase ended.",
        "None.",
        "Classified from the host's copy taken when the agent phase ended.",
        f"Compare the dump's summary with `{_EVIDENCE}/<id>{layout.HELD_SUMMARY_SUFFIX}`",
    ),
    TamperKind.EVAL_HUNG: M(
        "The eval phase reached the adapter's bound and was killed.",
        "None beyond the attempt.",
        "infra_failed: unsettled, a resume attempts it again.",
        _RESUME,
    ),
    TamperKind.UNREADABLE_DUMP: M(
        "The task's files made a host reader fail; its row says only that and every sibling is read as usual.",
        "None beyond the attempt.",
        "infra_failed/dump_unreadable: unsettled, a resume attempts it again.",
        "Read the row's tampering detail and the task's dump",
    ),
    TamperKind.DUMP_OVER_BOUND: M(
        "The task's dump passed --dump-max-gib, --dump-max-entries or --dump-max-depth while it ran; its containers "
        "were stopped.",
        "None beyond the attempt (its agent was stopped).",
        "agent_failed/dump_over_bound:<bound>, whatever an evaluator said afterwards.",
        f"Read `{_EVIDENCE}/{layout.DUMP_BOUNDS_LOG}`",
    ),
}

DAEMON_KINDS: dict[DaemonKind, M] = {
    DaemonKind.ROOTFUL: M(
        "dockerd run as root in this host's namespaces: the gateway listens on its bridge address on this host.",
        "None.",
        "None.",
        "`cowork-adapter doctor ...` (its daemon kind line)",
    ),
    DaemonKind.ROOTLESS: M(
        "dockerd run by an unprivileged user inside RootlessKit (docker info: name=rootless); on a cgroup v1 "
        "host it enforces no limit, and `run` refuses it without --accept-unenforced-limits.",
        "None.",
        "A run that accepted unenforced limits says so in the report's disclosures.",
        "`cowork-adapter doctor ...` (its daemon kind line)",
    ),
}
