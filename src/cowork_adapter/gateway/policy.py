"""What the model gateway lets through to the provider: the shape of a chat request, pure.

The agent under test holds its task's token and can send the gateway any body with curl. Every
field that could make one request cost more than the run's own engine would is pinned, capped
or refused here, before anything is forwarded:

- `model` must be the run's model (another model, or an OpenRouter variant such as `:online`,
  has another price);
- `n` must be absent or 1 (n answers are n times the output);
- `max_tokens` / `max_completion_tokens` are clamped to the run's cap, and `max_tokens` is set to
  the cap when neither is given (the output of one request, and so its worst price, is bounded;
  clamped rather than refused so an engine asking for more still runs, on a shorter leash);
- OpenRouter's routing and paid extras are refused: `models` (fallbacks to other, maybe dearer,
  models), `route`, `provider` (its `order`, `only`, `ignore`, `sort`, `allow_fallbacks`,
  `max_price`, `quantizations` pick another endpoint at another price), `plugins` (web search
  and file parsers are billed per use) and `web_search_options` (billed per search);
- a stream is made to report its usage (`stream_options.include_usage = true`).

On the provider's own route (the default; gateway/tls.py) the policy also lets through what
Ouroboros 6.97.2 sends there by itself and cannot raise a price: a `provider` object holding only
`require_parameters` and `allow_fallbacks` (its pins for Anthropic models and for replayed
reasoning; both narrow OpenRouter's choice of endpoint, or restate its default), and refuses tools
other than functions (`openrouter:web_search` is billed per search).

`shape(body, policy)` returns the body to forward, or the sentence the request is refused with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..defaults import DEFAULT_GATEWAY_MAX_TOKENS as DEFAULT_MAX_TOKENS
from ..defaults import DEFAULT_GATEWAY_UNKNOWN_COST_USD

DEFAULT_UNKNOWN_COST_USD = DEFAULT_GATEWAY_UNKNOWN_COST_USD  # gateway/server.py reads it here

# Fields refused outright, with why (the sentence names the field and the reason).
REFUSED_FIELDS = {
    "models": "OpenRouter model fallbacks may route to another model at another price",
    "route": "OpenRouter routing may route to another model at another price",
    "provider": "OpenRouter provider routing may pick another endpoint at another price",
    "plugins": "OpenRouter plugins (web search, file parsing) are billed per use",
    "web_search_options": "web search is billed per search",
}
TOKEN_CAP_FIELDS = ("max_tokens", "max_completion_tokens")


@dataclass(frozen=True)
class Policy:
    """The run's limits on a request: its model (None: any, used only by tests of other points)
    and the most output tokens one request may ask for."""

    model: str | None
    max_tokens: int = DEFAULT_MAX_TOKENS
    # The provider's own route: `provider` keys let through (booleans only), and whether tools must
    # all be functions. Empty / False on the OpenAI-compatible route (--llm-gateway), as before.
    provider_keys: frozenset[str] = frozenset()
    function_tools_only: bool = False


# What the provider's own route lets through in `provider` (see the module's docstring).
SEED_PROVIDER_KEYS = frozenset({"require_parameters", "allow_fallbacks"})


def pinned_model(run_model: str) -> str:
    """The model id the engines send the gateway: the run's model without a provider route prefix
    (`openai-compatible::m` is sent as `m`)."""
    return run_model.split("::", 1)[1] if "::" in run_model else run_model


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _benign_provider(value: object, policy: Policy) -> bool:
    return (
        bool(policy.provider_keys)
        and isinstance(value, dict)
        and set(value) <= policy.provider_keys
        and all(isinstance(v, bool) for v in value.values())
    )


def shape(body: dict[str, Any], policy: Policy) -> dict[str, Any] | str:
    """The body to forward (a new dict), or why it is refused (one sentence)."""
    for name, why in REFUSED_FIELDS.items():
        if name in body and not (name == "provider" and _benign_provider(body[name], policy)):
            return f"the field {name!r} is refused: {why}"
    if (
        policy.function_tools_only
        and isinstance(body.get("tools"), list)
        and any(not isinstance(t, dict) or t.get("type") != "function" for t in body["tools"])
    ):
        return "only function tools are forwarded: provider-side tools (web search) are billed per use"
    model = body.get("model")
    if not isinstance(model, str):
        return "the request names no model"
    if policy.model is not None and model != policy.model:
        return f"the model is pinned to the run's {policy.model!r}; {model[:80]!r} is refused"
    if body.get("n") is not None and not (_whole(body["n"]) and body["n"] == 1):
        return "n must be 1 (or absent): several answers are several times the price"
    if "stream" in body and not isinstance(body["stream"], bool):
        return "stream must be true or false"
    out = dict(body)
    if "n" in out and out["n"] is None:
        del out["n"]  # a null n is the provider's default of one answer: forwarded as absent, never as null
    capped = False
    for name in TOKEN_CAP_FIELDS:
        if name not in body or body[name] is None:
            continue
        if not _whole(body[name]) or body[name] < 1:
            return f"{name} must be a positive whole number"
        out[name] = min(body[name], policy.max_tokens)
        capped = True
    if not capped:
        out["max_tokens"] = policy.max_tokens
    if out.get("stream") is True:
        options = body.get("stream_options")
        if options is not None and not isinstance(options, dict):
            return "stream_options must be an object"
        out["stream_options"] = {**(options or {}), "include_usage": True}
    return out
