"""The operator's view of one run root, shared by `status` and `stop` (and `clear`, `campaign_status`):
its files read as typed records (a missing or unreadable one is None, its problem noted), whether a
process is this run's launcher, which custody processes the run recorded and which of them live,
which objects with its label the daemon holds (a fresh listing), and the command that finishes it.
Read-only: nothing here signals, fences or writes.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..custody.liveness import Liveness, Recorded, argv_run_root, prove, read_custody_processes
from ..custody.shim_words import RUN_MARKER_ENV  # stdlib only: the watchdog's copy would load docker
from ..errors import CustodyError, Refusal
from ..runroot import layout
from ..runroot.events import read_events
from ..runroot.layout import RunRoot
from ..schemas.admission import AdmissionState
from ..schemas.events import RunnerStarted, _Event
from ..schemas.ledger import TaskRow, read_index
from ..schemas.manifest import RunManifest
from ..schemas.monitor import Monitor
from ..schemas.record import RecordInvalid, decode
from ..vocab import ExitCode
from .recorded import clear_hint, clear_key_note, recorded_docker_host

LAUNCHER_MARKERS = ("cowork_adapter", "cowork-adapter")


def say(sentence: str, *, err: bool = False) -> None:
    print(f"cowork-adapter: {sentence}", file=sys.stderr if err else sys.stdout, flush=True)


# ---------------------------------------------------------------------------------------------
# Reading a run root
# ---------------------------------------------------------------------------------------------


@dataclass
class RunFiles:
    """What a run root holds; a file that is missing or unreadable is None (its problem noted)."""

    run_root: Path
    manifest: RunManifest | None
    monitor: Monitor | None
    events: list[_Event]  # typed: a line that is no valid event is counted in `problems`
    problems: list[str] = field(default_factory=list)
    ledger: list[TaskRow] | None = None  # result_index.jsonl's rows; None before it exists
    admission: AdmissionState | None = None  # custody/admission.json: a shared host waiting for load

    @property
    def is_run_root(self) -> bool:
        return self.manifest is not None or self.monitor is not None or bool(self.events)


def _load(path: Path, model, problems: list[str]):
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        problems.append(f"{path.name} cannot be read ({exc.strerror})")
        return None
    try:
        return decode(text, model)
    except RecordInvalid as exc:
        problems.append(f"{path.name} is not valid ({exc})")
        return None


def read_run(run_root: Path) -> RunFiles:
    problems: list[str] = []
    root = RunRoot(run_root)
    manifest = _load(root.manifest, RunManifest, problems)
    monitor = _load(root.monitor, Monitor, problems)
    events, invalid = read_events(root.events)
    if invalid:
        lines = "1 line that is" if invalid == 1 else f"{invalid} lines that are"
        problems.append(f"{layout.EVENTS} has {lines} not a valid event (skipped)")
    ledger = None
    if root.result_index.exists():
        try:
            ledger = read_index(root.result_index)
        except (OSError, ValueError) as exc:
            problems.append(
                f"{layout.RESULT_INDEX} cannot be read ({type(exc).__name__}), so resource use is not shown"
            )
    admission = _load(root.admission, AdmissionState, problems)
    return RunFiles(run_root, manifest, monitor, events, problems, ledger, admission)


# ---------------------------------------------------------------------------------------------
# Is this process the launcher of this run root?
# ---------------------------------------------------------------------------------------------


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc entry: the process is gone
    # The state follows the parenthesised command name, which may itself contain spaces.
    return stat.rsplit(")", 1)[-1].split()[:1] in (["Z"], ["X"])


def is_launcher_of(pid: int | None, run_root: Path) -> bool:
    """True when `pid` is alive (not a zombie) and its argv is a cowork_adapter `run` of `run_root`."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: its cmdline still decides (and signalling would fail anyway)
    if _zombie(pid):
        return False
    argv = _cmdline(pid)
    if not any(marker in arg for arg in argv for marker in LAUNCHER_MARKERS) or "run" not in argv:
        return False
    try:
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        cwd = None
    named = argv_run_root(argv, cwd)
    if named is None:
        return False
    try:
        return named.resolve() == run_root.resolve()
    except (OSError, RuntimeError):  # another process's run root may be a symlink loop: not ours
        return False


def _scan_launchers(run_root: Path) -> list[int]:
    """Every live launcher of `run_root` (a run still in preflight has written no pid yet)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and is_launcher_of(int(entry.name), run_root):
            found.append(int(entry.name))
    return sorted(found)


def campaign_active(files: RunFiles):
    """The campaign's active_run when it is this run root, else None (read without the lock)."""
    m = files.manifest
    if m is None or not (m.campaign_file or m.campaign_db):
        return None
    from ..campaign.store import read_campaign

    try:
        if m.campaign_db:  # PostgreSQL (libpq's PGPASSWORD or ~/.pgpass); unreachable: nothing added
            from ..campaign.pg_store import read_campaign_db

            record = read_campaign_db(m.campaign_db, m.campaign_name or "default")
        else:
            record = read_campaign(m.campaign_file)  # type: ignore[arg-type]  # a file when no database
    except Refusal:
        return None
    active = record.active_run if record else None
    if active is None or Path(active.run_root).resolve() != files.run_root.resolve():
        return None
    return active


