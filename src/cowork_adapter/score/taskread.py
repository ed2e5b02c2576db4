"""The ledger's bounded readers of one task's files: each reads one file of a dump (or the host's
seal beside it) and answers what stood there, never raising for what the agent left.

Every read goes through container/safefile.py (no link followed, no FIFO or device opened, a byte
cap, JSON depth bounded before parsing). score/ledger.py's read_task() calls these for one task
and gathers the answers into the record score/row.py classifies.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import msgspec

from ..audit.scan import TaskScan, scan_events
from ..container import protocol, safefile
from ..container.procs import process_alive
from ..fileio import create_exclusive
from ..runroot import custody_evidence  # the shim's reader of a dump, so both seals read alike
from ..schemas.ledger import UsageFacts
from ..schemas.record import RecordInvalid, convert
from ..schemas.seal import EvalSeal, SealHead, seal_path
from ..vocab import OfficialEvalStatus


def read_json(path: Path) -> tuple[str, Any]:
    """(state, value): absent | unreadable | present, strict JSON (no duplicates, no NaN).

    Read without following a link, blocking or passing the record cap (container/safefile)."""
    got = safefile.read_bytes(str(path), cap=safefile.RECORD_CAP)
    if got.kind == safefile.ABSENT:
        return "absent", None
    if not got.ok or got.data is None:  # (ok implies data; said again for the type checker)
        return "unreadable", None
    try:
        return "present", protocol.strict_loads(got.data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "unreadable", None


def classify_eval_result(
    path: Path, log_path: Path | None = None
) -> tuple[OfficialEvalStatus, str, Any, int | None, str | None]:
    """(status, cause, literal pass value, bytes, sha256) of one eval_res.json, undemoted.

    protocol.py offers the byte classifier but not this file-level tuple, so it lives here.
    The pass value is the literal JSON value (disclosure only); None for a missing key.
    """
    got = safefile.read_bytes(str(path), cap=safefile.RECORD_CAP)
    if got.kind != safefile.ABSENT and not got.ok:
        return OfficialEvalStatus.UNREADABLE, f"os_error:{got.kind}", None, None, None
    data: bytes | None = got.data
    reading = protocol.classify_eval_bytes(data, None)
    if reading.cause == "pass_null_unlinked" and log_path is not None:
        # Only a null pass needs the linked log status (the gate decline); read it lazily.
        reading = protocol.classify_eval_bytes(data, protocol.read_log_status(str(log_path)))
    if data is None:
        return reading.status, reading.cause, None, None, None
    return reading.status, reading.cause, _literal_pass(data), len(data), hashlib.sha256(data).hexdigest()


def _literal_pass(data: bytes) -> Any:
    try:
        value = safefile.loads(data)  # depth, size and encoding bounded before parsing
    except ValueError:
        return None
    return value.get("pass") if isinstance(value, dict) else None


def scan_usage(path: Path) -> UsageFacts | None:
    """Totals of the llm_usage records of one ouroboros/events.jsonl (None when absent).

    Read by the audit's own scanner, so a task's row and its audit count the same records the
    same way (malformed lines are the audit's gaps; here they count for nothing)."""
    scan = TaskScan()
    try:
        scan_events(path, path.name, scan)
    except FileNotFoundError:
        return None
    except OSError:
        return UsageFacts(unreadable=True)
    return UsageFacts(
        records=scan.usage_records,
        token_records=scan.token_bearing,
        prompt_tokens=scan.prompt_tokens,
        completion_tokens=scan.completion_tokens,
        known_cost_usd=scan.cost_known_usd,
        unknown_cost_records=scan.cost_unknown,
    )


def attempt_records(dump: Path) -> tuple[str, str, dict[str, Any] | None, Path | None]:
    """(claim_state, receipt_state, receipt, receipt_path) of a dump's official attempt."""
    claim, cause = protocol.read_json_record(str(dump / protocol.CLAIM_NAME))
    if claim is None and cause == "file_absent":
        return "absent", "absent", None, None
    if not protocol.valid_claim(claim):
        return "invalid", "absent", None, None
    path = Path(protocol.receipt_path(str(dump), claim["attempt_id"]))
    receipt, cause = protocol.read_json_record(str(path))
    if receipt is None and cause == "file_absent":
        return "present", "absent", None, path
    if not protocol.valid_receipt(receipt, claim):
        return "present", "invalid", None, path
    return "present", "present", receipt, path


def canonical(value: Any) -> str | None:
    """Type-exact comparison key (`True == 1` in Python, but not in JSON)."""
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return None


def file_digest(path: Path | None) -> tuple[int | None, str | None]:
    if path is None:
        return None, None
    got = safefile.read_bytes(str(path), cap=safefile.LOG_JSON_CAP)
    if not got.ok or got.data is None:  # (ok implies data; said again for the type checker)
        return None, None
    return got.size, hashlib.sha256(got.data).hexdigest()


def late_seal(run_root: Path, head: SealHead, dump: Path, dumps: Path) -> EvalSeal | None:
    """The host's seal of an eval exec whose shim died before sealing it (a SIGKILL of the runner's
    group mid-eval), once its receipt exists: written once beside the head, so later readers
    compare the dump with it. Sound for the same reason as the shim's own seal: the head shows the
    agent's container was gone before the exec, and no other container mounts this dump. None when
    the head cannot show that (the agent's container was present or unknown): then unsealed."""
    if head.agent_container_state != "absent":
        return None
    if head.shim_pid is not None and process_alive(head.shim_pid, head.shim_start_ticks):
        return None  # the exec may still run: its own shim seals it, or a later reading does

    inputs = custody_evidence.read_seal_inputs(safefile, str(dump), str(dumps))
    planted = {entry.sha256 for entry in head.pre if entry.sha256}
    found = [
        inputs[name].get("sha256") for name in ("claim", "receipt", "eval_res") if isinstance(inputs.get(name), dict)
    ]
    if planted.intersection(found):
        return None  # a record that stood there before the exec: the agent's, never the verdict
    try:
        seal = convert(dict(msgspec.to_builtins(head), entry="late", **inputs), EvalSeal)
    except RecordInvalid:
        return None
    try:
        create_exclusive(seal_path(run_root, head.runner_id), seal.to_json())
    except OSError:  # a read-only copy of a run root: the seal holds for this reading only
        pass
    return seal
