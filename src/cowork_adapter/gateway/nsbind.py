"""A listening TCP socket bound inside another process's network namespace and handed to this one.

Why: the gateway must listen where the Docker daemon's containers are, and see each of them by its
own address (gateway/peers.py). A rootless daemon's networks (its bridges and their gateway
addresses) exist only in RootlessKit's network namespace; from the host, containers are reached
through slirp, where every connection arrives from one address and the peer check could tell no
container from another. So a short-lived helper enters the daemon's user namespace (where the
daemon's user is root: port 443 needs no privilege on the host) and its network namespace with
util-linux's `nsenter`, binds and listens there, and passes the listening socket back over a unix
socket pair (SCM_RIGHTS). A socket keeps the namespace it was made in: the gateway accepts on it from
the host, in its own threads, and sees each peer's address as the daemon's networks have it. The
helper exits at once; the host process never changes namespace (a threaded process cannot).

Standard library only: this file is also the helper (`python -I -S nsbind.py FD ADDRESS PORT BACKLOG`).
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys

# The stdlib server's own backlog is 5; a burst of an agent's connections would wait in SYN retries.
DEFAULT_BACKLOG = 256
# nsenter and a Python start take well under a second; a helper that hangs is not waited for longer.
HELPER_TIMEOUT_SEC = 30.0
# The helper's one message: "ok" with the socket, or its error as JSON; never longer than this.
MESSAGE_BYTES = 4096


class NamespaceBindError(OSError):
    """The helper could not enter the namespaces or bind; `strerror` is one sentence."""


def namespace_id(pid: int | str, kind: str) -> tuple[int, int]:
    """The identity of `pid`'s namespace of `kind` ("net", "user"): its nsfs device and inode."""
    found = os.stat(f"/proc/{pid}/ns/{kind}")
    return found.st_dev, found.st_ino


def shares_namespace(pid: int, kind: str) -> bool:
    """Whether `pid` is in this process's namespace of `kind`."""
    return namespace_id("self", kind) == namespace_id(pid, kind)


def listen_here(address: str, port: int, backlog: int = DEFAULT_BACKLOG) -> socket.socket:
    """A TCP socket listening on `address`:`port` in this process's network namespace."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As socketserver does: a port the last run's connections left in TIME_WAIT is free to bind.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_listener(
    address: str, port: int, *, pid: int | None = None, backlog: int = DEFAULT_BACKLOG, python: str | None = None
) -> socket.socket:
    """A TCP socket listening on `address`:`port` in the network namespace of `pid` (None, or a
    process in ours: here). Raises OSError (NamespaceBindError when the helper could not run)."""
    if pid is None or shares_namespace(pid, "net"):
        return listen_here(address, port, backlog)
    nsenter = shutil.which("nsenter")
    if nsenter is None:
        raise NamespaceBindError(
            errno.ENOENT, "nsenter (util-linux) is not on PATH: the daemon's network namespace cannot be entered"
        )
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        argv = [nsenter, "--target", str(pid)]
        if not shares_namespace(pid, "user"):  # setns() into one's own user namespace is refused (EINVAL)
            argv += ["--user", "--preserve-credentials"]
        argv += ["--net", "--", python or sys.executable, "-I", "-S", os.path.abspath(__file__)]
        argv += [str(theirs.fileno()), address, str(port), str(backlog)]
        try:
            done = subprocess.run(
                argv,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=HELPER_TIMEOUT_SEC,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise NamespaceBindError(errno.ETIMEDOUT, "the namespace helper did not finish in time") from None
        theirs.close()  # the helper's copy is gone with it: the read below ends instead of waiting
        message, fds = _receive(ours)
    finally:
        theirs.close()
        ours.close()
    if not fds:
        if message.get("errno"):
            raise OSError(int(message["errno"]), str(message.get("error") or "bind failed"))
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise NamespaceBindError(
            errno.EPERM,
            f"the daemon's namespaces (process {pid}) could not be entered"
            + (f": {said[-1][:200]}" if said else f" (nsenter exit {done.returncode})"),
        )
    return _checked(socket.socket(fileno=fds[0]), address, port, fds[1:])


def _receive(ours: socket.socket) -> tuple[dict, list[int]]:
    ours.settimeout(HELPER_TIMEOUT_SEC)
    try:
        data, fds, _flags, _addr = socket.recv_fds(ours, MESSAGE_BYTES, 1)
    except OSError:
        return {}, []
    try:
        message = json.loads(data.decode("utf-8")) if data else {}
    except ValueError:
        message = {}
    return (message if isinstance(message, dict) else {}), list(fds)


def _checked(sock: socket.socket, address: str, port: int, extra: list[int]) -> socket.socket:
    """The received socket is what was asked for: a listening TCP socket on address:port."""
    for fd in extra:
        os.close(fd)
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        bound = sock.getsockname()
    except OSError:
        listening, bound = 0, ("", -1)
    same = bound[1] == port and _same_address(str(bound[0]), address)
    if sock.type != socket.SOCK_STREAM or not listening or not same:
        sock.close()
        raise NamespaceBindError(errno.EPROTO, f"the namespace helper returned another socket ({bound})")
    return sock


def _same_address(one: str, other: str) -> bool:
    try:
        return ipaddress.ip_address(one) == ipaddress.ip_address(other)
    except ValueError:
        return False


def _helper(argv: list[str]) -> int:
    """Inside the namespaces: bind, listen, send the socket (or the error) over the inherited fd."""
    channel = socket.socket(fileno=int(argv[0]))
    try:
        sock = listen_here(argv[1], int(argv[2]), int(argv[3]))
    except OSError as exc:
        error = {"errno": exc.errno or errno.EIO, "error": exc.strerror or str(exc)}
        channel.sendall(json.dumps(error).encode("utf-8"))
        return 1
    socket.send_fds(channel, [b'{"ok": true}'], [sock.fileno()])
    return 0


if __name__ == "__main__":
    sys.exit(_helper(sys.argv[1:]))
