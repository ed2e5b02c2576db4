"""Which of a run's custody processes are still alive: the launcher, its watchdog, the runner's group.

Used by `status`, `stop` and `clear` to tell the truth about a run whose launcher may be dead.
The facts come from the run's own records, best first:
  * custody/processes.json (pids paired with start ticks, so a reused pid reads as gone);
  * monitor.json `launcher_pid` / `runner_pid` and the campaign's active_run (pids without start
    ticks: a launcher pid counts only when its argv is a launcher of THIS run root);
  * a scan of the process table for a launcher of this run root, any cowork_adapter process
    naming it, any member of a recorded runner group, and the benchmark runner working inside it.

Everything reads /proc through `ProcTable`, so the logic is tested with a fake /proc directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..runroot.layout import CUSTODY_PROCESSES_FILE, RunRoot
from ..schemas.custody import CustodyProcesses
from ..schemas.record import RecordInvalid, decode

LAUNCHER_MARKERS = ("cowork_adapter", "cowork-adapter")
# cowork-adapter commands that only read or finish a run: naming its root does not make them part of it.
OPERATOR_COMMANDS = frozenset({"status", "stop", "clear", "audit", "report", "campaign", "doctor", "version"})

ROLE_LAUNCHER = "launcher"
ROLE_WATCHDOG = "watchdog"
ROLE_RUNNER_GROUP = "runner group"
ROLE_RUN_PROCESS = "process of the run"


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat this module needs."""

    state: str
    ppid: int
    pgrp: int
    start_ticks: int


def parse_stat(text: str) -> ProcStat | None:
    """Fields 3 (state), 4 (ppid), 5 (pgrp) and 22 (starttime) of a /proc/<pid>/stat line.

    The command name (field 2) is parenthesised and may hold spaces or ')', so the fields are
    counted from the LAST ')'.
    """
    rest = text.rsplit(")", 1)[-1].split()
    if len(rest) < 20:
        return None
    try:
        return ProcStat(state=rest[0], ppid=int(rest[1]), pgrp=int(rest[2]), start_ticks=int(rest[19]))
    except ValueError:
        return None


class ProcTable:
    """Read-only view of a /proc tree (the real one by default)."""

    def __init__(self, root: Path | str = "/proc") -> None:
        self.root = Path(root)

    def pids(self) -> list[int]:
        try:
            return sorted(int(p.name) for p in self.root.iterdir() if p.name.isdigit())
        except OSError:
            return []

    def stat(self, pid: int) -> ProcStat | None:
        try:
            return parse_stat((self.root / str(pid) / "stat").read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return None

    def cmdline(self, pid: int) -> list[str]:
        try:
            raw = (self.root / str(pid) / "cmdline").read_bytes()
        except OSError:
            return []
        return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]

    def cwd(self, pid: int) -> Path | None:
        try:
            return Path(os.readlink(self.root / str(pid) / "cwd"))
        except OSError:
            return None

    def environ_holds(self, pid: int, entry: bytes) -> bool | None:
        """Whether the environment `pid` started with holds `entry`; None when unreadable."""
        try:
            return entry in (self.root / str(pid) / "environ").read_bytes().split(b"\0")
        except OSError:
            return None

    def live(self, pid: int) -> ProcStat | None:
        """The stat of a running (not zombie, not dead) process, else None."""
        stat = self.stat(pid)
        return stat if stat is not None and stat.state not in ("Z", "X", "x") else None


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Holder:
    """One custody process (or group) of the run, and whether it still lives."""

    role: str
    pid: int  # for a runner group: the group id (its leader's pid)
    source: str  # where the pid came from
    alive: bool
    members: tuple[int, ...] = ()  # live members of a group

    def describe(self) -> str:
        if self.role == ROLE_RUNNER_GROUP:
            state = (
                f"alive ({len(self.members)} processes: {', '.join(map(str, self.members[:8]))})"
                if self.alive
                else "gone"
            )
            return f"runner group {self.pid} {state} (from {self.source})"
        return f"{self.role} pid {self.pid} {'alive' if self.alive else 'gone'} (from {self.source})"


@dataclass
class Recorded:
    """The pids a run recorded about itself, gathered from its files by the caller."""

    custody: CustodyProcesses | None = None
    launcher_pids: list[tuple[int, str]] = field(default_factory=list)  # (pid, source), no start ticks
    runner_pgids: list[tuple[int, str]] = field(default_factory=list)  # (pgid, source)
    # b"COWORK_RUN_LABEL=<label>", the marker every process of the run inherits: a recorded group's
    # member whose (readable) environment lacks it is another group that reuses the id, not the run's.
    marker: bytes | None = None


@dataclass(frozen=True)
class Liveness:
    holders: tuple[Holder, ...]

    @property
    def alive(self) -> list[Holder]:
        return [h for h in self.holders if h.alive]

    @property
    def all_gone(self) -> bool:
        return not self.alive

    def first(self, role: str) -> Holder | None:
        return next((h for h in self.holders if h.role == role), None)

    def live_group(self) -> Holder | None:
        return next((h for h in self.holders if h.role == ROLE_RUNNER_GROUP and h.alive), None)

    def sentence(self) -> str:
        """`launcher pid 12 gone (from …); runner group 40 alive (…)` or `no process of the run was recorded`."""
        return "; ".join(h.describe() for h in self.holders) or "no process of the run was recorded or found"


def read_custody_processes(run_root: Path) -> tuple[CustodyProcesses | None, str | None]:
    """(custody/processes.json, None) or (None, the problem); a missing file is (None, None)."""
    path = RunRoot(run_root).custody_processes
    try:
        return decode(path.read_bytes(), CustodyProcesses), None
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{path} cannot be read ({exc.strerror})"
    except RecordInvalid as exc:
        return None, f"{path} is not valid ({exc})"


