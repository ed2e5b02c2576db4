"""Whether a failed attempt is infrastructure's: decided from facts the agent cannot write.

A failing agent could once turn its attempt into `infra_failed`, which `--resume-from` reruns (a
free re-roll): kill its own entrypoint or server, leave a summary saying the provider failed, or
exit an upstream engine without traj_log.json (issue 36). classify() (ledger.py) still reads the
adapter's summary, but its `infra_failed` is only a claim now: `settle()` (pure) keeps it only when
the host itself saw a cause, named on the row (vocab.InfraCause); otherwise the row is
`agent_failed` with the tamper kind `unverified_infra_claim`, which recovery never reruns.

The host's facts, none of them in a file or process a container can reach:
- the shim's record of the agent exec's end and its exit code (`<id>.agent_exec`); a started exec
  (`<id>.task`) whose end the shim never recorded was cut by our side (the runner or the shim killed);
- whether the kernel OOM-killed a process of the agent container (its cgroup's oom_kill count, the
  daemon's State.OOMKilled), read by the shim before its removal (`<id>.resources.jsonl`);
- the gateway's log rows for the task's token (provider errors; whether any model answer came);
- the run's stop (the manifest's stop reason: a signal, a stop, the daemon lost, a budget...);
- the runner's own pg_fail row, written before any agent container of the task exists.
`read_host_facts()` reads them (score/resources.py's evidence_lines: bounded, no link followed); everything
else here is pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ..runroot.custody_evidence import AGENT_EXEC_SUFFIX
from ..runroot.layout import RunRoot
from ..schemas.gateway import GatewayRequest, read_requests
from ..schemas.ledger import TamperFinding
from ..vocab import INFRA_RUNTIME_REASONS, REFERENCE_ENGINES, EngineKind, InfraCause, StopReason, TamperKind, TaskStatus
from .resources import READINGS_SUFFIX, evidence_lines

# interruption causes that are not a stop of the run: the runner ended by itself (or nothing ran).
NOT_A_STOP = frozenset(
    {"runner_exited", "runner_finished", "cleanup_unproven", "nothing_remaining", "environment_blocked", "in_progress"}
)
# docker's own exit codes for an exec that never ran its command (125: docker failed, 126: not
# executable, 127: not found). The agent's entrypoint ends 0 by design, or by a signal (128+n).
EXEC_LOST_CODES = frozenset({125, 126, 127})
# Tamper kinds of a row's own dump and eval (what the agent did). A refused mount is the runner's
# request, not the agent's, so it does not by itself make an eval without verdict the agent's.
NOT_THE_AGENTS = frozenset({TamperKind.OUTSIDE_OWN_DUMP, TamperKind.UNVERIFIED_INFRA_CLAIM})


@dataclass(frozen=True)
class HostFacts:
    """What the host saw of one task's attempt (all False/None/0: nothing seen)."""

    recorded: bool = False  # the run's shim records these facts (a sealing run); False: a run from before
    exec_started: bool = False  # the shim saw the agent exec begin (`<id>.task`)
    exec_ended: bool = False  # the shim saw the agent exec end (`<id>.agent_exec`)
    exec_exit: int | None = None  # its exit code as the shim saw it
    oom_killed: bool = False
    gateway: bool = False  # the run's model traffic went through the gateway (provider errors are host-seen)
    provider_errors: int = 0  # gateway rows of this task: the provider answered 5xx/429 or never answered
    model_answers: int = 0  # gateway rows of this task: a chat completion the provider answered 2xx
    engine_acts_only_by_model: bool = False  # Ouroboros: the agent acts only through model answers
    reference_engine: bool = False  # oracle / nop: no agent runs, the adapter's own claim stands
    stop: str | None = None  # the run's stop reason (None: the runner ended by itself)
    final: bool = True  # the ledger is final (False: a live refresh, an exec may still run)
    runner_pg_fail: bool = False


class Settled(NamedTuple):
    """One row after the infra rule."""

    status: TaskStatus
    reason: str
    cause: InfraCause | None
    found: tuple[TamperFinding, ...] = ()
    provisional: bool = False  # a live row whose agent exec still runs: judged when it ends


def host_cause(host: HostFacts) -> InfraCause | None:
    """The first cause the host itself saw, in the order the report names them; None when none."""
    if host.runner_pg_fail and not host.exec_started:
        return InfraCause.PG_FAIL
    if host.stop == StopReason.DOCKER_DAEMON_LOST.value:
        return InfraCause.DAEMON_LOST
    if host.stop is not None:
        return InfraCause.RUN_STOPPED
    if host.oom_killed:
        return InfraCause.OOM_KILLED
    if host.exec_exit in EXEC_LOST_CODES:
        return InfraCause.EXEC_LOST
    if host.exec_started and not host.exec_ended and host.final:
        return InfraCause.EXEC_CUT
    if host.gateway and host.provider_errors > 0:
        return InfraCause.PROVIDER_ERRORS
    if host.gateway and host.engine_acts_only_by_model and host.model_answers == 0:
        return InfraCause.NO_MODEL_ANSWER
    if host.reference_engine:
        return InfraCause.NO_AGENT
    return None


