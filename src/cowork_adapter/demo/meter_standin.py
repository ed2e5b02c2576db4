"""A local STAND-IN for OpenRouter's key meter, for tests and the demo. It spends no money.

Serves, on 127.0.0.1 only:
  GET  /api/v1/key      {"data": {label, limit, limit_remaining, usage, ...}}  (401 on a wrong key)
  GET  /api/v1/credits  {"data": {total_credits, total_usage}}  (or 403 in "forbidden" mode)
  GET  /control         the stand-in's current script, as JSON
  POST /control         change the script at runtime (same fields as `MeterStandin.apply`)

Scriptable from Python (`MeterStandin`) or over /control: usage steps (set, add), a spending
rate in USD/s, per-request delays, HTTP errors, NaN/inf/negative/decreasing/non-numeric values,
silence (the connection is accepted and never answered), and a queue of one-off answers. Every
handler is bounded by `max_delay_sec`, so nothing here can hang a test for longer than that.

    python -m cowork_adapter.demo.meter_standin --port 8780 --key-env OPENROUTER_API_KEY
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_PREFIX = "/api/v1"
DEFAULT_MAX_DELAY_SEC = 30.0
_CONTROL_FIELDS = {
    "set_usage",
    "add_usage",
    "rate_usd_per_sec",
    "limit",
    "limit_remaining",
    "delay_sec",
    "fail_status",
    "fail_count",
    "silence",
    "silence_count",
    "credits",
    "total_credits",
    "wrap",
    "push",
    "reset",
}


class MeterStandin:
    """The stand-in server. Thread-safe; `apply()` takes the same dict that POST /control does.

    A `push`ed answer is used once, for the next /key request, before any persistent mode:
    {"usage": <any JSON value, e.g. NaN or "abc">} | {"status": 503} | {"silence": true}
    | {"delay_sec": 2.5} (combines with the others) | {"body": "raw text", "status": 200}.
    """

    def __init__(
        self,
        key: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        usage: float = 0.0,
        limit: float | None = None,
        total_credits: float | None = 1000.0,
        max_delay_sec: float = DEFAULT_MAX_DELAY_SEC,
        label: str = "stand-in key (no real spending)",
    ) -> None:
        if not key:
            raise ValueError("the stand-in needs the key it should accept")
        self._key = key
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.max_delay_sec = max_delay_sec
        self.label = label
        self.requests: list[dict[str, Any]] = []  # what was asked and how it was answered
        self._defaults: dict[str, Any] = {"usage": usage, "limit": limit, "total_credits": total_credits}
        self._reset()
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{API_PREFIX}"

    def start(self) -> MeterStandin:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="meter-standin", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        self._stop.set()  # wakes every delayed or silent handler
        if self._thread is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self._thread = None

    def __enter__(self) -> MeterStandin:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- script --------------------------------------------------------------------------
    def _reset(self) -> None:
        self._base_usage = float(self._defaults["usage"])
        self._rate = 0.0
        self._rate_since = time.monotonic()
        self._limit = self._defaults["limit"]
        self._limit_remaining_override: Any = "auto"
        self._total_credits = self._defaults["total_credits"]
        self._delay = 0.0
        self._fail_status: int | None = None
        self._fail_count: int | None = None  # None: until changed
        self._silence = False
        self._silence_count: int | None = None
        self._credits_forbidden = False
        self._wrap = True
        self._queue: deque[dict[str, Any]] = deque()

    def _usage_now(self) -> float:
        return self._base_usage + self._rate * (time.monotonic() - self._rate_since)

    def apply(self, control: dict[str, Any]) -> dict[str, Any]:
        """Change the script; returns the new state. Unknown fields raise ValueError."""
        unknown = set(control) - _CONTROL_FIELDS
        if unknown:
            raise ValueError(f"unknown control fields: {sorted(unknown)}")
        with self._lock:
            if control.get("reset"):
                self._reset()
            if "rate_usd_per_sec" in control:
                self._base_usage = self._usage_now()  # fold what the old rate spent so far
                self._rate_since = time.monotonic()
                self._rate = float(control["rate_usd_per_sec"])
            if "set_usage" in control:
                self._base_usage, self._rate_since = float(control["set_usage"]), time.monotonic()
            if "add_usage" in control:
                self._base_usage = self._usage_now() + float(control["add_usage"])
                self._rate_since = time.monotonic()
            if "limit" in control:
                self._limit = control["limit"]
            if "limit_remaining" in control:
                self._limit_remaining_override = control["limit_remaining"]
            if "total_credits" in control:
                self._total_credits = control["total_credits"]
            if "delay_sec" in control:
                self._delay = float(control["delay_sec"])
            if "fail_status" in control:
                self._fail_status = control["fail_status"]
                self._fail_count = control.get("fail_count")
            if "silence" in control:
                self._silence = bool(control["silence"])
                self._silence_count = control.get("silence_count")
            if "credits" in control:
                if control["credits"] not in ("ok", "forbidden"):
                    raise ValueError("credits must be 'ok' or 'forbidden'")
                self._credits_forbidden = control["credits"] == "forbidden"
            if "wrap" in control:
                self._wrap = bool(control["wrap"])
            for answer in control.get("push", []):
                self._queue.append(dict(answer))
            return self._state()

    def _state(self) -> dict[str, Any]:
        return {
            "usage": self._usage_now(),
            "rate_usd_per_sec": self._rate,
            "limit": self._limit,
            "delay_sec": self._delay,
            "fail_status": self._fail_status,
            "fail_count": self._fail_count,
            "silence": self._silence,
            "credits": "forbidden" if self._credits_forbidden else "ok",
            "queued": len(self._queue),
            "requests": len(self.requests),
            "max_delay_sec": self.max_delay_sec,
        }

    def state(self) -> dict[str, Any]:
        with self._lock:
            return self._state()

    # Convenience wrappers for Python callers.
    def set_usage(self, usage: Any) -> None:
        self.apply({"set_usage": usage})

    def add_usage(self, usd: float) -> None:
        self.apply({"add_usage": usd})

    def set_rate(self, usd_per_sec: float) -> None:
        self.apply({"rate_usd_per_sec": usd_per_sec})

    def set_delay(self, seconds: float) -> None:
        self.apply({"delay_sec": seconds})

    def fail(self, status: int | None, count: int | None = None) -> None:
        self.apply({"fail_status": status, "fail_count": count})

    def silence(self, on: bool = True, count: int | None = None) -> None:
        self.apply({"silence": on, "silence_count": count})

    def push(self, *answers: dict[str, Any]) -> None:
        self.apply({"push": list(answers)})

    # -- answering -----------------------------------------------------------------------
    def _plan_key_answer(self) -> dict[str, Any]:
        """Decide, under the lock, how the next /key request is answered."""
        with self._lock:
            if self._queue:
                plan = self._queue.popleft()
                plan.setdefault("delay_sec", self._delay)
                if not ({"usage", "status", "body"} & plan.keys()) and not plan.get("silence"):
                    plan["usage"] = self._usage_now()
                return plan
            if self._silence:
                if self._silence_count is not None:
                    self._silence_count -= 1
                    if self._silence_count <= 0:
                        self._silence, self._silence_count = False, None
                return {"silence": True}
            if self._fail_status is not None:
                status = self._fail_status
                if self._fail_count is not None:
                    self._fail_count -= 1
                    if self._fail_count <= 0:
                        self._fail_status, self._fail_count = None, None
                return {"status": status, "delay_sec": self._delay}
            return {"usage": self._usage_now(), "delay_sec": self._delay}

    def _key_body(self, usage: Any) -> dict[str, Any]:
        with self._lock:
            limit = self._limit
            remaining = self._limit_remaining_override
            wrap = self._wrap
        if remaining == "auto":
            numeric = isinstance(usage, (int, float)) and not isinstance(usage, bool)
            remaining = None if limit is None or not numeric else limit - usage
        data = {
            "label": self.label,
            "limit": limit,
            "limit_remaining": remaining,
            "limit_reset": None,
            "usage": usage,
            "usage_daily": usage,
            "usage_weekly": usage,
            "usage_monthly": usage,
            "byok_usage": 0,
            "include_byok_in_limit": False,
            "is_free_tier": False,
            "is_management_key": False,
            "is_provisioning_key": False,
            "expires_at": None,
            "rate_limit": {"requests": -1, "interval": "10s", "note": "stand-in"},
        }
        return {"data": data} if wrap else data

    def _credits_answer(self) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if self._credits_forbidden:
                return 403, {"error": {"code": 403, "message": "Only management keys can fetch credits (stand-in)"}}
            return 200, {"data": {"total_credits": self._total_credits, "total_usage": self._usage_now()}}

    def _wait(self, seconds: float) -> None:
        self._stop.wait(max(0.0, min(seconds, self.max_delay_sec)))

    def _authorized(self, header: str | None) -> bool:
        return header == f"Bearer {self._key}"

    def _log(self, **entry: Any) -> None:
        with self._lock:
            self.requests.append({"at": time.monotonic(), **entry})


def _handler_for(standin: MeterStandin) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "cowork-meter-standin/1"
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: Any) -> None:  # quiet: tests and the demo read `requests`
            pass

        def _send(self, status: int, body: Any) -> None:
            # allow_nan: the stand-in must be able to emit the NaN/Infinity tokens a broken meter would.
            self._send_raw(status, json.dumps(body, allow_nan=True).encode("utf-8"))

        def _send_raw(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            path = self.path.split("?", 1)[0]
            if path == "/control":
                self._send(200, standin.state())
                return
            if path not in (f"{API_PREFIX}/key", f"{API_PREFIX}/credits"):
                self._send(404, {"error": {"code": 404, "message": "not found"}})
                return
            if not standin._authorized(self.headers.get("Authorization")):
                standin._log(path=path, answer="unauthorized", no_cache=self.headers.get("Cache-Control"))
                self._send(401, {"error": {"code": 401, "message": "No auth credentials found"}})
                return
            if path.endswith("/credits"):
                status, body = standin._credits_answer()
                standin._log(path=path, answer=status)
                self._send(status, body)
                return
            plan = standin._plan_key_answer()
            standin._log(path=path, answer=plan, no_cache=self.headers.get("Cache-Control"))
            if plan.get("silence"):
                standin._wait(standin.max_delay_sec)
                self.close_connection = True  # never answered: the client must time out
                return
            standin._wait(float(plan.get("delay_sec") or 0.0))
            if "body" in plan:  # a raw body, e.g. malformed JSON or an error text
                self._send_raw(int(plan.get("status", 200)), str(plan["body"]).encode("utf-8"))
                return
            if "status" in plan:
                self._send(int(plan["status"]), {"error": {"code": plan["status"], "message": "stand-in failure"}})
                return
            self._send(200, standin._key_body(plan["usage"]))

        def do_POST(self) -> None:  # noqa: N802
            if self.path.split("?", 1)[0] != "/control":
                self._send(404, {"error": {"code": 404, "message": "not found"}})
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                control = json.loads(self.rfile.read(min(length, 1 << 20)) or b"{}")
                if not isinstance(control, dict):
                    raise ValueError("control body must be a JSON object")
                state = standin.apply(control)
            except ValueError as exc:
                self._send(400, {"error": {"code": 400, "message": str(exc)}})
                return
            self._send(200, state)

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Local stand-in for OpenRouter's key meter (no spending).")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--key-env", required=True, help="name of the environment variable holding the accepted key")
    parser.add_argument("--usage", type=float, default=0.0)
    parser.add_argument("--limit", type=float, default=None)
    parser.add_argument("--rate", type=float, default=0.0, help="spending rate in USD per second")
    parser.add_argument("--max-delay", type=float, default=DEFAULT_MAX_DELAY_SEC)
    args = parser.parse_args(argv)
    key = os.environ.get(args.key_env, "")
    if not key:
        print(f"meter stand-in: {args.key_env} is empty", file=sys.stderr)
        return 2
    standin = MeterStandin(key, port=args.port, usage=args.usage, limit=args.limit, max_delay_sec=args.max_delay)
    if args.rate:
        standin.set_rate(args.rate)
    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())
    standin.start()
    print(
        json.dumps({"meter_standin": standin.base_url, "control": f"http://127.0.0.1:{standin.port}/control"}),
        flush=True,
    )
    while not done.wait(0.5):  # a timed wait keeps the signal handlers responsive
        pass
    standin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