def _runner_started_pids(files: RunFiles) -> list[int]:
    return [e.pid for e in files.events if isinstance(e, RunnerStarted) and e.pid is not None]


def run_marker(files: RunFiles) -> bytes | None:
    """The environment entry every process of the run carries (watchdog.RUN_MARKER_ENV), or None."""
    label = files.manifest.run_label if files.manifest is not None else None
    return f"{RUN_MARKER_ENV}={label}".encode() if label else None


def gather_recorded(files: RunFiles) -> Recorded:
    """Every pid the run wrote down about its custody processes (the liveness proof's input)."""
    custody, problem = read_custody_processes(files.run_root)
    if problem:
        files.problems.append(problem)
    recorded = Recorded(custody=custody, marker=run_marker(files))
    if files.monitor is not None:
        recorded.launcher_pids.append((files.monitor.launcher_pid, layout.MONITOR))
        if files.monitor.runner_pid:
            # The runner is started in its own session: its pid is its process group's id.
            recorded.runner_pgids.append((files.monitor.runner_pid, layout.MONITOR))
    active = campaign_active(files)
    if active is not None:
        recorded.launcher_pids.append((active.launcher_pid, "the campaign's active_run"))
        if active.runner_pgid:
            recorded.runner_pgids.append((active.runner_pgid, "the campaign's active_run"))
    for pid in _runner_started_pids(files):
        recorded.runner_pgids.append((pid, layout.EVENTS))
    return recorded


def liveness_of(files: RunFiles) -> Liveness:
    return prove(files.run_root, gather_recorded(files))


@dataclass
class LabelledView:
    """A fresh listing of the run's labelled objects, or why there is none."""

    docker_host: str | None
    names: list[str] | None = None  # `container x`, `network y`, `volume z`
    counts: dict[str, int] | None = None
    error: str | None = None


def list_labelled_view(files: RunFiles) -> LabelledView:
    host = recorded_docker_host(files.run_root, files.manifest)
    label = files.manifest.run_label if files.manifest is not None else None
    if not host or not label:
        return LabelledView(host, error="the run recorded no Docker host" if label else "the run recorded no label")
    try:
        from ..custody.docker_ops import list_labelled

        listed = list_labelled(host, label, timeout=10)
    except CustodyError as exc:
        return LabelledView(host, error=str(exc))
    return LabelledView(
        host,
        listed.names(),
        {"containers": len(listed.containers), "networks": len(listed.networks), "volumes": len(listed.volumes)},
    )


def next_command(files: RunFiles, liveness: Liveness) -> str:
    """What the operator runs next on a run whose launcher is gone, with every flag it needs."""
    clear = f"`{clear_hint(files.run_root, files.manifest)}`{clear_key_note(files.manifest)}"
    runners = [h for h in liveness.alive if h.role not in ("launcher", "watchdog")]
    if runners:
        return f"`cowork-adapter stop {files.run_root}` (to stop what still runs), then {clear}"
    watchdog = liveness.first("watchdog")
    if watchdog is not None and watchdog.alive:
        # It is fencing and cleaning up on its own; clearing under it would race its removals.
        return f"wait for the watchdog (pid {watchdog.pid}) to finish, then {clear}"
    return clear


def find_launcher(files: RunFiles) -> tuple[int | None, str]:
    """(pid of this run's live launcher or None, where the pid came from)."""
    candidates = []
    if files.monitor is not None:
        candidates.append((files.monitor.launcher_pid, layout.MONITOR))
    active = campaign_active(files)
    campaign_pid = active.launcher_pid if active is not None else None
    if campaign_pid is not None:
        candidates.append((campaign_pid, "the campaign's active_run"))
    for pid, source in candidates:
        if is_launcher_of(pid, files.run_root):
            return pid, source
    scanned = _scan_launchers(files.run_root)
    if scanned:
        return scanned[0], "the process table"
    return None, candidates[0][1] if candidates else "nowhere"


# The names docs/exit-codes.md gives the exit codes (its "Exit codes" table), not the enum's member names.
EXIT_WORDS = {
    ExitCode.OK: "completed",
    ExitCode.FAILED: "incomplete",
    ExitCode.REFUSED: "refused",
    ExitCode.STOPPED: "stopped",
    ExitCode.SHIM_REFUSED: "container creation refused",
}


def exit_word(code: int) -> str:
    try:
        return EXIT_WORDS[ExitCode(code)]
    except ValueError:
        return "unknown"


def not_a_run_root(run_root: Path) -> int:
    say(f"{run_root} is not a run root (no {layout.MANIFEST}, {layout.MONITOR} or {layout.EVENTS}).", err=True)
    return int(ExitCode.REFUSED)
