"""`campaign release` (campaign/release.py): its pure rules, its evidence from the daemon, its flags,
and the lease thread's stop when a released host comes back. The database side is
tests/integration/test_campaign_release_pg.py; two real hosts tests/integration/test_shared_campaign_release.py."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

from cowork_adapter.campaign.claims import decide_operator_release, lapsed_problem
from cowork_adapter.campaign.records import describe
from cowork_adapter.campaign.release import Fence, find_fence, label_of_registered_root, release_record
from cowork_adapter.custody.labels import new_run_label, path_label
from cowork_adapter.demo.env import wait_for
from cowork_adapter.errors import CustodyError, Refusal
from cowork_adapter.schemas.multihost import HostRun, HostRunRelease
from cowork_adapter.vocab import ExitCode, ReleaseFence

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


def release(
    fence: ReleaseFence = ReleaseFence.ATTESTED, attested: bool = True, the_run: HostRun | None = None, **kw: object
) -> HostRunRelease:
    record = release_record(
        the_run or run(),
        NOW,
        "postgres",
        ["t2"],
        fence=Fence(fence, "what was seen", None),
        label="L",
        confirm_fenced=attested,
        operator="op@desk",
        note="VM deleted",
    )
    return msgspec_replace(record, **kw)


def msgspec_replace(record: HostRunRelease, **kw: object) -> HostRunRelease:
    import msgspec

    return msgspec.structs.replace(record, **kw)


@pytest.mark.parametrize(
    ("fence", "attested"),
    [(ReleaseFence.ATTESTED, True), (ReleaseFence.LABEL_EMPTY, False), (ReleaseFence.LABEL_CLEANED, False)],
)
def test_a_lapsed_run_is_released_on_an_attestation_or_its_daemons_answer(fence: ReleaseFence, attested: bool) -> None:
    decision = decide_operator_release(run(), NOW, release(fence, attested))
    assert decision.release and fence.value in decision.reason


@pytest.mark.parametrize(
    ("the_run", "the_release", "words"),
    [
        (run(expires=timedelta(seconds=20)), release(), "still renews its lease"),
        (run(state="released"), release(), "already released"),
        (run(state="fenced"), release(), "already fenced"),
        (run(state="finished"), release(), "already finished"),
        (run(), release(ReleaseFence.ATTESTED, attested=False), "did not attest"),
        (run(), release(run_id="r2"), "about run r2"),
        (run(), release(host="h2"), "not run r1 at h1"),
        (run(), msgspec_replace(release(), fence="guessed"), "is not one of"),
    ],
)
def test_a_release_is_refused_with_a_reason(the_run: HostRun, the_release: HostRunRelease, words: str) -> None:
    decision = decide_operator_release(the_run, NOW, the_release)
    assert not decision.release and words in decision.reason


def test_a_lease_expiring_exactly_now_has_lapsed() -> None:
    assert lapsed_problem(run(expires=timedelta(0)), NOW) is None


class Daemon:
    """The two daemon calls find_fence makes, scripted (the real ones: the integration tests)."""

    def __init__(self, listed: list[str] | Exception, clean: list[str] | Exception = ()) -> None:
        self.listed, self.clean, self.cleaned = listed, clean, 0

    def listing(self, host: str, label: str) -> list[str]:
        assert (host, label) == ("tcp://lost:2375", "L")
        if isinstance(self.listed, Exception):
            raise self.listed
        return self.listed

    def cleanup(self, host: str, label: str) -> list[str]:
        self.cleaned += 1
        if isinstance(self.clean, Exception):
            raise self.clean
        return list(self.clean)


def fence(daemon: Daemon, docker_host: str | None = "tcp://lost:2375", confirm: bool = False) -> Fence:
    return find_fence("r1", "L", docker_host, confirm, listing=daemon.listing, cleanup=daemon.cleanup)


def test_an_empty_label_is_evidence_without_attestation_and_nothing_is_removed() -> None:
    daemon = Daemon([])
    found = fence(daemon)
    assert (
        found.fence == ReleaseFence.LABEL_EMPTY
        and daemon.cleaned == 0
        and "processes were not checked" in found.evidence
    )


def test_what_carries_the_label_is_removed_by_it_and_recorded() -> None:
    daemon = Daemon(["container agent-x"], clean=["container agent-x", "network net-x"])
    found = fence(daemon)
    assert found.fence == ReleaseFence.LABEL_CLEANED and found.removed == ["container agent-x", "network net-x"]


def test_a_cleanup_not_proven_is_an_error_not_a_release() -> None:
    with pytest.raises(CustodyError):
        fence(Daemon(["container agent-x"], clean=CustodyError("survived: container agent-x")))


@pytest.mark.parametrize(
    ("daemon", "docker_host", "words"),
    [
        (Daemon([]), None, "name its Docker daemon with --docker-host, or attest"),
        (Daemon(CustodyError("connection refused")), "tcp://lost:2375", "did not answer"),
    ],
)
def test_without_a_daemons_answer_the_operator_must_attest(daemon: Daemon, docker_host: str | None, words: str) -> None:
    with pytest.raises(Refusal) as info:
        fence(daemon, docker_host)
    assert words in info.value.sentence and info.value.exit_code == ExitCode.REFUSED
    attested = fence(daemon, docker_host, confirm=True)
    assert attested.fence == ReleaseFence.ATTESTED and attested.docker_host == docker_host


def test_the_label_is_the_registered_one_else_the_registered_root_hashed_as_written(tmp_path) -> None:
    root = tmp_path.resolve() / "run-1"
    label, _ = new_run_label(root)
    assert label_of_registered_root(str(root), label) == label  # schema v4: as the launcher drew it
    assert label_of_registered_root(str(root)) == path_label(root)  # a run registered before: its path's
    assert label != path_label(root)


def test_status_and_report_say_an_attested_release_is_not_proven() -> None:
    assert "operator-attested, not proven" in describe(release())
    assert "processes not checked" in describe(release(ReleaseFence.LABEL_EMPTY, attested=False))


class Beats:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def heartbeat(self, run_id: str):
        raise self.error

    def expired_runs(self):
        return []


def test_a_released_host_that_comes_back_stops_with_its_own_reason() -> None:
    from cowork_adapter.campaign.pg_store import HostRunReleased
    from cowork_adapter.campaign.shared import HostLease

    stops: list[str] = []
    lease = HostLease(
        Beats(HostRunReleased("released by op@desk")),
        "r1",
        0.08,
        "h",
        read_attempts=lambda root, tasks: {},
        on_stop=lambda r, d: stops.append(r),
        say=lambda action, detail: None,
    ).start()
    # Until a turn has stopped the host (a fixed 0.3 s could pass before the thread's first turn on
    # a loaded machine); more turns would only prove the stop comes once.
    wait_for(lambda: bool(stops), 30, 0.02)
    time.sleep(0.1)  # a few more turns (lease/4 = 0.02 s): the stop is still said once
    lease.stop()
    assert stops == ["host_run_released"]


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--host-run", "r1", "--operator-note", " "], "--operator-note must say what was checked"),
        (["--host-run", " ", "--operator-note", "gone"], "--host-run is empty"),
        (["--host-run", "r1", "--operator-note", "gone", "--docker-host", " "], "--docker-host is empty"),
        (["--host-run", "r1", "--operator-note", "gone", "--campaign-db", "mysql://db/c"], "postgresql://"),
    ],
)
def test_bad_flags_are_refused_in_one_sentence(flags: list[str], words: str) -> None:
    db = [] if "--campaign-db" in flags else ["--campaign-db", "postgresql://db.invalid/c"]
    done = subprocess.run(
        [sys.executable, "-m", "cowork_adapter", "campaign", "release", *db, *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == ExitCode.REFUSED and words in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
