"""`cowork-adapter clear RUN_ROOT`: finish the custody of a run whose launcher died.

In order, each step refusing in one sentence when it is unsafe:
  1. prove the run's processes are gone (launcher, watchdog, runner group: custody/liveness.py);
  2. remove every container, network and volume with the run's exact label, and prove by a fresh
     listing that none remains (custody/docker_ops.py);
  3. delete the key file and the run-scoped TMPDIR;
  4. rebuild the run's final ledger from its manifest and dumps;
  5. settle the campaign's active run when it is this run (the guarded machinery of
     `campaign reconcile`); a run that never created its campaign file skips this, lock-free;
  6. record it: a `dead_run_cleared` event and the manifest's `cleared` record.
Running it again on a cleared run says so and exits 0.

Exit codes: 0 cleared (or already cleared); 1 the labelled objects could not be removed or proven
gone, the ledger could not be rebuilt, or the campaign could not be written; 2 refused (bad input,
a process of the run still alive, the meter gave no reading): the sentence says what to do.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..campaign.observe import DEFAULT_BLINDNESS_SEC
from ..campaign.store import read_campaign
from ..container import safetree
from ..custody.creations import creations_dir
from ..custody.liveness import prove
from ..errors import CampaignPersistenceError, CustodyError, Refusal
from ..host.resources import reader_for
from ..runroot import layout
from ..runroot.events import EventLog, read_all
from ..runroot.layout import RunRoot
from ..runroot.manifest import utc_now, write_manifest
from ..schemas.campaign import key_fingerprint
from ..schemas.manifest import ClearedRecord, RunManifest
from ..schemas.record import RecordInvalid, decode
from ..score.ledger import rebuild_final
from ..vocab import EventKind, ExitCode, RunOutcome, StopReason
from .recorded import clear_hint, recorded_docker_host, recorded_key_env, recorded_meter_url, run_tmpdir
from .run_view import gather_recorded, read_run
from .stop import fence

if TYPE_CHECKING:  # httpx is imported by the meter itself, not by `status` reading clear hints
    from ..campaign.meter import MeterReading

STAGE = "clear"
MANIFEST = layout.MANIFEST

# What step 5 found (the manifest's cleared.campaign).
CAMPAIGN_SETTLED = "settled"
NO_CAMPAIGN_FILE = "no_campaign_file"
NO_ACTIVE_RUN = "no_active_run"
OTHER_ACTIVE_RUN = "active_run_is_another_run"
UNSETTLED = "unsettled"  # the rest was done; the campaign's active run is kept for the next `clear`


def say(sentence: str, *, err: bool = False) -> None:
    print(f"cowork-adapter: {sentence}", file=sys.stderr if err else sys.stdout, flush=True)


# ---------------------------------------------------------------------------------------------
# The plan: the run's records resolved with the operator's flags, refused before anything changes
# ---------------------------------------------------------------------------------------------


@dataclass
class ClearPlan:
    run_root: Path
    manifest: RunManifest
    docker_host: str
    meter_url: str | None
    campaign_file: Path | None  # None: the run recorded none, or never created it
    campaign_state: str  # what step 5 will do, decided read-only before any step runs
    key: str | None  # only when the campaign's active run is this run


def _load_manifest(run_root: Path) -> RunManifest:
    if not run_root.is_dir():
        raise Refusal(STAGE, f"{run_root} is not a directory, so it is not a run root.")
    path = run_root / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise Refusal(STAGE, f"{run_root} has no {MANIFEST}, so it is not a run root this command can clear.") from None
    except OSError as exc:
        raise Refusal(STAGE, f"{path} cannot be read ({exc.strerror}).") from None
    try:
        manifest = decode(text, RunManifest)
    except RecordInvalid as exc:
        raise Refusal(STAGE, f"{path} is not a valid run manifest ({exc}); it is left as it is.") from None
    if os.path.normpath(manifest.run_root) != os.path.normpath(run_root):
        raise Refusal(STAGE, f"{path} belongs to the run root {manifest.run_root}, not {run_root}.")
    return manifest


def _ran_past_admission(run_root: Path) -> bool:
    """True when the runner started: by then the run's campaign file existed."""
    path = RunRoot(run_root).events
    if not path.is_file():
        return False
    return any(e.get("kind") == EventKind.RUNNER_STARTED.value for e in read_all(path))


