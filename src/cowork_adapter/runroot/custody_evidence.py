"""The custody evidence its writer (the docker shim) and its readers (score/) share, so both read alike:
the runner's per-task id, the agent exec's evidence file, and the host's one reading of a task dump's
official files (the claim, its receipt, eval_res.json) for a seal.

Standard library only, and nothing of the package: install_custody copies this file beside the shim
(custody/bash_env.py SHIM_FILES), which runs as `python3 -I -S shim.py`. The dump's files are read
through container/safefile.py, passed in (the shim loads its own copy).
"""

from __future__ import annotations

import hashlib
import os
import re
from types import ModuleType
from typing import Any

# A runner id or attempt id safe as a file name (the shim names evidence files after it).
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
AGENT_EXEC_SUFFIX = ".agent_exec"  # one line per agent exec end: its exit code as the shim saw it
# A task dump's official files, as the host reads them for the seal.
CLAIM_NAME = "ouroboros_eval_claim.json"  # container/protocol.py names; this file cannot import it
RECEIPT_PREFIX = "ouroboros_eval_receipt-"
EVAL_RES_NAME = "eval_res.json"
SUMMARY_NAME = "ouroboros_summary.json"
OFFICIAL_NAMES = (CLAIM_NAME, EVAL_RES_NAME)


def runner_digest(task: str) -> str:
    """The runner's per-task id suffix: the first 8 hex of md5(task + newline) (run_parallel.sh)."""
    return hashlib.md5((task + "\n").encode("utf-8")).hexdigest()[:8]


def file_seal(safefile: ModuleType, path: str, below: str | None) -> tuple[dict[str, Any], Any]:
    """{kind, bytes, sha256} of one dump file as the host reads it: no link, no FIFO, capped."""
    got = safefile.read_bytes(path, cap=safefile.RECORD_CAP, below=below)
    return {
        "kind": got.kind,
        "bytes": got.size,
        "sha256": hashlib.sha256(got.data).hexdigest() if got.ok else None,
    }, got


def read_seal_inputs(safefile: ModuleType, task_root: str, below: str | None) -> dict[str, Any]:
    """What the host seals after an eval exec: the claim, its receipt, eval_res.json, the verdict."""
    claim_facts, claim = file_seal(safefile, os.path.join(task_root, CLAIM_NAME), below)
    attempt: str | None = None
    evidence: dict[str, Any] = {}
    try:
        value: Any = safefile.loads(claim.data) if claim.ok else None  # nesting bounded before parsing
    except (UnicodeDecodeError, ValueError):
        value = None
    if isinstance(value, dict) and isinstance(value.get("attempt_id"), str) and SAFE_ID.match(value["attempt_id"]):
        attempt = value["attempt_id"]
        evidence = value["evidence"] if isinstance(value.get("evidence"), dict) else {}
    receipt_facts: dict[str, Any] | None = None
    verdict: dict[str, Any] | None = None
    if attempt is not None:
        receipt_facts, receipt = file_seal(safefile, os.path.join(task_root, RECEIPT_PREFIX + attempt + ".json"), below)
        try:
            rec = safefile.loads(receipt.data) if receipt.ok else None
        except (UnicodeDecodeError, ValueError):
            rec = None
        if isinstance(rec, dict) and rec.get("attempt_id") == attempt:
            returned = rec.get("returned")
            verdict = {
                "official_run": rec.get("official_run") is True,
                "raised": rec.get("raised"),
                "cause": str(rec.get("cause"))[:200],
                "pass": returned.get("pass")
                if isinstance(returned, dict) and isinstance(returned.get("pass"), bool)
                else None,
            }
    eval_facts, _ = file_seal(safefile, os.path.join(task_root, EVAL_RES_NAME), below)
    grading = evidence.get("grading_inputs_differ")
    rewritten = evidence.get("grading_log_rewritten")
    planted = evidence.get("planted_before_eval")
    return {
        "attempt_id": attempt,
        "claim": claim_facts,
        "receipt": receipt_facts,
        "eval_res": eval_facts,
        "verdict": verdict,
        "grading_inputs_differ": [str(x)[:100] for x in grading][:20] if isinstance(grading, list) else [],
        "grading_log_rewritten": [str(x)[:100] for x in rewritten][:40] if isinstance(rewritten, list) else [],
        "planted_moved": [str(x)[:200] for x in planted][:50] if isinstance(planted, list) else [],
    }
