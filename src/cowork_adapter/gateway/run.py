"""How a run uses the model gateway (--llm-gateway): open it, point the engines at it, account for it.

The gateway listens on the host address the run's containers reach (the Docker daemon's default
bridge gateway, or --llm-gateway-host), serves only peers that are containers of the run
(gateway_peers.RunPeers), and forwards to the endpoint the run would otherwise have
given the engine (--openai-compatible-base-url, else OpenRouter's chat API). Every engine is then
configured as if the gateway were an OpenAI-compatible endpoint: Ouroboros routes the model as
`openai-compatible::<model>` with OPENAI_COMPATIBLE_BASE_URL (6.97 hard-codes OpenRouter's URL for
unprefixed ids), the benchmark's own engines get its URL in MODEL_API_URL / LLM_BASE_URL.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from ..config import RunConfig
from ..errors import Refusal
from ..host.daemon import docker_client
from .server import Gateway, new_secret
from .peers import RunPeers
from .policy import Policy, pinned_model
from ..schemas.gateway import is_billed, read_requests
from ..schemas.manifest import GatewayRecord
from ..schemas.run_config import agent_base_url, routed_model_id
from ..vocab import EngineKind
from ..runroot.layout import RunRoot

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


def shaping_disclosures(cfg: RunConfig) -> list[str]:
    """What the gateway changed or refused in the engine's requests, and how it counted unknown costs."""
    return [
        f"The gateway pinned the model to {pinned_model(cfg.model)!r}, required n = 1, clamped max_tokens / "
        f"max_completion_tokens to {cfg.llm_gateway_max_tokens} (set it to that when absent), and refused "
        "OpenRouter's models, route, provider, plugins and web_search_options.",
        f"A forwarded request whose answer carried no cost figure (or was cut) was counted at "
        f"${cfg.llm_gateway_unknown_cost_usd:g} by the gateway's fences (assumed_usd in the record, "
        "assumed_cost_usd per request); it is not in the provider-figure total.",
        f"The gateway refused further requests of a task once its costs reached --per-task-cost-usd "
        f"(${cfg.per_task_cost_usd:g}), and the token of a task whose agent container was removed.",
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
        raise Refusal("llm_gateway", f"the Docker daemon's bridge address could not be read ({type(exc).__name__}); "
                                     "name the address containers reach this host at with --llm-gateway-host.") from None


def open_for_run(cfg: RunConfig, key: str, run_label: str, run_root: Path) -> tuple[Gateway, RunConfig, GatewayRecord]:
    """Start the run's gateway; returns it, the config the engines get, and the manifest's record."""
    host = cfg.llm_gateway_host or bridge_address(cfg.docker_host)
    secret, _ = new_secret(RunRoot(run_root).private)
    upstream = agent_base_url(cfg)
    try:
        gateway = Gateway(upstream=upstream, key=key, run_label=run_label, secret=secret, run_root=run_root,
                          stop_file=RunRoot(run_root).stop_file, bind_host=host,
                          policy=Policy(model=pinned_model(cfg.model), max_tokens=cfg.llm_gateway_max_tokens),
                          per_task_usd=cfg.per_task_cost_usd, unknown_cost_usd=cfg.llm_gateway_unknown_cost_usd,
                          revoked_dir=RunRoot(run_root).evidence,
                          peers=RunPeers(cfg.docker_host, run_label)).start()
    except OSError as exc:
        raise Refusal("llm_gateway", f"the gateway cannot listen on {host} ({exc.strerror or exc}); "
                                     "name a local address containers reach with --llm-gateway-host.") from None
    url = gateway.url_for(host)
    engine_cfg = cfg.with_changes(openai_compatible_base_url=url, credential_setting=COMPATIBLE_KEY_SETTING)
    disclosures = list(GENERAL_DISCLOSURES) + shaping_disclosures(cfg)
    if cfg.engine_kind is EngineKind.OUROBOROS:
        disclosures += OUROBOROS_DISCLOSURES
    record = GatewayRecord(container_url=url, upstream_url=upstream,
                           routed_model=routed_model_id(cfg.model, url), disclosures=disclosures)
    return gateway, engine_cfg, record


def secret_file(run_root: Path) -> Path:
    return RunRoot(run_root).gateway_secret


def close_for_run(gateway: Gateway, record: GatewayRecord, run_root: Path) -> None:
    """Stop the gateway, fill in the record's totals from its log, delete the secret and the token files."""
    gateway.close()
    rows = read_requests(run_root)
    forwarded = [r for r in rows if r.refused is None]
    record.requests = len(rows)
    record.spent_usd = round(sum(r.cost_usd or 0.0 for r in forwarded), 10)
    record.unknown_cost_requests = sum(1 for r in forwarded if r.cost_usd is None and is_billed(r))
    record.assumed_usd = round(sum(r.assumed_cost_usd or 0.0 for r in rows if r.cost_usd is None), 10)
    record.unknown_cost_price_usd = gateway.unknown_cost_usd
    record.unlogged_refusals = gateway.unlogged_refusals + gateway.overflowed
    record.allowance_usd = gateway.allowance_usd
    record.fence_reason = gateway.fence_reason
    remove_secrets(run_root)


def remove_secrets(run_root: Path) -> None:
    """The gateway secret and every task's token file (useless once the gateway is gone, removed anyway)."""
    private = RunRoot(run_root).private
    secret_file(run_root).unlink(missing_ok=True)
    for path in private.glob("agent-*.env") if private.is_dir() else ():
        path.unlink(missing_ok=True)
