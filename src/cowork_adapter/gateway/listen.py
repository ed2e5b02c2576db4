"""Where the run's gateway listens, and the server that accepts there.

- The address (the default route, without --llm-gateway-host): the gateway address of a Docker network
  the run makes for itself. Port 443 is one per address, so a run holding the daemon's default bridge
  address kept every other default-route run of that daemon out; a network of its own gives each run
  an address of its own. No container joins it: its gateway address is a local address on the
  daemon's side (a bridge of the host, or of a rootless daemon's namespace), which every container of
  the daemon reaches as it reaches the default bridge's, and the shim makes the provider's host resolve
  to it in the run's agent containers. It carries the run's label: the run's exact-label cleanup
  removes it, the watchdog and `clear` too when the launcher died.
- The namespace: the daemon's. The process serving the daemon's unix socket is found by the socket's
  peer credentials (SO_PEERCRED); when its network namespace is not ours (a rootless daemon), the
  socket is bound there by a helper (gateway/nsbind.py) and served from here, so the peer check still
  sees every container by its own address. A daemon over TCP, or one whose namespaces this user may
  not read (a rootful daemon used from the docker group), is taken to share ours.
- The server: the stdlib threading HTTP server with the peer check and the fair shares of
  connections (gateway/shares.py) on accept, serving a socket made by either path above.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING

from ..custody.labels import ROLE_GATEWAY, ROLE_LABEL_KEY, RUN_LABEL_KEY
from ..host.daemon import docker_client, docker_failures
from ..schemas.gateway import GatewayRequest
from . import nsbind
from .causes import peer_address

if TYPE_CHECKING:
    from .server import Gateway

# The run's own network: `cowork-gw-<the run label's first 16 hex digits>`, role ROLE_GATEWAY.
RUN_NETWORK_PREFIX = "cowork-gw-"
SOCKET_TIMEOUT_SEC = 10.0


@dataclass(frozen=True)
class RunNetwork:
    """The run's own network on the daemon and the address the gateway listens on (its gateway's)."""

    name: str
    address: str


def run_network_name(run_label: str) -> str:
    return RUN_NETWORK_PREFIX + run_label[:16]


def make_run_network(docker_host: str, run_label: str, name: str | None = None) -> RunNetwork:
    """Create the run's network (labelled with the run's label; `name`, else run_network_name) and read
    its gateway address. Raises OSError with one sentence when the daemon refuses or gives it no address."""
    name = name or run_network_name(run_label)
    client = docker_client(docker_host)
    try:
        network = client.networks.create(
            name,
            driver="bridge",
            labels={RUN_LABEL_KEY: run_label, ROLE_LABEL_KEY: ROLE_GATEWAY},
            check_duplicate=True,
        )
        network.reload()
        config = ((network.attrs.get("IPAM") or {}).get("Config") or [{}])[0]
    except docker_failures() as exc:
        client.close()
        remove_run_network(docker_host, name)  # made but unread, or never made (then: not found)
        raise OSError(errno.EIO, f"the daemon did not create network {name} ({_brief(exc)})") from None
    client.close()
    address = str(config.get("Gateway") or "").split("/")[0]
    if not address and config.get("Subnet"):  # an old daemon leaves the default gateway unsaid
        address = str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
    if not address:
        remove_run_network(docker_host, name)
        raise OSError(errno.EADDRNOTAVAIL, f"the daemon gave network {name} no gateway address")
    return RunNetwork(name=name, address=address)


def remove_run_network(docker_host: str, name: str) -> str | None:
    """Remove the run's network; None when it is gone (already removed by the run's cleanup counts),
    else the reason it stays (it carries the run's label: `clear` removes it)."""
    client = docker_client(docker_host)
    try:
        client.api.remove_network(name)
        return None
    except docker_failures() as exc:
        return None if getattr(exc, "status_code", None) == 404 else _brief(exc)
    finally:
        client.close()


def daemon_pid(docker_host: str) -> int | None:
    """The process serving the daemon's unix socket (its peer credentials), None over TCP or unreachable."""
    if not docker_host.startswith("unix://"):
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(SOCKET_TIMEOUT_SEC)
        try:
            sock.connect(docker_host.removeprefix("unix://"))
            pid, _uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        except OSError:
            return None
    return pid if pid > 0 else None


def daemon_namespace(docker_host: str) -> int | None:
    """The daemon's pid when its network namespace is not ours (a rootless daemon), else None."""
    pid = daemon_pid(docker_host)
    if pid is None:
        return None
    try:
        return None if nsbind.shares_namespace(pid, "net") else pid
    except OSError:  # its namespaces are not ours to read (a rootful daemon, used from the docker group)
        return None


class ListenError(OSError):
    """The gateway's address could not be bound; `strerror` is one sentence naming the real cause."""


def daemon_listener(docker_host: str, address: str, port: int) -> tuple[socket.socket, bool]:
    """A socket listening on `address`:`port` in the daemon's network namespace, and whether that
    namespace is not ours (a rootless daemon's). Raises ListenError."""
    pid = daemon_namespace(docker_host)
    try:
        return nsbind.bind_listener(address, port, pid=pid), pid is not None
    except OSError as exc:
        raise ListenError(exc.errno or errno.EIO, bind_sentence(exc, address, port, pid is not None)) from None


def bind_sentence(exc: OSError, address: str, port: int, namespaced: bool) -> str:
    """Why `address`:`port` could not be bound, naming the real cause."""
    where = "in the rootless daemon's network namespace" if namespaced else "on this host"
    if isinstance(exc, nsbind.NamespaceBindError):
        return f"the gateway cannot listen on {address}:{port}: {exc.strerror}"
    if exc.errno == errno.EACCES:
        return (
            f"port {port} of {address} {where} needs a privilege this process lacks (root, "
            "CAP_NET_BIND_SERVICE or net.ipv4.ip_unprivileged_port_start at most the port)"
        )
    if exc.errno == errno.EADDRINUSE:
        return f"another process already listens on {address}:{port} {where}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"{address} is not an address {where} (a rootless daemon's containers reach only addresses of "
            "its own namespace: the default route's own network has one)"
        )
    return f"the gateway cannot listen on {address}:{port} {where} ({exc.strerror or exc})"


def _brief(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


class GatewayServer(ThreadingHTTPServer):
    """The stdlib threading server with a peer check and fair shares of connections (gateway/shares.py).
    `listener`: a socket already listening (made in the daemon's namespace); else it binds `address`."""

    daemon_threads = True
    block_on_close = False
    # The listen backlog: the stdlib's 5 makes a burst of connections wait seconds in SYN retries
    # before the accept loop can even close the ones over the bound.
    request_queue_size = nsbind.DEFAULT_BACKLOG

    def __init__(
        self,
        address,
        handler,
        gateway: Gateway,
        tls: ssl.SSLContext | None = None,
        listener: socket.socket | None = None,
    ) -> None:
        self.gateway = gateway
        self.tls = tls
        super().__init__(address, handler, bind_and_activate=listener is None)
        if listener is not None:
            self.socket.close()  # the unbound one the base class made
            self.socket = listener
            self.server_address = listener.getsockname()[:2]
            self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])

    def get_request(self):
        sock, address = super().get_request()
        if self.tls is not None:  # no I/O here: the handshake runs in the handler's thread, under its timeout
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def verify_request(self, request, client_address) -> bool:
        return self.gateway.admit_peer(client_address[0])

    def process_request(self, request, client_address) -> None:
        peer = peer_address(client_address)
        why = self.gateway.shares.connect(peer)
        if why is not None:  # over the peer's share or full: closed at once, no thread, no read
            self.gateway.overflowed += 1
            self.gateway.record(
                GatewayRequest(at=time.time(), task=None, path="", status=0, latency_ms=0.0, refused=why, peer=peer)
            )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.gateway.shares.disconnect(peer, None)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.gateway.shares.disconnect(peer_address(client_address), self.gateway._bound.pop(request, None))

    def handle_error(self, request, client_address) -> None:  # a broken client is not our traceback
        self.gateway.errors += 1
