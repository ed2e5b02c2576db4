"""The eval phase: the official evaluator at most once per dump, under an exclusive claim.

First entry: publish the claim, call `TaskEvaluator.evaluate_from_log_file` once, write the
receipt. Any later entry replays the receipt's lines or refuses; it never evaluates again.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from typing import Any, Optional

from . import bench, protocol
from .runconfig import load_run_config, run_config_path
from .vocab import ContainerState, EvalRefusal, ReceiptCause

ENTRY_FILE = "cowork_entry.py"
EVALUATOR_FILE = os.path.join("utils", "evaluation", "evaluator.py")


def current_bindings(task_dir: str, task_root: str, config_path: str) -> dict:
    return protocol.bindings(
        task_dir=task_dir, task_root=task_root, log=os.path.join(task_root, protocol.LOG_NAME),
        config=config_path, evaluator=os.path.abspath(EVALUATOR_FILE), entry=os.path.abspath(ENTRY_FILE),
        container_dir=os.path.dirname(os.path.abspath(__file__)))


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


def run_eval(task_dir: str, out=None) -> int:
    """One eval entry; returns the process exit code (0 only when the official pass is True)."""
    out = out or sys.stdout
    agent_state = _agent_state()
    config_path = os.path.abspath(run_config_path(os.environ))
    cfg, raw, error = load_run_config(config_path)
    short = cfg.agent_short_name if cfg else (raw.get("agent_short_name") if isinstance(raw, dict) else None)
    if not isinstance(short, str) or not short:
        return _refuse(out, "config_invalid", error)
    task_root = bench.expected_task_root(task_dir, short)
    os.makedirs(task_root, exist_ok=True)
    claim_path = os.path.join(task_root, protocol.CLAIM_NAME)
    bind = current_bindings(task_dir, task_root, config_path)
    if os.path.lexists(claim_path):
        return _reenter(task_root, claim_path, bind, out)
    eval_res = os.path.join(task_root, protocol.EVAL_RES_NAME)
    prior = protocol.file_facts(eval_res)
    claim = protocol.new_claim(bind, agent_container_state=agent_state, prior_result=prior,
                               eval_host=socket.gethostname(), pid=os.getpid())
    if not protocol.publish_exclusive(claim_path, protocol.dump_record(claim)):
        return _reenter(task_root, claim_path, bind, out)
    if prior["state"] != "absent":
        receipt = protocol.new_receipt(claim, official_run=False, cause=ReceiptCause.UNCLAIMED_PRIOR_RESULT.value)
        _publish_receipt(task_root, receipt)
        return emit(receipt, out)
    return _evaluate(task_dir, short, task_root, claim, out,
                     diagnose=bool(cfg and cfg.diagnostic_eval_on_truncation))


def _evaluate(task_dir: str, short: str, task_root: str, claim: dict, out, diagnose: bool = False) -> int:
    log_file = os.path.join(task_root, protocol.LOG_NAME)
    try:
        task_config = bench.build_task_config(task_dir, short)  # deletes eval_res.json: only now
        configured = bench.attr(task_config, "log_file")
        evaluator = bench.evaluator_class()
    except Exception as exc:
        receipt = protocol.new_receipt(claim, official_run=False,
                                       cause=f"{ReceiptCause.PREPARATION_ERROR.value}:{type(exc).__name__}")
        _publish_receipt(task_root, receipt)
        return emit(receipt, out)
    if not configured or os.path.abspath(configured) != log_file:
        receipt = protocol.new_receipt(claim, official_run=False, cause=ReceiptCause.LOG_PATH_MISMATCH.value)
        _publish_receipt(task_root, receipt)
        return emit(receipt, out)
    raised: Optional[str] = None
    returned: Any = None
    try:
        returned = asyncio.run(evaluator.evaluate_from_log_file(log_file))
    except BaseException as exc:  # recorded, then the receipt is written before anything else
        raised = type(exc).__name__
        if not isinstance(exc, Exception):
            _settle(task_root, claim, raised, None, out)
            raise
    code = _settle(task_root, claim, raised, returned, out)
    if diagnose:  # opt-in, audit only: after the official receipt and lines, never changing either
        _diagnose(task_root, claim)
    return code


def _diagnose(task_root: str, claim: dict) -> None:
    """The residual-state diagnostic (diagnostic.py); it prints nothing to the runner's log."""
    try:
        from .diagnostic import run_diagnostic

        run_diagnostic(task_root, claim)
    except Exception as exc:  # its own failures are receipt outcomes; this is the last resort
        print(protocol.runner_safe(f"[cowork] diagnostic not recorded: {type(exc).__name__}"),
              file=sys.stderr, flush=True)


def _settle(task_root: str, claim: dict, raised: Optional[str], returned: Any, out) -> int:
    receipt = protocol.new_receipt(
        claim, official_run=True,
        cause=ReceiptCause.RAISED.value if raised else ReceiptCause.EVALUATED.value,
        raised=raised, returned=returned,
        result_file=protocol.file_facts(os.path.join(task_root, protocol.EVAL_RES_NAME)),
        bindings_after=current_bindings(claim["bindings"]["task_dir"], task_root,
                                        claim["bindings"]["config"]["path"]))
    _publish_receipt(task_root, receipt)
    return emit(receipt, out)
