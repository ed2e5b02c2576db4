"""Who may talk to the model gateway: the run's own containers, by their address on the daemon.

The gateway listens on an address every container of the daemon (other users' too) and every host
process can reach (the default bridge's gateway address). A connection is served only when its
peer address belongs to a container carrying the run's label: the daemon's own list of the
run's containers and their addresses on every network they joined, read again when a peer is not
in the last list (at most once per REFRESH_MIN_SEC, so a flood from strangers cannot hammer the
daemon) and whenever the last list is older than MAX_AGE_SEC (a removed container's address given
to a stranger's new container is not trusted for longer than that). The host itself (the bridge
gateway address, loopback) is no container of the run and is refused.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..custody.labels import RUN_LABEL_KEY
from ..host.daemon import docker_client

REFRESH_MIN_SEC = 0.5
MAX_AGE_SEC = 2.0
DAEMON_TIMEOUT_SEC = 10


def addresses_of(listed: dict) -> set[str]:
    """Every IPv4/IPv6 address a container has on its networks (one entry of the daemon's container list)."""
    networks = ((listed.get("NetworkSettings") or {}).get("Networks") or {}).values()
    found = set()
    for net in networks:
        for key in ("IPAddress", "GlobalIPv6Address"):
            if isinstance(net, dict) and net.get(key):
                found.add(str(net[key]))
    return found


class RunPeers:
    """`allowed(ip)`: whether `ip` is an address of one of the run's containers now."""

    def __init__(self, docker_host: str, run_label: str) -> None:
        self.docker_host = docker_host
        self.run_label = run_label
        self._lock = threading.Lock()
        self._known: set[str] = set()
        self._read_at = float("-inf")
        self._client: Any = None  # a docker.DockerClient once the first lookup made it
        self.lookups = 0

    def _read(self) -> set[str]:
        if self._client is None:
            self._client = docker_client(self.docker_host, DAEMON_TIMEOUT_SEC)
        # The daemon's list itself carries each container's networks: one call for the whole run
        # (the high-level list would inspect every container once more).
        listed = self._client.api.containers(filters={"label": f"{RUN_LABEL_KEY}={self.run_label}"})
        return set().union(*(addresses_of(c) for c in listed)) if listed else set()

    def allowed(self, ip: str) -> bool:
        with self._lock:  # one reader at a time; the others wait for its answer
            age = time.monotonic() - self._read_at
            if (ip in self._known and age < MAX_AGE_SEC) or (ip not in self._known and age < REFRESH_MIN_SEC):
                return ip in self._known
            try:
                self._known = self._read()
            except Exception:  # noqa: BLE001 - the daemon unreachable: nobody is known (fail closed)
                self._known = set()
            self._read_at = time.monotonic()
            self.lookups += 1
            return ip in self._known

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