def make_plan(
    run_root: Path,
    *,
    campaign_file: Path | None,
    meter_url: str | None,
    docker_host: str | None,
    api_key_env: str | None,
    environ: Mapping[str, str],
) -> ClearPlan:
    manifest = _load_manifest(run_root)
    host = (docker_host or "").strip() or recorded_docker_host(run_root, manifest)
    if not host:
        raise Refusal(STAGE, "The run recorded no Docker host; name the daemon it used with --docker-host.")
    meter = meter_url or recorded_meter_url(manifest)
    if campaign_file is not None:
        if not campaign_file.is_file():
            raise Refusal(
                STAGE,
                f"The campaign file {campaign_file} does not exist; omit --campaign-file when the "
                "run never created its campaign.",
            )
        chosen: Path | None = campaign_file
    elif manifest.campaign_file:
        chosen = Path(manifest.campaign_file)
        if not chosen.is_file():
            if _ran_past_admission(run_root):
                raise Refusal(
                    STAGE,
                    f"The run's campaign file {chosen} is missing although its runner started; "
                    "restore the file, then clear again.",
                )
            chosen = None  # killed before its campaign existed: nothing to settle
    else:
        chosen = None
    if chosen is None:
        return ClearPlan(run_root, manifest, host, meter, None, NO_CAMPAIGN_FILE, None)
    record = read_campaign(chosen)  # a Refusal when unreadable: nothing was touched yet
    active = record.active_run if record is not None else None
    if active is None:
        return ClearPlan(run_root, manifest, host, meter, chosen, NO_ACTIVE_RUN, None)
    if os.path.normpath(active.run_root) != os.path.normpath(run_root):
        return ClearPlan(run_root, manifest, host, meter, chosen, OTHER_ACTIVE_RUN, None)
    if not meter:
        raise Refusal(STAGE, "The run recorded no key meter URL; name it with --meter-url.")
    key_env = api_key_env or recorded_key_env(manifest)
    key = environ.get(key_env, "") if key_env else ""
    if not key:
        raise Refusal(
            STAGE,
            f"The environment variable {key_env or '(none recorded)'} holds no provider key, so the "
            "campaign's active run cannot be settled; export it (or name another with --api-key-env).",
        )
    if key_fingerprint(key) != record.fingerprint:  # type: ignore[union-attr]  # the plan read it
        raise Refusal(STAGE, f"The key in ${key_env} is not the campaign's key ({record.fingerprint}).")  # type: ignore[union-attr]  # the plan read it
    return ClearPlan(run_root, manifest, host, meter, chosen, CAMPAIGN_SETTLED, key)


# ---------------------------------------------------------------------------------------------
# The steps
# ---------------------------------------------------------------------------------------------


def rebuild_final_ledger(run_root: Path) -> int:
    """Step 4: the final ledger from the manifest and the dumps (receipts settle); returns the rows written."""
    return len(rebuild_final(run_root, StopReason.LAUNCHER_DIED.value))


def _drop_key(run_root: Path) -> bool:
    """Delete the run's key file; True when it existed."""
    path = RunRoot(run_root).agent_env
    existed = path.exists()
    path.unlink(missing_ok=True)
    from ..gateway.run import remove_secrets

    remove_secrets(run_root)  # --llm-gateway: the gateway secret and token files (useless once it died)
    return existed


def _already_cleared(plan: ClearPlan, labelled_empty: bool) -> bool:
    return (
        plan.manifest.cleared is not None
        and labelled_empty
        and not RunRoot(plan.run_root).agent_env.exists()
        and plan.campaign_state != CAMPAIGN_SETTLED
    )


