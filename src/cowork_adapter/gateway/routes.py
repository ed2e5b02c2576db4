"""What the model gateway serves on each of its two faces, pure.

Every path of both faces needs the task's token (server.py checks it before anything else is read):
a path answered without one let any run peer hold the gateway's connections with no task to count
them against.

- The OpenAI-compatible face (`--llm-gateway`): `<url>/v1/chat/completions` and `<url>/v1/models`
  (the `/v1` optional).
- The provider's own face (the default route, gateway/tls.py): the gateway answers as
  `https://openrouter.ai`, so it serves the paths of OpenRouter's API that Ouroboros 6.97.2 calls
  on its OpenRouter route, and only those:
  - `POST /api/v1/chat/completions`: the model calls (token; shaped by gateway/policy.py; billed);
  - `GET /api/v1/models`: pricing and capability look-ups. Ouroboros makes them WITHOUT a
    credential (ouroboros/llm.py fetch_openrouter_pricing, _fetch_openrouter_capabilities): those
    are refused (401) like every token-less request, and Ouroboros goes on without OpenRouter's
    prices (its own cost figures are unknown; the gateway's are the provider's);
  - `GET /api/v1/generation?id=...`: the cost of a generation whose answer carried none;
  - `GET /api/v1/auth/key` and `GET /api/v1/key`: the key's usage figures, which the
    seed's supervisor reads (supervisor/state.py check_openrouter_ground_truth).
  Nothing else is forwarded: an agent holding its token reaches no other paid endpoint of the key.
"""

from __future__ import annotations

from dataclasses import dataclass

OPENROUTER_PREFIX = "/api/v1"


@dataclass(frozen=True)
class Route:
    """One path the gateway forwards: its method, whether the provider may bill it, whether its body is
    a chat body to shape, and whether the query string goes along."""

    path: str
    method: str
    billed: bool = False
    chat: bool = False
    query: bool = False


CHAT = Route("/chat/completions", "POST", billed=True, chat=True)
COMPATIBLE_ROUTES = {r.path: r for r in (CHAT, Route("/models", "GET"))}
OPENROUTER_ROUTES = {
    r.path: r
    for r in (
        CHAT,
        Route("/models", "GET"),
        Route("/generation", "GET", query=True),
        Route("/auth/key", "GET"),
        Route("/key", "GET"),
    )
}


def route_for(raw_path: str, *, openrouter: bool) -> tuple[Route, str] | None:
    """(the route, the path and query to append to the upstream base URL), or None (not served)."""
    path, sep, query = raw_path.partition("?")
    path = path.rstrip("/")
    if openrouter:
        if not path.startswith(OPENROUTER_PREFIX + "/"):
            return None
        route = OPENROUTER_ROUTES.get(path[len(OPENROUTER_PREFIX) :])
    else:
        route = COMPATIBLE_ROUTES.get(path[3:] if path.startswith("/v1/") else path)
    if route is None:
        return None
    return route, route.path + (sep + query if route.query and query else "")
