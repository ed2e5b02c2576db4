"""The run's daemon checks before anything is built (issue 38): its kind, its limits, the route its gateway uses.

`run`'s preflight and `doctor` call the same two functions, so what doctor says OK is what the run does:
- `limits_refusal`: a daemon that enforces not every limit is refused unless --accept-unenforced-limits;
- `route_refusal` (`try_route`, whose sentence doctor shows): the route the run will really use (the
  default route, --llm-gateway, either with --llm-gateway-host) must reach this daemon's containers, tried
  with one short container (gateway/route_check.py); refused before the image build, never discovered as
  infra_failed tasks. On a daemon in our network namespace a given address is bound first (and closed at
  once), so the refusal names the bind's real cause.
"""

from __future__ import annotations

import os
import secrets
import socket

from ..config import RunConfig
from ..errors import Refusal
from ..gateway.route_check import RouteCheck, check_route
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


def try_route(cfg: RunConfig, facts: DaemonFacts) -> RouteCheck | None:
    """The route this paid run's gateway will use, tried as the run opens it (None: no gateway).

    One short container on the daemon must reach the gateway's socket from its own address
    (gateway/route_check.py): the default route on a network of its own, port 443 (or
    --llm-gateway-host's address), --llm-gateway on the bridge's address (or that one), any port; on a
    rootless daemon the socket is bound inside its network namespace, as the run binds it. Where the
    daemon shares our namespace, a given address (or --llm-gateway's bridge) is bound here first, so a
    refusal names the bind's real cause (root, the port, an address this host lacks)."""
    if not cfg.is_paid or not cfg.served_by_gateway:
        return None
    gateway_host = cfg.provider.llm_gateway_host
    openai_face = cfg.key_route is KeyRoute.GATEWAY_OPENAI
    in_our_namespace = facts.same_network is True or facts.kind is not DaemonKind.ROOTLESS
    if in_our_namespace and (gateway_host or openai_face):
        bound = _bind_refusal(cfg, cfg.key_route, gateway_host)
        if bound:
            return RouteCheck(False, bound)
    label = f"cowork-route-check-{secrets.token_hex(8)}"
    if not openai_face:
        return check_route(cfg.docker_host, label, address=gateway_host or None)
    try:
        host = gateway_host or bridge_address(cfg.docker_host)
    except Refusal as refusal:
        return RouteCheck(False, refusal.sentence)
    return check_route(cfg.docker_host, label, address=host, port=0)


def route_refusal(cfg: RunConfig, facts: DaemonFacts) -> str | None:
    """Why the gateway of this paid run cannot reach the daemon's containers, or None (no gateway: None)."""
    tried = try_route(cfg, facts)
    return None if tried is None or tried.reached else tried.sentence


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
