"""The eval claim/receipt protocol, file facts, the eval_res.json reader and secret scrubbing.

Shared by the container (eval phase) and the host (ledger, audit): standard library only, no
side effects at import, pure functions wherever the work allows. Record layout:

* claim   `<task_root>/ouroboros_eval_claim.json`: published exclusively, at most one per dump;
* receipt `<task_root>/ouroboros_eval_receipt-<attempt_id>.json`: written once, after the call.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any, NamedTuple, TypeGuard

from . import safefile
from .vocab import OfficialEvalStatus, ReceiptCause

CLAIM_NAME = "ouroboros_eval_claim.json"
RECEIPT_PREFIX = "ouroboros_eval_receipt-"
EVAL_RES_NAME = "eval_res.json"
LOG_NAME = "traj_log.json"
CLAIM_SCHEMA = "cowork_adapter.eval_attempt.v1"
RECEIPT_SCHEMA = "cowork_adapter.eval_receipt.v1"
GATE_TEXT = "Task status: {status}, only SUCCESS counts as pass; pass is null"
MIN_SECRET_LEN = 8
REDACTED = "[REDACTED]"
CAUSE_MAX = 200


# ---------------------------------------------------------------- scrubbing


def secret_terms(values: Iterable[Any]) -> list[str]:
    """The scrub terms among `values`: strings of at least 8 characters, longest first."""
    terms = {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_LEN}
    return sorted(terms, key=lambda t: (-len(t), t))


def scrub(text: str, terms: Iterable[str]) -> str:
    """`text` with every term replaced by a fixed marker."""
    for term in terms:
        if term:
            text = text.replace(term, REDACTED)
    return text


def scrub_bytes(data: bytes, terms: Iterable[str]) -> bytes:
    """`data` with every term (as UTF-8) replaced; works on files that are not valid UTF-8."""
    for term in terms:
        if term:
            data = data.replace(term.encode("utf-8"), REDACTED.encode("utf-8"))
    return data


def runner_safe(text: str) -> str:
    """A line the runner's `Status:`/`Pass:` greps cannot match (ours are the only such lines)."""
    out = text.replace("\r", " ").replace("\n", " ")
    for word in ("Status:", "status:", "STATUS:", "Pass:", "pass:", "PASS:"):
        out = out.replace(word, word[:-1] + " =")
    return out


# ---------------------------------------------------------------- records and file facts


