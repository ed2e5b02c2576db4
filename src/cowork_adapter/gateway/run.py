"""How a run uses the model gateway: open it, point the engines at it, account for it.

The gateway listens, in the Docker daemon's network namespace (gateway/listen.py: a rootless
daemon's own), on an address the run's containers reach: on the default route the gateway address
of a network the run makes for itself (so several default-route runs share a daemon, each on port
443 of its own address), with --llm-gateway the daemon's default bridge address, or
--llm-gateway-host. It serves only peers that are containers of the run (gateway/peers.py RunPeers).
It has two faces:

- the default (a paid run on the OpenRouter route without --key-in-agent): it serves
  `openrouter.ai` itself, over TLS on port 443 with a run-scoped certificate (gateway/tls.py);
  the shim makes agent containers resolve that name to the gateway and trust the run CA. The
  engine's configuration is untouched (Ouroboros keeps its OpenRouter client, request shape and
  pricing look-ups); only its key is a task token. Upstream: OpenRouter (or, on test beds,
  --provider-upstream-url).
- --llm-gateway: every engine is configured as if the gateway were an OpenAI-compatible endpoint:
  Ouroboros routes the model as `openai-compatible::<model>` with OPENAI_COMPATIBLE_BASE_URL (6.97
  hard-codes OpenRouter's URL for unprefixed ids), the benchmark's own engines get its URL in
  MODEL_API_URL / LLM_BASE_URL. Upstream: --openai-compatible-base-url, else OpenRouter's chat API.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from ..config import Agent, Provider, RunConfig
from ..custody.bash_env import ProviderRoute
from ..errors import Refusal
from ..host.daemon import docker_client
from ..runroot.layout import RunRoot
from ..schemas.gateway import is_billed, read_requests
from ..schemas.manifest import GatewayRecord
from ..schemas.run_config import OPENROUTER_CHAT_URL, agent_base_url, routed_model_id
from ..vocab import EngineKind, GatewayRoute
from .generation import model_price
from .listen import daemon_listener, make_run_network, remove_run_network
from .peers import RunPeers
from .policy import SEED_PROVIDER_KEYS, Policy, pinned_model
from .server import Gateway, new_secret
from .tls import PROVIDER_HOST, TLS_PORT, make_run_tls, remove_private

COMPATIBLE_KEY_SETTING = "OPENAI_COMPATIBLE_API_KEY"
# What routing Ouroboros 6.97 through an OpenAI-compatible endpoint changes (research: ouroboros-6.97-drift.md §8.1).
OUROBOROS_DISCLOSURES = (
    "Ouroboros routes the model as openai-compatible::<model>: it makes no OpenRouter pricing or capability "
    "look-ups, so its own cost figures for these requests are unknown; the gateway log holds the provider's.",
    "Ouroboros sends no OpenRouter extras on this route (provider routing from --or-provider, cache_control, "
    "OpenRouter headers); the requests are plain OpenAI chat completions, not streamed.",
    "The context window is learned from the gateway's /models, which forwards the provider's own list.",
)
GENERAL_DISCLOSURES = (
    "Tokens and cost per request are the provider's own usage figures as returned; the gateway asks every "
    "stream for its usage (stream_options.include_usage).",
    "The gateway's per-request fence counts only requests made through it; the key meter stays the authority.",
)


NAMESPACE_DISCLOSURE = (
    "The Docker daemon's networks live in a network namespace of their own (a rootless daemon): the gateway's "
    "listening socket was bound there by a short-lived helper (nsenter into the daemon's user and network "
    "namespaces) and served from the launcher, so it saw each container by its own address."
)
PROVIDER_TLS_DISCLOSURES = (
    f"The engine kept the seed's OpenRouter route ({OPENROUTER_CHAT_URL}, its own request shape and pricing "
    f"look-ups); the run served {PROVIDER_HOST} itself over TLS to its agent containers (the name resolved to "
    "the run's gateway, whose certificate a CA made for this run signed, which those containers trusted) and "
    "added the key upstream: no container held the key, each task held a token for its own requests.",
    "Ouroboros's look-ups of OpenRouter's model list without a credential were refused (every path of the "
    "gateway needs the task's token), so its own pricing figures are unknown; its generation-cost and key-usage "
    "look-ups went upstream with the key in place of the task's token.",
    "The agent containers' SSL_CERT_FILE, REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE named a bundle of the host's "
    "public roots plus the run CA, so every other HTTPS call of theirs verified against the host's roots.",
)


def shaping_disclosures(provider: Provider, agent: Agent) -> list[str]:
    """What the gateway changed or refused in the engine's requests, and how it counted unknown costs."""
    if provider.llm_gateway:
        routing = "refused OpenRouter's models, route, provider, plugins and web_search_options."
    else:
        routing = (
            "refused OpenRouter's models, route, plugins and web_search_options, a provider object with "
            "other fields than require_parameters and allow_fallbacks, and tools other than functions; "
            "a request it left unchanged went upstream byte for byte (the request log's `changed` "
            "marks the others)."
        )
    return [
        f"The gateway pinned the model to {pinned_model(agent.model)!r}, required n = 1, clamped max_tokens / "
        f"max_completion_tokens to {provider.llm_gateway_max_tokens} (set it to that when absent), and {routing}",
        f"A forwarded request whose answer carried no cost figure (or was cut) was counted at "
        f"${provider.llm_gateway_unknown_cost_usd:g} by the gateway's fences (assumed_usd in the record, "
        "assumed_cost_usd per request); it is not in the provider-figure total.",
        f"Each chat request reserved its most expensive possible answer against --per-task-cost-usd "
        f"(${agent.per_task_cost_usd:g}) before it was forwarded and settled it after, so a task's concurrent "
        "requests could not overshoot it; a task over it got no more requests, its siblings and the run went on. "
        "The token of a task whose agent container was removed was refused.",
    ]


