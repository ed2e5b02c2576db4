"""A LOAD engine, shipped for the adapter's own tests (`cowork-adapter demo --scenario hostile-load`).

Not a benchmark engine. Per task (PLANS) it either plays fairly while needing its model through the
run's gateway, or takes a shared part of the host from its siblings: the gateway (held connections,
a flood of requests, dropped streams), the runner's log (a stdout flood), the disk (bytes and
entries in its dump) or the host's JSON readers (a deeply nested file). Run by the adapter as
`--engine upstream:load_agent.py` with --llm-gateway, from the benchmark root (/workspace):
    python3 -u load_agent.py --task_dir <task> --max_steps N [--phase agent]
What it did is written to load_attempts.json in its dump (the scenario reads it as agent output);
the honest plan also writes load_model_calls.json (each model call's status and latency).
Standard library and the benchmark's own TaskConfig only; every attack is bounded in size and time.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.environ.get("COWORK_ADAPTER_HOME") or "/opt/cowork-adapter")

from cowork_container import bench, protocol

LINGER_SEC = 60.0
PLANS = {
    "demo-csv-totals": ("honest_model",),
    "demo-wrong-answer": ("flood_requests", "drop_streams", "hold_connections"),
    "demo-round-limit": ("flood_stdout", "dump_bytes", "dump_entries", "linger"),
    "demo-crm-postgres": ("nested_json",),
}
# The honest task's model calls: spread over the attackers' time, half of them streamed.
MODEL_CALLS = 40
MODEL_CALL_GAP_SEC = 1.5
CALL_TIMEOUT_SEC = 60
# The gateway attacker, one attack after the other (each needs connections of its own peer share):
# its request flood, its dropped streams, then the connections it tries to hold, and for how long.
FLOOD_SEC = 20.0
FLOOD_THREADS = 12
HOLD_CONNECTIONS = 300
HOLD_SEC = 40.0
DROPPED_STREAMS = 6
# The output and dump attackers (each well above the adapter's default bounds, bounded themselves).
STDOUT_BYTES = 160 << 20
DUMP_BYTES = 1536 << 20
DUMP_ENTRIES = 120_000
NESTING = 300_000
ATTEMPTS_NAME = "load_attempts.json"
CALLS_NAME = "load_model_calls.json"


class Task:
    def __init__(self, args):
        self.task = args.task_dir
        self.short = "%s/%s" % (os.environ.get("MODEL_PROVIDER") or "load", os.environ.get("MODEL_NAME") or "load")
        self.config = bench.build_task_config(self.task, self.short)
        self.root = os.path.abspath(bench.attr(self.config, "task_root"))
        self.attempts: list = []
        self.started = datetime.now().isoformat()

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def note(self, attack: str, **what) -> None:
        self.attempts.append({"attack": attack, **what})

    def end(self, status: str = "success") -> None:
        to_dict = getattr(self.config, "to_dict", None)
        config = json.loads(json.dumps(to_dict() if callable(to_dict) else {}, default=str))
        write(self.path(protocol.LOG_NAME), json.dumps({"config": config, "status": status, "start_time": self.started,
                                                        "end_time": datetime.now().isoformat()}, indent=2))


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


# ---------------------------------------------------------------- the model, through the gateway


def endpoint() -> tuple[str, str, str]:
    """(chat URL, token, model) as the adapter gives the benchmark's engines."""
    base = (os.environ.get("MODEL_API_URL") or "").rstrip("/")
    return base + "/chat/completions", os.environ.get("MODEL_API_KEY") or "", os.environ.get("MODEL_NAME") or ""


def chat(stream: bool, body: dict | None = None, timeout: float = CALL_TIMEOUT_SEC) -> tuple[int, float, str]:
    """One model call: (HTTP status, seconds, error or '')."""
    url, token, model = endpoint()
    body = body or {"model": model, "stream": stream, "max_tokens": 64,
                    "messages": [{"role": "user", "content": "Say hello (load scenario)."}]}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read()
            return answer.status, time.monotonic() - started, ""
    except urllib.error.HTTPError as exc:
        return exc.code, time.monotonic() - started, exc.read(300).decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        return 0, time.monotonic() - started, "%s: %s" % (type(exc).__name__, exc)


