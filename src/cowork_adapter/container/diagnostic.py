"""The opt-in residual-state diagnostic: after a truncated attempt, run the task's checker once.

When the agent was stopped by its time, round or budget rail, the official evaluator declines at
its status gate and never looks at the state the agent left. With --diagnostic-eval-on-truncation
the eval phase then reruns the task's unchanged checker command once, to observe that state. It is
an audit-only observation of the state after the stop (not an exact cut-off at the rail): it never
calls the official evaluation entry, never edits eval_res.json, the traj_log.json status or the
runner's log, and never becomes a score. Only the audit's eval_attempts block reports it.

Eligibility (every rule, `decide`): this attempt's official call returned the status-gate decline
and eval_res.json still holds exactly that payload; traj_log.json still has the claimed bytes; the
adapter summary is linked (same task, same status), not infrastructure, submitted, stopped by
deadline_local / wall_clock_timeout / round_limit / budget_exhausted, with model activity observed;
and the docker shim proved `agent-<id>` absent before this eval exec (claim evidence).

Execution: a child (`child_main`) in its own session rebuilds the checker command from the saved
task config exactly as the upstream evaluator does, and runs it through the shell. Its stdout and
stderr, and those of every grandchild, go to `ouroboros_diagnostic_log-<attempt>.log` only; the parent
prints nothing. The checker gets `--res_log_file <private copy of traj_log.json>`: many checkers
overwrite that file with their own summary, and the bound log must stay byte-identical (the copy
lives in a private temp dir and is deleted afterwards; its digests are in the receipt). The run is
capped at CAP_SEC (900 s); the env var COWORK_DIAGNOSTIC_CAP_SEC may only LOWER it and exists for
tests. After the child ends or the cap is reached, the process group gets SIGTERM, 5 s, SIGKILL,
5 s; its death is proven by killpg(pgid, 0) -> ProcessLookupError or by /proc holding only zombie
members. Unproven death is outcome `unknown`, never `timeout`. No command is `unavailable`, never
a pass.

Files beside the official records in the task dump: ouroboros_diagnostic_claim.json (exclusive;
an existing one means do nothing), ouroboros_diagnostic_receipt-<attempt>.json (the parent's
verdict), ouroboros_diagnostic_report-<attempt>.json (the child's stages) and
ouroboros_diagnostic_log-<attempt>.log (every file under the seed's `ouroboros_diagnostic_*`
names). Standard library only, Python 3.10.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from . import bench, protocol, safefile
from .procs import group_alive
from .vocab import (
    DIAGNOSTIC_LOG_PREFIX,
    DIAGNOSTIC_STOP_REASONS,
    ContainerState,
    DiagnosticOutcome,
    DiagnosticReason,
    OfficialEvalStatus,
)

CLAIM_NAME = "ouroboros_diagnostic_claim.json"
RECEIPT_PREFIX = "ouroboros_diagnostic_receipt-"
REPORT_PREFIX = "ouroboros_diagnostic_report-"
LOG_PREFIX = DIAGNOSTIC_LOG_PREFIX
SUMMARY_NAME = "ouroboros_summary.json"  # the agent phase's summary (agent.SUMMARY_NAME)
CLAIM_SCHEMA = "cowork_adapter.diagnostic_attempt.v1"
RECEIPT_SCHEMA = "cowork_adapter.diagnostic_receipt.v1"
REPORT_SCHEMA = "cowork_adapter.diagnostic_report.v1"
SEMANTICS = "residual_state_after_agent_stop_not_exact_cutoff"
CAP_SEC = 900.0
CAP_ENV = "COWORK_DIAGNOSTIC_CAP_SEC"  # tests only: a smaller positive value lowers the cap
GRACE_SEC = 5.0
STAGE_STARTED = "checker_started"
STAGE_FINAL = "final"
# The upstream evaluator's command line, with the private log copy as --res_log_file.
UPSTREAM_FORMAT = '%s --res_log_file %s --agent_workspace %s --groundtruth_workspace %s --launch_time "%s"'
REPORT_OUTCOMES = frozenset(
    {
        DiagnosticOutcome.CHECKS_PASSED.value,
        DiagnosticOutcome.CHECKS_FAILED.value,
        DiagnosticOutcome.UNAVAILABLE.value,
        DiagnosticOutcome.DIAGNOSTIC_ERROR.value,
    }
)
# Run in the child: put the adapter package's parent on sys.path, then call child_main.
BOOTSTRAP = (
    "import importlib, sys; sys.path.insert(0, sys.argv[1]); "
    "sys.exit(importlib.import_module(sys.argv[2] + '.diagnostic').child_main(sys.argv[3:]))"
)


def claim_path(task_root: str) -> str:
    return os.path.join(task_root, CLAIM_NAME)


def receipt_path(task_root: str, attempt_id: str) -> str:
    return os.path.join(task_root, f"{RECEIPT_PREFIX}{attempt_id}.json")


def report_path(task_root: str, attempt_id: str) -> str:
    return os.path.join(task_root, f"{REPORT_PREFIX}{attempt_id}.json")


def log_path(task_root: str, attempt_id: str) -> str:
    return os.path.join(task_root, f"{LOG_PREFIX}{attempt_id}.log")


def cap_seconds(env: Mapping[str, str]) -> float:
    """CAP_SEC, or the smaller positive finite value of COWORK_DIAGNOSTIC_CAP_SEC (tests only)."""
    try:
        value = float(env.get(CAP_ENV, ""))
    except ValueError:
        return CAP_SEC
    return value if math.isfinite(value) and 0 < value < CAP_SEC else CAP_SEC


# ---------------------------------------------------------------- eligibility (pure)


class Decision(NamedTuple):
    """`eligible`, else the outcome (ineligible | unavailable) and its reason."""

    eligible: bool
    outcome: str | None = None
    reason: str | None = None


ELIGIBLE = Decision(True)


def _no(outcome: DiagnosticOutcome, reason: DiagnosticReason) -> Decision:
    return Decision(False, outcome.value, reason.value)


def applicable(receipt: Any) -> bool:
    """False when the official evaluator returned a boolean verdict: nothing to observe then."""
    returned = receipt.get("returned") if isinstance(receipt, dict) else None
    return not (isinstance(returned, dict) and isinstance(returned.get("pass"), bool))


def _decode(data: bytes | None) -> Any:
    try:
        return protocol.strict_loads(data.decode("utf-8")) if data is not None else None
    except (UnicodeDecodeError, ValueError):
        return None


def decide(
    *,
    claim: Any,
    receipt: Any,
    log_facts: Mapping,
    log_status: Any,
    eval_res: bytes | None,
    summary: Any,
    summary_sha256: str | None = None,
) -> Decision:
    """Whether the diagnostic may run, from the attempt's records as read now. Pure.

    `claim`/`receipt`: the official attempt as published on disk; `log_facts`: file facts of
    traj_log.json now; `log_status`: its `status`; `eval_res`: eval_res.json bytes (None if
    absent); `summary`: the agent phase's summary (None if unreadable), `summary_sha256` the digest
    of its bytes now, which must equal the digest the host took when the agent exec ended (the
    claim's evidence): eligibility rests on facts the host holds. The first failing rule wins.
    """
    if (
        not protocol.valid_claim(claim)
        or not isinstance(receipt, dict)
        or receipt.get("schema") != protocol.RECEIPT_SCHEMA
        or receipt.get("attempt_id") != claim["attempt_id"]
    ):
        return _no(DiagnosticOutcome.UNAVAILABLE, DiagnosticReason.OFFICIAL_CLAIM_NOT_LINKED)
    ineligible = DiagnosticOutcome.INELIGIBLE
    if (
        receipt.get("official_run") is not True
        or receipt.get("raised") is not None
        or not isinstance(receipt.get("returned"), dict)
    ):
        return _no(ineligible, DiagnosticReason.OFFICIAL_NOT_COMPLETED)
    bound = found if isinstance(found := claim["bindings"].get("log"), dict) else {}
    if log_facts.get("state") != "present" or not bound.get("sha256") or log_facts.get("sha256") != bound["sha256"]:
        return _no(ineligible, DiagnosticReason.LOG_CHANGED_OR_UNREADABLE)
    reading = protocol.classify_eval_bytes(eval_res, log_status)
    result_file = found if isinstance(found := receipt.get("result_file"), dict) else {}
    same_bytes = eval_res is not None and hashlib.sha256(eval_res).hexdigest() == result_file.get("sha256")
    if reading.status != OfficialEvalStatus.DECLINED or not same_bytes or _decode(eval_res) != receipt["returned"]:
        return _no(ineligible, DiagnosticReason.NOT_SAME_ATTEMPT_STATUS_GATE_DECLINE)
    if not isinstance(summary, dict):
        return _no(ineligible, DiagnosticReason.ADAPTER_SUMMARY_UNAVAILABLE)
    evidence = found if isinstance(found := claim.get("evidence"), dict) else {}
    held = evidence.get("agent_summary_sha256")
    if not isinstance(held, str) or not held or summary_sha256 != held:
        return _no(ineligible, DiagnosticReason.ADAPTER_SUMMARY_CHANGED)
    if summary.get("task") != claim["bindings"].get("task_dir") or summary.get("bench_status") != log_status:
        return _no(ineligible, DiagnosticReason.ADAPTER_SUMMARY_NOT_LINKED)
    if summary.get("infra_failed") is not False:
        return _no(ineligible, DiagnosticReason.INFRASTRUCTURE_OUTCOME)
    if summary.get("task_submission_started") is not True:
        return _no(ineligible, DiagnosticReason.NO_TASK_SUBMISSION)
    if summary.get("reason_code") not in DIAGNOSTIC_STOP_REASONS:
        return _no(ineligible, DiagnosticReason.STOP_REASON_NOT_ELIGIBLE)
    activity = summary.get("model_activity_observed")
    if activity is False:
        return _no(ineligible, DiagnosticReason.NO_AGENT_ACTIVITY)
    if activity is not True:
        return _no(ineligible, DiagnosticReason.AGENT_ACTIVITY_UNKNOWN)
    if evidence.get("agent_container_state") != ContainerState.ABSENT.value:
        return _no(ineligible, DiagnosticReason.AGENT_TERMINATION_UNPROVEN)
    return ELIGIBLE


# ---------------------------------------------------------------- the checker command (pure)


def checker_command(
    saved: Any, *, task_dir: str, log_file: str, res_log_file: str, rebuild: Callable[[str], tuple] | None = None
) -> tuple[str | None, str]:
    """(command, "") or (None, reason) from a saved traj_log.json object, as upstream builds it.

    `log_file` is the bound traj_log.json the saved config must name; `res_log_file` replaces it on
    the command line. `rebuild(task_dir) -> (command, groundtruth)` re-resolves a sanitized config
    against the full tree (the upstream fallback); it is called only when one of them is missing.
    """
    config = saved.get("config") if isinstance(saved, dict) else None
    if (
        not isinstance(config, dict)
        or config.get("single_turn_mode") is not True
        or not isinstance(config.get("agent_workspace"), str)
    ):
        return None, DiagnosticReason.SAVED_CONFIG_UNSUPPORTED.value
    stated_log = config.get("log_file")
    if (
        config.get("task_dir") != task_dir
        or not isinstance(stated_log, str)
        or os.path.abspath(stated_log) != os.path.abspath(log_file)
    ):
        return None, DiagnosticReason.SAVED_CONFIG_NOT_LINKED.value
    evaluation = found if isinstance(found := config.get("evaluation"), dict) else {}
    command, groundtruth = evaluation.get("evaluation_command"), evaluation.get("groundtruth_workspace")
    if (command is None or groundtruth is None) and rebuild is not None:
        rebuilt_command, rebuilt_groundtruth = rebuild(task_dir)
        command, groundtruth = command or rebuilt_command, groundtruth or rebuilt_groundtruth
    if not isinstance(command, str) or not command.strip():
        return None, DiagnosticReason.NO_EVAL_COMMAND.value
    launch = " ".join(str(config.get("launch_time")).split()[:2])
    workspace = os.path.abspath(config["agent_workspace"])
    return UPSTREAM_FORMAT % (command, res_log_file, workspace, groundtruth, launch), ""


def _rebuild_from_tree(task_dir: str) -> tuple:
    """The benchmark's own Evaluation.build against the full tree in cwd (child process only)."""
    bench._cwd_on_path()
    from utils.data_structures.task_config import Evaluation  # type: ignore

    rebuilt = Evaluation.build(task_dir)
    return bench.attr(rebuilt, "evaluation_command"), bench.attr(rebuilt, "groundtruth_workspace")


# ---------------------------------------------------------------- the child


def child_main(argv: list) -> int:
    """`<task_root> <attempt_id> <res_log_copy> <task_dir> <bound log>`: rebuild, run, report.

    Runs with stdout/stderr on the diagnostic log; the report is the only record it writes.
    """
    task_root, attempt_id, copy, task_dir, bound_log = argv[:5]
    path = report_path(task_root, attempt_id)
    report: dict = {
        "schema": REPORT_SCHEMA,
        "attempt_id": attempt_id,
        "stage": STAGE_STARTED,
        "outcome": None,
        "reason": None,
        "command": None,
        "command_sha256": None,
        "checker_exit_code": None,
    }

    def publish(**fields: Any) -> None:
        report.update(fields, written_at=protocol.now_iso())
        protocol.write_atomic(path, protocol.dump_record(report))

    try:
        with open(copy, "rb") as fh:
            saved = _decode(fh.read())
        command, reason = checker_command(
            saved, task_dir=task_dir, log_file=bound_log, res_log_file=copy, rebuild=_rebuild_from_tree
        )
        if command is None:
            print(f"[diagnostic] no checker: {reason}", flush=True)
            publish(stage=STAGE_FINAL, outcome=DiagnosticOutcome.UNAVAILABLE.value, reason=reason)
            return 0
        publish(command=command, command_sha256=hashlib.sha256(command.encode("utf-8")).hexdigest())
        print(f"[diagnostic] $ {command}", flush=True)
        code = subprocess.call(command, shell=True, cwd=os.getcwd(), stdin=subprocess.DEVNULL)
        print(f"[diagnostic] checker exit code {code}", flush=True)
        outcome = DiagnosticOutcome.CHECKS_PASSED if code == 0 else DiagnosticOutcome.CHECKS_FAILED
        publish(stage=STAGE_FINAL, outcome=outcome.value, reason=f"checker_exit_{code}", checker_exit_code=code)
        return 0
    except Exception as exc:  # the traceback goes to the diagnostic log, the outcome to the report
        traceback.print_exc()
        publish(
            stage=STAGE_FINAL,
            outcome=DiagnosticOutcome.DIAGNOSTIC_ERROR.value,
            reason=f"{DiagnosticReason.EXCEPTION.value}:{type(exc).__name__}",
        )
        return 1


# ---------------------------------------------------------------- process group custody


def stop_group(proc: subprocess.Popen, grace: float | None = None) -> bool:
    """SIGTERM the child's group, wait `grace` (GRACE_SEC), SIGKILL, wait again; True only if death is proven."""
    grace = GRACE_SEC if grace is None else grace
    pgid = proc.pid
    proc.poll()  # reap the leader first: our own zombie would keep the group "alive"
    if not group_alive(pgid):
        return True
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        except OSError:
            return False
        deadline = time.monotonic() + grace
        while True:
            proc.poll()
            if not group_alive(pgid):
                return True
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    return False


class _Interrupted(BaseException):
    """SIGTERM reached the eval phase while the diagnostic ran."""


def _raise_interrupted(signum, frame):
    raise _Interrupted(f"signal {signum}")


# ---------------------------------------------------------------- the parent


def _read_bytes(path: str) -> bytes | None:
    """A dump file's bytes, read as every reader of agent-written files reads (container/safefile)."""
    return safefile.read_bytes(path, cap=safefile.LOG_JSON_CAP).data


def _package_home() -> tuple[str, str]:
    """(folder to put on sys.path, package name) of this package, however it was imported."""
    package = __package__ or "cowork_container"
    home = os.path.dirname(os.path.abspath(__file__))
    for _ in package.split("."):
        home = os.path.dirname(home)
    return home, package


def _new_claim(attempt_id: str, cap: float) -> dict:
    return {
        "schema": CLAIM_SCHEMA,
        "kind": "diagnostic",
        "attempt_id": attempt_id,
        "semantics": SEMANTICS,
        "cap_sec": cap,
        "official_verdict_unchanged": True,
        "created_at": protocol.now_iso(),
        "pid": os.getpid(),
    }


def run_diagnostic(
    task_root: str, claim: Mapping, *, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> dict | None:
    """Run the diagnostic for the official attempt `claim` (this process's claim); its receipt.

    None when nothing was recorded: the official evaluator returned a boolean verdict, or a
    diagnostic claim already exists for this dump. Never raises on the diagnostic's own failures
    (they are receipt outcomes); never writes anything but the four diagnostic files.
    """
    env = dict(os.environ if env is None else env)
    cwd = cwd or os.getcwd()
    attempt_id = str(claim["attempt_id"])
    on_disk, _ = protocol.read_json_record(os.path.join(task_root, protocol.CLAIM_NAME))
    receipt, _ = protocol.read_json_record(protocol.receipt_path(task_root, attempt_id))
    if not applicable(receipt):
        return None
    cap = cap_seconds(env)
    record = _new_claim(attempt_id, cap)
    if not protocol.publish_exclusive(claim_path(task_root), protocol.dump_record(record)):
        return None
    started = time.monotonic()
    bound_log = os.path.join(task_root, protocol.LOG_NAME)
    summary, _ = protocol.read_json_record(os.path.join(task_root, SUMMARY_NAME))
    summary_sha = protocol.file_facts(os.path.join(task_root, SUMMARY_NAME))["sha256"]
    result = dict(
        record,
        log_path=bound_log,
        eligible=False,
        reason_code=summary.get("reason_code") if summary else None,
        checker_exit_code=None,
        command=None,
        command_sha256=None,
        exit_code=None,
        custody="not_started",
        report_stage=None,
        res_log_copy=None,
        outcome=None,
        reason=None,
    )
    result["schema"] = RECEIPT_SCHEMA
    try:
        linked = on_disk if on_disk == dict(claim) else None
        decision = decide(
            claim=linked,
            receipt=receipt,
            log_facts=protocol.file_facts(bound_log),
            log_status=protocol.read_log_status(bound_log),
            eval_res=_read_bytes(os.path.join(task_root, protocol.EVAL_RES_NAME)),
            summary=summary,
            summary_sha256=summary_sha,
        )
        if decision.eligible and linked is not None:  # (eligible implies the claim: said for the type checker)
            result["eligible"] = True
            result.update(_execute(task_root, attempt_id, linked, bound_log, cap, env, cwd))
        else:
            result.update(outcome=decision.outcome, reason=decision.reason)
    except Exception as exc:  # a broken diagnostic is recorded, never raised into the eval phase
        result.update(
            outcome=DiagnosticOutcome.DIAGNOSTIC_ERROR.value,
            reason=f"{DiagnosticReason.EXCEPTION.value}:{type(exc).__name__}",
        )
    result.update(elapsed_sec=round(time.monotonic() - started, 3), completed_at=protocol.now_iso())
    if not protocol.publish_exclusive(receipt_path(task_root, attempt_id), protocol.dump_record(result)):
        raise OSError("diagnostic receipt already exists")
    return result


def _execute(
    task_root: str, attempt_id: str, claim: Mapping, bound_log: str, cap: float, env: Mapping[str, str], cwd: str
) -> dict:
    """Copy the bound log privately, run the child under the cap, prove its group dead."""
    data = _read_bytes(bound_log)
    bound_sha = claim["bindings"]["log"]["sha256"]
    if data is None or hashlib.sha256(data).hexdigest() != bound_sha:
        return {
            "eligible": False,
            "outcome": DiagnosticOutcome.INELIGIBLE.value,
            "reason": DiagnosticReason.LOG_CHANGED_OR_UNREADABLE.value,
        }
    private = tempfile.mkdtemp(prefix="cowork-diagnostic-")  # 0700: the checker may rewrite only this copy
    try:
        copy = os.path.join(private, protocol.LOG_NAME)
        with open(copy, "wb") as fh:
            fh.write(data)
        out = _run_child(task_root, attempt_id, copy, claim["bindings"]["task_dir"], bound_log, cap, env, cwd)
        after = protocol.file_facts(copy)
        out["res_log_copy"] = {
            "sha256_before": bound_sha,
            "sha256_after": after["sha256"],
            "rewritten_by_checker": after["sha256"] != bound_sha,
        }
        return out
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _run_child(
    task_root: str,
    attempt_id: str,
    copy: str,
    task_dir: str,
    bound_log: str,
    cap: float,
    env: Mapping[str, str],
    cwd: str,
) -> dict:
    home, package = _package_home()
    argv = [sys.executable, "-u", "-c", BOOTSTRAP, home, package, task_root, attempt_id, copy, task_dir, bound_log]
    fd = os.open(log_path(task_root, attempt_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        return {
            "outcome": DiagnosticOutcome.DIAGNOSTIC_ERROR.value,
            "reason": f"{DiagnosticReason.SPAWN_ERROR.value}:{type(exc).__name__}",
        }
    finally:
        os.close(fd)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_interrupted) if main_thread else None
    timed_out = interrupted = False
    try:
        try:
            proc.wait(timeout=cap)
        except subprocess.TimeoutExpired:
            timed_out = True
        except _Interrupted:
            interrupted = True
        dead = stop_group(proc)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    report, _ = protocol.read_json_record(report_path(task_root, attempt_id))
    out: dict = {
        "exit_code": proc.returncode,
        "custody": "group_dead" if dead else "unconfirmed",
        "report_stage": report.get("stage") if report else None,
    }
    if report:
        out.update(
            command=report.get("command"),
            command_sha256=report.get("command_sha256"),
            checker_exit_code=report.get("checker_exit_code"),
        )
    if not dead:
        out.update(outcome=DiagnosticOutcome.UNKNOWN.value, reason=DiagnosticReason.GROUP_DEATH_UNCONFIRMED.value)
    elif timed_out:
        out.update(outcome=DiagnosticOutcome.TIMEOUT.value, reason=DiagnosticReason.CAP_REACHED.value)
    elif interrupted:
        out.update(
            outcome=DiagnosticOutcome.DIAGNOSTIC_ERROR.value,
            reason=f"{DiagnosticReason.EXCEPTION.value}:{_Interrupted.__name__}",
        )
    elif report and report.get("stage") == STAGE_FINAL and report.get("outcome") in REPORT_OUTCOMES:
        out.update(outcome=report["outcome"], reason=report.get("reason"))
    else:
        out.update(outcome=DiagnosticOutcome.DIAGNOSTIC_ERROR.value, reason=DiagnosticReason.NO_FINAL_REPORT.value)
    return out
