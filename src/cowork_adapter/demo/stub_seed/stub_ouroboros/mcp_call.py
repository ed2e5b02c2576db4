"""One MCP tool call over streamable HTTP, in a FRESH client session per call (as the real engine).

That is why persistent state must live behind the URL (mcp-proxy keeps one stdio session per
server): nothing carries over between two calls made here. The mcp SDK is imported lazily so the
HTTP server starts without it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import timedelta

PREVIEW_CHARS = 2000


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool


def result_text(result) -> str:
    """Text blocks joined; structured content as JSON when there is no text."""
    parts = []
    for block in getattr(result, "content", None) or []:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            parts.append(f"[{getattr(block, 'type', 'content')}]")
    if not parts and getattr(result, "structuredContent", None) is not None:
        parts.append(json.dumps(result.structuredContent, ensure_ascii=False))
    return "\n".join(parts)


async def _call(url: str, tool: str, arguments: dict, timeout: float) -> ToolResult:
    import httpx
    from mcp import ClientSession

    try:
        from mcp.client.streamable_http import streamable_http_client
    except ImportError:  # SDKs before the rename only have the older spelling
        streamable_http_client = None
    from mcp.client.streamable_http import streamablehttp_client

    http_timeout = httpx.Timeout(timeout, read=timeout)
    if streamable_http_client is not None:
        async with httpx.AsyncClient(timeout=http_timeout) as http:
            async with streamable_http_client(url, http_client=http) as (read, write, _sid):
                return await _in_session(ClientSession(read, write), tool, arguments, timeout)
    async with streamablehttp_client(url, timeout=timeout, sse_read_timeout=timeout) as streams:
        read, write, _sid = streams
        return await _in_session(ClientSession(read, write), tool, arguments, timeout)


async def _in_session(session, tool: str, arguments: dict, timeout: float) -> ToolResult:
    async with session:
        await session.initialize()
        result = await session.call_tool(
            tool, arguments, read_timeout_seconds=timedelta(seconds=timeout)
        )
    return ToolResult(text=result_text(result), is_error=bool(result.isError))


def call_tool(url: str, tool: str, arguments: dict, timeout: float) -> ToolResult:
    """Call `tool` at `url`; every failure (transport, protocol, timeout) is an error result."""
    try:
        # The registry of the real engine adds 3 s to the configured tool timeout.
        return asyncio.run(asyncio.wait_for(_call(url, tool, arguments, timeout), timeout + 3))
    except asyncio.TimeoutError:
        return ToolResult(text=f"MCP tool call timed out after {timeout:g}s", is_error=True)
    except BaseException as exc:  # noqa: BLE001 - anyio raises exception groups; report any
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return ToolResult(text=f"MCP tool call failed: {_describe(exc)}", is_error=True)


def _describe(exc: BaseException) -> str:
    inner = getattr(exc, "exceptions", None)
    if inner:
        return _describe(inner[0])
    return f"{type(exc).__name__}: {exc}"
