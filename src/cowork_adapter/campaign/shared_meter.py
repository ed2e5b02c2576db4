"""One meter poller for every host of a shared campaign (`run --shared-campaign`).

`SharedMeter` has KeyMeter's `read_usage(timeout)`, so the campaign spending's MeterObserver judges its answers
exactly as it judges the provider's. Behind it, one host polls: the one holding the session advisory
lock on "<campaign>:meter" (never waited for; the server frees it when the holder's connection dies,
and the next host to ask takes it). The holder reads the provider's meter and stores every reading
the observer would accept in `meter_readings`, stamped with the server's clock. Every other host
reads that stored reading and its age on the same clock, and a reading older than its poll interval
is no reading at all: its observer then retries until the blindness bound stops it, exactly as when
the meter itself is silent. So the campaign has one meter stream, and a dead poller costs at most
one poll interval before another host polls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg2

from ..errors import Refusal
from .meter import KeyMeter, MeterError, MeterReading
from .observe import POLL_SEC, judge_usage
from .pg_conn import LOCK_NAMESPACE, connect, migrate

METER_LOCK_SUFFIX = ":meter"


def stored_reading_problem(age_sec: float | None, poll_sec: float) -> tuple[str, str] | None:
    """(error_type, error) when the stored reading may not stand for the meter now, else None."""
    if age_sec is None:
        return "no_shared_reading", "no host has stored a meter reading for this campaign yet"
    if age_sec > poll_sec:
        return "stale_shared_reading", f"the stored meter reading is {age_sec:.1f}s old (more than {poll_sec:.0f}s)"
    return None


def worth_storing(usage: Any, stored: float | None) -> bool:
    """The holder stores only what an observer would accept: finite, non-negative, not below the
    stored one. A rejected reading is left out, so it ages into "no reading" for the others."""
    return judge_usage(usage, stored) is None


class SharedMeter:
    """read_usage(timeout) for a host of a shared campaign; `close()` gives up the poller's lock."""

    def __init__(
        self,
        meter: KeyMeter | Any,
        db_url: str,
        campaign: str,
        poller: str,
        *,
        poll_sec: float = POLL_SEC,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.meter, self.db_url, self.campaign, self.poller = meter, db_url, campaign, poller
        self.poll_sec = poll_sec
        self._monotonic = monotonic
        self._conn: Any = None
        self.holder = False  # True while this object holds the meter lock (and so polls the meter)
        self._guard = threading.Lock()  # a late read still running and the next one share one connection

    def read_usage(self, timeout: float | None = None) -> MeterReading:
        """The provider's reading if we poll, else the stored one; MeterError when there is none.
        Bounded by `timeout` overall, as KeyMeter is: a database that stops answering (a partition
        holds a socket for the keepalives' 25 s) must not stretch the observer's blindness bound."""
        budget = self.meter.timeout if timeout is None else timeout
        started = self._monotonic()
        outcome: dict[str, Any] = {}

        def call() -> None:
            try:
                outcome["reading"] = self._read(budget, started)
            except BaseException as exc:  # handed to the caller's thread below
                outcome["error"] = exc

        worker = threading.Thread(target=call, name="shared-meter-read", daemon=True)
        worker.start()
        worker.join(budget)
        if worker.is_alive():  # it finishes (or fails and drops its connection) on its own
            raise MeterError("timeout", f"the campaign's shared meter reading took more than {budget:.1f}s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["reading"]

    def close(self) -> None:
        # Not waiting behind a stuck read: the connection, and the lock, end with the process anyway.
        if self._guard.acquire(timeout=self.meter.timeout):
            try:
                self._drop()
            finally:
                self._guard.release()

    # ------------------------------------------------------------------ internals

    def _read(self, budget: float, started: float) -> MeterReading:
        # One read at a time on the one connection; behind a stuck one, this read is a timeout.
        if not self._guard.acquire(timeout=budget):
            raise MeterError("timeout", "an earlier shared meter read is still waiting for the database")
        try:
            try:
                conn = self._connection(budget)
                if not self.holder:
                    self.holder = self._try_lock(conn)
                if self.holder:
                    return self._poll(conn, max(0.1, budget - (self._monotonic() - started)))
                return self._stored(conn)
            except psycopg2.Error as exc:
                self._drop()  # a new connection next time; a lock we held went with the old one
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise MeterError(
                    "shared_store", f"the campaign's shared meter reading is unreachable: {first}"
                ) from None
        finally:
            self._guard.release()

    def _connection(self, timeout: float) -> Any:
        if self._conn is None or self._conn.closed:
            try:
                conn = connect(self.db_url)
            except Refusal as exc:  # one sentence, the password never in it
                raise MeterError("shared_store", exc.sentence) from None
            try:
                migrate(conn)
            except Refusal as exc:
                conn.close()
                raise MeterError("shared_store", exc.sentence) from None
            conn.autocommit = True
            self._conn, self.holder = conn, False
        with self._conn.cursor() as cur:  # no statement may outlast this read's slice
            cur.execute("SELECT set_config('statement_timeout', %s, false)", (str(max(1, int(timeout * 1000))),))
        return self._conn

    def _try_lock(self, conn: Any) -> bool:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (LOCK_NAMESPACE, self.campaign + METER_LOCK_SUFFIX)
            )
            return bool(cur.fetchone()[0])

    def _poll(self, conn: Any, timeout: float) -> MeterReading:
        reading = self.meter.read_usage(timeout=timeout)  # MeterError propagates: a failed read
        with conn.cursor() as cur:
            cur.execute("SELECT usage FROM meter_readings WHERE campaign = %s", (self.campaign,))
            row = cur.fetchone()
            if worth_storing(reading.usage, None if row is None else row[0]):
                cur.execute(
                    "INSERT INTO meter_readings (campaign, usage, limit_usd, limit_remaining, observed_at, poller)"
                    " VALUES (%s, %s, %s, %s, now(), %s) ON CONFLICT (campaign) DO UPDATE SET"
                    " usage = EXCLUDED.usage, limit_usd = EXCLUDED.limit_usd,"
                    " limit_remaining = EXCLUDED.limit_remaining, observed_at = EXCLUDED.observed_at,"
                    " poller = EXCLUDED.poller",
                    (self.campaign, reading.usage, reading.limit, reading.limit_remaining, self.poller),
                )
        return reading

    def _stored(self, conn: Any) -> MeterReading:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT usage, limit_usd, limit_remaining, extract(epoch FROM now() - observed_at)"
                " FROM meter_readings WHERE campaign = %s",
                (self.campaign,),
            )
            row = cur.fetchone()
        age = None if row is None else float(row[3])
        problem = stored_reading_problem(age, self.poll_sec)
        if problem is not None:
            raise MeterError(*problem)
        usage, limit, remaining, _ = row
        # Requested when it was read, on our own clock: the age is the server's, so no clock skew.
        return MeterReading(
            usage=usage,
            limit=limit,
            limit_remaining=remaining,
            requested_at_monotonic=self._monotonic() - age,  # type: ignore[operator]
            age_sec=age,  # type: ignore[arg-type]
        )

    def _drop(self) -> None:
        conn, self._conn, self.holder = self._conn, None, False
        if conn is not None and not conn.closed:
            conn.close()  # the advisory lock ends with the session
