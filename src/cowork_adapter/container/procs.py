"""Child processes in their own session, stopped by process group; loopback JSON over HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any


def spawn_group(argv: Sequence[str], *, cwd: str, env: Mapping[str, str], log_path: str) -> subprocess.Popen:
    """Start `argv` in a new session (its own process group) with stdout+stderr appended to a log."""
    with open(log_path, "ab") as log:  # the child has its own copy of the descriptor
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_group(proc: subprocess.Popen | None, grace: float = 10.0) -> None:
    """SIGTERM the child's process group, wait `grace` s, then SIGKILL and wait again."""
    if proc is None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; members of its group may linger a moment.
        if not group_alive(proc.pid):
            return
    return


def _group_members(pgid: int) -> list[str] | None:
    """States of the processes whose process group is `pgid`, from /proc; None if unreadable."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    states = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read().decode("utf-8", "replace")
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid):
            states.append(fields[0])
    return states


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (after the parenthesised name), or None when unreadable."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            stat = fh.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    return stat[stat.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The start time of `pid` in clock ticks since boot (field 22 of /proc/<pid>/stat), or None.

    A pid alone names no process for long (pids are reused); a pid with its start time does.
    """
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None  # field 22 is the 20th after the name
    except (IndexError, ValueError):
        return None


def process_alive(pid: int, ticks: int | None) -> bool:
    """True when `pid` is the very process that started at `ticks` and has not exited.

    A zombie (exited, not yet reaped by its parent) counts as dead: it runs no code.
    With `ticks` None only existence and state are checked.
    """
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X", "x"):
        return False
    return ticks is None or fields[19] == str(ticks)


def pids_with_env(name: str, value: str) -> list[int]:
    """Processes whose environment holds exactly `name=value` (readable /proc/<pid>/environ only).

    The environment a process was started with is fixed at exec, so a marker set by the launcher
    on the runner is inherited by every descendant that does not scrub its environment.
    """
    wanted = f"{name}={value}".encode()
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []
    # Unreadable (gone meanwhile, or another user's process) is not marked.
    return [pid for pid in pids if environ_holds(pid, wanted)]


def environ_holds(pid: int, entry: bytes) -> bool | None:
    """Whether the environment `pid` was started with holds `entry` (b"NAME=value"); None when it
    cannot be read (gone meanwhile, or another user's process)."""
    try:
        with open(f"/proc/{int(pid)}/environ", "rb") as fh:
            return entry in fh.read().split(b"\0")
    except (OSError, ValueError):
        return None


def marked_members(pgid: int, name: str, value: str) -> list[int]:
    """The live (not zombie) members of process group `pgid` whose environment holds `name=value`.

    A group id is its leader's pid, and the kernel hands a pid out again once every member of the
    group is gone: a recorded group id alone may name someone else's group by now. A member that
    carries the run's marker proves the group is still the run's (no foreign group can hold that id
    while one of ours does)."""
    entry = f"{name}={value}".encode()
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []
    found = []
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is None or len(fields) < 3 or fields[0] in ("Z", "X", "x") or fields[2] != str(pgid):
            continue
        if environ_holds(pid, entry):
            found.append(pid)
    return found


def signal_marked_group(pgid: int, sig: int, name: str, value: str) -> bool:
    """killpg(pgid, sig) only while a member carries the marker `name=value`; False when none does
    (the group is gone, or the id now names another group) and nothing was signalled. Errors of
    killpg itself (ProcessLookupError, PermissionError) reach the caller."""
    if not marked_members(pgid, name, value):
        return False
    os.killpg(pgid, sig)
    return True


def pgid_of(pid: int) -> int | None:
    """The process group of `pid` (field 5 of its stat), or None when it is gone."""
    fields = _stat_fields(pid)
    try:
        return int(fields[2]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def group_alive(pgid: int) -> bool:
    """True unless the group is provably gone: no member, or (by /proc) only zombies left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # cannot tell: not proven dead
    states = _group_members(pgid)
    # killpg saw members: an empty or unreadable /proc view proves nothing.
    return not states or any(state != "Z" for state in states)


class HttpError(Exception):
    """A non-2xx answer (status kept) or a transport failure (status None)."""

    def __init__(self, message: str, status: int | None = None, body: Any = None):
        super().__init__(message)
        self.status = status
        self.body = body


def http_json(method: str, url: str, body: Any = None, timeout: float = 5.0) -> Any:
    """One JSON request to a loopback service; empty body means {}. Raises HttpError."""
    data = None
    headers = {"Accept": "application/json"}
    if body is not None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxies
    try:
        with opener.open(req, timeout=max(0.1, timeout)) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        try:
            payload = json.loads(exc.read() or b"{}")
        except ValueError:
            payload = None
        raise HttpError(f"HTTP {exc.code} from {method} {url}", exc.code, payload) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise HttpError(f"{type(exc).__name__} from {method} {url}: {exc}") from None
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        raise HttpError(f"non-JSON answer from {method} {url}") from None


def wait_until(check, *, proc: subprocess.Popen | None, deadline: float, interval: float = 0.5) -> str:
    """Poll `check()` (truthy = ready) until `deadline` (monotonic). Returns "" when ready,
    "exited" if `proc` ended first, "timeout" otherwise. `check` may raise HttpError (= not yet)."""
    while True:
        if proc is not None and proc.poll() is not None:
            return "exited"
        try:
            if check():
                return ""
        except HttpError:
            pass
        if time.monotonic() >= deadline:
            return "timeout"
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


END_STRAYS_ENV = "COWORK_END_STRAYS"  # set by the docker shim on the agent exec (custody/shim.py)


def end_strays() -> int:
    """SIGKILL every process of the task container but PID 1 (the runner's `sleep`), this process
    and its ancestors; how many were signalled. What the agent under test left running (a daemon
    that escaped its process group) could otherwise rewrite the dump after the agent phase wrote it.

    Only inside the runner's agent container: the shim's marker in the environment AND PID 1 being
    `sleep`; anywhere else (a test on a host) it does nothing."""
    if os.environ.get(END_STRAYS_ENV) != "1":
        return 0
    try:
        with open("/proc/1/cmdline", "rb") as fh:
            first = fh.read().split(b"\0")[0]
    except OSError:
        return 0
    if os.path.basename(first) != b"sleep":
        return 0
    keep, pid = {1}, os.getpid()
    while pid > 1 and pid not in keep:
        keep.add(pid)
        fields = _stat_fields(pid)
        try:
            pid = int(fields[1]) if fields else 0
        except (IndexError, ValueError):
            pid = 0
    killed = 0
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in keep:
            try:
                os.kill(int(name), signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed
