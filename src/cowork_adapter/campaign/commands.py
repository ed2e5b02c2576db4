"""`campaign show` and `campaign reconcile`: the operator's replacement for hand-editing JSON.

Both return an exit code. A refusal prints one sentence on stderr, returns 2 and leaves the
campaign file unmodified.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..container.procs import group_alive
from ..errors import CampaignPersistenceError, Refusal
from ..runroot.layout import RunRoot
from ..schemas.campaign import CampaignRecord, key_fingerprint
from ..vocab import ExitCode, MeterPhase
from .meter import KeyMeter, MeterReading
from .observe import DEFAULT_BLINDNESS_SEC, Clock, MeterBlind, MeterObserver, SystemClock
from .store import Campaign, CampaignStore, JsonFileCampaignStore, read_campaign, utc_now

DEFAULT_METER_URL = "https://openrouter.ai/api/v1"
STAGE = "reconcile"

LabelIsEmpty = Callable[[str, str], bool]


def _refused(exc: Refusal) -> int:
    print(f"cowork-adapter: refused ({exc.stage}): {exc.sentence}", file=sys.stderr)
    return int(exc.exit_code)


def show_command(
    campaign_file: str | os.PathLike[str] | None,
    as_json: bool = False,
    *,
    console: Console | None = None,
    store: Any = None,
) -> int:
    """Print the campaign (read-only, no lock needed: writes are atomic renames, or one committed
    transaction for a PostgreSQL `store`, which replaces `campaign_file`)."""
    try:
        record = store.read() if store is not None else read_campaign(campaign_file)  # type: ignore[arg-type]  # a file when no store
        if record is None:
            where = store.location if store is not None else f"file {Path(campaign_file).absolute()}"  # type: ignore[arg-type]  # a file when no store
            raise Refusal("campaign", f"The campaign {where} does not exist.")
    except Refusal as exc:
        return _refused(exc)
    if as_json:
        sys.stdout.write(record.to_json())  # plain JSON for machines, no styling
        return int(ExitCode.OK)
    out = console or Console()
    out.print(_summary_table(record))
    if record.runs:
        out.print(_runs_table(record))
    if record.reconciliations:
        out.print(_reconciliations_table(record))
    return int(ExitCode.OK)


def _stored_usd(value: float | None) -> str:
    return "not stored" if value is None else f"${value:,.2f}"


def _summary_table(record: CampaignRecord) -> Table:
    table = Table(title="Campaign", show_header=False)
    active = record.active_run
    rows = [
        ("key fingerprint", record.fingerprint),
        ("ceiling", f"${record.ceiling_usd:,.2f}"),
        ("spent", f"${record.spent_usd:,.4f}"),
        ("remaining", f"${record.remaining_usd:,.4f}"),
        ("prior spend", f"${record.prior_spend_usd:,.4f}"),
        (
            "reserve / run budget",
            f"{_stored_usd(record.reserve_usd)} / {_stored_usd(record.run_budget_usd)}"
            " (what a run naming neither uses)",
        ),
        ("residual diagnostic", {True: "on", False: "off", None: "not recorded"}[record.diagnostic_eval_on_truncation]),
        ("usage baseline / last", f"{record.usage_baseline:.6f} / {record.last_usage:.6f}"),
        ("last reading", record.last_usage_observed_at.isoformat()),
        ("created", record.created_at.isoformat()),
        (
            "active run",
            "none" if active is None else f"{active.run_root} (launcher pid {active.launcher_pid} on {active.host})",
        ),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def _runs_table(record: CampaignRecord) -> Table:
    table = Table(title="Runs")
    for column in ("run root", "outcome", "stop reason", "spent", "finished", "meter error"):
        table.add_column(column)
    for run in record.runs:
        table.add_row(
            run.run_root,
            run.outcome,
            run.stop_reason or "",
            f"${run.spent_usd:,.4f}",
            run.finished_at.isoformat(),
            run.meter_error or "",
        )
    return table


def _reconciliations_table(record: CampaignRecord) -> Table:
    table = Table(title="Operator reconciliations")
    for column in ("run root", "at", "usage before", "usage", "note"):
        table.add_column(column)
    for item in record.reconciliations:
        before = "not kept" if item.previous_usage is None else f"{item.previous_usage:.6f}"
        table.add_row(item.run_root, item.at.isoformat(), before, f"{item.usage_at_reconcile:.6f}", item.operator_note)
    return table


def process_exists(pid: int) -> bool:
    """True unless signal 0 proves there is no such process (a permission error means it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_group_exists(pgid: int) -> bool:
    """True unless the process group is provably gone (zombies alone do not keep it)."""
    return group_alive(pgid)


def _default_label_is_empty() -> LabelIsEmpty:
    try:
        from ..custody.docker_ops import label_is_empty
    except ImportError as exc:
        raise Refusal(
            STAGE, f"The Docker custody helper is unavailable ({exc}), so an empty run label cannot be proven."
        ) from None
    return label_is_empty


def reconcile_command(
    campaign_file: str | os.PathLike[str],
    run_root: str | os.PathLike[str],
    operator_note: str,
    api_key_env: str,
    meter_url: str = DEFAULT_METER_URL,
    docker_host: str = "",
    *,
    label_is_empty: LabelIsEmpty | None = None,
    read_meter: Callable[[float], MeterReading] | None = None,
    clock: Clock | None = None,
    environ: Mapping[str, str] | None = None,
    meter_deadline_sec: float = DEFAULT_BLINDNESS_SEC,
    store: CampaignStore | None = None,
) -> int:
    """Clear a stale active_run after proving the run is over; record the proof in the campaign.

    Proves, in order: the active run is this run root, on this host; its launcher pid and runner
    process group are gone; Docker holds nothing with its label; the key meter gives an accepted
    reading (finite, not below the last). Then ONE save records the operator's note and checks,
    appends the run as "reconciled" and clears active_run. Baseline, ceiling, prior spend and
    history are never changed. `label_is_empty`, `read_meter`, `clock` and `environ` are for tests.
    """
    try:
        note = operator_note.strip()
        if not note:
            raise Refusal(STAGE, "An operator note describing the checks you made is required.")
        if not docker_host:
            raise Refusal(STAGE, "A Docker host is required to prove that the run's label is empty.")
        key = (os.environ if environ is None else environ).get(api_key_env, "")
        if not key:
            raise Refusal(
                STAGE, f"The environment variable {api_key_env} holds no provider key, so usage cannot be refreshed."
            )
        wanted_root = str(Path(run_root).resolve())
        try:
            reading, record = settle_active_run(
                campaign_file,
                wanted_root,
                note,
                key,
                meter_url,
                docker_host,
                label_is_empty=label_is_empty,
                read_meter=read_meter,
                clock=clock,
                meter_deadline_sec=meter_deadline_sec,
                store=store,
            )
        except CampaignPersistenceError as exc:
            print(f"cowork-adapter: campaign write failed: {exc}", file=sys.stderr)
            return int(ExitCode.FAILED)
    except Refusal as exc:
        return _refused(exc)
    print(
        f"Reconciled {wanted_root}: active_run cleared, usage {reading['usage']:.6f} recorded, "
        f"campaign spent ${record.spent_usd:,.4f} of ${record.ceiling_usd:,.2f}."
    )
    return int(ExitCode.OK)


def settle_active_run(
    campaign_file: str | os.PathLike[str],
    wanted_root: str,
    note: str,
    key: str,
    meter_url: str,
    docker_host: str,
    *,
    label_is_empty: LabelIsEmpty | None = None,
    read_meter: Callable[[float], MeterReading] | None = None,
    clock: Clock | None = None,
    meter_deadline_sec: float = DEFAULT_BLINDNESS_SEC,
    store: CampaignStore | None = None,
) -> tuple[dict[str, Any], CampaignRecord]:
    """The guarded settlement of `reconcile` and `clear`: under the campaign's lock, prove the run
    over, read the meter, and clear its active_run in one save. Returns (meter reading, record).

    Raises Refusal for every unsafe state (the file untouched) and CampaignPersistenceError when
    the save fails. A missing campaign file is refused BEFORE the lock is taken: locking creates
    `<file>.lock`, and a run that never created its campaign must not leave one behind.
    """
    if store is None:  # the JSON file (a PostgreSQL store is passed in by `--campaign-db`)
        path = Path(campaign_file).absolute()
        if not path.is_file():
            raise Refusal(
                STAGE,
                f"The campaign file {path} does not exist (a run killed before creating it has no "
                f"campaign to settle: finish it with `cowork-adapter clear {wanted_root}`).",
            )
        store = JsonFileCampaignStore(path)
    with store.locked() as session:
        record = session.load()
        if record is None:
            raise Refusal(STAGE, f"The campaign {store.location} does not exist.")
        checks = _prove_run_over(record, wanted_root, key, docker_host, label_is_empty)
        reading = _refresh_usage(record, key, meter_url, read_meter, clock or SystemClock(), meter_deadline_sec)
        checks["meter"] = reading
        checks["agent_env_removed"] = _remove_agent_env(Path(wanted_root))
        campaign = Campaign(session, record, now=utc_now)
        campaign.reconcile_active_run(usage=reading["usage"], operator_note=note, checks=checks)
    return reading, campaign.record


def _prove_run_over(
    record: CampaignRecord, wanted_root: str, key: str, docker_host: str, label_is_empty: LabelIsEmpty | None
) -> dict[str, Any]:
    active = record.active_run
    if active is None:
        raise Refusal(STAGE, "The campaign has no active run to reconcile.")
    if str(Path(active.run_root).resolve()) != wanted_root:
        raise Refusal(STAGE, f"The campaign's active run is {active.run_root}, not {wanted_root}.")
    if key_fingerprint(key) != record.fingerprint:
        raise Refusal(STAGE, f"The key in the environment is not the campaign's key ({record.fingerprint}).")
    here = socket.gethostname()
    if active.host != here:
        raise Refusal(
            STAGE, f"The active run was launched on host {active.host}, so its processes cannot be checked from {here}."
        )
    if process_exists(active.launcher_pid):
        raise Refusal(STAGE, f"The run's launcher process {active.launcher_pid} still exists; stop it first.")
    checks: dict[str, Any] = {"host": here, "launcher_pid": {"pid": active.launcher_pid, "exists": False}}
    if active.runner_pgid is None:
        # The launcher died before recording a runner: the label check below still has to pass.
        checks["runner_pgid"] = {"pgid": None, "exists": None, "note": "no runner process group was recorded"}
    elif process_group_exists(active.runner_pgid):
        raise Refusal(
            STAGE, f"The run's runner process group {active.runner_pgid} still has processes; stop them first."
        )
    else:
        checks["runner_pgid"] = {"pgid": active.runner_pgid, "exists": False}
    check = label_is_empty or _default_label_is_empty()
    try:
        empty = check(docker_host, active.run_label)
    except Exception as exc:  # unknown Docker state is never taken as empty
        raise Refusal(
            STAGE, f"Docker could not prove the run label {active.run_label} empty ({type(exc).__name__}: {exc})."
        ) from None
    if empty is not True:
        raise Refusal(
            STAGE,
            f"Containers, networks or volumes with the run label {active.run_label} still exist on {docker_host}.",
        )
    checks["docker_label"] = {"label": active.run_label, "docker_host": docker_host, "empty": True}
    return checks


def _refresh_usage(
    record: CampaignRecord,
    key: str,
    meter_url: str,
    read_meter: Callable[[float], MeterReading] | None,
    clock: Clock,
    deadline_sec: float,
) -> dict[str, Any]:
    read = read_meter or KeyMeter(meter_url, key).read_usage
    accepted: list[float] = []
    observer = MeterObserver(
        read=read,
        save=lambda usage, _at: accepted.append(usage),  # saved below, together with the record
        last_accepted=lambda: record.last_usage,
        clock=clock,
    )
    try:
        reading = observer.observe(clock.monotonic() + deadline_sec, phase=MeterPhase.RECONCILE)
    except MeterBlind as exc:
        raise Refusal(STAGE, f"The key meter gave no acceptable reading ({exc.last_error}).") from None
    return {
        "usage": reading.usage,
        "previous_usage": record.last_usage,
        "attempts": reading.attempts,
        "rejected_reads": reading.attempts - 1,
    }


def _remove_agent_env(run_root: Path) -> bool:
    """A launcher killed by SIGKILL never reached its cleanup: the key file must not outlive reconcile."""
    path = RunRoot(run_root).agent_env
    existed = path.exists()
    path.unlink(missing_ok=True)
    return existed
