"""`campaign show | reconcile | release`: the campaign's records, read and settled by commands
(never by hand-editing its JSON or its database)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..defaults import (
    DEFAULT_API_KEY_ENV,
    DEFAULT_CAMPAIGN_NAME,
    DEFAULT_METER_URL,
    InvalidFlag,
    check_env_name,
    check_http_url,
)
from ..errors import Refusal
from ..paths import PathKind, checked_path
from .apps import _campaign_view_flags, _more, campaign_app


@campaign_app.command(
    "show",
    help="Show the campaign's ceiling, baseline, spending, active run and history.\n\n"
    "Example: cowork-adapter campaign show --campaign-file /data/campaign.json" + _more("docs/operating.md"),
)
def campaign_show(
    campaign_file: Annotated[Path | None, typer.Option(help="The campaign record.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    campaign_db: Annotated[
        str | None,
        typer.Option(help="The campaign in PostgreSQL instead (postgresql://HOST/DB, password in PGPASSWORD)."),
    ] = None,
    campaign_name: Annotated[str, typer.Option(help="The campaign's name in --campaign-db.")] = DEFAULT_CAMPAIGN_NAME,
) -> None:
    from ..campaign.commands import show_command

    path, store = _campaign_store_flags(campaign_file, campaign_db, campaign_name)
    raise SystemExit(show_command(path, as_json, store=store))


def _campaign_store_flags(
    campaign_file: Path | None, campaign_db: str | None, campaign_name: str
) -> tuple[Path | None, Any]:
    """Exactly one of --campaign-file and --campaign-db: (checked path, None) or (None, PostgreSQL store)."""
    if (campaign_file is None) == (campaign_db is None):
        raise Refusal("flags", "name the campaign with --campaign-file or --campaign-db (exactly one).")
    if campaign_file is not None:
        if campaign_name != DEFAULT_CAMPAIGN_NAME:
            raise Refusal("flags", "--campaign-name is only meaningful with --campaign-db.")
        return checked_path(campaign_file, PathKind.STATE_FILE, "--campaign-file"), None
    url, name = _campaign_view_flags(campaign_db, campaign_name) or (campaign_db, campaign_name)
    from ..campaign.pg_store import PostgresCampaignStore

    return None, PostgresCampaignStore(url, name)  # type: ignore[arg-type]  # a URL when --campaign-db


@campaign_app.command(
    "reconcile",
    help="After an ungraceful exit, verify the run left nothing behind, refresh the key's usage and "
    "clear the stale active run, recording the checks.\n\n"
    "Example: cowork-adapter campaign reconcile --campaign-file /data/campaign.json --run-root "
    "/data/smoke-1 --operator-note 'launcher killed by OOM, checked ps'" + _more("docs/operating.md"),
)
def campaign_reconcile(
    run_root: Annotated[Path, typer.Option(help="Run root of the stale active run.")],
    operator_note: Annotated[str, typer.Option(help="What the operator checked, recorded verbatim.")],
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the provider key.")
    ] = DEFAULT_API_KEY_ENV,
    meter_url: Annotated[str, typer.Option(help="Base URL of the key meter.")] = DEFAULT_METER_URL,
    docker_host: Annotated[str | None, typer.Option(envvar="DOCKER_HOST", help="Docker daemon to check.")] = None,
    campaign_file: Annotated[Path | None, typer.Option(help="The campaign record.")] = None,
    campaign_db: Annotated[
        str | None,
        typer.Option(help="The campaign in PostgreSQL instead (postgresql://HOST/DB, password in PGPASSWORD)."),
    ] = None,
    campaign_name: Annotated[str, typer.Option(help="The campaign's name in --campaign-db.")] = DEFAULT_CAMPAIGN_NAME,
) -> None:
    if not operator_note.strip():
        raise Refusal("flags", "--operator-note must say what was checked; it is empty.")
    if not (docker_host or "").strip():
        raise Refusal("docker_host", "--docker-host is empty; name the Docker daemon explicitly (or set DOCKER_HOST).")
    try:
        api_key_env = check_env_name("--api-key-env", api_key_env)
        meter_url = check_http_url("--meter-url", meter_url)
    except InvalidFlag as exc:
        raise Refusal(exc.stage, exc.sentence) from None
    from ..campaign.commands import reconcile_command

    path, store = _campaign_store_flags(campaign_file, campaign_db, campaign_name)
    raise SystemExit(
        reconcile_command(
            campaign_file=path,  # type: ignore[arg-type]  # a file when no store
            store=store,
            run_root=checked_path(run_root, PathKind.RUN_ROOT_IF_EXISTS, "--run-root"),
            operator_note=operator_note.strip(),
            api_key_env=api_key_env,
            meter_url=meter_url,
            docker_host=docker_host.strip(),  # type: ignore[union-attr]  # checked above
        )
    )


@campaign_app.command(
    "release",
    help="Give a lapsed host run's unsettled claims back when its machine is gone for good (a shared "
    "campaign in PostgreSQL).\n\nIts lease must have lapsed; with --docker-host and that daemon answering, "
    "whatever carries the run's exact label is removed and proven gone; otherwise --confirm-fenced is the "
    "operator's attestation. One transaction then marks the run released (with the evidence, who and "
    "when) and reopens its claimed tasks; settled tasks are never touched.\n\n"
    "Example: cowork-adapter campaign release --campaign-db postgresql://db.lan/campaigns --campaign-name c1 "
    "--host-run 3f2a... --confirm-fenced --operator-note 'VM host-a deleted 09:10, its disk is gone'\n\n"
    "Exit codes: 0 released; 1 the label's cleanup not proven or the database write failed (nothing "
    "released); 2 refused (unknown run, not live, lease not lapsed, no evidence)." + _more("docs/several-hosts.md"),
)
def campaign_release(
    campaign_db: Annotated[
        str,
        typer.Option(
            help="The campaign in PostgreSQL (postgresql://HOST/DB, password in PGPASSWORD).", show_default=False
        ),
    ],
    host_run: Annotated[
        str, typer.Option(help="The host run to release (its run id, as `status` lists it).", show_default=False)
    ],
    operator_note: Annotated[str, typer.Option(help="What the operator checked, recorded verbatim.")],
    campaign_name: Annotated[str, typer.Option(help="The campaign's name in --campaign-db.")] = DEFAULT_CAMPAIGN_NAME,
    docker_host: Annotated[
        str | None,
        typer.Option(
            help="The Docker daemon the run used (never taken from DOCKER_HOST: that is this machine's).",
            show_default=False,
        ),
    ] = None,
    confirm_fenced: Annotated[
        bool,
        typer.Option(
            "--confirm-fenced",
            help="Attest that the run's machine, processes and containers are gone (needed "
            "when no --docker-host answers); recorded as the release's evidence.",
        ),
    ] = False,
) -> None:
    if not operator_note.strip():
        raise Refusal("flags", "--operator-note must say what was checked; it is empty.")
    if not host_run.strip():
        raise Refusal("flags", "--host-run is empty; name the run id `status --campaign-db` lists.")
    if docker_host is not None and not docker_host.strip():
        raise Refusal("docker_host", "--docker-host is empty; name the run's Docker daemon or omit it.")
    url, name = _campaign_view_flags(campaign_db, campaign_name)  # type: ignore[misc]  # flags checked above
    from ..campaign.release import release_command

    raise SystemExit(
        release_command(
            url,
            name,
            host_run.strip(),
            operator_note.strip(),
            docker_host.strip() if docker_host else None,
            confirm_fenced,
        )
    )


# ---------------------------------------------------------------------------------------------
# Entry point: one line on stderr for every refusal or usage error.
# ---------------------------------------------------------------------------------------------
