"""The opt-in model gateway (`--llm-gateway`): the provider key stays in the launcher's memory.

An OpenAI-compatible HTTP endpoint served by a thread of the launcher for the run's lifetime. Agent
containers call it with a per-task token instead of the key; it forwards `/chat/completions`
(streamed or not) and `/models` to the provider with the real key, unchanged apart from the
credential, and passes the provider's status and body back. Why a thread and not a process: it
dies with the launcher by construction, so nothing can spend without a living supervisor.

Tokens: `cwg1.<task>.<hmac>`, the HMAC-SHA256 under a per-run random secret of the run label and the
runner's task id. The shim mints them when it creates `agent-<task>` (it reads the secret from a
0600 file under <run_root>/private/, never mounted into a container); the gateway holds the same
secret and recomputes. A token names one task of one run, and is useless once this gateway is gone
(no other process accepts it, and the key never left this process).

The fence is per request: once `fence(reason)` is called (the run is stopping, the stop file
exists, or the gateway's own sum of the provider's cost figures reaches the run's allowance) every
new request is refused with a 403 and a sentence, and every stream in flight is cut (its upstream
response is closed). Every request is one row of <run_root>/gateway/requests.jsonl.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from .schemas.gateway import GATEWAY_DIR, REQUESTS_NAME, GatewayRequest, encode_row

TOKEN_PREFIX = "cwg1"
TOKEN_CONTEXT = b"cowork-gateway-token\0"
SECRET_NAME = "gateway.secret"
# The stop file is looked at this often: a stop written by anyone fences within this bound.
STOP_POLL_SEC = 0.1
MAX_BODY_BYTES = 64 * 1024 * 1024
# Upstream timeouts: a model may think for minutes before its first byte; connecting is quick.
UPSTREAM_TIMEOUT = httpx.Timeout(connect=15.0, read=600.0, write=60.0, pool=30.0)
# Why the gateway answered a request itself (GatewayRequest.refused).
REFUSED_AUTH = "auth"
REFUSED_FENCED = "fenced"
REFUSED_ROUTE = "route"
REFUSED_BODY = "body"
FENCE_RUN_STOPPING = "run_stopping"
FENCE_BUDGET = "gateway_budget"


def token_mac(secret: bytes, run_label: str, task: str) -> str:
    message = TOKEN_CONTEXT + run_label.encode() + b"\0" + task.encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def mint_token(secret: bytes, run_label: str, task: str) -> str:
    """The token of `task` in run `run_label` (the shim mints the same one; see custody/shim.py)."""
    return f"{TOKEN_PREFIX}.{task}.{token_mac(secret, run_label, task)}"


def token_task(secret: bytes, run_label: str, token: str) -> str | None:
    """The task a token was minted for in this run, or None (malformed, other run, other task)."""
    prefix, _, rest = token.partition(".")
    task, _, mac = rest.rpartition(".")
    if prefix != TOKEN_PREFIX or not task or not mac:
        return None
    return task if hmac.compare_digest(mac, token_mac(secret, run_label, task)) else None


def new_secret(private_dir: Path) -> tuple[bytes, Path]:
    """A fresh per-run secret, and the 0600 file the shim reads it from (created, never replaced)."""
    secret = os.urandom(32)
    private_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = private_dir / SECRET_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secret.hex().encode())
    finally:
        os.close(fd)
    return secret, path


def usage_of(obj: object) -> tuple[int | None, int | None, float | None]:
    """(prompt tokens, completion tokens, cost) from a response or chunk's `usage`, when present."""
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if not isinstance(usage, dict):
        return None, None, None

    def number(name: str, kind):
        value = usage.get(name)
        return kind(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return number("prompt_tokens", int), number("completion_tokens", int), number("cost", float)


class StreamUsage:
    """Follows a server-sent event stream as it passes and keeps the last `usage` it carried."""

    def __init__(self) -> None:
        self._pending = b""
        self.usage: tuple[int | None, int | None, float | None] = (None, None, None)

    def feed(self, data: bytes) -> None:
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            line = line.strip()
            if not line.startswith(b"data:") or b'"usage"' not in line:
                continue
            try:
                found = usage_of(json.loads(line[5:].strip()))
            except ValueError:
                continue
            if found != (None, None, None):
                self.usage = found


class Gateway:
    """The gateway on `bind_host:port` (0 = any free port). `start()` returns self; `close()` ends it.

    `allowance_usd` is what the provider's cost figures may add up to before the gateway fences
    (None until the launcher has admitted the run: every request is refused until then).
    `on_fence(reason)` is called once, from the thread that fenced (the launcher stops the run).
    """

    def __init__(self, *, upstream: str, key: str, run_label: str, secret: bytes, run_root: Path,
                 stop_file: Path, bind_host: str, port: int = 0,
                 on_fence: Callable[[str], None] | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self._key = key
        self.run_label = run_label
        self._secret = secret
        self.stop_file = stop_file
        self.on_fence = on_fence
        self.allowance_usd: float | None = None
        self.spent_usd = 0.0
        self.fence_reason: str | None = None
        self._fenced = threading.Event()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._active: set[httpx.Response] = set()
        log_dir = run_root / GATEWAY_DIR
        log_dir.mkdir(mode=0o700, exist_ok=True)
        self._log_fd = os.open(log_dir / REQUESTS_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._client = httpx.Client(timeout=UPSTREAM_TIMEOUT, follow_redirects=False)
        self._server = ThreadingHTTPServer((bind_host, port), _handler(self))
        self._server.daemon_threads = True
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url_for(self, host: str) -> str:
        """The base URL (with /v1) under which containers reach this gateway at `host`."""
        return f"http://{host}:{self.port}/v1"

    def start(self) -> "Gateway":
        for target, name in ((self._server.serve_forever, "llm-gateway"), (self._watch_stop, "llm-gateway-stop")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def close(self) -> None:
        """Fence, stop serving, release the port and the log. Idempotent."""
        if self._closing.is_set():
            return
        self.fence(FENCE_RUN_STOPPING, notify=False)
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._client.close()
        with self._lock:
            os.close(self._log_fd)
            self._log_fd = -1

    # ------------------------------------------------------------ money and the fence

    def set_allowance(self, usd: float) -> None:
        with self._lock:
            self.allowance_usd = max(0.0, float(usd))
        self._check_budget()

    def fence(self, reason: str, *, notify: bool = True) -> None:
        """Refuse every new request from now on and cut every stream in flight. The first reason stays."""
        with self._lock:
            first = self.fence_reason is None
            if first:
                self.fence_reason = reason
            self._fenced.set()
            active = list(self._active)
        for response in active:  # closing the upstream response ends the relay loop reading it
            try:
                response.close()
            except Exception:  # noqa: BLE001 - a response already closed by its own thread
                pass
        if first and notify and self.on_fence is not None:
            self.on_fence(reason)

    @property
    def fenced(self) -> bool:
        return self._fenced.is_set()

    def _add_cost(self, cost: float | None) -> None:
        if cost is not None:
            with self._lock:
                self.spent_usd += cost
            self._check_budget()

    def _check_budget(self) -> None:
        with self._lock:
            crossed = self.allowance_usd is not None and self.spent_usd >= self.allowance_usd > 0
            crossed = crossed or self.allowance_usd == 0.0
        if crossed and not self.fenced:
            self.fence(FENCE_BUDGET)

    def _watch_stop(self) -> None:
        while not self._closing.wait(STOP_POLL_SEC):
            if not self.fenced and os.path.lexists(self.stop_file):
                self.fence(FENCE_RUN_STOPPING)

    def refusal(self) -> str | None:
        """The sentence a new request gets now, or None to forward it."""
        if self.fenced:
            if self.fence_reason == FENCE_BUDGET:
                return (f"the run's model budget is spent: the gateway's sum of provider costs "
                        f"${self.spent_usd:.4f} reached the run's allowance ${self.allowance_usd or 0:.4f}")
            return f"the run is stopping ({self.fence_reason}); no new model requests are forwarded"
        if self.allowance_usd is None:
            return "the run is not admitted yet; no model requests are forwarded"
        return None

    # ------------------------------------------------------------ the request log

    def record(self, row: GatewayRequest) -> None:
        data = encode_row(row)
        with self._lock:
            if self._log_fd >= 0:
                os.write(self._log_fd, data)  # one append of one line: rows never interleave

    # ------------------------------------------------------------ forwarding

    def authorize(self, header: str | None) -> str | None:
        if not header or not header.lower().startswith("bearer "):
            return None
        return token_task(self._secret, self.run_label, header[7:].strip())

    def open_upstream(self, method: str, path: str, body: bytes | None, passed: dict[str, str]) -> httpx.Response:
        """The provider's response, opened as a stream. The client's own headers go along (its SDK's
        names, OpenRouter's attribution headers), except the credential and what framing sets."""
        headers = {**passed, "Authorization": f"Bearer {self._key}", "Accept-Encoding": "identity"}
        request = self._client.build_request(method, self.upstream + path, content=body, headers=headers)
        response = self._client.send(request, stream=True)
        with self._lock:
            self._active.add(response)
            fenced = self._fenced.is_set()
        if fenced:  # fenced while connecting: the fence's sweep may have missed this one
            response.close()
        return response

    def release(self, response: httpx.Response) -> None:
        with self._lock:
            self._active.discard(response)
        response.close()


# Hop-by-hop and framing headers the gateway sets itself instead of passing on.
_NOT_PASSED = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding",
                         "proxy-authenticate", "proxy-authorization", "te", "trailers", "upgrade", "set-cookie"})


# What reading a response the fence closed (or the provider broke off) may raise.
_READ_ERRORS = (httpx.HTTPError, httpx.StreamError, ValueError, AttributeError, OSError)
# Request headers never forwarded: the credential (replaced by the key), the address, framing and hop-by-hop.
_NOT_FORWARDED = _NOT_PASSED | {"authorization", "host", "accept-encoding", "cookie", "x-api-key"}


def _handler(gateway: Gateway):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body are two writes: without this, Nagle's algorithm and the client's delayed
        # ACK hold the body back ~40 ms on every keep-alive answer (bench_gateway.py measured it).
        disable_nagle_algorithm = True

        def log_message(self, format, *args):  # the request log is the record
            return

        def _json(self, status: int, message: str, kind: str) -> None:
            data = json.dumps({"error": {"message": f"cowork-adapter gateway: {message}", "type": kind,
                                         "code": status}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self) -> str | None:
            path = self.path.split("?", 1)[0].rstrip("/")
            path = path[3:] if path.startswith("/v1/") else path
            return path if path in ("/models", "/chat/completions") else None

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def _serve(self, method: str) -> None:
            started = time.time()
            clock = time.monotonic()
            task = gateway.authorize(self.headers.get("Authorization"))
            row = GatewayRequest(at=started, task=task, path=self.path.split("?", 1)[0], status=0, latency_ms=0.0)
            self._clock, self._settled = clock, False
            try:
                self._forward(method, task, row)
            except (BrokenPipeError, ConnectionResetError) as exc:
                row.error = row.error or f"client gone: {type(exc).__name__}"
                self.close_connection = True
            finally:
                self._settle(row)

        def _settle(self, row: GatewayRequest) -> None:
            """Record the request and count its cost, once. A plain answer is settled before its body is
            sent, so the client cannot send its next request before a crossing has fenced the gateway."""
            if self._settled:
                return
            self._settled = True
            row.latency_ms = round((time.monotonic() - self._clock) * 1000, 3)
            gateway.record(row)
            gateway._add_cost(row.cost_usd)

        def _refuse(self, row: GatewayRequest, status: int, why: str, message: str, kind: str) -> None:
            row.status, row.refused = status, why
            self._settle(row)
            self._json(status, message, kind)

        def _forward(self, method: str, task: str | None, row: GatewayRequest) -> None:
            route = self._route()
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self.close_connection = True
                return self._refuse(row, 413, REFUSED_BODY, "request body too large", "invalid_request_error")
            body = self.rfile.read(length) if length else b""
            if task is None:
                return self._refuse(row, 401, REFUSED_AUTH, "the token is not valid for this run and task",
                                    "authentication_error")
            wanted = "GET" if route == "/models" else "POST"
            if route is None or method != wanted:
                return self._refuse(row, 404, REFUSED_ROUTE, f"no route {method} {self.path}", "not_found")
            if route == "/chat/completions":
                try:
                    parsed = json.loads(body or b"{}")
                except ValueError:
                    parsed = None
                if not isinstance(parsed, dict):
                    return self._refuse(row, 400, REFUSED_BODY, "the body is not a JSON object",
                                        "invalid_request_error")
                row.model = parsed.get("model") if isinstance(parsed.get("model"), str) else None
                row.stream = parsed.get("stream") is True
            refusal = gateway.refusal()
            if refusal is not None:
                return self._refuse(row, 403, REFUSED_FENCED, refusal, "gateway_fenced")
            try:
                passed = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_FORWARDED}
                response = gateway.open_upstream(method, route, body if method == "POST" else None, passed)
            except httpx.HTTPError as exc:
                row.error = f"upstream: {type(exc).__name__}"
                return self._refuse(row, 502, None, f"the provider could not be reached ({type(exc).__name__})",
                                    "upstream_error")
            try:
                self._relay(response, row)
            finally:
                gateway.release(response)

        def _relay(self, response: httpx.Response, row: GatewayRequest) -> None:
            streamed = response.headers.get("content-type", "").startswith("text/event-stream")
            if not streamed:  # read whole first: a failed read is then still answered with an error
                try:
                    data = response.read()
                except _READ_ERRORS as exc:  # cut by the fence, or the provider went away
                    row.cut, row.error = gateway.fenced, f"upstream: {type(exc).__name__}"
                    if gateway.fenced:
                        return self._refuse(row, 403, REFUSED_FENCED, gateway.refusal() or "fenced", "gateway_fenced")
                    return self._refuse(row, 502, None, f"the provider's answer broke off ({type(exc).__name__})",
                                        "upstream_error")
                row.status = response.status_code
                try:
                    row.prompt_tokens, row.completion_tokens, row.cost_usd = usage_of(json.loads(data))
                except ValueError:
                    pass
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
                for chunk in response.iter_raw():
                    if gateway.fenced:
                        row.cut = True
                        break
                    usage.feed(chunk)
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except _READ_ERRORS as exc:  # the fence closed the upstream response, or the provider broke off
                row.cut = gateway.fenced
                row.error = f"upstream: {type(exc).__name__}"
            row.prompt_tokens, row.completion_tokens, row.cost_usd = usage.usage

        def _head(self, response: httpx.Response) -> None:
            self.send_response(response.status_code)
            for name, value in response.headers.items():
                if name.lower() not in _NOT_PASSED:
                    self.send_header(name, value)

    return Handler
