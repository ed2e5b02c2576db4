"""The HTTP task API (standard library server): a thin router over the Supervisor.

Every answer is JSON; failures use the envelope {"error": ..., ...}. An empty body reads as {}.
"""

from __future__ import annotations

import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from . import STUB_VERSION
from .supervisor import Supervisor

_TASK = re.compile(r"^/api/tasks/([^/]+)$")
_CANCEL = re.compile(r"^/api/tasks/([^/]+)/cancel$")
MAX_BODY = 8 * 1024 * 1024


class _BadBody(Exception):
    pass


def make_handler(sup: Supervisor):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "stub-ouroboros/" + STUB_VERSION

        def log_message(self, fmt, *args):  # access log to stderr, like the real server's
            sys.stderr.write("[stub-ouroboros] %s %s\n" % (self.address_string(), fmt % args))

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise _BadBody("request body too large")
            raw = self.rfile.read(length) if length else b""
            if not raw.strip():
                return {}
            try:
                return json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                raise _BadBody("invalid JSON body") from None

        def do_GET(self):
            path = urlsplit(self.path).path
            if path == "/api/health":
                return self._send(200, {"status": "ok", "version": STUB_VERSION,
                                        "runtime_version": STUB_VERSION,
                                        "app_version": STUB_VERSION, "stand_in": True})
            if path == "/api/state":
                return self._send(200, sup.state())
            if path == "/api/tasks":
                rows = [{k: r.get(k) for k in ("task_id", "status", "reason_code", "created_at",
                                               "updated_at", "artifact_status")}
                        for r in sup.store.records()]
                state = sup.state()
                return self._send(200, {"tasks": rows, "queue": {
                    "pending_count": state["pending_count"], "running_count": state["running_count"]}})
            match = _TASK.match(path)
            if match:
                return self._send(*sup.task_view(unquote(match.group(1))))
            return self._send(404, {"error": "not found"})

        def do_POST(self):
            path = urlsplit(self.path).path
            try:
                body = self._body()
            except _BadBody as exc:
                return self._send(400, {"error": str(exc)})
            if path == "/api/tasks":
                return self._send(*sup.create_task(body))
            match = _CANCEL.match(path)
            if match:
                return self._send(*sup.cancel_task(unquote(match.group(1)), body))
            return self._send(404, {"error": "not found"})

        def do_PUT(self):
            self._send(405, {"error": "method not allowed"})

        do_DELETE = do_PATCH = do_PUT

    return Handler


def bind(sup: Supervisor, host: str, port: int) -> ThreadingHTTPServer:
    """Bind `port`, or (like the real server) the next nine ports when it is busy; 0 = any."""
    candidates = [0] if port == 0 else range(port, port + 10)
    last: OSError | None = None
    for candidate in candidates:
        try:
            server = ThreadingHTTPServer((host, candidate), make_handler(sup))
        except OSError as exc:
            last = exc
            continue
        server.daemon_threads = True
        return server
    raise OSError(f"no free port in {port}..{port + 9}: {last}")
