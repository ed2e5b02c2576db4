"""The eval phase: the official evaluator at most once per dump, under an exclusive claim.

First entry: publish the claim, call `TaskEvaluator.evaluate_from_log_file` once, write the
receipt. Any later entry replays the receipt's lines or refuses; it never evaluates again.

The agent under test wrote this dump, so (issue 27) on the first entry the docker shim names
(COWORK_EVAL_ENTRY=first):
* any official record already there (a claim, a receipt, eval_res.json) was planted: it is set
  aside as `planted-<name>` (evidence) and never honoured; the claim names what was set aside;
* every input the unchanged evaluator takes from traj_log.json is the task tree's or the host's
  (issue 36): the phase writes that file itself (gradinglog.py: the benchmark's own TaskConfig,
  the agent exec's start as the host saw it, the status mapped onto the upstream set), keeps the
  agent's original beside it as evidence, and the claim names every field that differed;
* a traj_log.json that is not a regular file within its cap is not evaluated (the evaluator would
  block on a FIFO or follow a link);
* the call is bounded (COWORK_EVAL_BOUND_SEC; the runner has no bound there): past it a receipt
  says `eval_hung`, the evaluator's processes are killed and the phase exits.
The host seals what this phase leaves (custody/shim.py), and only a sealed verdict is scored.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from typing import Any

from . import bench, gradinglog, protocol, safefile
from .diagnostic import run_diagnostic
from .runconfig import load_run_config, run_config_path
from .vocab import ContainerState, EvalRefusal, ReceiptCause

ENTRY_FILE = "cowork_entry.py"
# Set by the docker shim on the eval exec (custody/shim.py: ENTRY_ENV, SUMMARY_SHA_ENV, BOUND_ENV).
ENTRY_ENV = "COWORK_EVAL_ENTRY"
SUMMARY_SHA_ENV = "COWORK_AGENT_SUMMARY_SHA256"
BOUND_ENV = "COWORK_EVAL_BOUND_SEC"
PLANTED_PREFIX = "planted-"
EVALUATOR_FILE = os.path.join("utils", "evaluation", "evaluator.py")


def current_bindings(task_dir: str, task_root: str, config_path: str) -> dict:
    return protocol.bindings(
        task_dir=task_dir,
        task_root=task_root,
        log=os.path.join(task_root, protocol.LOG_NAME),
        config=config_path,
        evaluator=os.path.abspath(EVALUATOR_FILE),
        entry=os.path.abspath(ENTRY_FILE),
        container_dir=os.path.dirname(os.path.abspath(__file__)),
    )


def _agent_state() -> str:
    value = os.environ.pop("COWORK_AGENT_CONTAINER_STATE", "")
    return value if value in ContainerState.values() else ContainerState.UNKNOWN.value


def _refuse(out, cause: str, detail: str = "") -> int:
    text = f"[cowork] eval not run: {cause}" + (f" ({detail})" if detail else "")
    print(protocol.runner_safe(text), file=out, flush=True)
    return 1


def emit(receipt: dict, out) -> int:
    """Print the receipt's verdict lines (exit 0 only on a literal True), or one refusal line."""
    if receipt.get("official_run") and receipt.get("raised") is None:
        lines = protocol.verdict_lines(receipt.get("returned"))
        if lines is not None:
            for line in lines[0]:
                print(line, file=out, flush=True)
            return lines[1]
        return _refuse(out, "no_verdict", f"evaluator returned no boolean pass: {receipt.get('cause')}")
    return _refuse(out, str(receipt.get("cause")), f"raised {receipt['raised']}" if receipt.get("raised") else "")


def _publish_receipt(task_root: str, receipt: dict) -> None:
    path = protocol.receipt_path(task_root, receipt["attempt_id"])
    try:
        if not protocol.publish_exclusive(path, protocol.dump_record(receipt)):
            print("[cowork] eval receipt already exists; kept the first", file=sys.stderr, flush=True)
    except (OSError, ValueError) as exc:
        # The verdict still stands; a later entry will refuse (unfinished_claim).
        print(f"[cowork] eval receipt not written: {type(exc).__name__}", file=sys.stderr, flush=True)


def _reenter(task_root: str, claim_path: str, bind: dict, out) -> int:
    claim, _ = protocol.read_json_record(claim_path)
    if not protocol.valid_claim(claim):
        return _refuse(out, EvalRefusal.CLAIM_UNREADABLE.value)
    assert claim is not None
    receipt, _ = protocol.read_json_record(protocol.receipt_path(task_root, claim["attempt_id"]))
    receipt = receipt if protocol.valid_receipt(receipt, claim) else None
    after = receipt.get("bindings_after") if receipt else None
    if bind != claim["bindings"] and bind != after:
        return _refuse(out, EvalRefusal.BINDING_MISMATCH.value)
    if receipt is None:
        return _refuse(out, EvalRefusal.UNFINISHED_CLAIM.value)
    return emit(receipt, out)


