"""`status R` and `stop R` over a trial-set folder (`run --trials K`): each trial is a run root of its own, so
both read or stop it with ops/control.py exactly as a single run; this module only walks the set."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..fileio import replace_atomic
from ..runroot.layout import STOP, RunRoot
from ..schemas.trials import TrialProjection, read_trial_set
from ..vocab import ExitCode
from .run_view import find_launcher, read_run, say
from .status import add_dead_run_truth, build_status
from .stop import STOP_POLL_SEC, stop_command


def _started(folder: Path) -> tuple[list[str], list[Path]]:
    record = read_trial_set(folder)
    return record.run_roots, [folder / n for n in record.run_roots if RunRoot(folder / n).manifest.is_file()]


def set_spend(trials: list[dict[str, Any]]) -> tuple[float, int]:
    """(the started trials' key-meter spend summed, how many started trials have no reading yet)."""
    spent, unread = 0.0, 0
    for t in trials:
        if not t["started"]:
            continue
        value = (t["status"].get("spending") or {}).get("run_spent_usd")
        if isinstance(value, int | float):
            spent += float(value)
        else:
            unread += 1
    return spent, unread


def spend_line(spent: float, unread: int, projection: TrialProjection | None) -> str:
    """The set's spend so far against the projection made before trial 1 (run/trial_money.py)."""
    line = f"  spend so far ${spent:.2f}" + (f" ({unread} started trial(s) without a reading)" if unread else "")
    if projection is None:
        return line + "; no projection recorded (a set that spends nothing, or from before one was kept)"
    if projection.expected_usd is not None:
        line += f" of the expected ${projection.expected_usd:.2f}"
    line += f"; worst case ${projection.worst_case_usd:.2f}"
    limits = [v for v in (projection.budget_usd, projection.campaign_available_usd) if v is not None]
    return line + (f"; the set may spend ${min(limits):.2f}" if limits else "")


def trial_set_status(folder: Path, as_json: bool) -> int:
    """Every trial's status, in order (not started ones named as such), and the set's spend against its
    projection. 0 read."""
    names, _ = _started(folder)
    projection = read_trial_set(folder).projection
    trials: list[dict[str, Any]] = []
    for name in names:
        files = read_run(folder / name) if (folder / name).is_dir() else None
        if files is None or not files.is_run_root:
            trials.append({"name": name, "started": False, "status": None})
            continue
        pid, _source = find_launcher(files)
        status = build_status(files, launcher_pid=pid, launcher_alive=pid is not None)
        if pid is None:
            add_dead_run_truth(status, files)
        trials.append({"name": name, "started": True, "status": status})
    stop_asked = (folder / STOP).exists()
    spent, unread = set_spend(trials)
    if as_json:
        doc = {
            "trial_set": str(folder),
            "k": len(names),
            "stop_requested": stop_asked,
            "trials": trials,
            "spent_usd": spent,
            "trials_without_spend": unread,
            "projection": projection.to_dict() if projection is not None else None,
        }
        print(json.dumps(doc, sort_keys=True, default=str), flush=True)
        return int(ExitCode.OK)
    started = sum(1 for t in trials if t["started"])
    print(f"trial set {folder}: {len(names)} trials, {started} started" + ("; stop requested" if stop_asked else ""))
    print(spend_line(spent, unread, projection))
    for t in trials:
        line = "not started" if not t["started"] else f"{t['status'].get('state')} ({folder / t['name']})"
        print(f"  {t['name']}: {line}", flush=True)
    return int(ExitCode.OK)


def trial_set_stop(folder: Path, timeout: float, *, poll_sec: float = STOP_POLL_SEC) -> int:
    """Stop the set: R/stop first (the set's launcher starts no further trial), then every trial with a live
    launcher is stopped as a run is, until none is live or `timeout` passes (a trial that started as the stop
    file was written is caught by the next look). 0 stopped or already ended; 1 a trial's stop was not proven."""
    replace_atomic(folder / STOP, "stop\n")
    deadline = time.monotonic() + timeout
    codes: dict[Path, int] = {}
    while True:
        _, roots = _started(folder)
        live = [r for r in roots if r not in codes and find_launcher(read_run(r))[0] is not None]
        if not live:
            break
        for root in live:
            codes[root] = stop_command(root, max(1.0, deadline - time.monotonic()), poll_sec=poll_sec)
        if time.monotonic() >= deadline:
            break
        time.sleep(poll_sec)
    if not codes:
        say(f"the trial set {folder} has no live trial; no further trial starts.")
        return int(ExitCode.OK)
    return max(codes.values())
