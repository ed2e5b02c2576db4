"""What the provider says one answer cost, after the fact (OpenRouter's generation stats).

Why: a stream dropped or cut before its usage chunk carries no cost, and counting it at the run's
assumed figure ($5 by default) made a few dropped streams look like a task's whole budget. Every
OpenRouter answer names its generation (`"id": "gen-..."` in the first chunk); `GET /generation?id=`
returns its `total_cost` a moment after it ends. Asked a few times, bounded in time; None when the
upstream has no such look-up (another OpenAI-compatible endpoint answers 404) or never posts it.
"""

from __future__ import annotations

import threading

import httpx

from .reserve import Price, price_from_models

# How long to wait before each try (OpenRouter posts the stats a moment after the answer ends).
TRIES_SEC = (0.5, 1.0, 2.0)
TIMEOUT_SEC = 5.0


def generation_cost(
    client: httpx.Client,
    upstream: str,
    key: str,
    generation: str,
    closing: threading.Event,
    tries: tuple[float, ...] = TRIES_SEC,
) -> float | None:
    for pause in tries:
        if closing.wait(pause):
            return None
        try:
            answer = client.get(
                upstream + "/generation",
                params={"id": generation},
                headers={"Authorization": f"Bearer {key}"},
                timeout=TIMEOUT_SEC,
            )
        except httpx.HTTPError:
            continue
        if answer.status_code in (400, 401, 403, 404, 405):  # no such look-up there: do not ask again
            return None
        try:
            data = answer.json().get("data") if answer.status_code == 200 else None
        except (ValueError, AttributeError, RecursionError):
            data = None
        cost = data.get("total_cost") if isinstance(data, dict) else None
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and 0 <= cost < float("inf"):
            return float(cost)
    return None


def model_price(upstream: str, key: str, model: str, timeout_sec: float = 10.0) -> Price | None:
    """The run's model price from the upstream's model list (OpenRouter's carries `pricing`), or None
    (another endpoint, no such model, unreachable): each request's worst cost is then the run's
    assumed figure. Read once when the gateway opens."""
    try:
        with httpx.Client(timeout=timeout_sec, follow_redirects=False) as client:
            answer = client.get(upstream.rstrip("/") + "/models", headers={"Authorization": f"Bearer {key}"})
        if answer.status_code != 200 or len(answer.content) > 64 * 1024 * 1024:
            return None
        return price_from_models(answer.json(), model)
    except (httpx.HTTPError, ValueError, RecursionError):
        return None