def set_aside_planted(task_root: str) -> list:
    """Rename every official record found in the dump before the first eval entry to
    `planted-<name>` (kept as evidence, never honoured); `["<name>:<kind>", ...]` of what moved."""
    moved = []
    _, entries = safefile.scan_dir(task_root)
    for entry in entries:
        name = entry.name
        if name not in (protocol.CLAIM_NAME, protocol.EVAL_RES_NAME, gradinglog.AGENT_LOG_NAME) and not name.startswith(
            protocol.RECEIPT_PREFIX
        ):
            continue
        target = os.path.join(task_root, PLANTED_PREFIX + name)
        n = 1
        while os.path.lexists(target):
            n += 1
            target = os.path.join(task_root, f"{PLANTED_PREFIX}{n}-{name}")
        os.rename(os.path.join(task_root, name), target)  # a link or FIFO is renamed, never opened
        moved.append(f"{name}:{entry.kind}"[:200])
    return moved


HIDDEN_TASK_PARTS = ("groundtruth_workspace", "groundtruth_workspace_cn", "evaluation")


def _hidden_target(target: str, tasks: str, own: str) -> bool:
    """Whether `target` is task-tree content the agent's container did not have: another task, or
    its own task's ground truth or evaluator (only the eval container mounts the full tree)."""
    if target != tasks and not target.startswith(tasks + os.sep):
        return False
    if target != own and not target.startswith(own + os.sep):
        return True
    return any(
        target == os.path.join(own, part) or target.startswith(os.path.join(own, part) + os.sep)
        for part in HIDDEN_TASK_PARTS
    )


def link_to_hidden(task_root: str, task_dir: str, tasks: str = "tasks") -> str | None:
    """The first link in the agent's workspace (the workspace itself included) that resolves to
    task-tree content its own container did not see, relative to the dump; None when there is none.
    Such a link dangles where the agent ran and resolves in the eval container: a workspace pointing
    at the ground truth would be graded against itself. The walk never follows a link."""
    tasks = os.path.realpath(tasks)
    own = os.path.join(tasks, "finalpool", task_dir)
    workspace = os.path.join(task_root, "workspace")
    candidates = [workspace] if os.path.islink(workspace) else []
    if not candidates:
        for folder, dirs, files in os.walk(workspace):
            candidates.extend(os.path.join(folder, n) for n in dirs + files if os.path.islink(os.path.join(folder, n)))
    for path in candidates:
        if _hidden_target(os.path.realpath(path), tasks, own):
            return os.path.relpath(path, task_root)[:150]
    return None


