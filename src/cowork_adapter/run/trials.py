"""`run --trials K`: every selected task K times, each trial a complete run root of its own, one after another.

The run root R becomes a trial-set folder: `R/trials.json` (schemas/trials.py) is written atomically before any
trial starts, then `R/trial-1` ... `R/trial-K` run in order, each the unchanged launcher in a child process
(`cowork-adapter run --run-root R/trial-i`: its own benchmark clone, dumps, custody label and ledger, and an argv
that names its own run root, so status, stop and clear find it as any run), all against the one campaign.
They run one after another, not side by side: several default-route runs on one daemon are not yet possible
(each run's gateway serves port 443 of the daemon's bridge), and each trial uses the host's admitted
`--concurrency` across its own tasks.

Money: `--budget-usd` is the whole set's: each trial is given what the trials before it left, read from their
final key-meter figure (monitor.json); a trial whose spend cannot be read stops the set before the next one.
Only trial 1 may create the campaign (`--new-campaign`); the rest open it. Before anything is written the set
is priced for K x the selected tasks (run/trial_money.py), said on stderr, recorded in trials.json, and refused
when its expected cost is above what the set may spend.

Stop and death: `stop R` writes R/stop (no further trial starts) and stops the live trial's launcher; a stop
reason that ends a trial (budget, meter, disk, signal) ends the set. A SIGKILL at any line leaves trials.json
and complete or clearable trial run roots: `clear R/trial-i` finishes a dead trial, and
`run --trials K --resume-from R --run-root R2` resumes each started trial of R into R2's namesake (a trial of R
that never started starts afresh there, over the selection its started siblings answer for, unless the resuming
command names its own).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ..config import RunConfig
from ..errors import Refusal
from ..fileio import replace_atomic
from ..runroot.layout import LAUNCHER_OUTPUT, MONITOR, STOP, TRIALS, RunRoot
from ..runroot.manifest import read_manifest, utc_now
from ..runroot.trials import is_trial_set
from ..schemas.monitor import Monitor
from ..schemas.record import RecordInvalid, decode
from ..schemas.trials import TrialProjection, TrialSet, read_trial_set, trial_names
from ..vocab import ExitCode
from .launch import say
from .trial_money import projection_for, projection_line, refusal_sentence

SEVERITY = (ExitCode.OK, ExitCode.FAILED, ExitCode.REFUSED, ExitCode.STOPPED)


def _spent(root: Path) -> float | None:
    try:
        monitor = decode(RunRoot(root).monitor.read_bytes(), Monitor)
    except (OSError, RecordInvalid):
        return None
    return monitor.spending.run_spent_usd


def resumed_set(cfg: RunConfig) -> TrialSet | None:
    """The trial set `--resume-from` names, or None (Refusal: a trial set among other ancestors, or of another K)."""
    sets = [p for p in cfg.selection.resume_from if is_trial_set(p)]
    if not sets:
        return None
    if len(cfg.selection.resume_from) != 1:
        raise Refusal("flags", "--resume-from names a trial set: it resumes that trial set alone, nothing beside it.")
    try:
        record = read_trial_set(sets[0])
    except (OSError, RecordInvalid) as exc:
        raise Refusal("flags", f"--resume-from {sets[0]}: its {TRIALS} cannot be read ({exc}).") from None
    if record.k != cfg.selection.trials:
        raise Refusal("flags", f"--resume-from {sets[0]} holds {record.k} trials; resume it with --trials {record.k}.")
    return record


def _refuse_unsupported(cfg: RunConfig) -> None:
    if cfg.hosts.shared_campaign:
        raise Refusal("flags", "--trials does not apply to --shared-campaign: the hosts' claims make one trial.")
    if cfg.probe is not None:
        raise Refusal("flags", "--trials does not apply to --probe: a probe hands no task to the runner.")


VALUE_FLAGS = ("--run-root", "--trials", "--resume-from", "--budget-usd", "--resource-root")


def trial_argv(argv: list[str], changes: dict[str, str | None], *, new_campaign: bool) -> list[str]:
    """The set's own `run` argv for one trial: the flags in VALUE_FLAGS replaced by `changes` (a None value
    drops the flag), and --new-campaign kept only for the trial that may create the campaign."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in VALUE_FLAGS:
            skip = "=" not in arg
            continue
        if name == "--new-campaign" and not new_campaign:
            continue
        out.append(arg)
    for flag, value in changes.items():
        if value is not None:
            out += [flag, value]
    return out


def fresh_selection(ancestor: Path, names: list[str], argv: list[str]) -> list[str]:
    """`--task` flags for a trial of the resumed set `ancestor` that never started: the selection a started
    sibling answers for, unless the resuming command names its own (--task, --task-file); [] when none is known."""
    if any(a.split("=", 1)[0] in ("--task", "--task-file") for a in argv):
        return []
    for name in names:
        try:
            sel = read_manifest(ancestor / name).selection
        except (OSError, ValueError):
            continue
        return [word for task in sel.selection_task_ids or sel.task_ids for word in ("--task", task)]
    return []


