"""RunConfig with --llm-gateway: its refusals, caps, key route and the engines pointed at the gateway."""

from __future__ import annotations

import pytest
from test_config import base, build, refusal  # noqa: F401 (fixture)

from cowork_adapter.errors import Refusal

# ---- --llm-gateway ---------------------------------------------------------------------------


def test_llm_gateway_is_off_by_default_and_recorded_as_the_key_route(base):
    assert build(base).provider.llm_gateway is False
    assert build(base).applied_config()["key_route"] == "gateway_openrouter"
    assert build(base, llm_gateway=True).applied_config()["key_route"] == "gateway_openai"


def test_llm_gateway_refusals(base):
    free = {k: v for k, v in base.items() if k != "campaign_file"}
    assert "makes none" in refusal(free, engine="oracle", llm_gateway=True).sentence
    # The default route has a gateway too: the host is meaningful there, not on the seed's path.
    assert build(base, llm_gateway_host="10.0.0.1").provider.llm_gateway_host == "10.0.0.1"
    assert (
        "only meaningful when a gateway serves"
        in refusal(base, key_in_agent=True, llm_gateway_host="10.0.0.1").sentence
    )


def test_llm_gateway_caps_are_flags_of_the_gateway_only(base):
    cfg = build(base, llm_gateway=True, llm_gateway_max_tokens=4096, llm_gateway_unknown_cost_usd=1.5)
    assert (cfg.provider.llm_gateway_max_tokens, cfg.provider.llm_gateway_unknown_cost_usd) == (4096, 1.5)
    assert cfg.applied_config()["llm_gateway_max_tokens"] == 4096  # it bounds how the agent ran
    assert cfg.applied_config()["llm_gateway_unknown_cost_usd"] == 1.5  # it prices answers without a cost
    # The default route's gateway applies its defaults; the seed's own path has no gateway to record.
    assert build(base).applied_config()["llm_gateway_max_tokens"] == cfg.provider.__class__().llm_gateway_max_tokens
    assert "llm_gateway_max_tokens" not in build(base, key_in_agent=True).applied_config()
    for field, value in (("llm_gateway_max_tokens", 100), ("llm_gateway_unknown_cost_usd", 1.0)):
        assert build(base, **{field: value}).provider_tls  # the default route's gateway takes them
        assert "only meaningful when a gateway serves" in refusal(base, key_in_agent=True, **{field: value}).sentence
    assert "llm-gateway-max-tokens" in refusal(base, llm_gateway=True, llm_gateway_max_tokens=0).sentence
    assert "llm-gateway-unknown-cost-usd" in refusal(base, llm_gateway=True, llm_gateway_unknown_cost_usd=0).sentence


def test_the_key_route_is_the_default_tls_one_unless_a_flag_names_another(base):
    """No flag: the run's gateway serves openrouter.ai (no container holds the key). --key-in-agent
    is the seed's path, --llm-gateway the OpenAI-compatible face; a reference engine has no key."""
    free = {k: v for k, v in base.items() if k != "campaign_file"}
    assert build(base).provider_tls and build(base).served_by_gateway
    assert not build(base, key_in_agent=True).provider_tls and not build(base, key_in_agent=True).served_by_gateway
    assert not build(base, llm_gateway=True).provider_tls and build(base, llm_gateway=True).served_by_gateway
    compatible = build(
        base, openai_compatible_base_url="http://10.0.0.9:8000/v1", credential_setting="OPENAI_COMPATIBLE_API_KEY"
    )
    assert not compatible.provider_tls and not compatible.served_by_gateway
    assert not build(free, engine="oracle").provider_tls
    assert "not both" in refusal(base, key_in_agent=True, llm_gateway=True).sentence
    assert "uses none" in refusal(free, engine="nop", key_in_agent=True).sentence
    # The test beds' hidden flags: each only where it means something, the stand-in's two together.
    assert build(base, provider_upstream_url="http://127.0.0.1:9/api/v1").provider.provider_upstream_url
    assert (
        "default OpenRouter route"
        in refusal(base, key_in_agent=True, provider_upstream_url="http://127.0.0.1:9/api/v1").sentence
    )
    assert "go together" in refusal(base, key_in_agent=True, provider_standin_address="10.0.0.1").sentence
    assert (
        "only meaningful with --key-in-agent"
        in refusal(base, provider_standin_address="10.0.0.1", provider_standin_bundle="/tmp/b.pem").sentence
    )


