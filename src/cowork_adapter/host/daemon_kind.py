"""What kind of Docker daemon a run is about to use, and what follows from it, said before anything starts.

Two facts decide what can work (issue 38, docs/install.md):
- rootless or not: `docker info` lists `name=rootless` among its SecurityOptions, and the daemon's own
  network namespace (its process, found as the peer of its unix socket) is not ours. A rootless daemon's
  bridge address lives only inside RootlessKit's namespace, and what reaches this host from a container
  comes through slirp4netns from this host's own address: a gateway bound on this host either binds
  another daemon's bridge or sees every container as the same peer.
- whether it enforces limits: `docker info`'s MemoryLimit / CpuCfsQuota / PidsLimit and its warnings. A
  rootless daemon on a cgroup v1 host enforces none (its cgroup driver is `none`): `--memory` and `--cpus`
  are accepted and ignored, so a task could take the machine.

The decisions (`facts_from_info`, `unenforced_refusal`, `bind_failure`) are pure; the two
readers below them are the only I/O (the peer's namespaces, `net.ipv4.ip_unprivileged_port_start`).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..vocab import DaemonKind
from .daemon import daemon_info

ROOTLESS_OPTION = "name=rootless"
# A limit and the `docker info` flag that says the daemon can enforce it, in the order they are named.
LIMIT_FLAGS = (("memory", "MemoryLimit"), ("cpu", "CpuCfsQuota"), ("pids", "PidsLimit"))
# Docker's own warnings for a limit it cannot enforce (daemon/info.go), lower-cased, by the limit they name.
LIMIT_WARNINGS = (
    ("memory", "no memory limit support"),
    ("cpu", "no cpu cfs quota support"),
    ("pids", "no pids limit support"),
)
WITHOUT_CGROUPS = "without cgroups"  # "Running in rootless-mode without cgroups": no limit at all
PORT_START_FILE = "/proc/sys/net/ipv4/ip_unprivileged_port_start"


@dataclass(frozen=True)
class DaemonFacts:
    """What one `docker info` (and the daemon's process, when it can be seen) says about a daemon."""

    kind: DaemonKind
    cgroup_version: str  # "1", "2", or "" when not said
    cgroup_driver: str  # "cgroupfs", "systemd", or "none" (a rootless daemon without cgroups)
    unenforced: tuple[str, ...]  # the limits it cannot enforce: memory, cpu, pids
    # Whether the daemon's process shares our network namespace; None when it cannot be seen (a TCP
    # daemon, another host, a process we may not inspect).
    same_network: bool | None = None
    owner_uid: int | None = None  # the uid of the daemon's process (its socket's peer), None when unseen

    @property
    def enforces_limits(self) -> bool:
        return not self.unenforced

    def describe(self) -> str:
        """One clause for doctor and the refusals: `a rootless daemon (cgroup v1, driver none)`."""
        cgroup = f"cgroup v{self.cgroup_version}" if self.cgroup_version else "cgroup version not said"
        return f"a {self.kind.value} daemon ({cgroup}, cgroup driver {self.cgroup_driver or 'not said'})"


def facts_from_info(
    info: Mapping[str, Any], same_network: bool | None = None, owner_uid: int | None = None
) -> DaemonFacts:
    """The daemon's kind and its unenforced limits from its `docker info` record."""
    options = [str(o) for o in info.get("SecurityOptions") or ()]
    rootless = any(ROOTLESS_OPTION in option.split(",") for option in options)
    # A namespace that is not ours is RootlessKit's (or another machine's) even when the option is absent.
    kind = DaemonKind.ROOTLESS if rootless or same_network is False else DaemonKind.ROOTFUL
    warnings = [str(w).lower() for w in info.get("Warnings") or ()]
    driver = str(info.get("CgroupDriver") or "")
    no_cgroups = driver == "none" or any(WITHOUT_CGROUPS in w for w in warnings)
    unenforced = []
    for limit, flag in LIMIT_FLAGS:
        warned = any(text in w for name, text in LIMIT_WARNINGS if name == limit for w in warnings)
        if no_cgroups or warned or info.get(flag) is False:
            unenforced.append(limit)
    return DaemonFacts(kind, str(info.get("CgroupVersion") or ""), driver, tuple(unenforced), same_network, owner_uid)


def unenforced_refusal(facts: DaemonFacts, docker_host: str) -> str | None:
    """The sentence `run` refuses with when the daemon enforces not every limit (None when it does)."""
    if facts.enforces_limits:
        return None
    why = (
        "a rootless daemon on a cgroup v1 host enforces no limit"
        if facts.kind is DaemonKind.ROOTLESS and facts.cgroup_version != "2"
        else "its cgroups lack those controllers"
    )
    return (
        f"the Docker daemon at {docker_host} is {facts.describe()} and does not enforce the "
        f"{', '.join(facts.unenforced)} limit{'s' if len(facts.unenforced) > 1 else ''} ({why}): a task could "
        "take the whole machine; use a daemon that enforces them (rootless on a cgroup v2 host with memory, cpu "
        "and pids delegated to its user), or pass --accept-unenforced-limits (the manifest and the report say so)."
    )


def owner_refusal(facts: DaemonFacts, docker_host: str, euid: int) -> str | None:
    """Why this process may not drive a rootless daemon another user runs (None: it may).

    A rootless daemon maps only its own user to root in its containers; a folder this process creates
    and the run mounts (the probe's, the dumps) belongs, inside, to nobody, and the tool servers' first
    write fails (PermissionError at the tool-server check). Run the tool as the daemon's user."""
    if facts.kind is not DaemonKind.ROOTLESS or facts.owner_uid is None or facts.owner_uid == euid:
        return None
    return (
        f"the Docker daemon at {docker_host} is rootless and run by uid {facts.owner_uid}, but this process runs "
        f"as uid {euid}: the folders the run mounts would belong to nobody inside its containers, which could not "
        f"write them; run cowork-adapter as uid {facts.owner_uid} (the daemon's user)."
    )


def bind_failure(error: OSError, host: str, port: int, *, port_start: int | None, euid: int) -> str:
    """The real cause of a failed bind of the gateway on `host:port`, in one clause (no trailing stop)."""
    code = error.errno
    if code == errno.EADDRNOTAVAIL:
        return (
            f"no interface of this host has the address {host} (the daemon's bridge is in another network "
            "namespace, or --llm-gateway-host names an address of another machine)"
        )
    if code == errno.EADDRINUSE:
        return f"another process holds {host}:{port} (another run's gateway on this daemon, or another service)"
    if code in (errno.EACCES, errno.EPERM):
        start = "unknown" if port_start is None else str(port_start)
        who = "root" if euid == 0 else f"uid {euid}"
        return (
            f"{who} may not bind port {port} here: that needs root, CAP_NET_BIND_SERVICE, or "
            f"net.ipv4.ip_unprivileged_port_start at most {port} (it is {start})"
        )
    return f"{host}:{port} cannot be bound ({error.strerror or error})"


# ---- the only I/O ----


def socket_peer(docker_host: str) -> tuple[int, int] | None:
    """(pid, uid) of the process serving `docker_host`'s unix socket (SO_PEERCRED: dockerd itself, rootless
    or not); None for a TCP daemon or a socket that does not answer."""
    if not docker_host.startswith("unix://"):
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5)
            conn.connect(docker_host[len("unix://") :])
            pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except OSError:
        return None
    return (pid, uid) if pid > 0 else None


def peer_same_network(docker_host: str) -> bool | None:
    """Whether the process serving `docker_host`'s unix socket shares our network namespace; its /proc
    namespace link is readable by root and by the daemon's own user. None when it cannot be seen."""
    peer = socket_peer(docker_host)
    if peer is None:
        return None
    try:
        return os.readlink(f"/proc/{peer[0]}/ns/net") == os.readlink("/proc/self/ns/net")
    except OSError:
        return None


def socket_owner(docker_host: str) -> int | None:
    """The uid of the daemon's process, None when it cannot be seen."""
    peer = socket_peer(docker_host)
    return None if peer is None else peer[1]


def unprivileged_port_start() -> int | None:
    """This host's net.ipv4.ip_unprivileged_port_start (ports below it need privilege), None if unread."""
    try:
        with open(PORT_START_FILE, encoding="ascii") as f:
            return int(f.read(32).strip())
    except (OSError, ValueError):
        return None


def daemon_facts(docker_host: str) -> DaemonFacts:
    """The facts of the daemon at `docker_host` (one `docker info`); raises as daemon_info does."""
    return facts_from_info(daemon_info(docker_host), peer_same_network(docker_host), socket_owner(docker_host))
