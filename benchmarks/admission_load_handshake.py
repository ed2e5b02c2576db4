"""Run INSIDE the benchmark's agent image by bench_admission_load.py: time MCP servers' first connect.

Reads a JSON spec on stdin: {"servers": {name: {command, args, env, timeout}}, "concurrency": N,
"cap_factor": F or "cap_sec": S}. Starts the servers as the benchmark's default engine connects them (CAMEL's
MCPToolkit: at most N at once, each one spawned over stdio, then `initialize` and `tools/list`, each
bounded by the server's yaml `client_session_timeout_seconds`), and writes one JSON object on
stdout: per server the seconds from spawn to the `initialize` answer, from there to the `tools/list`
answer, the tool count, or an error; and the container's peak memory (its cgroup's record).

Unlike the engine, a server is waited for up to cap_factor x its timeout (at most 120 s), or
cap_sec when given (the adapter's one bound on all servers), so a slow start is measured instead of
cut off. Stdlib only: the image's Python 3.10 runs it as is.
"""

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

PROTOCOL_VERSION = "2024-11-05"
MAX_WAIT_SEC = 120.0


def _cgroup_peak_bytes():
    # cgroup v1 keeps the peak; v2 has memory.peak on newer kernels only.
    for path in ("/sys/fs/cgroup/memory/memory.max_usage_in_bytes", "/sys/fs/cgroup/memory.peak"):
        try:
            with open(path) as fh:
                return int(fh.read().strip())
        except (OSError, ValueError):
            continue
    return None


class _Lines:
    """Newline-delimited JSON-RPC messages from a pipe, read with a deadline."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = b""

    def answer(self, msg_id, deadline):
        """The response with this id (notifications and server requests in between are skipped)."""
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue  # a server's stray print on stdout: not the channel's message
                if isinstance(msg, dict) and msg.get("id") == msg_id and ("result" in msg or "error" in msg):
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    raise EOFError("server closed stdout")
                self.buf += chunk


def _send(proc, msg):
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()


def connect(spec, cap_factor, cap_sec):
    timeout = float(spec["timeout"])
    cap = cap_sec if cap_sec else min(MAX_WAIT_SEC, cap_factor * timeout)
    row = {"timeout_sec": timeout, "init_sec": None, "tools_sec": None, "tools": None, "error": None}
    env = dict(os.environ)
    env.update(spec.get("env") or {})
    start = time.monotonic()
    proc = None
    try:
        proc = subprocess.Popen(
            [spec["command"], *spec["args"]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        lines = _Lines(proc.stdout.fileno())
        _send(
            proc,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "cowork-admission-bench", "version": "1"},
                },
            },
        )
        lines.answer(1, start + cap)
        row["init_sec"] = round(time.monotonic() - start, 3)
        _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed = time.monotonic()
        _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
        answer = lines.answer(2, listed + cap)
        row["tools_sec"] = round(time.monotonic() - listed, 3)
        row["tools"] = len((answer.get("result") or {}).get("tools") or [])
    except (OSError, TimeoutError, EOFError) as exc:
        row["error"] = f"{type(exc).__name__}: {exc} after {time.monotonic() - start:.1f} s"
    return row, proc


def main():
    spec = json.load(sys.stdin)
    gate = threading.Semaphore(int(spec.get("concurrency", 4)))
    rows, procs = {}, []
    lock = threading.Lock()

    def one(name, server):
        with gate:
            row, proc = connect(server, float(spec.get("cap_factor", 3.0)), spec.get("cap_sec"))
        with lock:
            rows[name] = row
            if proc is not None:
                procs.append(proc)

    threads = [threading.Thread(target=one, args=item) for item in spec["servers"].items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    peak = _cgroup_peak_bytes()  # every server still up: the start-up's peak is in
    for proc in procs:  # each server in its own session: its uv/node children go with it
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    json.dump({"servers": rows, "peak_memory_bytes": peak}, sys.stdout)


if __name__ == "__main__":
    main()