def dump_record(obj: Any) -> bytes:
    """Canonical record bytes: sorted keys, indent 2, non-ASCII kept, NaN refused, newline."""
    return (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def file_facts(path: str, cap: int = safefile.LOG_JSON_CAP) -> dict:
    """`{path, state: absent|unreadable|present, bytes, sha256[, cause]}` of one file.

    Read without following a link, without blocking and up to `cap` bytes (the agent may have
    put a link, a FIFO or a huge file there): anything but a regular file within the cap is
    unreadable, its kind in `cause`."""
    facts: dict = {"path": path, "state": "absent", "bytes": None, "sha256": None}
    got = safefile.read_bytes(path, cap=cap)
    if got.kind == safefile.ABSENT:
        return facts
    if not got.ok or got.data is None:  # (ok implies data; said again for the type checker)
        facts.update(state="unreadable", cause=f"{got.kind}:{got.cause}" if got.cause else got.kind)
        return facts
    facts.update(state="present", bytes=got.size, sha256=hashlib.sha256(got.data).hexdigest())
    return facts


def bundle_facts(label: str, paths: Iterable[str]) -> dict:
    """File facts of several files hashed together (names and digests in sorted order)."""
    members = [file_facts(p) for p in sorted(paths)]
    digest = hashlib.sha256()
    for m in members:
        digest.update(f"{os.path.basename(m['path'])}\0{m['state']}\0{m['sha256']}\n".encode())
    states = {m["state"] for m in members}
    state = "present" if states == {"present"} else ("absent" if not members else sorted(states - {"present"})[0])
    return {
        "path": label,
        "state": state,
        "bytes": sum(m["bytes"] or 0 for m in members),
        "sha256": digest.hexdigest(),
        "members": [os.path.basename(m["path"]) for m in members],
    }


def bindings(
    *, task_dir: str, task_root: str, log: str, config: str, evaluator: str, entry: str, container_dir: str
) -> dict:
    """What a claim is bound to: the dump and the bytes of everything that decides the verdict."""
    helpers = [os.path.join(container_dir, n) for n in os.listdir(container_dir) if n.endswith(".py")]
    return {
        "task_dir": task_dir,
        "task_root": os.path.abspath(task_root),
        "log": file_facts(log),
        "config": file_facts(config),
        "evaluator": file_facts(evaluator),
        "entry": bundle_facts("entry", [entry, *helpers]),
    }


def new_claim(bind: Mapping, *, agent_container_state: str, prior_result: Mapping, eval_host: str, pid: int) -> dict:
    return {
        "schema": CLAIM_SCHEMA,
        "kind": "official",
        "attempt_id": uuid.uuid4().hex,
        "created_at": now_iso(),
        "eval_host": eval_host,
        "pid": pid,
        "bindings": dict(bind),
        "evidence": {"agent_container_state": agent_container_state, "prior_result": dict(prior_result)},
    }


def new_receipt(
    claim: Mapping,
    *,
    official_run: bool,
    cause: str,
    raised: str | None = None,
    returned: Any = None,
    result_file: Mapping | None = None,
    bindings_after: Mapping | None = None,
) -> dict:
    """The receipt of one attempt; `returned` is kept only when it is JSON (else its type name)."""
    unserializable = None
    if returned is not None:
        try:
            dump_record(returned)
        except (TypeError, ValueError):
            unserializable, returned = type(returned).__name__, None
    return {
        "schema": RECEIPT_SCHEMA,
        "kind": "official",
        "attempt_id": claim["attempt_id"],
        "bindings": claim["bindings"],
        "official_run": official_run,
        "cause": cause[:CAUSE_MAX],
        "raised": raised,
        "returned": returned,
        "returned_unserializable": unserializable,
        "result_file": dict(result_file) if result_file is not None else None,
        # The task checker may rewrite traj_log.json: replay accepts these bindings too.
        "bindings_after": dict(bindings_after) if bindings_after is not None else None,
        "completed_at": now_iso(),
    }


def receipt_path(task_root: str, attempt_id: str) -> str:
    return os.path.join(task_root, f"{RECEIPT_PREFIX}{attempt_id}.json")


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def publish_exclusive(path: str, data: bytes) -> bool:
    """Publish complete bytes at `path` only if nothing is there; False if it already exists.

    A fsynced temp file is hard-linked to the final name (atomic and exclusive); where links are
    unsupported, O_CREAT|O_EXCL creation is the fallback.
    """
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    _fsync_dir(folder)
    return True


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data` via a fsynced dot-temp and rename (no torn file on a kill)."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


# ---------------------------------------------------------------- strict JSON


class StrictJSONError(ValueError):
    """Duplicate keys or a non-finite constant: the file is not one unambiguous JSON value."""


def _no_duplicates(pairs: list) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise StrictJSONError("duplicate_key")
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise StrictJSONError("non_finite_constant")


def strict_loads(text: str) -> Any:
    """json.loads that refuses duplicate keys and NaN/Infinity (raises StrictJSONError), and a
    document nested deeper than safefile.MAX_DEPTH (StrictJSONError "too_deep"), before parsing."""
    try:
        return safefile.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except (safefile.TooDeep, safefile.TooLarge) as exc:
        raise StrictJSONError(str(exc)) from None


def read_json_record(path: str, cap: int = safefile.RECORD_CAP) -> tuple[dict | None, str]:
    """(object, "") or (None, cause) for a record file the protocol wrote (read as file_facts reads)."""
    got = safefile.read_bytes(path, cap=cap)
    if got.kind == safefile.ABSENT:
        return None, "file_absent"
    if not got.ok or got.data is None:  # (ok implies data; said again for the type checker)
        return None, f"not_regular:{got.kind}"
    data = got.data
    try:
        value = strict_loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"invalid:{type(exc).__name__}"
    if not isinstance(value, dict):
        return None, f"not_object:{type(value).__name__}"
    return value, ""


def valid_claim(value: dict | None) -> TypeGuard[dict]:
    return (
        isinstance(value, dict)
        and value.get("schema") == CLAIM_SCHEMA
        and isinstance(value.get("attempt_id"), str)
        and len(value["attempt_id"]) == 32
        and isinstance(value.get("bindings"), dict)
    )


def valid_receipt(value: dict | None, claim: Mapping) -> TypeGuard[dict]:
    return (
        isinstance(value, dict)
        and value.get("schema") == RECEIPT_SCHEMA
        and value.get("attempt_id") == claim.get("attempt_id")
        and isinstance(value.get("official_run"), bool)
    )


# ---------------------------------------------------------------- eval_res.json reader


class EvalReading(NamedTuple):
    """What an eval_res.json says. `passed` is the literal bool only when status is completed."""

    status: OfficialEvalStatus
    cause: str
    passed: bool | None


def _utf8_error_cause(exc: UnicodeDecodeError) -> str:
    return f"{ReceiptCause.UTF8_ERROR.value}:byte_{exc.start}"


def classify_eval_bytes(data: bytes | None, log_status: Any = None) -> EvalReading:
    """Classify eval_res.json bytes (None = no file). Pure; never coerces a non-boolean pass.

    `log_status` is the `status` of the linked traj_log.json; a null pass is a decline only
    with the exact upstream gate shape and a linked non-success status.
    """
    if data is None:
        return EvalReading(OfficialEvalStatus.UNREPORTED, ReceiptCause.FILE_ABSENT.value, None)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return EvalReading(OfficialEvalStatus.UNREADABLE, _utf8_error_cause(exc), None)
    try:
        value = strict_loads(text)
    except StrictJSONError as exc:
        return EvalReading(OfficialEvalStatus.UNREADABLE, f"{ReceiptCause.JSON_ERROR.value}:{exc}", None)
    except json.JSONDecodeError as exc:
        return EvalReading(
            OfficialEvalStatus.UNREADABLE, f"{ReceiptCause.JSON_ERROR.value}:line_{exc.lineno}_col_{exc.colno}", None
        )
    if not isinstance(value, dict):
        return EvalReading(
            OfficialEvalStatus.UNREADABLE, f"{ReceiptCause.NOT_OBJECT.value}:{type(value).__name__}", None
        )
    if "pass" not in value:
        return EvalReading(OfficialEvalStatus.INVALID, ReceiptCause.PASS_MISSING.value, None)
    verdict = value["pass"]
    if isinstance(verdict, bool):
        return EvalReading(OfficialEvalStatus.COMPLETED, ReceiptCause.EVALUATED.value, verdict)
    if verdict is not None:
        return EvalReading(
            OfficialEvalStatus.INVALID, f"{ReceiptCause.PASS_NOT_BOOLEAN.value}:{type(verdict).__name__}", None
        )
    gate = (
        set(value) == {"pass", "details"}
        and isinstance(log_status, str)
        and log_status
        and log_status != "success"
        and value["details"] == GATE_TEXT.format(status=log_status)
    )
    if gate:
        return EvalReading(OfficialEvalStatus.DECLINED, ReceiptCause.STATUS_GATE.value, None)
    return EvalReading(OfficialEvalStatus.UNKNOWN, ReceiptCause.PASS_NULL_UNLINKED.value, None)


def read_log_status(log_path: str) -> Any:
    """The `status` of a traj_log.json, or None when absent/unreadable/not an object."""
    value, _ = read_json_record(log_path, cap=safefile.LOG_JSON_CAP)
    return value.get("status") if value else None


def read_eval_result(path: str, log_path: str | None = None) -> EvalReading:
    """Classify the eval_res.json at `path` (I/O wrapper of classify_eval_bytes)."""
    got = safefile.read_bytes(path, cap=safefile.RECORD_CAP)
    data: bytes | None = got.data
    if got.kind != safefile.ABSENT and not got.ok:
        return EvalReading(OfficialEvalStatus.UNREADABLE, f"{ReceiptCause.OS_ERROR.value}:{got.kind}", None)
    status = read_log_status(log_path) if log_path else None
    return classify_eval_bytes(data, status)


# ---------------------------------------------------------------- runner lines


def verdict_lines(returned: Any) -> tuple[list[str], int] | None:
    """The `Pass:`/`Details:` lines and exit code for an evaluator's returned value.

    None when there is no verdict to print: not a dict, or `pass` missing or not bool/None
    (a non-boolean pass is never coerced into a `Pass:` line).
    """
    if not isinstance(returned, dict) or "pass" not in returned:
        return None
    verdict = returned["pass"]
    if verdict is not None and not isinstance(verdict, bool):
        return None
    details = returned.get("details")
    if details is None:
        details = returned.get("failure", "N/A")
    return [f"Pass:    {verdict}", f"Details: {details}"], (0 if verdict is True else 1)


def is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
