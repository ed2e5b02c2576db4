"""One meter poller for every host of a shared campaign, on a REAL PostgreSQL server.

The meter is the demo's stand-in (it counts requests); the holder is a separate process, killed with
SIGKILL as a host would die; the reader is a SharedMeter in this process, as the other host's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import types
import uuid

import psycopg2
import pytest
from pg_server import PgServer, server  # noqa: F401 (a module fixture); tests/ is on sys.path (its conftest)

from cowork_adapter.campaign import shared_meter
from cowork_adapter.campaign.meter import KeyMeter, MeterError
from cowork_adapter.campaign.observe import MeterBlind, MeterObserver
from cowork_adapter.campaign.pg_conn import LOCK_NAMESPACE
from cowork_adapter.campaign.shared_meter import METER_LOCK_SUFFIX, SharedMeter
from cowork_adapter.demo.env import wait_for
from cowork_adapter.demo.meter_standin import MeterStandin

KEY = "sk-or-test-shared-meter"
CAMPAIGN = "c1"
POLL_SEC = 3.0
# The other host: polls through its own SharedMeter once a second until killed.
HOLDER = """
import os, sys, time
from cowork_adapter.campaign.meter import KeyMeter
from cowork_adapter.campaign.shared_meter import SharedMeter
shared = SharedMeter(KeyMeter(sys.argv[1], os.environ["TEST_METER_KEY"]), os.environ["TEST_DB_URL"], sys.argv[2],
                     poller="A", poll_sec=float(sys.argv[3]))
while True:
    shared.read_usage(2.0)
    print("holder" if shared.holder else "reader", flush=True)
    time.sleep(1.0)