def bridge_address(docker_host: str) -> str:
    """The host's address on the daemon's default bridge network (containers on any bridge reach it)."""
    try:
        client = docker_client(docker_host)
        try:
            config = ((client.networks.get("bridge").attrs.get("IPAM") or {}).get("Config") or [{}])[0]
        finally:
            client.close()
        if config.get("Gateway"):
            return str(config["Gateway"])
        return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
    except Exception as exc:  # noqa: BLE001 - any failure is one sentence, with the flag that avoids it
        raise Refusal(
            "llm_gateway",
            f"the Docker daemon's bridge address could not be read ({type(exc).__name__}); "
            "name the address containers reach this host at with --llm-gateway-host.",
        ) from None


def open_for_run(
    cfg: RunConfig, key: str, run_label: str, run_root: Path
) -> tuple[Gateway, RunConfig, GatewayRecord, ProviderRoute | None]:
    """Start the run's gateway; returns it, the config the engines get, the manifest's record, and
    (the default route) what the shim gives agent containers to reach it as the provider."""
    if not cfg.provider.llm_gateway:
        return _open_provider_tls(cfg, key, run_label, run_root)
    host = cfg.provider.llm_gateway_host or bridge_address(cfg.docker_host)
    secret, _ = new_secret(RunRoot(run_root).private)
    upstream = agent_base_url(cfg)
    try:
        listener, namespaced = daemon_listener(cfg.docker_host, host, 0)
    except OSError as exc:
        remove_secrets(run_root)
        raise Refusal(
            "llm_gateway",
            f"{exc.strerror}; name a local address containers reach with --llm-gateway-host.",
        ) from None
    try:
        gateway = Gateway(
            upstream=upstream,
            key=key,
            run_label=run_label,
            secret=secret,
            run_root=run_root,
            stop_file=RunRoot(run_root).stop_file,
            bind_host=host,
            policy=Policy(model=pinned_model(cfg.agent.model), max_tokens=cfg.provider.llm_gateway_max_tokens),
            per_task_usd=cfg.agent.per_task_cost_usd,
            unknown_cost_usd=cfg.provider.llm_gateway_unknown_cost_usd,
            revoked_dir=RunRoot(run_root).evidence,
            peers=RunPeers(cfg.docker_host, run_label),
            price=model_price(upstream, key, pinned_model(cfg.agent.model)),
            listener=listener,
        ).start()
    except BaseException:
        listener.close()
        remove_secrets(run_root)
        raise
    url = gateway.url_for(host)
    engine_cfg = cfg.with_changes(openai_compatible_base_url=url, credential_setting=COMPATIBLE_KEY_SETTING)
    disclosures = list(GENERAL_DISCLOSURES) + shaping_disclosures(cfg.provider, cfg.agent)
    disclosures += [NAMESPACE_DISCLOSURE] if namespaced else []
    if cfg.agent.engine_kind is EngineKind.OUROBOROS:
        disclosures += OUROBOROS_DISCLOSURES
    record = GatewayRecord(
        container_url=url,
        upstream_url=upstream,
        routed_model=routed_model_id(cfg.agent.model, url),
        disclosures=disclosures,
        route=GatewayRoute.OPENAI_COMPATIBLE,
        listen_address=f"{host}:{gateway.port}",
    )
    return gateway, engine_cfg, record, None


