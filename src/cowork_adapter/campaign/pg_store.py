"""The campaign in PostgreSQL, for one campaign spread over several hosts (`--campaign-db`).

Same interface as the JSON file store (`CampaignStore.locked()` yields a session with load/save),
plus the task claims every host takes from the campaign's selection.

* Exclusive hold: `locked()` takes a SESSION advisory lock on the campaign's name, never waiting
  (a second holder is refused at once, like the file store's flock). It dies with the connection,
  so a SIGKILLed launcher or a restarted server frees it without cleanup code. (A row lock would
  need a transaction open for the whole run, which pins the server's vacuum horizon for a day.)
* Every save is one transaction: the record's row `SELECT ... FOR UPDATE`, its version checked,
  the record written as JSONB, committed before the caller counts it. A lost connection is never
  reconnected behind the caller's back: the save raises CampaignPersistenceError and the run stops.
* Claims: `SELECT ... FOR UPDATE SKIP LOCKED` over the open tasks, in the same transaction that
  marks them claimed; leases and their expiry use the server's clock (`now()`), never a host's.
* Schema: versioned migrations in `schema_migrations`, applied under a transaction advisory lock so
  two hosts starting together migrate once; a database newer than this code is refused.

psycopg2 is imported here and in pg_conn.py (the connection, the migrations, the advisory hold) only,
so commands that never name a database never load it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import msgspec
import psycopg2
import psycopg2.errors
import psycopg2.extensions

from ..errors import CampaignPersistenceError, Refusal
from ..schemas.campaign import CampaignRecord
from ..schemas.multihost import ClaimCounts, FenceProof, HostRun, HostRunRelease
from ..vocab import ClaimState, HostRunState
from .claims import decide_operator_release, decide_release, decide_settle, lapsed_problem
from .pg_conn import _lost, check_url, connect, hold, migrate, redacted
from .store import STAGE, parse_campaign_text


class PostgresCampaignStore:
    """The campaign `name` in the database at `url` (a CampaignStore)."""

    def __init__(self, url: str, name: str = "default") -> None:
        check_url(url)
        if not name or len(name) > 200:
            raise Refusal(STAGE, "The campaign name must be 1 to 200 characters.")
        self.url = url
        self.name = name
        self.location = f"{redacted(url)} campaign {name!r}"

    def read(self) -> CampaignRecord | None:
        """The record without the hold (read-only views)."""
        return read_campaign_db(self.url, self.name)

    def refuse_if_locked(self) -> None:
        """Preflight: the Refusal `locked()` would give now (the hold is taken and at once released)."""
        with self.locked():
            pass

    @contextmanager
    def locked(self) -> Iterator[PostgresSession]:
        conn = connect(self.url)
        try:
            migrate(conn)
            if not hold(conn, self.name, self.location, shared=False):
                raise Refusal(
                    STAGE,
                    f"The campaign {self.location} is held by another launcher or command; "
                    "wait for it to finish (see `cowork-adapter campaign show`).",
                )
            yield PostgresSession(conn, self.name, self.location)
        finally:
            conn.close()  # the advisory lock ends with the session


class PostgresSession:
    """Load and save the record while the campaign's hold is ours (a CampaignSession)."""

    def __init__(self, conn: psycopg2.extensions.connection, name: str, location: str) -> None:
        self._conn = conn
        self._name = name
        self.location = location
        self._version: int | None = None  # the row version last read or written by this session

    def load(self) -> CampaignRecord | None:
        try:
            with self._conn, self._conn.cursor() as cur:
                cur.execute("SELECT record::text, version FROM campaigns WHERE name = %s", (self._name,))
                row = cur.fetchone()
        except psycopg2.Error as exc:
            raise Refusal(STAGE, f"The campaign {self.location} cannot be read ({str(exc).strip()}).") from None
        if row is None:
            self._version = 0
            return None
        self._version = row[1]
        return parse_campaign_text(self.location, row[0])

    def save(self, record: CampaignRecord) -> None:
        text = record.to_json()
        try:
            with self._conn, self._conn.cursor() as cur:
                cur.execute("SELECT version FROM campaigns WHERE name = %s FOR UPDATE", (self._name,))
                row = cur.fetchone()
                found = 0 if row is None else row[0]
                if self._version is not None and found != self._version:
                    raise CampaignPersistenceError(
                        f"the campaign {self.location} changed behind this launcher (version {found}, "
                        f"expected {self._version}); nothing was written"
                    )
                if row is None:
                    cur.execute(
                        "INSERT INTO campaigns (name, record, version) VALUES (%s, %s::jsonb, 1)", (self._name, text)
                    )
                else:
                    cur.execute(
                        "UPDATE campaigns SET record = %s::jsonb, version = version + 1, updated_at = now() "
                        "WHERE name = %s",
                        (text, self._name),
                    )
                self._version = found + 1
        except psycopg2.Error as exc:
            raise _lost("saving the campaign record", exc) from exc


