"""The pure rules of a campaign shared by several hosts (campaign/claims.py) and the store's URL checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cowork_adapter.campaign.claims import decide_release, decide_settle, prove_fenced
from cowork_adapter.campaign.pg_store import check_url, redacted
from cowork_adapter.custody.daemon_watch import process_start_ticks
from cowork_adapter.errors import Refusal
from cowork_adapter.schemas.custody import CustodyProcesses, ProcessIdentity
from cowork_adapter.schemas.multihost import FenceProof, HostRun
from cowork_adapter.vocab import ClaimState

NOW = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)


def run(state: str = "live", expires: timedelta = timedelta(seconds=-1)) -> HostRun:
    return HostRun(
        run_id="r1",
        campaign="c",
        host="h1",
        run_root="/runs/a",
        lease_sec=30,
        lease_expires_at=NOW + expires,
        state=state,
    )


def proof(all_gone: bool = True, **kw: str) -> FenceProof:
    fields = {"run_id": "r1", "host": "h1", "run_root": "/runs/a", **kw}
    return FenceProof(all_gone=all_gone, evidence="launcher pid 5 gone", checked_at=NOW, **fields)


def test_release_needs_an_expired_lease_and_a_proof_that_everything_is_gone() -> None:
    assert decide_release(run(), NOW, proof()).release


@pytest.mark.parametrize(
    ("the_run", "the_proof", "words"),
    [
        (run(expires=timedelta(seconds=20)), proof(), "still renews its lease"),
        (run(), None, "nothing proves its processes gone"),
        (run(), proof(all_gone=False), "is not fenced"),
        (run(), proof(host="h2"), "not run r1 at h1"),
        (run(), proof(run_root="/runs/b"), "not run r1 at h1"),
        (run(), proof(run_id="r2"), "about run r2"),
        (run(state="finished"), proof(), "already finished"),
        (run(state="fenced"), proof(), "already fenced"),
    ],
)
def test_release_is_refused_with_a_reason(the_run: HostRun, the_proof: FenceProof | None, words: str) -> None:
    decision = decide_release(the_run, NOW, the_proof)
    assert not decision.release and words in decision.reason


def test_a_lease_expiring_exactly_now_is_expired() -> None:
    assert decide_release(run(expires=timedelta(0)), NOW, proof()).release


@pytest.mark.parametrize(
    ("state", "holder", "status", "write", "new", "problem"),
    [
        ("claimed", "r1", "passed", True, ClaimState.SETTLED, None),
        ("claimed", "r1", "agent_failed", True, ClaimState.SETTLED, None),
        ("claimed", "r1", "infra_failed", True, ClaimState.OPEN, None),  # unsettled: any host may retry it
        ("settled", "r1", "passed", False, None, None),  # the same run reporting twice: no change
        ("settled", "r2", "passed", False, None, "already settled by run r2"),
        ("claimed", "r2", "passed", False, None, "does not hold"),
        ("open", None, "passed", False, None, "does not hold"),
    ],
)
def test_settle_rules(
    state: str, holder: str | None, status: str, write: bool, new: ClaimState | None, problem: str | None
) -> None:
    decision = decide_settle(state, holder, "r1", status)
    assert (decision.write, decision.new_state) == (write, new)
    assert (decision.problem is None) == (problem is None)
    if problem:
        assert problem in decision.problem


def _custody(root: Path, launcher: int, pgid: int | None) -> None:
    (root / "custody").mkdir(parents=True, exist_ok=True)
    record = CustodyProcesses(
        launcher=ProcessIdentity(pid=launcher, start_ticks=process_start_ticks(launcher)), runner_pgid=pgid
    )
    (root / "custody" / "processes.json").write_text(record.to_json())


def test_prove_fenced_sees_a_live_runner_group_and_then_its_end(tmp_path: Path) -> None:
    root = tmp_path / "run"
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        dead_launcher = subprocess.Popen([sys.executable, "-c", "pass"])
        dead_launcher.wait()
        _custody(root, dead_launcher.pid, runner.pid)
        the_run = HostRun(
            run_id="r1", campaign="c", host="h1", run_root=str(root), lease_sec=5, lease_expires_at=NOW, state="live"
        )
        alive = prove_fenced(the_run, host="h1")
        assert not alive.all_gone and f"runner group {runner.pid} alive" in alive.evidence
        assert not decide_release(the_run, NOW, alive).release
    finally:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
    gone = prove_fenced(the_run, host="h1")
    assert gone.all_gone, gone.evidence
    assert decide_release(the_run, NOW, gone).release


def test_an_unreadable_custody_record_proves_nothing(tmp_path: Path) -> None:
    root = tmp_path / "run"
    (root / "custody").mkdir(parents=True)
    (root / "custody" / "processes.json").write_text("{not json")
    the_run = HostRun(
        run_id="r1", campaign="c", host="h1", run_root=str(root), lease_sec=5, lease_expires_at=NOW, state="live"
    )
    got = prove_fenced(the_run, host="h1")
    assert not got.all_gone and "is not valid" in got.evidence


def test_urls_are_checked_and_passwords_never_shown() -> None:
    assert redacted("postgresql://u:secret@db:5432/c") == "postgresql://u:***@db:5432/c"
    assert redacted("postgresql://db/c") == "postgresql://db/c"
    assert (
        redacted("postgresql://db/c?sslmode=require&PassWord=secret")
        == "postgresql://db/c?sslmode=require&PassWord=***"
    )
    with pytest.raises(Refusal) as caught:
        check_url("mysql://u:secret@db/c")
    assert "secret" not in str(caught.value) and "postgresql://" in str(caught.value)