def argv_run_root(argv: list[str], cwd: Path | None) -> Path | None:
    """The --run-root an argv names (relative ones against `cwd`), normalised; None when none."""
    for i, arg in enumerate(argv):
        value = None
        if arg == "--run-root" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--run-root="):
            value = arg.split("=", 1)[1]
        if value is not None:
            path = Path(value).expanduser()
            if not path.is_absolute():
                if cwd is None:
                    return None
                path = cwd / path
            return Path(os.path.normpath(path))
    return None


def is_launcher_argv(argv: list[str], cwd: Path | None, run_root: Path) -> bool:
    """True when argv is a cowork_adapter `run` whose --run-root is `run_root`."""
    if not any(marker in arg for arg in argv for marker in LAUNCHER_MARKERS) or "run" not in argv:
        return False
    named = argv_run_root(argv, cwd)
    return named is not None and os.path.normpath(named) == os.path.normpath(run_root)


def _is_ours(argv: list[str], run_root: Path) -> bool:
    """A cowork_adapter process (not an operator command) whose argv names the run root."""
    if not any(marker in arg for arg in argv for marker in LAUNCHER_MARKERS):
        return False
    if any(arg in OPERATOR_COMMANDS for arg in argv[:6]):
        return False
    root = os.path.normpath(run_root)
    return any(arg == root or arg.startswith(root + os.sep) or arg.endswith("=" + root) for arg in argv)


def _runner_inside(argv: list[str], cwd: Path | None, run_root: Path) -> bool:
    """The benchmark's runner (or a docker call of it) working inside the run root, even when its
    group was never recorded (a launcher killed right after starting it). An operator's shell
    sitting in the run root is not one."""
    if cwd is None or not any("run_parallel" in arg or os.path.basename(arg) == "docker" for arg in argv[:3]):
        return False
    text, root = os.path.normpath(cwd), os.path.normpath(run_root)
    return text == root or text.startswith(root + os.sep)


def _lineage(table: ProcTable, pid: int) -> set[int]:
    """`pid` and its ancestors: the command asking is never evidence against itself."""
    seen: set[int] = set()
    while pid > 0 and pid not in seen:
        seen.add(pid)
        stat = table.stat(pid)
        if stat is None:
            break
        pid = stat.ppid
    return seen


def _identity_alive(table: ProcTable, pid: int, start_ticks: int | None) -> bool:
    stat = table.live(pid)
    return stat is not None and (start_ticks is None or stat.start_ticks == start_ticks)


def prove(
    run_root: Path, recorded: Recorded, *, table: ProcTable | None = None, self_pid: int | None = None
) -> Liveness:
    """Which custody processes of `run_root` live, by every record and a scan of the process table."""
    table = table or ProcTable()
    run_root = Path(os.path.normpath(run_root))
    exclude = _lineage(table, os.getpid() if self_pid is None else self_pid)
    holders: list[Holder] = []
    named: set[int] = set()

    def add(role: str, pid: int, source: str, alive: bool, members: Iterable[int] = ()) -> None:
        if role != ROLE_RUNNER_GROUP and pid in named:
            return
        holders.append(Holder(role, pid, source, alive, tuple(members)))
        if role != ROLE_RUNNER_GROUP:
            named.add(pid)

    custody = recorded.custody
    if custody is not None:
        add(
            ROLE_LAUNCHER,
            custody.launcher.pid,
            CUSTODY_PROCESSES_FILE,
            _identity_alive(table, custody.launcher.pid, custody.launcher.start_ticks),
        )
        if custody.watchdog is not None:
            add(
                ROLE_WATCHDOG,
                custody.watchdog.pid,
                CUSTODY_PROCESSES_FILE,
                _identity_alive(table, custody.watchdog.pid, custody.watchdog.start_ticks),
            )
    for pid, source in recorded.launcher_pids:
        if pid in named or pid <= 0:
            continue
        # No start time was recorded: only a process whose argv is this run's launcher counts.
        alive = table.live(pid) is not None and is_launcher_argv(table.cmdline(pid), table.cwd(pid), run_root)
        add(ROLE_LAUNCHER, pid, source, alive)

    groups: dict[int, str] = {}
    if custody is not None and custody.runner_pgid:
        groups[custody.runner_pgid] = CUSTODY_PROCESSES_FILE
    for pgid, source in recorded.runner_pgids:
        if pgid > 0:
            groups.setdefault(pgid, source)

    members: dict[int, list[int]] = {g: [] for g in groups}
    scanned: list[tuple[str, int]] = []
    for pid in table.pids():
        if pid in exclude:
            continue
        stat = table.live(pid)
        if stat is None:
            continue
        if stat.pgrp in members:
            if recorded.marker is None or table.environ_holds(pid, recorded.marker) is not False:
                members[stat.pgrp].append(pid)  # unreadable is not proof of another owner: counted
            continue
        if pid in named:
            continue
        argv = table.cmdline(pid)
        cwd = table.cwd(pid)
        if is_launcher_argv(argv, cwd, run_root):
            scanned.append((ROLE_LAUNCHER, pid))
        elif _is_ours(argv, run_root) or _runner_inside(argv, cwd, run_root):
            scanned.append((ROLE_RUN_PROCESS, pid))
    for pgid, source in groups.items():
        add(ROLE_RUNNER_GROUP, pgid, source, bool(members[pgid]), members[pgid])
    for role, pid in scanned:
        add(role, pid, "the process table", True)
    return Liveness(tuple(holders))


__all__ = [
    "ProcTable",
    "ProcStat",
    "parse_stat",
    "Holder",
    "Recorded",
    "Liveness",
    "prove",
    "read_custody_processes",
    "is_launcher_argv",
]
