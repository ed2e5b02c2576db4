"""The model gateway: the provider key stays in the launcher's memory.

An HTTP endpoint served by threads of the launcher for the run's lifetime, with one of two faces
(gateway/routes.py): by default the provider's own (it serves TLS as `openrouter.ai` on port 443,
gateway/tls.py, so the engine keeps the seed's OpenRouter route), or with `--llm-gateway` an
OpenAI-compatible one. Agent containers call it with a per-task token instead of the key; it
forwards the chat calls (streamed or not) and the free look-ups the route needs to the provider
with the real key, and passes the provider's status and body back. Why threads and not a process:
it dies with the launcher by construction, so nothing can spend without a living supervisor.

Tokens (gateway/tokens.py) name one task of one run; a token dies when the shim removes the task's
agent container (it leaves `<task>.agent_removed` in the evidence directory) and with this gateway.

Where it listens and the server that accepts (the peer check and the connection shares on accept):
gateway/listen.py; the request handler (checks, shaping, forwarding, relaying): gateway/handler.py.

The agent under test is untrusted and holds its token, so the gateway defends itself:
- only the run's own containers are served (gateway/peers.py RunPeers, by peer address), each peer
  and each task within its fair share of connections and requests in flight (gateway/shares.py);
- the token is checked before any body is read, on every path; a POST needs one exact
  Content-Length (411/400/413 otherwise), at most MAX_BODY_BYTES, arriving whole within
  request_deadline_sec (the reaper cuts a trickling client); every socket operation has a timeout;
- log rows are bounded: client text truncated, refusals counted per caller and cause per interval
  (gateway/refusals.py), rows of unauthenticated refusals capped;
- the body is shaped by gateway/policy.py (model pinned, n = 1, output tokens capped, price-changing
  routing refused, stream usage forced);
- each chat request reserves its worst cost against its task's limit before it is forwarded and
  settles it after (gateway/reserve.py); an answer without a cost is counted at what the provider's
  generation stats say, else at `unknown_cost_usd`, against its task only.

The fence is per request: once `fence(reason)` is called (the run is stopping, the stop file
exists, or the gateway's sum of the provider's cost figures reaches the run's allowance) every new
request is refused with a 403 and a sentence, and every upstream connection is shut down: a stream
in flight is cut, and a request still waiting for the provider's headers is cut too (counted at
`unknown_cost_usd`, since the provider may bill it). Every forwarded request is one row of
<run_root>/gateway/requests.jsonl.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import httpx

from ..runroot.layout import RunRoot
from ..schemas.gateway import GatewayRequest, encode_row
from . import shares as sh
from .causes import (  # noqa: F401 - the refusal and fence names are imported from here by the run and tests
    FENCE_BUDGET,
    FENCE_RUN_STOPPING,
    MAX_BODY_BYTES,
    PATH_CHARS,
    REFUSED_AUTH,
    REFUSED_BODY,
    REFUSED_FENCED,
    REFUSED_PEER,
    REFUSED_REVOKED,
    REFUSED_ROUTE,
    REFUSED_SHAPE,
    REFUSED_TASK_BUDGET,
    TEXT_CHARS,
    bounded,
    peer_address,
)
from .generation import generation_cost
from .handler import make_handler
from .listen import GatewayServer
from .policy import DEFAULT_UNKNOWN_COST_USD, Policy
from .refusals import RefusalLog
from .reserve import Price, TaskLimits
from .tokens import StreamUsage, mint_token, new_secret, token_task, usage_of  # noqa: F401 - imported from here by the shim, the run and tests

# The shim's evidence marker: agent-<task> was removed, its token is dead (custody/shim_daemon.py handle_remove).
REVOKED_SUFFIX = ".agent_removed"
# The stop file and the request deadlines are looked at this often.
STOP_POLL_SEC = 0.1
# A request (its line, headers and body; or a keep-alive connection's wait for its next one) must
# arrive whole within this; every single socket operation (a write to a client that does not read)
# within SOCKET_TIMEOUT_SEC.
REQUEST_DEADLINE_SEC = 30.0
SOCKET_TIMEOUT_SEC = 30.0
# Rows of requests without a valid token (or from strangers) stop after this many (then only counted).
MAX_ANONYMOUS_ROWS = 1000
# Upstream timeouts: a model may think for minutes before its first byte; connecting is quick.
UPSTREAM_TIMEOUT = httpx.Timeout(connect=15.0, read=600.0, write=60.0, pool=30.0)


class Gateway:
    """The gateway on `bind_host:port` (0 = any free port). `start()` returns self; `close()` ends it.

    `allowance_usd` is what the gateway's sum of costs may reach before it fences (None until the
    launcher has admitted the run: every request is refused until then). `policy` shapes chat
    bodies (gateway/policy.py). `per_task_usd`: each request of a task reserves its worst
    cost against it first (gateway/reserve.py; `price`: the run's model price, else a request's worst
    cost is `unknown_cost_usd`). `shares`: the connection and in-flight bounds per peer and per task
    (gateway/shares.py; `max_connections` alone scales them down, for tests).
    `unknown_cost_usd`: what a forwarded request without a provider cost figure is counted at.
    `revoked_dir`: where the shim leaves `<task>.agent_removed`. `peers`: an object with
    `allowed(ip)` (gateway_peers.RunPeers); None serves any peer (tests on loopback).
    `on_fence(reason)` is called once, from the thread that fenced (the launcher stops the run).
    `listener`: a socket already listening (gateway/listen.py: bound in the daemon's namespace), served
    instead of binding `bind_host:port`; the gateway closes it.
    """

    def __init__(
        self,
        *,
        upstream: str,
        key: str,
        run_label: str,
        secret: bytes,
        run_root: Path,
        stop_file: Path,
        bind_host: str,
        port: int = 0,
        on_fence: Callable[[str], None] | None = None,
        policy: Policy | None = None,
        per_task_usd: float | None = None,
        unknown_cost_usd: float = DEFAULT_UNKNOWN_COST_USD,
        revoked_dir: Path | None = None,
        peers=None,
        max_connections: int | None = None,
        shares: sh.Limits | None = None,
        price: Price | None = None,
        generation_stats: bool | None = None,
        request_deadline_sec: float = REQUEST_DEADLINE_SEC,
        socket_timeout_sec: float = SOCKET_TIMEOUT_SEC,
        tls: ssl.SSLContext | None = None,
        openrouter: bool = False,
        listener: socket.socket | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.openrouter = openrouter  # the provider's own face (gateway/routes.py), else OpenAI-compatible
        self._key = key
        self.run_label = run_label
        self._secret = secret
        self.stop_file = stop_file
        self.on_fence = on_fence
        self.policy = policy or Policy(model=None)
        self.per_task_usd = per_task_usd
        self.limits = TaskLimits(per_task_usd)
        self.price = price
        # Whether the upstream posts generation stats (OpenRouter does; gateway/generation.py).
        self.generation_stats = (
            (openrouter or "openrouter.ai" in upstream) if generation_stats is None else generation_stats
        )
        self.unknown_cost_usd = unknown_cost_usd
        if shares is None and max_connections is not None:
            half = max(1, max_connections // 2)
            shares = sh.Limits(
                max_connections=max_connections,
                per_peer=half,
                guaranteed=min(half, 4),
                headroom=max_connections // 4,
                per_task=max_connections,
                per_task_in_flight=half,
            )
        self.shares = sh.Shares(shares)
        self._bound: dict[socket.socket, str] = {}  # a served connection -> the task whose token it showed
        self.refusals = RefusalLog()
        self.revoked_dir = revoked_dir
        self.peers = peers
        self.request_deadline_sec = request_deadline_sec
        self.socket_timeout_sec = socket_timeout_sec
        self.allowance_usd: float | None = None
        self.spent_usd = 0.0  # the provider's own figures: what the run-wide fence counts
        self.assumed_usd = 0.0  # counted at unknown_cost_usd against their tasks only, never the run
        self.task_spent = self.limits.spent  # each task's settled costs, assumed ones included
        self.fence_reason: str | None = None
        # Counters: connections closed on accept (over a share), broken handlers, unauthenticated
        # refusals past MAX_ANONYMOUS_ROWS (and refusals the refusal log could not follow).
        self.overflowed = 0
        self.errors = 0
        self.unlogged_refusals = 0
        self._anonymous_rows = 0
        self._fenced = threading.Event()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._active: set[httpx.Response] = set()
        # Every upstream connection ever opened (httpcore network streams, seen through the trace
        # extension): the fence shuts their sockets down, which also ends a wait for headers.
        self._upstream_streams: weakref.WeakSet = weakref.WeakSet()
        # Client connections still reading a request -> the monotonic time they must be done by.
        self._deadlines: dict[socket.socket, float] = {}
        log_path = RunRoot(run_root).gateway_requests
        log_path.parent.mkdir(mode=0o700, exist_ok=True)
        self._log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._client = httpx.Client(timeout=UPSTREAM_TIMEOUT, follow_redirects=False)
        # The provider sees the client's own headers, not httpx's defaults added where the client sent
        # none (an `Accept: */*` on the seed's key check made its request differ from the seed's path).
        for name in ("accept", "user-agent"):
            self._client.headers.pop(name, None)
        self._server = GatewayServer((bind_host, port), make_handler(self), self, tls, listener)
        self._threads: list[threading.Thread] = []
        # Called once the gateway is closed, in order (the run's own network removed: gateway/run.py).
        self.after_close: list[Callable[[], object]] = []

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url_for(self, host: str) -> str:
        """The base URL (with /v1) under which containers reach this gateway at `host` (OpenAI-compatible face)."""
        return f"http://{host}:{self.port}/v1"

    def start(self) -> Gateway:
        for target, name in ((self._server.serve_forever, "llm-gateway"), (self._watch, "llm-gateway-watch")):
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
        for row in self.refusals.due(time.monotonic(), final=True):
            self._write(row)
        self._client.close()
        if self.peers is not None and hasattr(self.peers, "close"):
            self.peers.close()
        with self._lock:
            os.close(self._log_fd)
            self._log_fd = -1
        for step in self.after_close:
            step()

    # ------------------------------------------------------------ who may call

    def admit_peer(self, ip: str) -> bool:
        """Whether a connection from `ip` is served (called on accept); a refusal is logged."""
        if self.peers is None:
            return True
        ip = peer_address((ip,))
        if self.peers.allowed(ip):
            return True
        self.record(
            GatewayRequest(
                at=time.time(),
                task=None,
                path="",
                status=0,
                latency_ms=0.0,
                refused=REFUSED_PEER,
                peer=ip,
                error=bounded(f"peer {ip} is not a container of this run", TEXT_CHARS),
            )
        )
        return False

    def authorize(self, header: str | None) -> str | None:
        if not header or header[:7].lower() != "bearer ":
            return None
        return token_task(self._secret, self.run_label, header[7:].strip())

    def revoked(self, task: str) -> bool:
        """Whether the shim removed `task`'s agent container (one stat: cheap on every request)."""
        return self.revoked_dir is not None and os.path.lexists(self.revoked_dir / (task + REVOKED_SUFFIX))

    # ------------------------------------------------------------ money and the fence

    def set_allowance(self, usd: float) -> None:
        with self._lock:
            self.allowance_usd = max(0.0, float(usd))
        self._check_budget()

    def fence(self, reason: str, *, notify: bool = True) -> None:
        """Refuse every new request from now on and cut every upstream exchange in flight (a stream
        being relayed, or a request waiting for the provider's headers). The first reason stays."""
        with self._lock:
            first = self.fence_reason is None
            if first:
                self.fence_reason = reason
            self._fenced.set()
            active = list(self._active)
            streams = list(self._upstream_streams)
        for stream in streams:  # a shut-down socket ends a blocked read in its thread at once
            try:
                stream.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
            except (OSError, AttributeError):
                pass
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

    def _add_cost(
        self, task: str | None, cost: float | None, assumed: float | None, reserved: float | None = None
    ) -> None:
        """Count a request's cost: the provider's figure toward the run-wide fence and its task; an
        assumed figure toward its task only (one task's unknowns never fence its siblings). A request
        that reserved its worst cost (gateway/reserve.py) settles the reservation with this charge."""
        charge = cost if cost is not None else (assumed or 0.0)
        if task is not None and reserved is not None:
            self.limits.settle(task, reserved, charge)
        elif task is not None and charge:
            self.limits.charge(task, charge)
        if not charge:
            return
        with self._lock:
            if cost is None:
                self.assumed_usd += charge
            else:
                self.spent_usd += charge
        self._check_budget()

    def _check_budget(self) -> None:
        with self._lock:
            crossed = self.allowance_usd is not None and self.spent_usd >= self.allowance_usd > 0
            crossed = crossed or self.allowance_usd == 0.0
        if crossed and not self.fenced:
            self.fence(FENCE_BUDGET)

    def _watch(self) -> None:
        """The stop file, and the request deadlines: a client still sending when its time is up is cut."""
        while not self._closing.wait(STOP_POLL_SEC):
            if not self.fenced and os.path.lexists(self.stop_file):
                self.fence(FENCE_RUN_STOPPING)
            for row in self.refusals.due(time.monotonic()):
                self._write(row)
            now = time.monotonic()
            for conn, deadline in list(self._deadlines.items()):
                if now > deadline and self._deadlines.pop(conn, None) is not None:
                    try:  # the plain socket's shutdown: an SSLSocket's own would drop its TLS state under the reader
                        socket.socket.shutdown(conn, socket.SHUT_RDWR)
                    except OSError:
                        pass

    def refusal(self, task: str | None = None) -> tuple[str, str] | None:
        """(why, sentence) a new request of `task` gets now, or None to forward it."""
        if self.fenced:
            if self.fence_reason == FENCE_BUDGET:
                return REFUSED_FENCED, (
                    f"the run's model budget is spent: the gateway's sum of costs "
                    f"${self.spent_usd:.4f} reached the run's allowance "
                    f"${self.allowance_usd or 0:.4f}"
                )
            return REFUSED_FENCED, f"the run is stopping ({self.fence_reason}); no new model requests are forwarded"
        if self.allowance_usd is None:
            return REFUSED_FENCED, "the run is not admitted yet; no model requests are forwarded"
        spent = self.limits.settled(task) if task is not None else 0.0
        if self.per_task_usd is not None and spent >= self.per_task_usd:
            return REFUSED_TASK_BUDGET, (
                f"this task's model spend ${spent:.4f} reached the per-task limit "
                f"${self.per_task_usd:.4f} (--per-task-cost-usd); no more requests "
                f"of this task are forwarded"
            )
        return None

    # ------------------------------------------------------------ the request log

    def record(self, row: GatewayRequest) -> None:
        row.path = bounded(row.path, PATH_CHARS) or ""
        row.model = bounded(row.model, TEXT_CHARS)
        row.error = bounded(row.error, TEXT_CHARS)
        # Refusals: one row per caller and cause per interval (gateway/refusals.py).
        if row.refused is None or self.refusals.note(row, time.monotonic()) is not None:
            self._write(row)

    def _write(self, row: GatewayRequest) -> None:
        data = encode_row(row)
        with self._lock:
            if row.task is None and row.refused is not None:
                if self._anonymous_rows >= MAX_ANONYMOUS_ROWS:
                    self.unlogged_refusals += row.count
                    return
                self._anonymous_rows += 1
            if self._log_fd >= 0:
                os.write(self._log_fd, data)  # one append of one line: rows never interleave

    # ------------------------------------------------------------ forwarding

    def open_upstream(
        self,
        method: str,
        path: str,
        body: bytes | None,
        passed: dict[str, str],
        sent: list[bool],
        with_key: bool = True,
    ) -> httpx.Response:
        """The provider's response, opened as a stream. The client's own headers go along (its SDK's
        names, OpenRouter's attribution headers), except the credential and what framing sets; the
        key replaces the credential (`with_key`: a request that came without one goes without one).
        `sent[0]` becomes True once the whole request went out (from then on the provider may bill it)."""

        def trace(event: str, info: dict) -> None:
            if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
                stream = info.get("return_value")
                if stream is not None:
                    with self._lock:
                        self._upstream_streams.add(stream)
                        fenced = self._fenced.is_set()
                    if fenced:  # fenced while connecting: the sweep may have missed this one
                        stream.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
            elif event == "http11.send_request_body.complete":
                sent[0] = True

        headers = {**passed, "Accept-Encoding": "identity"}
        if with_key:
            headers["Authorization"] = f"Bearer {self._key}"
        request = self._client.build_request(
            method, self.upstream + path, content=body, headers=headers, extensions={"trace": trace}
        )
        if self.fenced:
            raise httpx.ConnectError("fenced before sending")
        response = self._client.send(request, stream=True)
        with self._lock:
            self._active.add(response)
            fenced = self._fenced.is_set()
        if fenced:  # fenced while waiting: the fence's sweep may have missed this one
            response.close()
        return response

    def generation_cost(self, generation: str) -> float | None:
        """The provider's own figure for an answer that carried none (gateway/generation.py)."""
        return generation_cost(self._client, self.upstream, self._key, generation, self._closing)

    def release(self, response: httpx.Response) -> None:
        with self._lock:
            self._active.discard(response)
        response.close()
