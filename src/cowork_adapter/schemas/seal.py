"""`<run_root>/custody/evidence/<runner id>.seal.json`: the host's seal of one task's official eval.

The docker shim (custody/shim.py, standard library) writes it once, right after the task's first
eval exec ended, from what the host read in the task's dump without following a link: the claim,
its receipt, eval_res.json (kind, bytes, sha256) and the receipt's verdict, plus what stood there
before the exec. The evidence folder is never mounted into a container, so nothing the agent
under test runs can write a seal; the ledger scores a verdict only when its seal exists and the
dump's files still have the sealed bytes (score/verdict.py).

`<runner id>.seal-head.json` is the same record's first part, written before the exec. When the
shim died during the exec (a SIGKILL of the runner's group), the host seals later (`entry` late):
the head proves the agent's container was gone before the exec and what stood in the dump then,
and the per-task mount means only the eval container wrote the dump since (score/taskread.py late_seal).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final, Literal

import msgspec

from ..container import safefile
from ..runroot.layout import SEAL_HEAD_SUFFIX, SEAL_SUFFIX, RunRoot
from .record import Record, RecordInvalid, decode

SEAL_SCHEMA: Final = "cowork_adapter.eval_seal.v1"


class SealedFile(Record):
    kind: str  # container/safefile kinds: regular, absent, symlink, fifo, too_large, ...
    bytes: int | None = None
    sha256: str | None = None


class SealedVerdict(Record, rename={"pass_": "pass"}):
    official_run: bool
    raised: str | None = None
    cause: str = ""
    pass_: bool | None = None


class PreEntry(Record):
    """An official-looking entry found in the dump before the eval exec (planted by the agent)."""

    name: str
    kind: str
    bytes: int | None = None
    sha256: str | None = None  # a regular file's bytes (a planted record is never sealed as the verdict)


class SealHead(Record, rename={"schema_": "schema"}, forbid_unknown_fields=False):
    """What the shim knew before the eval exec (the seal's first part; unknown fields: the rest)."""

    schema_: Literal["cowork_adapter.eval_seal.v1"] = SEAL_SCHEMA
    runner_id: str
    task: str
    entry: str  # first (sealed by the shim) | late (sealed by the host after the shim died)
    task_dir_arg: str | None = None
    agent_container_state: str
    agent_summary_sha256: str | None = None
    pre: list[PreEntry] = msgspec.field(default_factory=list)
    started_at: float
    # The shim that ran the exec: while it lives, the exec may still be running (no late seal).
    shim_pid: int | None = None
    shim_start_ticks: int | None = None


class EvalSeal(SealHead, forbid_unknown_fields=True):
    ended_at: float | None = None  # None in a late seal: the host did not see the exec end
    exit_code: int | None = None
    hung: bool = False
    attempt_id: str | None = None
    claim: SealedFile
    receipt: SealedFile | None = None
    eval_res: SealedFile
    verdict: SealedVerdict | None = None
    grading_inputs_differ: list[str] = msgspec.field(default_factory=list)
    # traj_log.json fields the eval phase's host log replaced (container/gradinglog.py log_differences).
    grading_log_rewritten: list[str] = msgspec.field(default_factory=list)
    planted_moved: list[str] = msgspec.field(default_factory=list)


class SealRead(msgspec.Struct, frozen=True):
    """A task's seal as read, or only its head (the shim died during the exec)."""

    seal: EvalSeal | None
    head: SealHead | None = None


def read_seals(run_root: Path | str) -> dict[str, SealRead]:
    """task -> its seal, from every `<id>.seal.json` of the run's evidence folder.

    A task sealed twice (two runner ids: a task handed to the runner twice) keeps the first id in
    name order, as resources.task_runner_ids does. The folder is the host's own; its files are
    still read through safefile (capped, no link)."""
    folder = RunRoot(run_root).evidence
    out: dict[str, SealRead] = {}
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return out
    heads: dict[str, SealHead] = {}
    for name in names:
        kind = EvalSeal if name.endswith(SEAL_SUFFIX) else (SealHead if name.endswith(SEAL_HEAD_SUFFIX) else None)
        if kind is None:
            continue
        got = safefile.read_bytes(str(folder / name), cap=safefile.RECORD_CAP)
        if not got.ok or got.data is None:  # (ok implies data; said again for the type checker)
            continue
        try:
            record = decode(got.data, kind)
        except RecordInvalid:
            continue
        if isinstance(record, EvalSeal):
            out.setdefault(record.task, SealRead(record))
        else:
            heads.setdefault(record.task, record)
    for task, head in heads.items():
        if task not in out:
            out[task] = SealRead(None, head)
    return out


def seal_path(run_root: Path | str, runner_id: str) -> Path:
    return RunRoot(run_root).seal(runner_id)


def run_seals_verdicts(run_root: Path | str) -> bool:
    """Whether the run's shim sealed eval execs: a run from before the seal is read as it was
    (its receipts settle its tasks, with a disclosure), never re-scored to nothing."""
    got = safefile.read_bytes(str(RunRoot(run_root).shim_config), cap=safefile.RECORD_CAP)
    if not got.ok or got.data is None:  # (ok implies data; said again for the type checker)
        return False
    try:
        value = json.loads(got.data)
    except ValueError:
        return False
    return isinstance(value, dict) and bool(value.get("dumps_dir"))