def test_gateway_run_serves_the_provider_host_by_default(base, tmp_path):
    """open_for_run on the default route: the engine's config is untouched (the OpenRouter route), the
    gateway answers TLS as openrouter.ai on port 443 of the host address, the shim gets the route,
    and the TLS key is deleted with the secret. A port it cannot bind is one sentence naming
    --key-in-agent (here: 443 on an address this host does not have)."""
    import os

    from cowork_adapter.gateway import run as gateway_run

    run_root = tmp_path / "storage" / "run-1"
    run_root.mkdir(parents=True)
    cfg = build(base, llm_gateway_host="127.0.0.1", model="vendor/model-x")
    if os.geteuid() != 0:
        pytest.fail("binding port 443 needs root: the project's tests run as root (docs/testing.md)")
    gateway, engine_cfg, record, provider = gateway_run.open_for_run(cfg, "sk-test", "c" * 32, run_root)
    try:
        assert engine_cfg is cfg and gateway.port == 443 and gateway.openrouter
        assert record.route.value == "provider_tls" and record.listen_address == "127.0.0.1:443"
        assert record.container_url == "https://openrouter.ai/api/v1" == record.upstream_url
        assert (provider.host, provider.address) == ("openrouter.ai", "127.0.0.1") and provider.ca_bundle.is_file()
        assert (run_root / "private" / "provider-leaf.key").stat().st_mode & 0o777 == 0o600
        assert gateway.policy.provider_keys and gateway.policy.function_tools_only
        assert any("seed's OpenRouter route" in d for d in record.disclosures)
    finally:
        gateway_run.close_for_run(gateway, record, run_root)
    assert not (run_root / "private" / "provider-leaf.key").exists()
    other = tmp_path / "storage" / "run-2"
    other.mkdir()
    with pytest.raises(Refusal) as info:
        gateway_run.open_for_run(build(base, run_root=other, llm_gateway_host="192.0.2.1"), "sk-test", "d" * 32, other)
    assert info.value.stage == "provider_tls" and "--key-in-agent" in info.value.sentence
    assert "\n" not in info.value.sentence
    assert (
        not (other / "private" / "provider-leaf.key").exists() and not (other / "private" / "gateway.secret").exists()
    )


def test_gateway_run_points_every_engine_at_the_gateway(base, tmp_path, monkeypatch):
    """open_for_run: the engines get the gateway's URL and the compatible key setting; the gateway
    forwards to the endpoint the run would otherwise have used."""
    from cowork_adapter.gateway import run as gateway_run
    from cowork_adapter.schemas.run_config import build_run_config

    run_root = tmp_path / "storage" / "run-1"
    run_root.mkdir(parents=True)
    cfg = build(base, llm_gateway=True, llm_gateway_host="127.0.0.1", model="vendor/model-x")
    gateway, engine_cfg, record, provider = gateway_run.open_for_run(cfg, "sk-test", "c" * 32, run_root)
    try:
        url = f"http://127.0.0.1:{gateway.port}/v1"
        assert record.container_url == url and record.upstream_url == "https://openrouter.ai/api/v1"
        assert record.routed_model == "openai-compatible::vendor/model-x"
        settings = build_run_config(engine_cfg).settings
        assert settings["OPENAI_COMPATIBLE_BASE_URL"] == url and settings["OUROBOROS_MODEL"] == record.routed_model
        assert build_run_config(engine_cfg).credential_setting == "OPENAI_COMPATIBLE_API_KEY"
        assert (run_root / "private" / "gateway.secret").stat().st_mode & 0o777 == 0o600
    finally:
        gateway_run.close_for_run(gateway, record, run_root)
    assert not (run_root / "private" / "gateway.secret").exists() and record.requests == 0
    # The gateway was given the run's limits, and the record says how it shaped and counted.
    assert gateway.policy.model == "vendor/model-x" and gateway.per_task_usd == cfg.agent.per_task_cost_usd
    assert gateway.peers is not None and gateway.peers.run_label == "c" * 32
    assert record.unknown_cost_price_usd == cfg.provider.llm_gateway_unknown_cost_usd and record.assumed_usd == 0
    assert any("pinned the model" in d for d in record.disclosures)
