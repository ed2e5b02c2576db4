"""The operator commands over one run root (or a campaign's hosts): `status`, `stop` and `clear`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ..defaults import DEFAULT_CAMPAIGN_NAME, InvalidFlag, check_env_name, check_http_url
from ..errors import Refusal
from ..paths import PathKind, checked_path, checked_result_root
from ..runroot import layout
from .apps import _campaign_view_flags, _more, app


@app.command(
    help="Show a run's progress, spending, disk headroom and stop reasons.\n\n"
    "Example: cowork-adapter status /data/smoke-1 --json\n\n"
    "A campaign over several hosts: cowork-adapter status --campaign-db postgresql://db/campaigns "
    "--campaign-name c1 [RUN_ROOT...] (its claims, host runs and leases from the database, with each "
    "given run root's progress).\n\nExit codes: 0 read; 1 read, but a run root of the campaign was not "
    "given; 2 refused (not a run root, database unreachable, unknown campaign, a run root not of it)."
    + _more("docs/operating.md")
)
def status(
    run_roots: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Run root to inspect (with --campaign-db: any of the campaign's run roots).", show_default=False
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    campaign_db: Annotated[
        str | None,
        typer.Option(
            help="Show the campaign in this PostgreSQL database over every host (password in PGPASSWORD).",
            show_default=False,
        ),
    ] = None,
    campaign_name: Annotated[str, typer.Option(help="The campaign's name in --campaign-db.")] = DEFAULT_CAMPAIGN_NAME,
) -> None:
    campaign = _campaign_view_flags(campaign_db, campaign_name)
    if campaign is not None:
        roots = [checked_path(p, PathKind.RUN_ROOT, "", needs_manifest=True) for p in run_roots or []]
        from ..ops.campaign_status import campaign_status_command

        raise SystemExit(campaign_status_command(campaign[0], campaign[1], roots, as_json))
    if len(run_roots or []) != 1:
        raise Refusal("flags", "status takes exactly one run root (several only with --campaign-db).")
    if os.path.isfile(Path(run_roots[0], layout.TRIALS)):  # type: ignore[index]  # exactly one, checked above
        from ..ops.trial_control import trial_set_status

        raise SystemExit(trial_set_status(checked_result_root(run_roots[0]), as_json))  # type: ignore[index]
    run_root = checked_path(run_roots[0], PathKind.RUN_ROOT, "")  # type: ignore[index]  # exactly one, checked above
    from ..ops.status import status_command

    raise SystemExit(status_command(run_root, as_json))


@app.command(
    help="Ask a running launcher to stop and clean up by its exact run label, then wait for it.\n\n"
    "Example: cowork-adapter stop /data/smoke-1 --timeout 300\n\n"
    "Exit codes: 0 stopped with cleanup proven, or already ended; "
    "1 cleanup unproven, timed out, or launcher gone (it names what lives and the `clear` line); 2 not a run root."
    + _more("docs/operating.md")
)
def stop(
    run_root: Annotated[Path, typer.Argument(help="Run root of the launcher to stop.")],
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the launcher to finish (> 0).")] = 300.0,
) -> None:
    if not (0 < timeout < float("inf")):
        raise Refusal("flags", f"--timeout must be a finite number greater than 0 (got {timeout}).")
    if os.path.isfile(Path(run_root, layout.TRIALS)):  # a trial set (run --trials): every live trial stops
        from ..ops.trial_control import trial_set_stop

        raise SystemExit(trial_set_stop(checked_result_root(run_root), timeout))
    run_root = checked_path(run_root, PathKind.RUN_ROOT, "")
    from ..ops.stop import stop_command

    raise SystemExit(stop_command(run_root, timeout))


@app.command(
    help="Finish the custody of a run whose launcher died: prove its processes gone, remove every container, "
    "network and volume with its exact label (proven by a fresh listing), delete its key file, rebuild its "
    "ledger and settle the campaign's active run. Flags default to what the run recorded.\n\n"
    "Example: cowork-adapter clear /data/smoke-1 --operator-note 'launcher OOM-killed at 14:02'\n\n"
    "Exit codes: 0 cleared, or already cleared; 1 labelled objects not removable or provable, ledger or "
    "campaign not written; 2 refused (bad input, a process of the run alive, no meter reading)."
    + _more("docs/operating.md")
)
def clear(
    run_root: Annotated[Path, typer.Argument(help="Run root of the dead run.")],
    operator_note: Annotated[str, typer.Option(help="What the operator checked, recorded verbatim.")],
    campaign_file: Annotated[
        Path | None,
        typer.Option(
            help="The campaign record. Default: the one the run recorded (skipped when it was never created)."
        ),
    ] = None,
    meter_url: Annotated[str | None, typer.Option(help="Base URL of the key meter. Default: the run's.")] = None,
    docker_host: Annotated[str | None, typer.Option(help="Docker daemon of the run. Default: the run's.")] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option(
            help="Environment variable holding the provider key (only to settle a campaign). Default: the run's."
        ),
    ] = None,
) -> None:
    if not operator_note.strip():
        raise Refusal("flags", "--operator-note must say what was checked; it is empty.")
    if docker_host is not None and not docker_host.strip():
        raise Refusal("docker_host", "--docker-host is empty; name the Docker daemon explicitly or omit it.")
    try:
        if api_key_env is not None:
            api_key_env = check_env_name("--api-key-env", api_key_env)
        if meter_url is not None:
            meter_url = check_http_url("--meter-url", meter_url)
    except InvalidFlag as exc:
        raise Refusal(exc.stage, exc.sentence) from None
    from ..ops.clear import clear_command

    raise SystemExit(
        clear_command(
            checked_path(run_root, PathKind.RUN_ROOT, "", needs_manifest=True),
            operator_note.strip(),
            campaign_file=checked_path(campaign_file, PathKind.STATE_FILE, "--campaign-file")
            if campaign_file
            else None,
            meter_url=meter_url,
            docker_host=docker_host.strip() if docker_host else None,
            api_key_env=api_key_env,
        )
    )
