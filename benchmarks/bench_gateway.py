"""The latency the model gateway (--llm-gateway) adds to one request, against a direct call.

Starts the chat stand-in (the provider) and a gateway in front of it, both on loopback, then sends
--requests chat completions of each kind (plain, and streamed with usage) alternately direct and
through the gateway, each on its own keep-alive client, so both see the same stand-in state and
machine load. Prints per route and kind the latency p50 / p99 in ms (a streamed request is timed to
its last byte), the added latency (gateway minus direct, p50 and p99) and the ratio of the medians.
No target: the issue asks for the number. Nothing is written outside a temporary directory.

    .venv/bin/python benchmarks/bench_gateway.py [--requests 400]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.gateway import Gateway, mint_token

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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    standin = ChatStandin().start()
    secret, label = b"s" * 32, "b" * 32
    gateway = Gateway(upstream=standin.base_url, key="sk-bench", run_label=label, secret=secret, run_root=root,
                      stop_file=root / "stop", bind_host="127.0.0.1").start()
    gateway.set_allowance(1e9)
    headers = {"Authorization": "Bearer " + mint_token(secret, label, "bench-task")}
    kinds = {"plain": BODY, "stream": {**BODY, "stream": True, "stream_options": {"include_usage": True}}}
    times: dict[tuple[str, str], list[float]] = {}
    try:
        with httpx.Client(timeout=30) as direct, httpx.Client(timeout=30) as through:
            routes = {"direct": (direct, standin.base_url), "gateway": (through, gateway.url_for("127.0.0.1"))}
            for kind, body in kinds.items():
                for name, (client, base) in routes.items():  # warm-up: connections and code paths
                    for _ in range(10):
                        timed(client, base + "/chat/completions", body, headers)
                for i in range(args.requests):
                    order = ("direct", "gateway") if i % 2 == 0 else ("gateway", "direct")
                    for name in order:
                        client, base = routes[name]
                        times.setdefault((name, kind), []).append(
                            timed(client, base + "/chat/completions", body, headers))
    finally:
        gateway.close()
        standin.stop()
    print(f"{args.requests} requests per route and kind, alternating direct / gateway, loopback")
    for kind in kinds:
        direct, through = times[("direct", kind)], times[("gateway", kind)]
        added = [g - d for g, d in zip(through, direct)]
        print(f"{kind:6s} direct  p50 {percentile(direct, 0.5):7.2f} ms  p99 {percentile(direct, 0.99):7.2f} ms")
        print(f"{kind:6s} gateway p50 {percentile(through, 0.5):7.2f} ms  p99 {percentile(through, 0.99):7.2f} ms")
        print(f"{kind:6s} added   p50 {percentile(added, 0.5):7.2f} ms  p99 {percentile(added, 0.99):7.2f} ms  "
              f"ratio of medians {statistics.median(through) / statistics.median(direct):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