"""


@pytest.fixture()
def db(server: PgServer) -> str:
    return server.fresh_database("t" + uuid.uuid4().hex[:10])


def stored(db: str) -> tuple[float, str, float] | None:
    conn = psycopg2.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT usage, poller, extract(epoch FROM now() - observed_at) FROM meter_readings WHERE campaign = %s",
                (CAMPAIGN,),
            )
            return cur.fetchone()
    finally:
        conn.close()


def wait_session_ended(db: str, pid: int, timeout: float) -> bool:
    """Until the server's backend `pid` (a closed client's session) is gone; False at the timeout."""
    conn = psycopg2.connect(db)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:

            def ended() -> bool:
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
                return cur.fetchone()[0] == 0

            return wait_for(ended, timeout, 0.05)
    finally:
        conn.close()


def test_one_host_polls_and_another_takes_over_within_one_interval_when_it_dies(db: str) -> None:
    # Each host's own view of the one key's meter: a stand-in each, so each counts its host's requests.
    with MeterStandin(KEY, usage=1.25) as meter, MeterStandin(KEY, usage=1.25) as meter_b:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TEST_METER_KEY": KEY, "TEST_DB_URL": db}
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, meter.base_url, CAMPAIGN, str(POLL_SEC)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        reader = SharedMeter(KeyMeter(meter_b.base_url, KEY), db, CAMPAIGN, poller="B", poll_sec=POLL_SEC)
        try:
            assert holder.stdout.readline().strip() == "holder"
            for _ in range(3):  # B's polls are answered from A's stored reading, never from the meter
                reading = reader.read_usage(2.0)
                assert not reader.holder and reading.usage == 1.25
                time.sleep(0.5)
            assert stored(db)[:2] == (1.25, "A")
            assert holder.stdout.readline().strip() == "holder"
            assert meter_b.requests == [] and len(meter.requests) >= 2  # only the holder asks the meter
            meter_b.apply({"set_usage": 2.5})
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=10)
            killed = time.monotonic()
            took_over = None
            while time.monotonic() - killed < POLL_SEC:
                try:
                    reading = reader.read_usage(2.0)
                except MeterError:
                    pass
                if reader.holder:
                    took_over = time.monotonic() - killed
                    break
                time.sleep(0.2)
            assert took_over is not None, f"B did not take the meter lock within {POLL_SEC}s of A's death"
            assert reading.usage == 2.5 and len(meter_b.requests) >= 1  # B's own poll of the meter
            assert stored(db)[:2] == (2.5, "B")
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait(timeout=10)
            reader.close()


def test_a_stale_stored_reading_is_no_reading_and_blinds_the_reader(db: str) -> None:
    with MeterStandin(KEY, usage=4.0) as meter:
        poller = SharedMeter(KeyMeter(meter.base_url, KEY), db, CAMPAIGN, poller="A", poll_sec=POLL_SEC)
        reader = SharedMeter(KeyMeter(meter.base_url, KEY), db, CAMPAIGN, poller="B", poll_sec=POLL_SEC)
        try:
            # A connection of its own holds the lock: a live poller that has stored nothing yet.
            squatter = psycopg2.connect(db)
            squatter.autocommit = True
            with squatter.cursor() as cur:
                cur.execute(
                    "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (LOCK_NAMESPACE, CAMPAIGN + METER_LOCK_SUFFIX)
                )
                assert cur.fetchone()[0]
                cur.execute("SELECT pg_backend_pid()")
                squatter_pid = cur.fetchone()[0]
            with pytest.raises(MeterError) as none_yet:
                reader.read_usage(2.0)
            assert none_yet.value.error_type == "no_shared_reading" and not reader.holder
            squatter.close()
            # The server ends the closed session, and its lock, in its own time: wait for that, not a
            # fixed 0.5 s, which a loaded server could overrun (the poller then found the lock still
            # held, and no reading stored).
            assert wait_session_ended(db, squatter_pid, 30), "the closed session outlived 30 s"
            assert poller.read_usage(2.0).usage == 4.0 and poller.holder
            assert reader.read_usage(2.0).usage == 4.0 and not reader.holder
            # The poller stays alive and holds the lock but stops storing (stuck): its reading ages.
            conn = psycopg2.connect(db)
            with conn, conn.cursor() as cur:
                cur.execute("UPDATE meter_readings SET observed_at = now() - interval '4 seconds'")
            conn.close()
            with pytest.raises(MeterError) as stale:
                reader.read_usage(2.0)
            assert stale.value.error_type == "stale_shared_reading"
            # Through the run's own observer: no accepted reading before the bound, as with a silent meter.
            saved: list[float] = []
            observer = MeterObserver(
                read=reader.read_usage,
                save=lambda usage, _at: saved.append(usage),
                last_accepted=lambda: 4.0,
                retry_sec=0.5,
            )
            with pytest.raises(MeterBlind) as blind:
                observer.observe(time.monotonic() + 2.0)
            assert "s old (more than 3s)" in str(blind.value.last_error) and saved == []
            assert {o.error_type for o in blind.value.observations} == {"stale_shared_reading"}
        finally:
            poller.close()
            reader.close()


class _WatchedRead(threading.Thread):
    """The shared meter's read thread, recorded: the bound its caller waited for it with, and whether it was
    still stuck when the caller gave up (the slice seen at work, not a wall-time bound)."""

    made: list[_WatchedRead] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.joined_with: list[float | None] = []
        _WatchedRead.made.append(self)

    def join(self, timeout: float | None = None) -> None:
        self.joined_with.append(timeout)
        super().join(timeout)


def test_a_database_that_stops_answering_costs_a_read_no_more_than_its_slice(
    db: str, server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MeterStandin(KEY, usage=1.0) as meter:
        reader = SharedMeter(KeyMeter(meter.base_url, KEY), db, CAMPAIGN, poller="B", poll_sec=POLL_SEC)
        try:
            assert reader.read_usage(2.0).usage == 1.0 and reader.holder
            server.container.pause()  # the server keeps the socket open and never answers: a partition
            try:
                # the reader's lock made before the patch: only its read threads are watched
                monkeypatch.setattr(shared_meter, "threading", types.SimpleNamespace(Thread=_WatchedRead))
                for attempt in range(2):  # the second waits behind the first, still stuck: a timeout too
                    _WatchedRead.made = []
                    with pytest.raises(MeterError) as hung:
                        reader.read_usage(1.0)
                    assert hung.value.error_type == "timeout"
                    reads = _WatchedRead.made
                    assert [r.joined_with for r in reads] == [[1.0]]  # waited for no longer than the slice
                    if attempt == 0:  # the first is stuck on the silent database when the slice ends it (the
                        # second's own wait for the first, of the same slice, may end it just before)
                        assert reads[0].is_alive()
            finally:
                server.container.unpause()
            deadline = time.monotonic() + 60  # the stuck statement ends (statement timeout or reset)
            while True:
                try:
                    assert reader.read_usage(2.0).usage == 1.0
                    break
                except MeterError:
                    assert time.monotonic() < deadline, "the shared meter did not recover after the database came back"
                    time.sleep(0.5)
        finally:
            reader.close()