def agent_finished(summary_state: str, summary: Mapping[str, Any] | None) -> bool:
    """The summary says the agent phase succeeded without infrastructure: an infra_failed row is
    then the eval's (no verdict), not a claim of the agent phase."""
    if summary_state != "present" or not isinstance(summary, Mapping):
        return False
    reason = summary.get("reason_code")
    return (
        summary.get("infra_failed") is False
        and summary.get("bench_status") == "success"
        and not (isinstance(reason, str) and reason in INFRA_RUNTIME_REASONS)
    )


def _claim(reason: str, host: HostFacts, summary_state: str) -> str:
    """One sentence naming what the agent side said, for the finding's detail."""
    if summary_state == "absent":
        said = "no adapter summary"
        if host.exec_ended:
            said += f" after the agent exec ended (exit {host.exec_exit})"
    elif summary_state == "unreadable":
        said = "an unreadable adapter summary"
    else:
        said = f"the summary says {reason}"
    seen = "no provider error in the gateway log" if host.gateway else "no gateway, so no provider error is host-seen"
    return f"{said}; {seen}, no OOM kill, no stop"[:200]


def settle(
    status: TaskStatus,
    reason: str,
    provisional: bool,
    *,
    host: HostFacts,
    summary_state: str,
    summary: Mapping[str, Any] | None,
    findings: Iterable[TamperFinding],
) -> Settled:
    """The row's final (status, reason, infra cause, added findings) under the infra rule.

    Only an infra_failed row changes, and a live provisional one never (its agent may still run).
    A row whose agent phase succeeded but whose eval gave no verdict stays infrastructure's unless
    the agent tampered (then that tampering is why: agent_failed, `no_verdict_after_tampering`)."""
    if status is not TaskStatus.INFRA_FAILED or provisional:
        return Settled(status, reason, None)
    if not host.recorded:
        return Settled(status, reason, InfraCause.LEGACY_UNVERIFIED)
    cause = host_cause(host)
    if agent_finished(summary_state, summary) and host.runner_pg_fail is False:
        if any(f.kind not in NOT_THE_AGENTS for f in findings):
            return Settled(TaskStatus.AGENT_FAILED, f"no_verdict_after_tampering:{reason}"[:200], None)
        return Settled(status, reason, cause or InfraCause.EVAL_NO_VERDICT)
    if cause is not None:
        return Settled(status, reason, cause)
    if host.exec_started and not host.exec_ended and not host.final:
        return Settled(status, reason, None, provisional=True)  # a claim while the exec runs: not judged yet
    found = TamperFinding(kind=TamperKind.UNVERIFIED_INFRA_CLAIM, detail=_claim(reason, host, summary_state))
    return Settled(TaskStatus.AGENT_FAILED, f"unverified_infra:{reason}"[:200], None, (found,))


# ================================================================ reading the host's facts


def is_provider_error(row: GatewayRequest) -> bool:
    """A forwarded request the provider failed: 5xx or 429, no answer at all (the gateway's 502), or a
    stream it broke off (the gateway's read of it failed); never one the gateway refused or its own
    fence cut (those are the run's, and counted elsewhere)."""
    broke_off = isinstance(row.error, str) and row.error.startswith("upstream:")
    return row.refused is None and not row.cut and (row.status >= 500 or row.status == 429 or broke_off)


def is_model_answer(row: GatewayRequest) -> bool:
    return row.refused is None and 200 <= row.status < 300 and row.path.rstrip("/").endswith("/chat/completions")


def gateway_by_runner(rows: Iterable[GatewayRequest]) -> dict[str, tuple[int, int]]:
    """runner id -> (provider errors, model answers) of its token's rows (pure)."""
    out: dict[str, tuple[int, int]] = {}
    for row in rows:
        if row.task is None:
            continue
        errors, answers = out.get(row.task, (0, 0))
        out[row.task] = (errors + is_provider_error(row), answers + is_model_answer(row))
    return out


def stop_of(interruption_cause: str) -> str | None:
    return None if interruption_cause in NOT_A_STOP else interruption_cause


def read_host_facts(
    run_root: Path, runner_ids: Mapping[str, str], *, recorded: bool, gateway: bool, engine: str | None
) -> dict[str, HostFacts]:
    """task -> the host's facts of its attempt, except the run's stop and the runner's row (the
    caller's, known per reading). Tasks without an agent exec get the run-level facts only."""
    evidence = RunRoot(run_root).evidence
    traffic = gateway_by_runner(read_requests(run_root)) if gateway and recorded else {}
    by_model = (engine or EngineKind.OUROBOROS.value) == EngineKind.OUROBOROS.value
    reference = engine in REFERENCE_ENGINES
    out: dict[str, HostFacts] = {}
    for task, ident in runner_ids.items():
        ended = evidence_lines(evidence / (ident + AGENT_EXEC_SUFFIX)) if recorded else []
        code = ended[-1].get("exit") if ended else None
        readings = evidence_lines(evidence / (ident + READINGS_SUFFIX)) if recorded else []
        errors, answers = traffic.get(ident, (0, 0))
        out[task] = HostFacts(
            recorded=recorded,
            exec_started=True,
            exec_ended=bool(ended),
            exec_exit=code if isinstance(code, int) and not isinstance(code, bool) else None,
            oom_killed=any(r.get("role") == "agent" and r.get("oom_killed") is True for r in readings),
            gateway=gateway,
            provider_errors=errors,
            model_answers=answers,
            engine_acts_only_by_model=by_model,
            reference_engine=reference,
        )
    return out