def _projection(cfg: RunConfig, ancestor: Path | None, names: list[str], argv: list[str]) -> TrialProjection | None:
    """The set's spending projection, said on stderr before anything is written; a Refusal when its expected
    cost is above what the set may spend (never for a dry run, which only says it). A resumed set is priced
    over the selection its started trials answer for (run/trial_money.py)."""
    resumed = fresh_selection(ancestor, names, argv) if ancestor is not None else []
    projection = projection_for(cfg, len(resumed) // 2 if resumed else None)
    if projection is None:
        return None
    say(f"trial set {cfg.run_root}: {projection_line(projection)}")
    sentence = refusal_sentence(projection)
    if sentence is not None and cfg.dry_run:
        say(f"without --dry-run this set would be refused: {sentence}")
    elif sentence is not None:
        raise Refusal("campaign", sentence)
    return projection


def execute_trials(cfg: RunConfig, argv: list[str]) -> int:
    """The whole `run --trials K`; returns the set's exit code: the most severe of its trials' (3 stopped,
    2 refused, 1 incomplete, 0 every trial completed).

    Each trial is the unchanged launcher in a child process (`cowork-adapter run --run-root R/trial-i`), so its
    argv names its own run root and `status`, `stop`, `clear` and resume treat it as any run."""
    try:
        _refuse_unsupported(cfg)
        previous = resumed_set(cfg)
        if os.path.lexists(cfg.run_root):
            raise Refusal("flags", f"--run-root {cfg.run_root} already exists; a trial set needs a new folder.")
        names = trial_names(cfg.selection.trials)
        ancestor = cfg.selection.resume_from[0] if previous is not None else None
        projection = _projection(cfg, ancestor, names, argv)
    except Refusal as refusal:
        say(refusal.sentence)
        return int(ExitCode.REFUSED)
    folder = cfg.run_root
    campaign = str(cfg.money.campaign_file) if cfg.money.campaign_file else cfg.money.campaign_db
    folder.mkdir()
    record = TrialSet(
        created_at=utc_now(),
        k=cfg.selection.trials,
        run_roots=names,
        campaign=campaign,
        resume_from=str(ancestor) if ancestor else None,
        projection=projection,
    )
    replace_atomic(folder / TRIALS, record.to_json())  # first: every reader and resume knows the set from here on
    codes: list[int] = []
    spent = 0.0
    child: list[subprocess.Popen[bytes]] = []

    def on_signal(signum: int, _frame: object) -> None:
        # The set stops: no further trial starts, and the live trial's launcher stops as on any signal.
        replace_atomic(folder / STOP, f"signal {signum}\n")
        for proc in child:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    def on_hangup(_signum: int, _frame: object) -> None:
        # A closed terminal never stops a set (as a run: run/signals.py); the set's lines go on in its folder.
        try:
            fd = os.open(folder / LAUNCHER_OUTPUT, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        except OSError:
            pass  # nowhere to write: the set still goes on, and its trials' files say what happened

    previous_handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    previous_handlers[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hangup)
    try:
        for i, name in enumerate(names):
            if (folder / STOP).exists():
                say(f"the trial set {folder} was asked to stop: {name} and the trials after it do not start.")
                codes.append(int(ExitCode.STOPPED))
                break
            changes: dict[str, str | None] = {
                "--run-root": str(folder / name),
                "--resource-root": str(cfg.resource_root),
            }
            extra: list[str] = []
            if ancestor is not None and RunRoot(ancestor / name).manifest.is_file():
                changes["--resume-from"] = str(ancestor / name)
            elif ancestor is not None:
                extra = fresh_selection(ancestor, names, argv)  # the set's selection, as its siblings resume it
            if cfg.money.budget_usd is not None:
                remaining = cfg.money.budget_usd - spent
                if remaining <= 0:
                    say(f"the trial set's --budget-usd is spent (${spent:.2f}): {name} and later trials do not start.")
                    codes.append(int(ExitCode.STOPPED))
                    break
                changes["--budget-usd"] = f"{remaining:.6f}"
            say(f"trial set {folder}: {name} of {len(names)} starts.")
            child[:] = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "cowork_adapter",
                        *trial_argv(argv[1:], changes, new_campaign=i == 0),
                        *extra,
                    ]
                )
            ]
            if (folder / STOP).exists():
                child[0].send_signal(signal.SIGTERM)  # `stop R` wrote it after this loop's look: this trial stops too
            code = child[0].wait()
            codes.append(code)
            if i == 0 and code == ExitCode.REFUSED and not (folder / name).exists():
                # Refused in preflight: like a refused run, the set leaves nothing behind.
                os.unlink(folder / TRIALS)
                folder.rmdir()
                return int(ExitCode.REFUSED)
            if code in (ExitCode.STOPPED, ExitCode.REFUSED):
                break
            if cfg.money.budget_usd is not None:
                trial_spent = _spent(folder / name)
                if trial_spent is None:
                    say(f"{name}'s spend cannot be read from its {MONITOR}, so no further trial of {folder} starts.")
                    codes.append(int(ExitCode.STOPPED))
                    break
                spent += trial_spent
    finally:
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
    worst = max(codes, key=lambda c: SEVERITY.index(ExitCode(c)) if c in SEVERITY else len(SEVERITY))
    say(f"trial set {folder}: {len(codes)} of {len(names)} trials ran; exit {worst}.")
    return int(worst)
