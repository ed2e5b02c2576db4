"""A read-only snapshot of one campaign in PostgreSQL, for `report` and `status` over its hosts.

Read-only by construction: the session is READ ONLY (the server refuses any write), the schema is
never created or migrated (a database without it holds no campaign), and the whole snapshot is one
REPEATABLE READ transaction, so the runs, the claims and the record agree with each other even
while hosts keep settling tasks.
"""

from __future__ import annotations

import msgspec
import psycopg2

from ..errors import Refusal
from ..schemas.multihost import CampaignClaim, CampaignRun, CampaignSnapshot, HostRunRelease
from .pg_store import SCHEMA_VERSION, connect, redacted
from .store import STAGE, parse_campaign_text


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _release(location: str, text: str) -> HostRunRelease:
    try:
        return msgspec.json.decode(text, type=HostRunRelease)
    except msgspec.DecodeError as exc:
        raise Refusal(STAGE, f"The campaign {location} holds a host run release that does not read ({exc}).") from None


def read_snapshot(url: str, name: str) -> CampaignSnapshot:
    """The campaign `name` as one consistent read, or a Refusal (unreachable, no schema, unknown name)."""
    location = f"{redacted(url)} campaign {name!r}"
    conn = connect(url)  # a Refusal naming the server when it cannot be reached
    try:
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn, conn.cursor() as cur:
            cur.execute("SELECT to_regclass('schema_migrations') IS NOT NULL")
            if not cur.fetchone()[0]:
                raise Refusal(STAGE, f"The database {redacted(url)} holds no campaign (its campaign schema was "
                                     f"never created), so there is no campaign {name!r} to read.")
            cur.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
            version = cur.fetchone()[0]
            if version > SCHEMA_VERSION:
                raise Refusal(STAGE, f"The campaign database has schema version {version}, newer than this adapter's "
                                     f"{SCHEMA_VERSION}; upgrade cowork-adapter on this host.")
            if version < 1:
                raise Refusal(STAGE, f"The database {redacted(url)} holds no campaign (no schema version is "
                                     f"recorded), so there is no campaign {name!r} to read.")
            cur.execute("SELECT now()")
            db_now = cur.fetchone()[0]
            cur.execute("SELECT record::text FROM campaigns WHERE name = %s", (name,))
            row = cur.fetchone()
            # An operator's release (schema v3) is read where the column exists: a v2 database has none.
            release = "release::text" if version >= 3 else "NULL"
            label = "run_label" if version >= 4 else "NULL"  # v4: the label registered with the run
            cur.execute(f"SELECT run_id, host, run_root, state, started_at, ended_at, lease_expires_at, {release}, "
                        f"{label} FROM host_runs WHERE campaign = %s ORDER BY started_at, run_id", (name,))
            runs = [CampaignRun(run_id=r[0], host=r[1], run_root=r[2], state=r[3], started_at=r[4], ended_at=r[5],
                                lease_expires_at=r[6], release=None if r[7] is None else _release(location, r[7]),
                                run_label=r[8])
                    for r in cur.fetchall()]
            cur.execute("SELECT task_id, state, run_id, times_claimed, settled_status, receipt, settled_at "
                        "FROM task_claims WHERE campaign = %s ORDER BY task_id", (name,))
            claims = [CampaignClaim(task_id=r[0], state=r[1], run_id=r[2], times_claimed=r[3], settled_status=r[4],
                                    receipt=r[5], settled_at=r[6]) for r in cur.fetchall()]
    except psycopg2.Error as exc:
        raise Refusal(STAGE, f"The campaign {location} cannot be read ({_first_line(exc)}).") from None
    finally:
        conn.close()
    if row is None and not runs and not claims:
        raise Refusal(STAGE, f"The database {redacted(url)} has no campaign named {name!r} (no record, no host run, "
                             "no task claim); check --campaign-name.")
    record = parse_campaign_text(location, row[0]) if row is not None else None
    return CampaignSnapshot(name=name, location=location, db_now=db_now, record=record, runs=runs, claims=claims)