def _entry_lock(task_root: str) -> int | None:
    """An exclusive lock for one task's entries, in the eval container's own /tmp (never the dump the
    agent wrote: nothing it left can block or fake it); None when it cannot be had (then entries are
    only as exclusive as the claim's O_EXCL, as before)."""

    digest = hashlib.sha256(os.path.abspath(task_root).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    try:
        fd = os.open(
            os.path.join(tempfile.gettempdir(), f"cowork-eval-{digest}.lock"),
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        return None
    return fd


def _entry_unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the descriptor releases its flock


def _bound_sec() -> float | None:
    try:
        value = float(os.environ.pop(BOUND_ENV, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def run_eval(task_dir: str, out=None) -> int:
    """One eval entry; returns the process exit code (0 only when the official pass is True)."""
    out = out or sys.stdout
    agent_state = _agent_state()
    entry = os.environ.pop(ENTRY_ENV, "")
    summary_sha = os.environ.pop(SUMMARY_SHA_ENV, "") or None
    bound = _bound_sec()
    host = gradinglog.host_facts(os.environ)
    config_path = os.path.abspath(run_config_path(os.environ))
    cfg, raw, error = load_run_config(config_path)
    short = cfg.agent_short_name if cfg else (raw.get("agent_short_name") if isinstance(raw, dict) else None)
    if not isinstance(short, str) or not short:
        return _refuse(out, "config_invalid", error)
    task_root = bench.expected_task_root(task_dir, short)
    os.makedirs(task_root, exist_ok=True)
    claim_path = os.path.join(task_root, protocol.CLAIM_NAME)
    # Entries of one task run one at a time up to their claim: the log the claim binds is written by
    # the entry that publishes it, never rewritten by a concurrent one (which would then meet its own
    # log's digest, not the claim's). The evaluation itself runs outside the lock.
    lock = _entry_lock(task_root)
    try:
        planted = set_aside_planted(task_root) if entry == "first" else []
        if os.path.lexists(claim_path):
            return _reenter(task_root, claim_path, current_bindings(task_dir, task_root, config_path), out)
        eval_res = os.path.join(task_root, protocol.EVAL_RES_NAME)
        prior = protocol.file_facts(eval_res)
        log_file = os.path.join(task_root, protocol.LOG_NAME)
        log_kind = safefile.kind_at(log_file)
        task_config, build_error = None, None
        written = gradinglog.Written([], [], protocol.file_facts(os.path.join(task_root, gradinglog.AGENT_LOG_NAME)))
        if prior["state"] == "absent" and log_kind in (safefile.REGULAR, safefile.ABSENT):
            try:
                task_config = bench.build_task_config(task_dir, short)  # deletes eval_res.json: absent here
                written = gradinglog.write_host_log(
                    task_root, task_config, host, repeat=entry == "repeat", now=time.time()
                )
            except Exception as exc:  # recorded in the receipt below, after the claim
                build_error = exc
        claim = protocol.new_claim(
            current_bindings(task_dir, task_root, config_path),
            agent_container_state=agent_state,
            prior_result=prior,
            eval_host=socket.gethostname(),
            pid=os.getpid(),
        )
        claim["evidence"].update(
            planted_before_eval=planted,
            grading_inputs_differ=written.grading_differ,
            grading_log_rewritten=written.log_differ,
            agent_log=written.agent_log,
            host_facts=host.as_evidence(),
            agent_summary_sha256=summary_sha,
            entry=entry or None,
        )
        if not protocol.publish_exclusive(claim_path, protocol.dump_record(claim)):
            return _reenter(task_root, claim_path, current_bindings(task_dir, task_root, config_path), out)
    finally:
        _entry_unlock(lock)
    cause = None
    if prior["state"] != "absent":
        cause = ReceiptCause.UNCLAIMED_PRIOR_RESULT.value
    elif log_kind not in (safefile.REGULAR, safefile.ABSENT):
        cause = f"{ReceiptCause.LOG_NOT_REGULAR.value}:{log_kind}"
    elif (outside := link_to_hidden(task_root, task_dir)) is not None:
        cause = f"{ReceiptCause.WORKSPACE_LINK_OUTSIDE_DUMP.value}:{outside}"
    elif build_error is not None:
        cause = f"{ReceiptCause.PREPARATION_ERROR.value}:{type(build_error).__name__}"
    if cause is not None:
        receipt = protocol.new_receipt(claim, official_run=False, cause=cause)
        _publish_receipt(task_root, receipt)
        return emit(receipt, out)
    return _evaluate(
        task_config, task_root, claim, out, bound=bound, diagnose=bool(cfg and cfg.diagnostic_eval_on_truncation)
    )


def _evaluate(
    task_config: Any, task_root: str, claim: dict, out, bound: float | None = None, diagnose: bool = False
) -> int:
    log_file = os.path.join(task_root, protocol.LOG_NAME)
    try:
        configured = bench.attr(task_config, "log_file")
        evaluator = bench.evaluator_class()
    except Exception as exc:
        receipt = protocol.new_receipt(
            claim, official_run=False, cause=f"{ReceiptCause.PREPARATION_ERROR.value}:{type(exc).__name__}"
        )
        _publish_receipt(task_root, receipt)
        return emit(receipt, out)
    if not configured or os.path.abspath(configured) != log_file:
        receipt = protocol.new_receipt(claim, official_run=False, cause=ReceiptCause.LOG_PATH_MISMATCH.value)
        _publish_receipt(task_root, receipt)
        return emit(receipt, out)
    raised: str | None = None
    returned: Any = None
    timer = threading.Timer(bound, _hung, args=(task_root, claim, out)) if bound else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        returned = asyncio.run(evaluator.evaluate_from_log_file(log_file))
    except BaseException as exc:  # recorded, then the receipt is written before anything else
        raised = type(exc).__name__
        if not isinstance(exc, Exception):
            _settle(task_root, claim, raised, None, out)
            raise
    finally:
        if timer is not None:
            timer.cancel()
    code = _settle(task_root, claim, raised, returned, out)
    if diagnose:  # opt-in, audit only: after the official receipt and lines, never changing either
        _diagnose(task_root, claim)
    return code


def _hung(task_root: str, claim: dict, out) -> None:
    """The bound passed with the evaluator still running (a checker blocked on a FIFO in the
    workspace, say): the receipt says so, its processes are killed, and the phase exits."""
    receipt = protocol.new_receipt(claim, official_run=False, cause=ReceiptCause.EVAL_HUNG.value)
    _publish_receipt(task_root, receipt)
    emit(receipt, out)
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(1)


def _descendants(root: int) -> list:
    """Every process below `root`, from /proc (children first found, then theirs)."""
    parents: dict = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode("utf-8", "replace")
            parents.setdefault(int(stat[stat.rfind(")") + 2 :].split()[1]), []).append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _diagnose(task_root: str, claim: dict) -> None:
    """The residual-state diagnostic (diagnostic.py); it prints nothing to the runner's log."""
    try:
        run_diagnostic(task_root, claim)
    except Exception as exc:  # its own failures are receipt outcomes; this is the last resort
        print(
            protocol.runner_safe(f"[cowork] diagnostic not recorded: {type(exc).__name__}"), file=sys.stderr, flush=True
        )


def _settle(task_root: str, claim: dict, raised: str | None, returned: Any, out) -> int:
    receipt = protocol.new_receipt(
        claim,
        official_run=True,
        cause=ReceiptCause.RAISED.value if raised else ReceiptCause.EVALUATED.value,
        raised=raised,
        returned=returned,
        result_file=protocol.file_facts(os.path.join(task_root, protocol.EVAL_RES_NAME)),
        bindings_after=current_bindings(claim["bindings"]["task_dir"], task_root, claim["bindings"]["config"]["path"]),
    )
    _publish_receipt(task_root, receipt)
    return emit(receipt, out)
