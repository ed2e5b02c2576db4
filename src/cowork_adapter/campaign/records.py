"""The campaign's records as the scoring code and `status` read them: a read-only snapshot of one
campaign in PostgreSQL, which host run each given run root is, and the sentence for an operator's release.

`report/` reads a campaign only through this module, never through the store, the claims or the
commands; and nothing in `campaign/` imports `report/`, so money sits below the scoring code.

The snapshot is read-only by construction: the session is READ ONLY (the server refuses any write),
the schema is never created or migrated (a database without it holds no campaign), and the whole
snapshot is one REPEATABLE READ transaction, so the runs, the claims and the record agree with each
other even while hosts keep settling tasks. Its database driver and connection are imported by
`read_snapshot` alone, so a reader of the records imports none of the store's machinery.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..errors import Refusal
from ..schemas.manifest import RunManifest
from ..schemas.multihost import CampaignClaim, CampaignRun, CampaignSnapshot, HostRunRelease
from ..vocab import ReleaseFence

STAGE = "campaign"  # the stage of the snapshot's refusals, as the store's own
# A run root that is not the campaign's is refused under the report's stage, by `report` and `status` alike.
MATCH_STAGE = "report"


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
    # psycopg2 and the store's connection take ~0.1 s to import: only the commands that read a database pay it.
    import psycopg2

    from .pg_conn import SCHEMA_VERSION, connect, redacted
    from .store import parse_campaign_text

    location = f"{redacted(url)} campaign {name!r}"
    conn = connect(url)  # a Refusal naming the server when it cannot be reached
    try:
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn, conn.cursor() as cur:
            cur.execute("SELECT to_regclass('schema_migrations') IS NOT NULL")
            if not cur.fetchone()[0]:  # type: ignore[index]  # one row, always
                raise Refusal(
                    STAGE,
                    f"The database {redacted(url)} holds no campaign (its campaign schema was "
                    f"never created), so there is no campaign {name!r} to read.",
                )
            cur.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
            version = cur.fetchone()[0]  # type: ignore[index]  # one row, always
            if version > SCHEMA_VERSION:
                raise Refusal(
                    STAGE,
                    f"The campaign database has schema version {version}, newer than this adapter's "
                    f"{SCHEMA_VERSION}; upgrade cowork-adapter on this host.",
                )
            if version < 1:
                raise Refusal(
                    STAGE,
                    f"The database {redacted(url)} holds no campaign (no schema version is "
                    f"recorded), so there is no campaign {name!r} to read.",
                )
            cur.execute("SELECT now()")
            db_now = cur.fetchone()[0]  # type: ignore[index]  # one row, always
            cur.execute("SELECT record::text FROM campaigns WHERE name = %s", (name,))
            row = cur.fetchone()
            # An operator's release (schema v3) is read where the column exists: a v2 database has none.
            release = "release::text" if version >= 3 else "NULL"
            label = "run_label" if version >= 4 else "NULL"  # v4: the label registered with the run
            cur.execute(
                f"SELECT run_id, host, run_root, state, started_at, ended_at, lease_expires_at, {release}, "
                f"{label} FROM host_runs WHERE campaign = %s ORDER BY started_at, run_id",
                (name,),
            )
            runs = [
                CampaignRun(
                    run_id=r[0],
                    host=r[1],
                    run_root=r[2],
                    state=r[3],
                    started_at=r[4],
                    ended_at=r[5],
                    lease_expires_at=r[6],
                    release=None if r[7] is None else _release(location, r[7]),
                    run_label=r[8],
                )
                for r in cur.fetchall()
            ]
            cur.execute(
                "SELECT task_id, state, run_id, times_claimed, settled_status, receipt, settled_at "
                "FROM task_claims WHERE campaign = %s ORDER BY task_id",
                (name,),
            )
            claims = [
                CampaignClaim(
                    task_id=r[0],
                    state=r[1],
                    run_id=r[2],
                    times_claimed=r[3],
                    settled_status=r[4],
                    receipt=r[5],
                    settled_at=r[6],
                )
                for r in cur.fetchall()
            ]
    except psycopg2.Error as exc:
        raise Refusal(STAGE, f"The campaign {location} cannot be read ({_first_line(exc)}).") from None
    finally:
        conn.close()
    if row is None and not runs and not claims:
        raise Refusal(
            STAGE,
            f"The database {redacted(url)} has no campaign named {name!r} (no record, no host run, "
            "no task claim); check --campaign-name.",
        )
    record = parse_campaign_text(location, row[0]) if row is not None else None
    return CampaignSnapshot(name=name, location=location, db_now=db_now, record=record, runs=runs, claims=claims)


def describe(release: HostRunRelease) -> str:
    """One sentence for status and report: released, by whom, on what evidence (never 'proven')."""
    how = (
        "operator-attested, not proven"
        if release.fence == ReleaseFence.ATTESTED
        else "its daemon's label proven empty, its processes not checked"
    )
    return (
        f"released by {release.operator} (database role {release.db_user}) at {release.at.isoformat()} "
        f"({how}: {release.evidence}; note: {release.operator_note}); "
        f"{len(release.released_tasks)} claim(s) went back to open"
    )


def run_place(run: CampaignRun) -> str:
    return f"run {run.run_id} on {run.host} ({run.run_root})"


def match_runs(runs: list[CampaignRun], given: list[tuple[str, RunManifest]], campaign: str) -> dict[str, str]:
    """run_id -> the given run root (path here) of that host run, matched by the run id its manifest
    records, else by the run root its launcher registered. Refusal for a root that is not the
    campaign's, matches two host runs, or repeats a run already given."""
    by_id = {r.run_id: r for r in runs}
    matched: dict[str, str] = {}
    for root, m in given:
        if m.campaign_name is not None and m.campaign_name != campaign:
            raise Refusal(
                MATCH_STAGE,
                f"Run root {root} belongs to campaign {m.campaign_name!r}, not {campaign!r}; "
                "give only the run roots of this campaign.",
            )
        run_id = m.shared_run.run_id if m.shared_run is not None else None
        if run_id is not None:
            if run_id not in by_id:
                raise Refusal(
                    MATCH_STAGE,
                    f"Run root {root} records run {run_id}, which is not a run of campaign "
                    f"{campaign!r}; give only the run roots of this campaign.",
                )
            candidates = [by_id[run_id]]
        else:
            candidates = [r for r in runs if r.run_root == m.run_root]
        if not candidates:
            raise Refusal(
                MATCH_STAGE,
                f"Run root {root} (recorded as {m.run_root}) is not a run of campaign {campaign!r}: "
                "no host run of the campaign has that run root; give only the run roots of this campaign.",
            )
        if len(candidates) > 1:
            raise Refusal(
                MATCH_STAGE,
                f"Run root {root} (recorded as {m.run_root}) matches "
                f"{' and '.join(run_place(c) for c in candidates)}, and its manifest records no run id "
                "to tell them apart; report those hosts' runs separately.",
            )
        run = candidates[0]
        if run.run_id in matched:
            raise Refusal(
                MATCH_STAGE,
                f"Run roots {matched[run.run_id]} and {root} are both {run_place(run)}; give each run root once.",
            )
        matched[run.run_id] = root
    return matched


def missing_runs(runs: list[CampaignRun], matched: dict[str, Any]) -> list[CampaignRun]:
    return [r for r in runs if r.run_id not in matched]


def missing_sentence(missing: list[CampaignRun], campaign: str) -> str:
    listed = "; ".join(f"{r.host}:{r.run_root} (run {r.run_id}, {r.state})" for r in missing)
    noun = "run root is" if len(missing) == 1 else f"{len(missing)} run roots are"
    return (
        f"Campaign {campaign!r}: {noun} not given: {listed}; copy each from its host and name it, "
        "since one result needs every host's ledger."
    )