def clear_command(
    run_root: Path,
    operator_note: str,
    *,
    campaign_file: Path | None = None,
    meter_url: str | None = None,
    docker_host: str | None = None,
    api_key_env: str | None = None,
    environ: Mapping[str, str] | None = None,
    read_meter: Callable[[float], MeterReading] | None = None,
    meter_deadline_sec: float | None = None,  # None: the meter's blindness bound (campaign.observe)
    table: Any = None,
) -> int:
    from ..custody import docker_ops

    note = operator_note.strip()
    meter_deadline_sec = DEFAULT_BLINDNESS_SEC if meter_deadline_sec is None else meter_deadline_sec
    try:
        if not note:
            raise Refusal(STAGE, "--operator-note must say what you checked; it is empty.")
        plan = make_plan(
            Path(run_root),
            campaign_file=campaign_file,
            meter_url=meter_url,
            docker_host=docker_host,
            api_key_env=api_key_env,
            environ=os.environ if environ is None else environ,
        )
        # 1. Nothing of the run may still be running: it could create or use what we remove.
        liveness = prove(plan.run_root, gather_recorded(read_run(plan.run_root)), table=table)
        if not liveness.all_gone:
            alive = "; ".join(h.describe() for h in liveness.alive)
            raise Refusal(
                STAGE,
                f"The run is not dead: {alive}; stop it with `cowork-adapter stop {plan.run_root}` "
                "first, then clear it.",
            )
    except Refusal as exc:
        say(f"refused ({exc.stage}): {exc.sentence}", err=True)
        return int(exc.exit_code)

    label = plan.manifest.run_label
    try:
        before = docker_ops.list_labelled(plan.docker_host, label)
    except CustodyError as exc:
        _drop_key(plan.run_root)  # nothing of the run lives to need it: the secret goes in any case
        say(
            f"cannot list the run's labelled objects, so nothing was removed (the key file was deleted): {exc}.",
            err=True,
        )
        return int(ExitCode.FAILED)
    if _already_cleared(plan, before.empty):
        say(
            f"the run {plan.run_root} was already cleared at {plan.manifest.cleared.at}; its processes are gone and "  # type: ignore[union-attr]  # cleared, checked above
            f"nothing with its label {label} remains on {plan.docker_host}."
        )
        return int(ExitCode.OK)

    # 2. Remove every labelled object, proven by a fresh listing (cleanup_run relists). The stop
    # file first: should anything of the run have escaped the proof, the shim refuses it new containers.
    fence(plan.run_root)
    try:
        # Containers a killed run left behind are read before removal: the rebuilt ledger shows them.
        report = docker_ops.cleanup_run(
            plan.docker_host,
            label,
            lambda r: print(f"cowork-adapter: cleanup: {r}", file=sys.stderr, flush=True),
            before_remove=reader_for(RunRoot(plan.run_root).evidence),
            creations=creations_dir(plan.run_root),
        )
    except CustodyError as exc:
        _drop_key(plan.run_root)
        say(
            f"the run's labelled objects could not all be removed or proven gone: {exc}; the key file was deleted, "
            "the ledger and campaign are left for a later `clear`.",
            err=True,
        )
        return int(ExitCode.FAILED)
    say(
        f"removed {len(report.removed_containers)} containers, {len(report.removed_networks)} networks and "
        f"{len(report.removed_volumes)} volumes with label {label}; a fresh listing finds none."
    )

    # 3. The key file and the runner's staging copies (any depth: the remover never recurses), and
    # what the agent must not leave on the host in its dumps: device nodes and set-id files.
    agent_env_removed = _drop_key(plan.run_root)
    tmpdir = run_tmpdir(plan.manifest)
    tmpdir_removed = bool(tmpdir and tmpdir.exists())
    if tmpdir is not None:
        safetree.remove_tree(str(tmpdir))
    hazards = safetree.remove_hazards(str(RunRoot(plan.run_root).dumps))
    if hazards.removed or hazards.failed:
        say(
            f"removed {hazards.removed} device node(s) or set-id file(s) the agents left in the dumps"
            + (f"; {hazards.failed} could not be removed ({', '.join(hazards.errors[:3])})" if hazards.failed else "")
            + ".",
            err=bool(hazards.failed),
        )

    # 4. The final ledger.
    code = ExitCode.OK
    try:
        ledger = f"rebuilt: {rebuild_final_ledger(plan.run_root)} rows"
    except (OSError, ValueError) as exc:
        ledger = f"not rebuilt: {type(exc).__name__}: {str(exc)[:300]}"
        say(f"the run's ledger could not be rebuilt ({ledger}).", err=True)
        code = ExitCode.FAILED

    # 5. The campaign.
    campaign = plan.campaign_state
    if campaign == CAMPAIGN_SETTLED:
        from ..campaign.commands import settle_active_run

        try:
            reading, record = settle_active_run(
                # settled: a file campaign
                plan.campaign_file,  # type: ignore[arg-type]
                str(plan.run_root),
                note,
                plan.key or "",
                plan.meter_url or "",
                plan.docker_host,
                read_meter=read_meter,
                meter_deadline_sec=meter_deadline_sec,
            )
        except Refusal as exc:
            _record_quietly(plan, note, liveness.sentence(), report, agent_env_removed, tmpdir_removed, ledger)
            say(
                f"refused ({exc.stage}): {exc.sentence} The labelled objects and the key file are gone and "
                "the campaign's active run is kept; clear again to settle it.",
                err=True,
            )
            return int(exc.exit_code)
        except CampaignPersistenceError as exc:
            _record_quietly(plan, note, liveness.sentence(), report, agent_env_removed, tmpdir_removed, ledger)
            say(f"campaign write failed: {exc}; its active run is kept, clear again to settle it.", err=True)
            return int(ExitCode.FAILED)
        say(
            f"settled the campaign's active run: usage {reading['usage']:.6f}, campaign spent "
            f"${record.spent_usd:,.4f} of ${record.ceiling_usd:,.2f}."
        )
    elif campaign == OTHER_ACTIVE_RUN:
        say(f"the campaign {plan.campaign_file} has another run active; it was left as it is.")

    # 6. The record.
    try:
        _record(plan, note, liveness.sentence(), report, agent_env_removed, tmpdir_removed, ledger, campaign)
    except OSError as exc:
        say(f"everything was cleared but {MANIFEST} could not be written ({exc}); clear again to record it.", err=True)
        return int(ExitCode.FAILED)
    say(f"cleared the dead run {plan.run_root} (campaign: {campaign}, ledger {ledger}).")
    return int(code)