def _open_provider_tls(
    cfg: RunConfig, key: str, run_label: str, run_root: Path
) -> tuple[Gateway, RunConfig, GatewayRecord, ProviderRoute]:
    """The default route: the gateway serves the provider's host over TLS on port 443 of the run's
    own network's gateway address (or --llm-gateway-host), bound in the daemon's network namespace."""
    host = cfg.provider.llm_gateway_host
    network = None
    if not host:
        try:
            network = make_run_network(cfg.docker_host, run_label)
        except OSError as exc:
            raise Refusal(
                "provider_tls",
                f"the run cannot make its gateway's network: {exc.strerror or exc}; name an address "
                "containers reach with --llm-gateway-host, or pass --key-in-agent (the agent can then read the key).",
            ) from None
        host = network.address
    try:
        listener, namespaced = daemon_listener(cfg.docker_host, host, TLS_PORT)
    except OSError as exc:
        if network is not None:
            remove_run_network(cfg.docker_host, network.name)
        raise Refusal(
            "provider_tls",
            f"the run cannot serve {PROVIDER_HOST}: {exc.strerror}; name another "
            "address containers reach with --llm-gateway-host, or give the agent containers the key themselves "
            "with --key-in-agent (the seed's path, where the agent can read it).",
        ) from None
    secret, _ = new_secret(RunRoot(run_root).private)
    tls = make_run_tls(run_root, run_label)
    upstream = cfg.provider.provider_upstream_url or OPENROUTER_CHAT_URL
    try:
        gateway = Gateway(
            upstream=upstream,
            key=key,
            run_label=run_label,
            secret=secret,
            run_root=run_root,
            stop_file=RunRoot(run_root).stop_file,
            bind_host=host,
            port=TLS_PORT,
            policy=Policy(
                model=pinned_model(cfg.agent.model),
                max_tokens=cfg.provider.llm_gateway_max_tokens,
                provider_keys=SEED_PROVIDER_KEYS,
                function_tools_only=True,
            ),
            per_task_usd=cfg.agent.per_task_cost_usd,
            unknown_cost_usd=cfg.provider.llm_gateway_unknown_cost_usd,
            revoked_dir=RunRoot(run_root).evidence,
            peers=RunPeers(cfg.docker_host, run_label),
            price=model_price(upstream, key, pinned_model(cfg.agent.model)),
            tls=tls.server_context(),
            openrouter=True,
            listener=listener,
        ).start()
    except BaseException:
        listener.close()
        remove_secrets(run_root)
        if network is not None:
            remove_run_network(cfg.docker_host, network.name)
        raise
    if network is not None:  # its removal after the gateway's (the run's cleanup has removed it by then)
        gateway.after_close.append(lambda: remove_run_network(cfg.docker_host, network.name))
    disclosures = (
        list(PROVIDER_TLS_DISCLOSURES) + list(GENERAL_DISCLOSURES) + shaping_disclosures(cfg.provider, cfg.agent)
    )
    disclosures += [NAMESPACE_DISCLOSURE] if namespaced else []
    record = GatewayRecord(
        container_url=OPENROUTER_CHAT_URL,
        upstream_url=upstream,
        routed_model=cfg.agent.model,
        disclosures=disclosures,
        route=GatewayRoute.PROVIDER_TLS,
        listen_address=f"{host}:{TLS_PORT}",
    )
    return gateway, cfg, record, ProviderRoute(host=PROVIDER_HOST, address=host, ca_bundle=tls.bundle)


def secret_file(run_root: Path) -> Path:
    return RunRoot(run_root).gateway_secret


def close_for_run(gateway: Gateway, record: GatewayRecord, run_root: Path) -> None:
    """Stop the gateway, fill in the record's totals from its log, delete the secret and the token files."""
    gateway.close()
    rows = read_requests(run_root)
    forwarded = [r for r in rows if r.refused is None]
    record.requests = sum(r.count for r in rows)
    record.spent_usd = round(sum(r.cost_usd or 0.0 for r in forwarded), 10)
    record.unknown_cost_requests = sum(1 for r in forwarded if r.cost_usd is None and is_billed(r))
    record.assumed_usd = round(sum(r.assumed_cost_usd or 0.0 for r in rows if r.cost_usd is None), 10)
    record.unknown_cost_price_usd = gateway.unknown_cost_usd
    record.unlogged_refusals = gateway.unlogged_refusals + gateway.overflowed + gateway.refusals.unlogged
    record.allowance_usd = gateway.allowance_usd
    record.fence_reason = gateway.fence_reason
    remove_secrets(run_root)


def remove_secrets(run_root: Path) -> None:
    """The gateway secret and every task's token file (useless once the gateway is gone, removed anyway)."""
    private = RunRoot(run_root).private
    secret_file(run_root).unlink(missing_ok=True)
    remove_private(run_root)  # the default route's TLS key
    for path in private.glob("agent-*.env") if private.is_dir() else ():
        path.unlink(missing_ok=True)