def honest_model(t: Task) -> None:
    """Model calls through the gateway while the attackers run, then the demo's own engine."""
    calls = []
    for n in range(MODEL_CALLS):
        status, seconds, error = chat(stream=bool(n % 2))
        calls.append({"n": n, "stream": bool(n % 2), "status": status, "seconds": round(seconds, 4), "error": error[:300]})
        time.sleep(MODEL_CALL_GAP_SEC)
    write(t.path(CALLS_NAME), json.dumps({"calls": calls}, indent=2))
    t.note("honest_model", calls=len(calls), answered=sum(1 for c in calls if c["status"] == 200))


def _gateway_address() -> tuple[str, int]:
    parts = urllib.parse.urlsplit(os.environ.get("MODEL_API_URL") or "")
    return parts.hostname or "", parts.port or 80


def hold_connections(t: Task) -> None:
    """Open HOLD_CONNECTIONS connections to the gateway, each sending half a request line, and keep
    the ones the gateway kept (reopening the ones it closed) for HOLD_SEC."""
    host, port = _gateway_address()
    stop = time.monotonic() + HOLD_SEC
    opened = closed = 0
    held: list = []

    def open_one():
        sock = socket.create_connection((host, port), timeout=5)
        sock.sendall(b"POST /v1/chat")
        return sock

    def keep() -> None:
        nonlocal opened, closed
        while time.monotonic() < stop:
            while len(held) < HOLD_CONNECTIONS and time.monotonic() < stop:
                try:
                    held.append(open_one())
                    opened += 1
                except OSError:
                    closed += 1
                    break
            for sock in list(held):  # the ones the gateway closed: count them, reopen later
                sock.setblocking(False)
                try:
                    if sock.recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue
                except OSError:
                    held.remove(sock)
                    sock.close()
                    closed += 1
            time.sleep(0.5)
        for sock in held:
            sock.close()

    keep()
    t.note("hold_connections", target="%s:%d" % (host, port), tried=HOLD_CONNECTIONS, seconds=HOLD_SEC,
           counts={"opened": opened, "closed_by_gateway": closed})


