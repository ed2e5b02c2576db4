"""Whether the route a run will use reaches a container: tried, not assumed, before anything is paid.

`check_route` does what the run's gateway will do and what one of its agent containers will do, on the
real daemon: it listens where the run would (gateway/listen.py: the address of a network of its own on
the default route, or the address given, bound in the daemon's network namespace), starts one short
container on a network like a task's with the provider's host resolving to that address, and waits
for the container's connection. It passes only when the connection arrived AND came from the
container's own address, since the gateway's peer check serves a container by nothing else (through a
rootless daemon's slirp, every connection arrives from one address and would be refused). Nothing is
read from the container but its exit code. Everything it makes carries the caller's run label (a
killed check leaves nothing `clear` cannot find) and is removed before it returns.

For doctor and the run's preflight (before the image build): a route that cannot reach a container is
refused there, never found as tasks that end infra_failed.
"""

from __future__ import annotations

import secrets
import socket
import time
from dataclasses import dataclass

from ..custody.labels import ROLE_LABEL_KEY, RUN_LABEL_KEY
from ..host.daemon import docker_client, docker_failures
from .listen import ROLE_GATEWAY, daemon_listener, make_run_network, remove_run_network
from .tls import PROVIDER_HOST, TLS_PORT

# Every run needs it (the runner starts each task's database from it) and it has bash, whose
# /dev/tcp opens a connection without any client program in the image.
CHECK_IMAGE = "postgres:15"
CHECK_TIMEOUT_SEC = 60.0
# How often, while no connection came, the check asks whether its container ended first.
ACCEPT_SLICE_SEC = 0.5
# The container connects (a refused connection ends the shell: exit 1), then holds the connection until the
# check has read its peer address and closed it.
CONNECT_SCRIPT = f'exec 3<>"/dev/tcp/{PROVIDER_HOST}/$1" || exit 3; read -r -t 30 _ <&3 || true'


@dataclass(frozen=True)
class RouteCheck:
    """`reached`: a container's connection arrived from its own address; `sentence` says what was seen."""

    reached: bool
    sentence: str
    address: str = ""
    namespaced: bool = False


def check_route(
    docker_host: str,
    run_label: str,
    image: str = CHECK_IMAGE,
    *,
    address: str | None = None,
    port: int = TLS_PORT,
    timeout_sec: float = CHECK_TIMEOUT_SEC,
) -> RouteCheck:
    """Whether a container of the daemon at `docker_host` reaches the gateway the run would open:
    `address` None is the default route (a network of its own, port 443); else `address`:`port`
    (--llm-gateway-host, or --llm-gateway's bridge address with port 0: any free port). Never raises
    for the daemon's or the route's failures: they are the sentence of a RouteCheck not reached."""
    own = None
    made: list[str] = []  # the check's networks, removed in `finally`
    # Its own names, whatever the label looks like: checks of runs starting at once never collide.
    tag = secrets.token_hex(6)
    try:
        if address is None:
            own = make_run_network(docker_host, run_label, name=f"cowork-gwcheck-{tag}")
            made.append(own.name)
            address = own.address
        listener, namespaced = daemon_listener(docker_host, address, port)
    except OSError as exc:
        for name in made:
            remove_run_network(docker_host, name)
        return RouteCheck(False, f"the gateway's route cannot be opened: {exc.strerror or exc}", address or "")
    where = f"{address}:{listener.getsockname()[1]}"
    try:
        return _from_container(docker_host, run_label, image, listener, address, namespaced, made, timeout_sec, tag)
    except docker_failures() as exc:
        return RouteCheck(
            False, f"the daemon did not run the route's check container ({type(exc).__name__})", where, namespaced
        )
    finally:
        listener.close()
        for name in made:
            remove_run_network(docker_host, name)


def _from_container(
    docker_host: str,
    run_label: str,
    image: str,
    listener: socket.socket,
    address: str,
    namespaced: bool,
    made: list[str],
    timeout_sec: float,
    tag: str,
) -> RouteCheck:
    port = listener.getsockname()[1]
    where = f"{address}:{port}"
    labels = {RUN_LABEL_KEY: run_label, ROLE_LABEL_KEY: ROLE_GATEWAY}
    client = docker_client(docker_host, timeout=timeout_sec)
    container = None
    try:
        task_net = f"cowork-gwcheck-task-{tag}"
        client.networks.create(task_net, driver="bridge", labels=labels, check_duplicate=True)
        made.insert(0, task_net)  # removed before the listener's network
        api = client.api
        # The low-level create: it never pulls (an absent image is an answer, not a download).
        try:
            made_container = api.create_container(
                image,
                entrypoint=["bash", "-c"],
                command=[CONNECT_SCRIPT, "bash", str(port)],
                labels=labels,
                host_config=api.create_host_config(extra_hosts={PROVIDER_HOST: address}, network_mode=task_net),
            )
        except docker_failures() as exc:
            if getattr(exc, "status_code", None) == 404:
                return RouteCheck(False, f"the route's check needs the image {image}, absent here", where, namespaced)
            raise
        container = made_container["Id"]
        api.start(container)
        accepted = _accept(api, container, listener, timeout_sec)
        if isinstance(accepted, str):
            return RouteCheck(False, f"no container's connection reached {where}: {accepted}", where, namespaced)
        conn, peer = accepted
        with conn:
            networks = (api.inspect_container(container).get("NetworkSettings") or {}).get("Networks") or {}
            own = str((networks.get(task_net) or {}).get("IPAddress") or "")
            seen = str(peer[0]).removeprefix("::ffff:")
        if seen != own:
            return RouteCheck(
                False,
                f"a container reached {where} but arrived from {seen}, not from its own address {own or '?'}: "
                "the gateway's peer check would refuse every container (the listener is not in the daemon's "
                "network namespace)",
                where,
                namespaced,
            )
        exit_code = api.wait(container, timeout=int(timeout_sec) + 1).get("StatusCode")
        if exit_code != 0:
            return RouteCheck(
                False, f"the check container ({image}) ended with exit code {exit_code}", where, namespaced
            )
        inside = " in the rootless daemon's network namespace" if namespaced else ""
        return RouteCheck(
            True,
            f"a container reached {PROVIDER_HOST} at {where}{inside} and was seen at its own address {own}",
            where,
            namespaced,
        )
    finally:
        if container is not None:
            _remove_container(client, container)
        client.close()


def _accept(api, container: str, listener: socket.socket, timeout_sec: float):
    """(connection, peer) once the container connected; else why not (it ended first, or the time is up)."""
    deadline = time.monotonic() + timeout_sec
    listener.settimeout(ACCEPT_SLICE_SEC)
    while time.monotonic() < deadline:
        try:
            return listener.accept()
        except TimeoutError:
            state = api.inspect_container(container).get("State") or {}
            if not state.get("Running") and state.get("Status") not in ("created", "running"):
                return f"the check container could not connect (it ended with exit code {state.get('ExitCode')})"
    return f"nothing within {timeout_sec:g} s (a firewall, or an address the daemon's containers cannot reach)"


def _remove_container(client, container: str) -> None:
    try:
        client.api.remove_container(container, force=True)
    except docker_failures():
        pass  # gone already, or left labelled for `clear`
