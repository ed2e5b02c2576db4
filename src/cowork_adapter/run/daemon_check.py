"""The run's daemon checks before anything is built (issue 38): its kind, its limits, the route its gateway uses.

`run`'s preflight and `doctor` call the same two functions, so what doctor says OK is what the run does:
- `limits_refusal`: a daemon that enforces not every limit is refused unless --accept-unenforced-limits;
- `route_refusal`: the route the run will really use (the default route, --llm-gateway, either with
  --llm-gateway-host) must reach this daemon's containers; refused before the image build, never
  discovered as infra_failed tasks. On a daemon in our network namespace the check binds what the run
  will bind (and closes it at once), so the refusal names the bind's real cause.
"""

from __future__ import annotations

import importlib
import os
import secrets
import socket

from ..config import RunConfig
from ..errors import Refusal
from ..gateway.run import bridge_address
from ..gateway.tls import PROVIDER_HOST, TLS_PORT
from ..host.daemon import docker_failures
from ..host.daemon_kind import (
    DaemonFacts,
    bind_failure,
    daemon_facts,
    owner_refusal,
    unenforced_refusal,
    unprivileged_port_start,
)
from ..host.daemon_kind import route_refusal as namespace_refusal
from ..vocab import DaemonKind, KeyRoute


def read_facts(cfg: RunConfig) -> DaemonFacts:
    """The daemon's facts, or a refusal naming the daemon that did not answer."""
    try:
        return daemon_facts(cfg.docker_host)
    except docker_failures() as exc:
        raise Refusal("docker_host", f"the Docker daemon at {cfg.docker_host} did not answer: {exc}") from None


def limits_refusal(cfg: RunConfig, facts: DaemonFacts) -> str | None:
    """Why this run may not use the daemon's limits as they are (None: enforced, or accepted by the flag)."""
    if cfg.limits.accept_unenforced_limits:
        return None
    return unenforced_refusal(facts, cfg.docker_host)


# What default_route_refusal returns when ROUTE's trial is not in this tree (before b38-route is merged).
UNTRIED = "untried"


def default_route_refusal(cfg: RunConfig) -> str | None:
    """The default route (with or without --llm-gateway-host), tried as the run will open it.

    ROUTE's call site (issue 38 item 1, gateway/route_check.py): one short container on the daemon must
    reach the gateway from its own address; a rootless daemon's is bound inside its namespace. Returns
    UNTRIED where that module is absent: `route_refusal` then decides from the daemon's facts and a bind."""
    # Looked up by name: the module comes with b38-route (ROUTE); once merged, a plain import can replace this.
    try:
        trial = importlib.import_module("cowork_adapter.gateway.route_check")
    except ModuleNotFoundError:
        return UNTRIED
    label = f"cowork-route-check-{secrets.token_hex(8)}"
    tried = trial.check_route(cfg.docker_host, label, address=cfg.provider.llm_gateway_host or None)
    return None if tried.reached else str(tried.sentence)


def route_refusal(cfg: RunConfig, facts: DaemonFacts) -> str | None:
    """Why the gateway of this paid run cannot reach the daemon's containers, or None (no gateway: None)."""
    if not cfg.is_paid or not cfg.served_by_gateway:
        return None
    route, gateway_host = cfg.key_route, cfg.provider.llm_gateway_host
    if route is KeyRoute.GATEWAY_OPENROUTER:
        tried = default_route_refusal(cfg)
        if tried != UNTRIED:
            return tried
    if facts.same_network is not True and facts.kind is DaemonKind.ROOTLESS:
        return namespace_refusal(facts, route, cfg.docker_host, gateway_host=gateway_host)
    return _bind_refusal(cfg, route, gateway_host)


def _bind_refusal(cfg: RunConfig, route: KeyRoute, gateway_host: str) -> str | None:
    """Bind what the run will bind (closed at once: the run binds it again when it opens its gateway)."""
    try:
        host = gateway_host or bridge_address(cfg.docker_host)
    except Refusal as refusal:
        return refusal.sentence
    port = TLS_PORT if route is KeyRoute.GATEWAY_OPENROUTER else 0
    try:
        with socket.create_server((host, port)):
            return None
    except OSError as exc:
        cause = bind_failure(exc, host, port, port_start=unprivileged_port_start(), euid=os.geteuid())
    what = f"serve {PROVIDER_HOST} on {host}:{port}" if port else f"listen on {host} (--llm-gateway)"
    return (
        f"the run cannot {what}: {cause}; name an address of this host its containers reach with "
        "--llm-gateway-host, or pass --key-in-agent (the agent can then read the key)."
    )


def check_daemon(cfg: RunConfig) -> DaemonFacts:
    """`run`'s preflight: the daemon's facts, or the first refusal (its user, its limits, then the route)."""
    facts = read_facts(cfg)
    sentence = owner_refusal(facts, cfg.docker_host, os.geteuid())
    if sentence:
        raise Refusal("docker_host", sentence)
    sentence = limits_refusal(cfg, facts)
    if sentence:
        raise Refusal("limits", sentence)
    sentence = route_refusal(cfg, facts)
    if sentence:
        raise Refusal("key_route", sentence)
    return facts
