"""The latency the model gateway (--llm-gateway) adds to one request, against a direct call.

Starts the chat stand-in (the provider) and a gateway in front of it, both on loopback, then sends
--requests chat completions of each kind (plain, and streamed with usage) to each route in turn
(the order rotating per round), each route on its own keep-alive client, so all see the same
stand-in state and machine load. Routes: direct to the stand-in; through the gateway (stdlib
threading server, the one the adapter ships); and with --asgi through a minimal asyncio candidate
(uvicorn + an ASGI app + httpx.AsyncClient doing the same token check, shaping and forwarding,
none of the gateway's other defences), the maintained-library alternative issue 28 asked to weigh.
Prints per route and kind the latency p50 / p99 in ms (a streamed request is timed to its last
byte), the added latency (route minus direct in the same round, p50 and p99) and the ratio of
the medians. Nothing is written outside a temporary directory.

    .venv/bin/python benchmarks/bench_gateway.py [--requests 400] [--asgi]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.gateway.policy import Policy, shape
from cowork_adapter.gateway.server import Gateway, mint_token, token_task

BODY = {"model": "demo-stub-model", "messages": [{"role": "user", "content": "benchmark request " + "x" * 400}]}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed(client: httpx.Client, url: str, body: dict, headers: dict) -> float:
    started = time.perf_counter()
    if body.get("stream"):
        with client.stream("POST", url, json=body, headers=headers) as answer:
            for _ in answer.iter_raw():
                pass
            status = answer.status_code
    else:
        status = client.post(url, json=body, headers=headers).status_code
    elapsed = (time.perf_counter() - started) * 1000
    if status != 200:
        raise SystemExit(f"request to {url} answered {status}")
    return elapsed


def start_asgi_candidate(upstream: str, secret: bytes, label: str):
    """The asyncio candidate on loopback: (its base URL, a function that stops it)."""
    import uvicorn

    state: dict = {}
    policy = Policy(model=BODY["model"])

    async def answer(send, status: int, data: bytes, kind: bytes = b"application/json") -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", kind), (b"content-length", str(len(data)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": data})

    async def app(scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        auth = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        if token_task(secret, label, auth[7:]) is None:
            return await answer(send, 401, b'{"error": "token"}')
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        shaped = shape(json.loads(body), policy)
        if "client" not in state:
            import httpx as _httpx

            state["client"] = _httpx.AsyncClient(timeout=30)
        request = state["client"].build_request(
            "POST",
            upstream + "/chat/completions",
            content=json.dumps(shaped).encode(),
            headers={"Authorization": "Bearer k", "Content-Type": "application/json"},
        )
        response = await state["client"].send(request, stream=True)
        try:
            kind = response.headers.get("content-type", "").encode()
            if not kind.startswith(b"text/event-stream"):
                return await answer(send, response.status_code, await response.aread(), kind)
            await send(
                {"type": "http.response.start", "status": response.status_code, "headers": [(b"content-type", kind)]}
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    sock = socket.socket()
    # Accepted sockets inherit it: without it the candidate pays Nagle + delayed ACK (~40 ms) per answer.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="error", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)

    return f"http://127.0.0.1:{sock.getsockname()[1]}/v1", stop


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--asgi", action="store_true", help="also time the uvicorn/ASGI candidate")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    standin = ChatStandin().start()
    secret, label = b"s" * 32, "b" * 32
    gateway = Gateway(
        upstream=standin.base_url,
        key="sk-bench",
        run_label=label,
        secret=secret,
        run_root=root,
        stop_file=root / "stop",
        bind_host="127.0.0.1",
        policy=Policy(model=BODY["model"]),
    ).start()
    gateway.set_allowance(1e9)
    candidate = start_asgi_candidate(standin.base_url, secret, label) if args.asgi else None
    headers = {"Authorization": "Bearer " + mint_token(secret, label, "bench-task")}
    kinds = {"plain": BODY, "stream": {**BODY, "stream": True, "stream_options": {"include_usage": True}}}
    times: dict[tuple[str, str], list[float]] = {}
    clients = {name: httpx.Client(timeout=30) for name in ("direct", "gateway", "asgi")}
    routes = {"direct": standin.base_url, "gateway": gateway.url_for("127.0.0.1")}
    if candidate is not None:
        routes["asgi"] = candidate[0]
    names = list(routes)
    try:
        for kind, body in kinds.items():
            for name in names:  # warm-up: connections and code paths
                for _ in range(10):
                    timed(clients[name], routes[name] + "/chat/completions", body, headers)
            for i in range(args.requests):
                for name in names[i % len(names) :] + names[: i % len(names)]:  # the order rotates per round
                    times.setdefault((name, kind), []).append(
                        timed(clients[name], routes[name] + "/chat/completions", body, headers)
                    )
    finally:
        for client in clients.values():
            client.close()
        if candidate is not None:
            candidate[1]()
        gateway.close()
        standin.stop()
    print(f"{args.requests} requests per route and kind, rotating {' / '.join(names)}, loopback")
    for kind in kinds:
        direct = times[("direct", kind)]
        print(f"{kind:6s} direct  p50 {percentile(direct, 0.5):7.2f} ms  p99 {percentile(direct, 0.99):7.2f} ms")
        for name in names[1:]:
            through = times[(name, kind)]
            added = [g - d for g, d in zip(through, direct, strict=True)]
            print(
                f"{kind:6s} {name:7s} p50 {percentile(through, 0.5):7.2f} ms  p99 {percentile(through, 0.99):7.2f} ms"
                f"  added p50 {percentile(added, 0.5):7.2f} ms  p99 {percentile(added, 0.99):7.2f} ms"
                f"  ratio of medians {statistics.median(through) / statistics.median(direct):.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
