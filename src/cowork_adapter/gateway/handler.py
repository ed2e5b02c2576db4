"""The gateway's request handler: one client request, checked, shaped, forwarded and relayed.

What it checks, in order, and why: server.py's docstring (the token before any body is read, the task's
fair share, one exact Content-Length within the deadline, the shape, the worst cost reserved). A
refusal is answered with a JSON error and a log row, then ends the handling (_Refused). Split from
server.py, which owns the state (fence, tokens, shares, the log) this handler reads and updates.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, NoReturn

import httpx

from ..schemas.gateway import GatewayRequest
from . import shares as sh
from .causes import (
    MAX_BODY_BYTES,
    PATH_CHARS,
    REFUSED_AUTH,
    REFUSED_BODY,
    REFUSED_FENCED,
    REFUSED_REVOKED,
    REFUSED_ROUTE,
    REFUSED_SHAPE,
    REFUSED_TASK_BUDGET,
    TEXT_CHARS,
    bounded,
    peer_address,
)
from .policy import shape
from .reserve import output_cap, worst_cost
from .routes import route_for
from .tokens import StreamUsage, usage_of

if TYPE_CHECKING:
    from .server import Gateway

# Hop-by-hop and framing headers the gateway sets itself instead of passing on.
_NOT_PASSED = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "content-encoding",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "upgrade",
        "set-cookie",
    }
)


# What reading a response the fence closed (or the provider broke off) may raise.
_READ_ERRORS = (httpx.HTTPError, httpx.StreamError, ValueError, AttributeError, OSError)
# Request headers never forwarded: the credential (replaced by the key), the address, framing and hop-by-hop.
_NOT_FORWARDED = _NOT_PASSED | {"authorization", "host", "accept-encoding", "cookie", "x-api-key"}


class _Refused(Exception):
    """Raised inside a handler once the refusal was answered and logged."""


def make_handler(gateway: Gateway) -> type[BaseHTTPRequestHandler]:
    """The request handler class of `gateway`'s server (a class per gateway: it closes over it)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body are two writes: without this, Nagle's algorithm and the client's delayed
        # ACK hold the body back ~40 ms on every keep-alive answer (bench_gateway.py measured it).
        disable_nagle_algorithm = True
        timeout = gateway.socket_timeout_sec  # every read and write on the client's socket

        def log_message(self, format, *args):  # the request log is the record
            return

        def setup(self):
            super().setup()  # sets the socket timeout first: a stalled handshake ends with it
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.do_handshake()

        def handle_one_request(self):
            # The request must arrive whole (or the idle keep-alive connection gets its next one)
            # before the deadline; the body reader clears it, the watcher cuts a late one.
            gateway._deadlines[self.connection] = time.monotonic() + gateway.request_deadline_sec
            try:
                super().handle_one_request()
            finally:
                gateway._deadlines.pop(self.connection, None)

        def _json(self, status: int, message: str, kind: str) -> None:
            data = json.dumps(
                {"error": {"message": f"cowork-adapter gateway: {message}", "type": kind, "code": status}}
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def _serve(self, method: str) -> None:
            started = time.time()
            clock = time.monotonic()
            row = GatewayRequest(
                at=started,
                task=None,
                path=self.path.split("?", 1)[0],
                status=0,
                latency_ms=0.0,
                peer=peer_address(self.client_address),
            )
            self._clock, self._settled = clock, False
            self._reserved: float | None = None  # the worst cost this request holds (gateway/reserve.py)
            self._busy: str | None = None  # the task whose in-flight share it takes
            try:
                self._forward(method, row)
            except _Refused:
                pass
            except (OSError, ValueError) as exc:  # the client went away, or its socket timed out
                row.error = row.error or f"client gone: {type(exc).__name__}"
                self.close_connection = True
            finally:
                self._settle(row)
                if self._busy is not None:
                    gateway.shares.end(self._busy)

        def _settle(self, row: GatewayRequest) -> None:
            """Record the request and count its cost, once. A plain answer is settled before its body is
            sent, so the client cannot send its next request before a crossing has fenced the gateway."""
            if self._settled:
                return
            self._settled = True
            row.latency_ms = round((time.monotonic() - self._clock) * 1000, 3)
            gateway.record(row)
            gateway._add_cost(row.task, row.cost_usd, row.assumed_cost_usd, self._reserved)

        def _refuse(
            self, row: GatewayRequest, status: int, why: str | None, message: str, kind: str, *, close: bool = False
        ) -> NoReturn:
            """Answer the request with an error and log it; raises _Refused to end the handling."""
            row.status, row.refused = status, why
            if close:  # the body was not read: the connection cannot carry another request
                self.close_connection = True
            self._settle(row)
            self._json(status, message, kind)
            raise _Refused

        def _forward(self, method: str, row: GatewayRequest) -> None:
            # 1. The token, before anything else is read, on every path of both faces.
            found = route_for(self.path, openrouter=gateway.openrouter)
            task = gateway.authorize(self.headers.get("Authorization"))
            row.task = task
            if task is None:
                self._refuse(
                    row,
                    401,
                    REFUSED_AUTH,
                    "the token is not valid for this run and task",
                    "authentication_error",
                    close=True,
                )
            if gateway.revoked(task):
                self._refuse(
                    row,
                    401,
                    REFUSED_REVOKED,
                    "this task's agent container was removed; its token is no longer valid",
                    "authentication_error",
                    close=True,
                )
            # 1b. The task's fair share (gateway/shares.py): its connections, then its requests in flight.
            if gateway._bound.get(self.request) != task:
                if self.request in gateway._bound or not gateway.shares.bind(task):
                    self._refuse(
                        row,
                        429,
                        sh.TASK_CONNECTIONS,
                        "this task holds its share of the gateway's connections; close some first",
                        "rate_limit_error",
                        close=True,
                    )
                gateway._bound[self.request] = task
            if not gateway.shares.begin(task):
                self._refuse(
                    row,
                    429,
                    sh.TASK_BUSY,
                    "this task has its share of requests in flight "
                    f"({gateway.shares.limits.per_task_in_flight}); wait for one to end",
                    "rate_limit_error",
                    close=True,
                )
            self._busy = task
            if found is None or method != found[0].method:
                self._refuse(
                    row,
                    404,
                    REFUSED_ROUTE,
                    f"no route {method} {bounded(self.path, PATH_CHARS)}",
                    "not_found",
                    close=True,
                )
            route, upstream_path = found
            # 2. The body: its exact length first, then a bounded read within the deadline.
            body = self._read_body(method, row)
            if not route.chat:
                return self._send_upstream(method, upstream_path, None, row, billed=route.billed, worst=0.0)
            # 3. The shape: model, n, output tokens, routing, stream usage (gateway/policy.py).
            try:
                parsed = json.loads(body or b"{}")
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):
                self._refuse(row, 400, REFUSED_BODY, "the body is not a JSON object", "invalid_request_error")
            row.model = parsed.get("model") if isinstance(parsed.get("model"), str) else None
            row.stream = parsed.get("stream") is True
            shaped = shape(parsed, gateway.policy)
            if isinstance(shaped, str):
                self._refuse(row, 400, REFUSED_SHAPE, shaped, "invalid_request_error")
            # A body the policy left as it was goes upstream byte for byte, as the engine sent it.
            row.changed = shaped != parsed
            forwarded = json.dumps(shaped).encode() if row.changed else body
            worst = worst_cost(
                len(forwarded), output_cap(shaped, gateway.policy.max_tokens), gateway.price, gateway.unknown_cost_usd
            )
            self._send_upstream(method, upstream_path, forwarded, row, billed=route.billed, worst=worst)

        def _read_body(self, method: str, row: GatewayRequest) -> bytes:
            if self.headers.get("Transfer-Encoding") is not None:
                self._refuse(
                    row,
                    411,
                    REFUSED_BODY,
                    "a Content-Length is required (no chunked bodies)",
                    "invalid_request_error",
                    close=True,
                )
            given = self.headers.get_all("Content-Length") or []
            if not given:
                if method == "POST":
                    self._refuse(
                        row, 411, REFUSED_BODY, "a Content-Length is required", "invalid_request_error", close=True
                    )
                gateway._deadlines.pop(self.connection, None)  # read whole: the provider's time is not the client's
                return b""
            raw = given[0].strip()
            if len(given) > 1 or not (raw.isascii() and raw.isdigit()):
                self._refuse(
                    row,
                    400,
                    REFUSED_BODY,
                    "the Content-Length is not one whole number",
                    "invalid_request_error",
                    close=True,
                )
            length = int(raw)
            if length > MAX_BODY_BYTES:
                self._refuse(
                    row,
                    413,
                    REFUSED_BODY,
                    f"request body too large (at most {MAX_BODY_BYTES} bytes)",
                    "invalid_request_error",
                    close=True,
                )
            if method == "GET" and length:
                self._refuse(row, 400, REFUSED_BODY, "a GET carries no body", "invalid_request_error", close=True)
            try:  # the reaper's shutdown reads as an end, or as a reset when the client closed first
                body = self.rfile.read(length) if length else b""
            except ConnectionError:
                body = b""
            gateway._deadlines.pop(self.connection, None)
            if len(body) < length:  # cut by the deadline, or the client stopped sending
                row.error = f"body ended after {len(body)} of {length} bytes"
                self._refuse(
                    row, 400, REFUSED_BODY, "the body did not arrive in time", "invalid_request_error", close=True
                )
            return body

        def _send_upstream(
            self, method: str, path: str, body: bytes | None, row: GatewayRequest, *, billed: bool, worst: float
        ) -> None:
            refusal = gateway.refusal(row.task)
            if refusal is None and billed and row.task is not None:  # the worst answer reserved first
                if gateway.limits.reserve(row.task, worst):
                    self._reserved = worst
                else:
                    refusal = (
                        REFUSED_TASK_BUDGET,
                        f"this task's model spend ${gateway.limits.settled(row.task):.4f} "
                        f"and the answers in flight may reach the per-task limit ${gateway.per_task_usd:.4f} "
                        "(--per-task-cost-usd); wait for them to end",
                    )
            if refusal is not None:
                self._refuse(
                    row,
                    403,
                    refusal[0],
                    refusal[1],
                    "gateway_fenced" if refusal[0] == REFUSED_FENCED else "task_budget_spent",
                )
            sent = [False]
            try:
                passed = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_FORWARDED}
                response = gateway.open_upstream(method, path, body, passed, sent, with_key=row.task is not None)
            except httpx.HTTPError as exc:
                row.error = f"upstream: {type(exc).__name__}"
                self._unanswered(row, billed and sent[0])
                return
            try:
                self._relay(response, row, billed)
            finally:
                gateway.release(response)

        def _unanswered(self, row: GatewayRequest, maybe_billed: bool) -> None:
            """The provider's answer never came whole: cut by the fence, or it broke off. Once the
            request went out the provider may bill it: counted at the pessimistic price."""
            row.cut = gateway.fenced
            if maybe_billed:
                row.assumed_cost_usd = gateway.unknown_cost_usd
            if gateway.fenced:  # a request that went out counts as forwarded (refused stays None): it may be billed
                self._refuse(
                    row,
                    403,
                    None if maybe_billed else REFUSED_FENCED,
                    (gateway.refusal() or ("", "fenced"))[1],
                    "gateway_fenced",
                )
            self._refuse(row, 502, None, f"the provider's answer did not arrive ({row.error})", "upstream_error")

        def _relay(self, response: httpx.Response, row: GatewayRequest, billed: bool) -> None:
            streamed = response.headers.get("content-type", "").startswith("text/event-stream")
            if not streamed:  # read whole first: a failed read is then still answered with an error
                try:
                    data = response.read()
                except _READ_ERRORS as exc:  # cut by the fence, or the provider went away
                    row.error = f"upstream: {type(exc).__name__}"
                    return self._unanswered(row, billed)
                row.status = response.status_code
                try:
                    row.prompt_tokens, row.completion_tokens, row.cost_usd = usage_of(json.loads(data))
                except ValueError:
                    pass
                if billed and row.cost_usd is None and response.status_code < 400:
                    row.assumed_cost_usd = gateway.unknown_cost_usd
                self._settle(row)
                self._head(response)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            # A stream: relayed chunk by chunk as it arrives, ended by closing the connection.
            row.status = response.status_code
            self._head(response)
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            usage = StreamUsage()
            try:
                try:
                    for chunk in response.iter_raw():
                        if gateway.fenced:
                            row.cut = True
                            break
                        usage.feed(chunk)
                        self.wfile.write(chunk)
                        self.wfile.flush()
                    # A stream is framed by the connection's end, so a socket the fence shut down
                    # ends it like the provider would: fenced by now is cut.
                    row.cut = row.cut or gateway.fenced
                except _READ_ERRORS as exc:  # the fence shut the upstream socket, or the provider broke off
                    row.cut = gateway.fenced
                    row.error = f"upstream: {type(exc).__name__}"
            finally:  # also when the client went away mid-stream: the provider bills what it made
                row.prompt_tokens, row.completion_tokens, row.cost_usd = usage.usage
                if (
                    billed
                    and row.cost_usd is None
                    and response.status_code < 400
                    and usage.generation
                    and gateway.generation_stats
                ):
                    try:  # the stream ends for the client now (framed by the connection's end), then we ask
                        socket.socket.shutdown(self.connection, socket.SHUT_RDWR)
                    except OSError:
                        pass
                    row.cost_usd = gateway.generation_cost(usage.generation)  # the provider's own figure
                    row.error = (
                        row.error
                        if row.cost_usd is None
                        else bounded(f"{row.error or 'no usage'}; cost from generation stats", TEXT_CHARS)
                    )
                if billed and row.cost_usd is None and response.status_code < 400:
                    row.assumed_cost_usd = gateway.unknown_cost_usd

        def _head(self, response: httpx.Response) -> None:
            self.send_response(response.status_code)
            for name, value in response.headers.items():
                if name.lower() not in _NOT_PASSED:
                    self.send_header(name, value)

    return Handler