def _record_quietly(
    plan: ClearPlan, note: str, processes: str, report, agent_env_removed: bool, tmpdir_removed: bool, ledger: str
) -> None:
    """Record what an interrupted clear did (the campaign unsettled), so the next one adds to it."""
    try:
        _record(plan, note, processes, report, agent_env_removed, tmpdir_removed, ledger, UNSETTLED)
    except OSError as exc:
        say(f"{MANIFEST} could not be written ({exc}).", err=True)


def _record(
    plan: ClearPlan,
    note: str,
    processes: str,
    report,
    agent_env_removed: bool,
    tmpdir_removed: bool,
    ledger: str,
    campaign: str,
) -> None:
    manifest = plan.manifest
    earlier = manifest.cleared  # an earlier, interrupted clear: what it removed stays on record
    cleared = ClearedRecord(
        at=utc_now(),
        operator_note=note,
        docker_host=plan.docker_host,
        processes=processes,
        removed_containers=(earlier.removed_containers if earlier else []) + [n for _, n in report.removed_containers],
        removed_networks=(earlier.removed_networks if earlier else []) + [n for _, n in report.removed_networks],
        removed_volumes=(earlier.removed_volumes if earlier else []) + [n for _, n in report.removed_volumes],
        label_empty=True,
        agent_env_removed=agent_env_removed or bool(earlier and earlier.agent_env_removed),
        tmpdir_removed=tmpdir_removed or bool(earlier and earlier.tmpdir_removed),
        ledger=ledger,
        campaign=campaign,
    )
    try:
        EventLog(RunRoot(plan.run_root).events).append(
            EventKind.DEAD_RUN_CLEARED,
            removed_containers=len(cleared.removed_containers),
            removed_networks=len(cleared.removed_networks),
            removed_volumes=len(cleared.removed_volumes),
            label_empty=True,
            agent_env_removed=agent_env_removed,
            campaign=campaign,
            ledger=ledger,
            operator_note=note,
        )
    except OSError as exc:
        say(f"could not append to {layout.EVENTS} ({exc.strerror}); the manifest still records the clear.", err=True)
    if manifest.finished_at is None:
        # The launcher never finalised the record: it was stopped by its own death.
        manifest.outcome = RunOutcome.STOPPED.value
        manifest.stop_reason = manifest.stop_reason or StopReason.LAUNCHER_DIED.value
        if StopReason.LAUNCHER_DIED.value not in manifest.stop_causes:
            manifest.stop_causes = [*manifest.stop_causes, StopReason.LAUNCHER_DIED.value]
        manifest.finished_at = cleared.at
    if campaign == CAMPAIGN_SETTLED:
        manifest.campaign_settlement = "reconciled"
    manifest.cleared = cleared
    manifest.updated_at = cleared.at
    write_manifest(plan.run_root, manifest)


__all__ = ["clear_command", "clear_hint", "make_plan", "rebuild_final_ledger", "recorded_docker_host"]