def flood_requests(t: Task) -> None:
    """FLOOD_THREADS callers sending requests as fast as they can for FLOOD_SEC: valid ones (past
    its share in flight and its limit's reservations) and ones the gateway refuses (another model)."""
    model = endpoint()[2]
    stop = time.monotonic() + FLOOD_SEC
    statuses: dict = {}
    lock = threading.Lock()

    def caller(n: int) -> None:
        body = {"model": model if n % 2 else "another/model", "messages": [{"role": "user", "content": "flood"}]}
        while time.monotonic() < stop:
            status, _, _ = chat(False, body=body, timeout=10)
            with lock:
                statuses[status] = statuses.get(status, 0) + 1

    threads = [threading.Thread(target=caller, args=(n,), daemon=True) for n in range(FLOOD_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(FLOOD_SEC + 30)
    t.note("flood_requests", threads=FLOOD_THREADS, seconds=FLOOD_SEC,
           statuses={str(k): v for k, v in sorted(statuses.items())})


def drop_streams(t: Task) -> None:
    """Streams started and hung up on after their first bytes (the provider may bill each)."""
    url, token, model = endpoint()
    host, port = _gateway_address()
    path = urllib.parse.urlsplit(url).path
    dropped = 0
    for _ in range(DROPPED_STREAMS):
        body = json.dumps({"model": model, "stream": True, "messages": [{"role": "user", "content": "stream"}]}).encode()
        head = ("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n" % (path, host, token, len(body))).encode()
        try:
            with socket.create_connection((host, port), timeout=10) as sock:
                # Closed with a reset: the gateway's next write of the stream fails at once.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.sendall(head + body)
                if sock.recv(64):
                    dropped += 1
        except OSError:
            continue
    t.note("drop_streams", dropped=dropped)


def flood_stdout(t: Task) -> None:
    """STDOUT_BYTES printed: the adapter relays the engine's output into the runner's task log."""
    line = ("load flood " + "x" * 1011 + "\n").encode()
    out = sys.stdout.buffer
    written = 0
    try:
        while written < STDOUT_BYTES:
            out.write(line * 64)
            written += len(line) * 64
        out.flush()
    except OSError as exc:
        t.note("flood_stdout", bytes=written, error="%s" % type(exc).__name__)
        return
    t.note("flood_stdout", bytes=written)


def dump_bytes(t: Task) -> None:
    """DUMP_BYTES of real blocks in its dump (allocated, not sparse)."""
    path = t.path("load_fill.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        try:
            os.posix_fallocate(fd, 0, DUMP_BYTES)
        except OSError:  # a file system without fallocate: write it
            chunk = b"\xa5" * (1 << 20)
            for _ in range(DUMP_BYTES >> 20):
                os.write(fd, chunk)
    finally:
        os.close(fd)
    t.note("dump_bytes", bytes=DUMP_BYTES)


def dump_entries(t: Task) -> None:
    """DUMP_ENTRIES empty files in its dump, in folders of 10,000."""
    made = 0
    for n in range(DUMP_ENTRIES):
        folder = t.path("load_files/%03d" % (n // 10000))
        if n % 10000 == 0:
            os.makedirs(folder, exist_ok=True)
        os.close(os.open(os.path.join(folder, "f%06d" % n), os.O_WRONLY | os.O_CREAT, 0o644))
        made += 1
    t.note("dump_entries", files=made)


def nested_json(t: Task) -> None:
    """JSON nested NESTING levels deep where the host's readers look: the claim's and a receipt's
    names (the ledger parses both on every refresh), and beside them."""
    text = "[" * NESTING + "]" * NESTING
    names = [protocol.CLAIM_NAME, os.path.basename(protocol.receipt_path(t.root, "d" * 32)), "load_nested.json"]
    for name in names:
        write(t.path(name), text)
    t.note("nested_json", depth=NESTING, names=names)


def linger(t: Task) -> None:
    """Keep the task alive after the floods, as an agent that goes on working would (LINGER_SEC at
    most): the run's dump meter sees the dump over its bound and stops the task's containers."""
    t.note("linger", seconds=LINGER_SEC)
    time.sleep(LINGER_SEC)


ATTACKS = {f.__name__: f for f in (honest_model, hold_connections, flood_requests, drop_streams, flood_stdout,
                                   dump_bytes, dump_entries, nested_json, linger)}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="load engine (for the adapter's tests)")
    parser.add_argument("--task_dir", required=True)
    parser.add_argument("--max_steps", type=int, default=100)
    parser.add_argument("--phase", choices=("all", "agent", "eval"), default="agent")
    return parser.parse_known_args(argv)[0]


def main(argv=None) -> int:
    args = parse_args(argv)
    if not os.path.exists("/.dockerenv"):
        print("load_agent.py runs only inside a task container; nothing was done.", flush=True)
        return 2
    if args.phase == "eval":  # the demo engine grades
        os.execv(sys.executable, [sys.executable, "-u", os.path.abspath("main.py")] + sys.argv[1:])
    plan = PLANS.get(args.task_dir, ())
    t = Task(args)
    os.makedirs(t.root, exist_ok=True)
    for name in plan:
        try:
            ATTACKS[name](t)
        except Exception as exc:  # one failed attempt never stops the others
            t.note(name, error="".join(traceback.format_exception_only(type(exc), exc)).strip())
    write(t.path(ATTEMPTS_NAME), json.dumps({"task": t.task, "plan": list(plan), "attempts": t.attempts}, indent=2))
    if plan == ("honest_model",):  # then it plays the task fairly, with the demo's own engine
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-u", os.path.abspath("main.py")] + sys.argv[1:])
    t.end()
    print("load engine: tried %s" % ", ".join(plan), flush=True)
    print("====== Status: success ======", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