def read_campaign_db(url: str, name: str = "default") -> CampaignRecord | None:
    """Read a campaign without its hold (read-only views: every save is one committed transaction)."""
    conn = connect(url)
    try:
        migrate(conn)
        with conn, conn.cursor() as cur:
            cur.execute("SELECT record::text FROM campaigns WHERE name = %s", (name,))
            row = cur.fetchone()
    except psycopg2.Error as exc:
        raise Refusal(
            STAGE, f"The campaign {redacted(url)} campaign {name!r} cannot be read ({str(exc).strip()})."
        ) from None
    finally:
        conn.close()
    return None if row is None else parse_campaign_text(f"{redacted(url)} campaign {name!r}", row[0])


# ---------------------------------------------------------------------------------------------
# Task claims


class ClaimLost(CampaignPersistenceError):
    """This run may no longer claim or settle: its lease lapsed, it was fenced, or the database is gone."""


class HostRunReleased(ClaimLost):
    """An operator released this run (`campaign release`) while its lease was lapsed: it came back
    after its claims went to other hosts, and must stop without settling or running anything."""


_RUN_COLUMNS = (
    "run_id, campaign, host, run_root, lease_sec, lease_expires_at, state, fence_proof::text, release::text, run_label"
)


def _host_run(row: Sequence[Any]) -> HostRun:
    return HostRun(
        run_id=row[0],
        campaign=row[1],
        host=row[2],
        run_root=row[3],
        lease_sec=row[4],
        lease_expires_at=row[5],
        state=row[6],
        fence_proof=row[7],
        release=row[8],
        run_label=row[9],
    )


def _no_lease(cur: Any, run_id: str, doing: str) -> ClaimLost:
    """The error for a run whose lease is gone, naming an operator's release when there was one."""
    cur.execute("SELECT state, release->>'operator', release->>'at' FROM host_runs WHERE run_id = %s", (run_id,))
    row = cur.fetchone()
    if row is not None and row[0] == HostRunState.RELEASED:
        return HostRunReleased(
            f"run {run_id} was released by {row[1]} at {row[2]} (campaign release) after its lease "
            f"lapsed; its claims went to other hosts, so it {doing}"
        )
    return ClaimLost(f"run {run_id} lost its lease (lapsed or fenced); it {doing}")


