"""Why the gateway answered a request itself, and how much of a client's text its log rows keep.

Shared by the gateway (server.py: the fence, the peer check, the log) and its request handler
(handler.py), which both refuse and both write rows; server.py re-exports every name.
"""

from __future__ import annotations

# A chat body is JSON text; 16 MiB holds a long context with images. Bounded memory: this times
# the requests in flight (gateway/shares.py), and only the run's containers with a valid token get a body read at all.
MAX_BODY_BYTES = 16 * 1024 * 1024
# Log rows: client-provided text is cut to these lengths (rows of requests without a valid token stop
# after server.MAX_ANONYMOUS_ROWS, then are only counted).
PATH_CHARS = 200
TEXT_CHARS = 120
# Why the gateway answered a request itself (GatewayRequest.refused).
REFUSED_AUTH = "auth"
REFUSED_REVOKED = "revoked"
REFUSED_PEER = "peer"
REFUSED_FENCED = "fenced"
REFUSED_TASK_BUDGET = "task_budget"
REFUSED_ROUTE = "route"
REFUSED_BODY = "body"
REFUSED_SHAPE = "shape"
FENCE_RUN_STOPPING = "run_stopping"
FENCE_BUDGET = "gateway_budget"


def bounded(text: str | None, limit: int) -> str | None:
    """Client-provided text as a log row may hold it: at most `limit` characters, marked when cut."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"...[{len(text) - limit} more]"


def peer_address(client_address) -> str:
    """The peer's address as the log and the peer check name it."""
    return str(client_address[0]).removeprefix("::ffff:")  # an IPv4 peer on a dual-stack socket
