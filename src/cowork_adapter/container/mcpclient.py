"""A minimal MCP client over streamable HTTP (urllib JSON-RPC): one session per `McpSession`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

PROTOCOL_VERSION = "2025-03-26"


class McpError(Exception):
    pass


def _parse_body(content_type: str, raw: bytes, want_id: int | None) -> Any:
    """The JSON-RPC message answering `want_id` from a JSON or an SSE body."""
    text = raw.decode("utf-8", "replace")
    if "text/event-stream" in content_type:
        messages = []
        for block in text.replace("\r\n", "\n").split("\n\n"):
            data = "\n".join(line[5:].lstrip() for line in block.split("\n") if line.startswith("data:"))
            if data.strip():
                messages.append(json.loads(data))
    else:
        value = json.loads(text) if text.strip() else None
        messages = value if isinstance(value, list) else [value]
    for msg in messages:
        if isinstance(msg, dict) and msg.get("id") == want_id:
            return msg
    raise McpError(f"no answer with id {want_id}")


class McpSession:
    """initialize → notifications/initialized → requests, against one server URL."""

    def __init__(self, url: str, timeout: float = 60.0):
        self.url = url
        self.timeout = timeout
        self.session_id: str | None = None
        self.next_id = 1
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _post(self, payload: dict) -> tuple[str, bytes]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": PROTOCOL_VERSION,
        }
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        req = urllib.request.Request(self.url, data=json.dumps(payload).encode(), headers=headers, method="POST")
        try:
            with self.opener.open(req, timeout=self.timeout) as resp:
                sid = resp.headers.get("mcp-session-id")
                if sid:
                    self.session_id = sid
                return resp.headers.get("content-type", ""), resp.read()
        except urllib.error.HTTPError as exc:
            raise McpError(f"HTTP {exc.code}: {exc.read()[:300]!r}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise McpError(f"{type(exc).__name__}: {exc}") from None

    def request(self, method: str, params: dict | None = None) -> Any:
        rid = self.next_id
        self.next_id += 1
        ctype, raw = self._post({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        msg = _parse_body(ctype, raw, rid)
        if "error" in msg:
            raise McpError(f"{method}: {msg['error']}")
        return msg.get("result")

    def open(self) -> McpSession:
        self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "cowork-probe", "version": "1"},
            },
        )
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    def list_tools(self) -> list:
        tools, cursor = [], None
        while True:
            result = self.request("tools/list", {"cursor": cursor} if cursor else {}) or {}
            tools += [t.get("name") for t in result.get("tools", []) if isinstance(t, dict)]
            cursor = result.get("nextCursor")
            if not cursor:
                return tools

    def call_text(self, name: str, arguments: dict) -> str:
        result = self.request("tools/call", {"name": name, "arguments": arguments}) or {}
        parts = [c.get("text", "") for c in result.get("content", []) if isinstance(c, dict)]
        if result.get("isError"):
            raise McpError(f"tool {name} failed: {' '.join(parts)[:300]}")
        return "\n".join(parts)
