"""PostgreSQL for a campaign: the connection (bounded, its URL never shown with its password), the
versioned schema migrations, and the session advisory hold on a campaign's name. Apart from the
store and the task claims (pg_store.py), which run on what this module opens.

psycopg2 is imported here and in pg_store.py only, so commands that never name a database never load it.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import psycopg2
import psycopg2.errors
import psycopg2.extensions

from ..errors import CampaignPersistenceError, Refusal
from .db_url import SECRET_PARAMETERS, password_part
from .store import STAGE

LOCK_NAMESPACE = 0x636F77  # "cow": the first key of every advisory lock this store takes


MIGRATION_LOCK = 0


CONNECT_TIMEOUT_SEC = 10


STATEMENT_TIMEOUT_MS = 30_000


MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
CREATE TABLE campaigns (
    name text PRIMARY KEY,
    record jsonb NOT NULL,
    version bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE host_runs (
    run_id text PRIMARY KEY,
    campaign text NOT NULL,
    host text NOT NULL,
    run_root text NOT NULL,
    lease_sec double precision NOT NULL CHECK (lease_sec > 0),
    lease_expires_at timestamptz NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    ended_at timestamptz,
    state text NOT NULL CHECK (state IN ('live', 'finished', 'fenced')),
    fence_proof jsonb
);
CREATE TABLE task_claims (
    campaign text NOT NULL,
    task_id text NOT NULL,
    state text NOT NULL CHECK (state IN ('open', 'claimed', 'settled')),
    run_id text REFERENCES host_runs (run_id),
    claimed_at timestamptz,
    times_claimed integer NOT NULL DEFAULT 0,
    settled_status text,
    receipt text,
    settled_at timestamptz,
    PRIMARY KEY (campaign, task_id),
    CHECK ((state = 'open') = (run_id IS NULL)),
    CHECK ((state = 'settled') = (settled_status IS NOT NULL))
);
CREATE INDEX task_claims_open ON task_claims (campaign, task_id) WHERE state = 'open';
CREATE INDEX task_claims_by_run ON task_claims (run_id) WHERE state = 'claimed';
""",
    ),
    # The one accepted meter reading of a shared campaign (campaign/shared_meter.py): written by the
    # host holding the campaign's meter lock, read with its age by every other host.
    (
        2,
        """
CREATE TABLE meter_readings (
    campaign text PRIMARY KEY,
    usage double precision NOT NULL CHECK (usage >= 0),
    limit_usd double precision,
    limit_remaining double precision,
    observed_at timestamptz NOT NULL,
    poller text NOT NULL
);
""",
    ),
    # An operator's release of a lapsed run from another machine (campaign/release.py): its own state,
    # and the evidence and attestation that stood for a fence proof (a HostRunRelease).
    (
        3,
        """
ALTER TABLE host_runs DROP CONSTRAINT host_runs_state_check;
ALTER TABLE host_runs ADD CONSTRAINT host_runs_state_check CHECK (state IN ('live', 'finished', 'fenced', 'released'));
ALTER TABLE host_runs ADD COLUMN release jsonb;
""",
    ),
    # The run's exact Docker label as its launcher made it (path and a per-run nonce, custody/labels.py):
    # a release from another machine cannot recompute it from the run root. NULL: a run registered
    # before, whose label is its run root's alone.
    (
        4,
        """
ALTER TABLE host_runs ADD COLUMN run_label text;
""",
    ),
)


SCHEMA_VERSION = MIGRATIONS[-1][0]


def redacted(url: str) -> str:
    """The URL with its password replaced (user part and query), for messages and the store's location.
    The flags refuse a URL with a password; an in-process caller (a test's server URL) may give one."""
    parts = urlsplit(url)
    if password_part(url) is None:
        return url
    if parts.password is not None:
        netloc = parts.netloc.rsplit("@", 1)
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{netloc[-1]}")
    query = [
        (k, "***" if unquote(k).strip().lower() in SECRET_PARAMETERS else v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    ]
    return urlunsplit(parts._replace(query=urlencode(query, safe="*")))


def check_url(url: str) -> None:
    if urlsplit(url).scheme not in ("postgresql", "postgres"):
        raise Refusal(STAGE, f"--campaign-db must be a postgresql:// URL, not {redacted(url)!r}.")


def connect(url: str) -> psycopg2.extensions.connection:
    """A connection, or a Refusal naming the server (the password never appears)."""
    check_url(url)
    try:
        # Keepalives: a server that vanishes (host down, partition) fails the next call within about
        # 25 s instead of hanging it on TCP's default of hours; no statement may wait longer than 30 s.
        conn = psycopg2.connect(
            url,
            connect_timeout=CONNECT_TIMEOUT_SEC,
            application_name="cowork-adapter",
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
            options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
        )
    except psycopg2.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Refusal(STAGE, f"Cannot reach the campaign database {redacted(url)} ({first}).") from None
    return conn


def migrate(conn: psycopg2.extensions.connection) -> int:
    """Bring the schema to SCHEMA_VERSION (one transaction, serialised across hosts); its version."""
    try:
        return _migrate(conn)
    except psycopg2.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Refusal(STAGE, f"The campaign database's schema cannot be checked or created ({first}).") from None


def _migrate(conn: psycopg2.extensions.connection) -> int:
    with conn:  # commits on success, rolls back on error
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_NAMESPACE, MIGRATION_LOCK))
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cur.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
            have = cur.fetchone()[0]  # type: ignore[index]  # one row, always
            if have > SCHEMA_VERSION:
                raise Refusal(
                    STAGE,
                    f"The campaign database has schema version {have}, newer than this adapter's "
                    f"{SCHEMA_VERSION}; upgrade cowork-adapter on this host.",
                )
            for version, sql in MIGRATIONS:
                if version > have:
                    cur.execute(sql)
                    cur.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
    return SCHEMA_VERSION


def _lost(what: str, exc: Exception) -> CampaignPersistenceError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return CampaignPersistenceError(f"the campaign database failed while {what}: {first}")


def hold(conn: psycopg2.extensions.connection, name: str, location: str, *, shared: bool) -> bool:
    """Try the campaign's session advisory lock, never waiting: exclusive for a single-host launcher
    or command, shared for the hosts of a shared campaign (campaign/shared.py). Either kind refuses
    the other; it ends with the connection. True when taken."""
    take = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {take}(%s, hashtext(%s))", (LOCK_NAMESPACE, name))
            return bool(cur.fetchone()[0])  # type: ignore[index]  # one row, always
    except psycopg2.Error as exc:
        raise Refusal(STAGE, f"The campaign {location} cannot be held ({str(exc).strip()}).") from None
    finally:
        conn.autocommit = False
