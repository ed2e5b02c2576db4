"""Child processes in their own session, stopped by process group; loopback JSON over HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any, Mapping, Optional, Sequence


def spawn_group(argv: Sequence[str], *, cwd: str, env: Mapping[str, str], log_path: str) -> subprocess.Popen:
    """Start `argv` in a new session (its own process group) with stdout+stderr appended to a log."""
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()


def stop_group(proc: Optional[subprocess.Popen], grace: float = 10.0) -> None:
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


def _group_members(pgid: int) -> Optional[list[str]]:
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
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[2] == str(pgid):
            states.append(fields[0])
    return states


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

    def __init__(self, message: str, status: Optional[int] = None, body: Any = None):
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


def wait_until(check, *, proc: Optional[subprocess.Popen], deadline: float, interval: float = 0.5) -> str:
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