class TaskClaims:
    """One host's view of the campaign's task claims, over its own connection.

    Every method is one transaction; any database error becomes ClaimLost (the caller stops
    claiming and lets its runner finish what it holds: a claim is never taken twice)."""

    def __init__(self, url: str, campaign: str = "default") -> None:
        self.url = url
        self.campaign = campaign
        self._conn = connect(url)
        try:
            migrate(self._conn)
        except BaseException:
            self._conn.close()
            raise

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> TaskClaims:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self, what: str) -> Iterator[Any]:
        try:
            with self._conn, self._conn.cursor() as cur:
                yield cur
        except psycopg2.Error as exc:
            raise ClaimLost(str(_lost(what, exc))) from exc

    def add_selection(self, task_ids: Sequence[str]) -> int:
        """Put the campaign's selection in the table (idempotent: existing rows keep their state)."""
        with self._tx("adding the selection") as cur:
            cur.execute(
                "INSERT INTO task_claims (campaign, task_id, state) SELECT %s, t, 'open' FROM unnest(%s) AS t "
                "ON CONFLICT DO NOTHING",
                (self.campaign, list(task_ids)),
            )
            return cur.rowcount

    def register_run(
        self, *, host: str, run_root: str, lease_sec: float, run_id: str | None = None, run_label: str | None = None
    ) -> HostRun:
        run_id = run_id or uuid.uuid4().hex
        with self._tx("registering the run") as cur:
            cur.execute(
                "INSERT INTO host_runs (run_id, campaign, host, run_root, lease_sec, lease_expires_at, state, "
                "run_label) VALUES (%s, %s, %s, %s, %s, now() + make_interval(secs => %s), 'live', %s) "
                f"RETURNING {_RUN_COLUMNS}",
                (run_id, self.campaign, host, run_root, lease_sec, lease_sec, run_label),
            )
            return _host_run(cur.fetchone())

    def renew(self, run_id: str) -> datetime:
        """Extend a live run's lease from the server's now; ClaimLost if it is no longer live or
        its lease already lapsed (another host may be proving it fenced: it must stop)."""
        with self._tx("renewing the lease") as cur:
            return self._renew(cur, run_id)

    @staticmethod
    def _renew(cur: Any, run_id: str) -> datetime:
        cur.execute(
            "UPDATE host_runs SET lease_expires_at = now() + make_interval(secs => lease_sec) "
            "WHERE run_id = %s AND state = 'live' AND lease_expires_at > now() RETURNING lease_expires_at",
            (run_id,),
        )
        row = cur.fetchone()
        if row is None:
            raise _no_lease(cur, run_id, "must claim nothing more")
        return row[0]

    def heartbeat(self, run_id: str) -> tuple[datetime, str | None]:
        """renew() and, in the same transaction, the campaign's stop (its JSON, or None): every host
        learns of a campaign-wide stop within one renewal interval."""
        with self._tx("renewing the lease") as cur:
            expires = self._renew(cur, run_id)
            cur.execute("SELECT (record->'stop')::text FROM campaigns WHERE name = %s", (self.campaign,))
            stop = cur.fetchone()
        text = stop[0] if stop else None
        return expires, None if text in (None, "null") else text

    def held_by(self, run_id: str) -> list[str]:
        """The tasks `run_id` holds claimed (not settled), sorted."""
        with self._tx("reading a run's claims") as cur:
            cur.execute(
                "SELECT task_id FROM task_claims WHERE run_id = %s AND state = 'claimed' ORDER BY task_id", (run_id,)
            )
            return [r[0] for r in cur.fetchall()]

    def lapsed_claims(self) -> int:
        """Claims held by live runs of this campaign whose lease has lapsed: work that may come back
        once those runs are proven fenced."""
        with self._tx("counting lapsed claims") as cur:
            cur.execute(
                "SELECT count(*) FROM task_claims c JOIN host_runs r ON r.run_id = c.run_id "
                "WHERE c.campaign = %s AND c.state = 'claimed' AND r.state = 'live' "
                "AND r.lease_expires_at <= now()",
                (self.campaign,),
            )
            return cur.fetchone()[0]

    def claim(self, run_id: str, limit: int, exclude: Sequence[str] = ()) -> list[str]:
        """Up to `limit` open tasks, now held by `run_id`. Concurrent hosts skip each other's locked
        rows instead of waiting, and never see a row another committed claim already took.
        `exclude`: tasks this run already ran (an unsettled result went back to open for ANOTHER
        host; the same run taking it again would loop on a task that fails here)."""
        with self._tx("claiming tasks") as cur:
            # FOR SHARE: a fencing host (FOR UPDATE on this row) waits for this claim, or this claim
            # waits for the fence and then sees the run is no longer live.
            cur.execute(
                "SELECT 1 FROM host_runs WHERE run_id = %s AND state = 'live' AND lease_expires_at > now() FOR SHARE",
                (run_id,),
            )
            if cur.fetchone() is None:
                raise _no_lease(cur, run_id, "may claim nothing")
            # A campaign-wide stop (campaign/shared.py) ends claiming for every host at once.
            cur.execute(
                "SELECT 1 FROM campaigns WHERE name = %s AND jsonb_typeof(record->'stop') = 'object'", (self.campaign,)
            )
            if cur.fetchone() is not None:
                return []
            cur.execute(
                "SELECT task_id FROM task_claims WHERE campaign = %s AND state = 'open' "
                "AND NOT (task_id = ANY(%s)) ORDER BY task_id LIMIT %s FOR UPDATE SKIP LOCKED",
                (self.campaign, list(exclude), limit),
            )
            ids = [r[0] for r in cur.fetchall()]
            if ids:
                cur.execute(
                    "UPDATE task_claims SET state = 'claimed', run_id = %s, claimed_at = now(), "
                    "times_claimed = times_claimed + 1 WHERE campaign = %s AND task_id = ANY(%s)",
                    (run_id, self.campaign, ids),
                )
            return ids

    def settle(self, run_id: str, task_id: str, status: str, receipt: str | None = None) -> ClaimState:
        """Record `run_id`'s result for a task it holds: settled for good, or back to open."""
        with self._tx("settling a task") as cur:
            cur.execute(
                "SELECT state, run_id FROM task_claims WHERE campaign = %s AND task_id = %s FOR UPDATE",
                (self.campaign, task_id),
            )
            row = cur.fetchone()
            if row is None:
                raise Refusal(STAGE, f"Task {task_id} is not in the campaign's selection.")
            decision = decide_settle(row[0], row[1], run_id, status)
            if decision.problem:
                raise ClaimLost(f"task {task_id}: {decision.problem}")
            if not decision.write:
                return ClaimState(row[0])
            if decision.new_state == ClaimState.SETTLED:
                cur.execute(
                    "UPDATE task_claims SET state = 'settled', settled_status = %s, receipt = %s, "
                    "settled_at = now() WHERE campaign = %s AND task_id = %s",
                    (status, receipt, self.campaign, task_id),
                )
            else:
                cur.execute(
                    "UPDATE task_claims SET state = 'open', run_id = NULL WHERE campaign = %s AND task_id = %s",
                    (self.campaign, task_id),
                )
            return decision.new_state  # type: ignore[return-value]  # a write has its new state

    def finish_run(self, run_id: str) -> list[str]:
        """The run's own launcher ended it (its runner is gone): unsettled claims go back to open."""
        with self._tx("finishing the run") as cur:
            cur.execute("SELECT state FROM host_runs WHERE run_id = %s FOR UPDATE", (run_id,))
            row = cur.fetchone()
            if row is None or row[0] != HostRunState.LIVE:
                return []
            released = self._release(cur, run_id)
            cur.execute("UPDATE host_runs SET state = 'finished', ended_at = now() WHERE run_id = %s", (run_id,))
            return released

    def host_run(self, run_id: str) -> HostRun | None:
        with self._tx("reading a run") as cur:
            cur.execute(f"SELECT {_RUN_COLUMNS} FROM host_runs WHERE run_id = %s", (run_id,))
            row = cur.fetchone()
        return None if row is None else _host_run(row)

    def expired_runs(self) -> list[HostRun]:
        """Live runs of this campaign whose lease has lapsed (candidates for a fence proof)."""
        with self._tx("listing lapsed runs") as cur:
            cur.execute(
                f"SELECT {_RUN_COLUMNS} FROM host_runs WHERE campaign = %s AND state = 'live' "
                "AND lease_expires_at <= now() ORDER BY run_id",
                (self.campaign,),
            )
            return [_host_run(r) for r in cur.fetchall()]

    def release_fenced(self, run_id: str, proof: FenceProof | None) -> tuple[bool, str, list[str]]:
        """Give a dead run's unsettled claims back, only when `decide_release` allows it.
        (released?, the sentence why, the tasks released)."""
        with self._tx("releasing a fenced run") as cur:
            cur.execute(f"SELECT {_RUN_COLUMNS} FROM host_runs WHERE run_id = %s FOR UPDATE", (run_id,))
            row = cur.fetchone()
            if row is None:
                return False, f"no run {run_id} in the campaign.", []
            cur.execute("SELECT now()")
            db_now = cur.fetchone()[0]
            decision = decide_release(_host_run(row), db_now, proof)
            if not decision.release:
                return False, decision.reason, []
            released = self._release(cur, run_id)
            cur.execute(
                "UPDATE host_runs SET state = 'fenced', ended_at = now(), fence_proof = %s::jsonb WHERE run_id = %s",
                (msgspec.json.encode(proof).decode(), run_id),
            )
            return True, decision.reason, released

    def release_by_operator(
        self, run_id: str, make: Callable[[HostRun, datetime, str, list[str]], HostRunRelease]
    ) -> tuple[HostRunRelease, list[str]]:
        """`campaign release`: ONE transaction under the run's row lock: the rules checked again on
        what is stored now (`decide_operator_release`), its claimed tasks back to open (a settled
        task is never touched), the run marked released with `make(run, db_now, db_user, tasks)`.
        Refusal (nothing written) when the rules say no; ClaimLost when the database fails."""
        with self._tx("releasing a run") as cur:
            cur.execute(
                f"SELECT {_RUN_COLUMNS} FROM host_runs WHERE run_id = %s AND campaign = %s FOR UPDATE",
                (run_id, self.campaign),
            )
            row = cur.fetchone()
            if row is None:
                raise Refusal(STAGE, f"The campaign {self.campaign!r} has no host run {run_id}.")
            run = _host_run(row)
            cur.execute("SELECT now(), session_user")
            db_now, db_user = cur.fetchone()
            problem = lapsed_problem(run, db_now)  # before any write: a refusal leaves the row as it was
            if problem is not None:
                raise Refusal(STAGE, problem[0].upper() + problem[1:])
            released = self._release(cur, run_id)
            release = make(run, db_now, db_user, released)
            decision = decide_operator_release(run, db_now, release)
            if not decision.release:  # raised inside the transaction: the claims' update rolls back
                raise Refusal(STAGE, decision.reason[0].upper() + decision.reason[1:])
            cur.execute(
                "UPDATE host_runs SET state = 'released', ended_at = now(), release = %s::jsonb WHERE run_id = %s",
                (msgspec.json.encode(release).decode(), run_id),
            )
            return release, released

    def _release(self, cur: Any, run_id: str) -> list[str]:
        cur.execute(
            "UPDATE task_claims SET state = 'open', run_id = NULL WHERE run_id = %s AND state = 'claimed' "
            "RETURNING task_id",
            (run_id,),
        )
        return sorted(r[0] for r in cur.fetchall())

    def counts(self) -> ClaimCounts:
        with self._tx("counting claims") as cur:
            cur.execute("SELECT state, count(*) FROM task_claims WHERE campaign = %s GROUP BY state", (self.campaign,))
            return ClaimCounts(**{state: n for state, n in cur.fetchall()})

    def settled_by(self) -> dict[str, tuple[str, str]]:
        """task -> (run that settled it, status), for every settled task of the campaign."""
        with self._tx("reading settled tasks") as cur:
            cur.execute(
                "SELECT task_id, run_id, settled_status FROM task_claims WHERE campaign = %s AND state = 'settled'",
                (self.campaign,),
            )
            return {t: (r, s) for t, r, s in cur.fetchall()}
