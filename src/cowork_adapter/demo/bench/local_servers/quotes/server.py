"""Demo MCP server `quotes`: fixed closing prices, written on the low-level mcp Server API (1.x).

It runs in its own environment (/opt/local_servers/quotes/.venv), which the demo pack image fills
with the 2.x SDK on purpose: 2.x removed the low-level `Server` decorators (`list_tools`,
`list_resources`), so the server crashes at start with "'Server' object has no attribute ...",
exactly like the benchmark's lock-less servers do when built today. Repinning that
environment below 2.x (the derived image's disclosed repair) makes it work.
"""

import asyncio

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

CLOSING_PRICES = {"ACME": 42.17, "GLOBEX": 18.05, "INITECH": 7.5}


class _Registry:
    """Tool functions by name, with their one-line descriptions."""

    def __init__(self):
        self.functions = {}

    def tool(self):
        def register(fn):
            self.functions[fn.__name__] = fn
            return fn

        return register


tools = _Registry()
server = Server("quotes")


@tools.tool()
def get_quote(symbol: str) -> dict:
    """The closing price of a ticker symbol: {symbol, close, currency}."""
    key = str(symbol).strip().upper()
    if key not in CLOSING_PRICES:
        raise ValueError("unknown symbol %s; known: %s" % (symbol, ", ".join(sorted(CLOSING_PRICES))))
    return {"symbol": key, "close": CLOSING_PRICES[key], "currency": "USD"}


@server.list_tools()
async def list_tools():
    schema = {"type": "object", "properties": {"symbol": {"type": "string"}}, "required": ["symbol"]}
    return [types.Tool(name=name, description=(fn.__doc__ or "").strip(), inputSchema=schema)
            for name, fn in sorted(tools.functions.items())]


@server.call_tool()
async def call_tool(name, arguments):
    fn = tools.functions.get(name)
    if fn is None:
        raise ValueError("unknown tool %s" % name)
    result = fn(**(arguments or {}))
    return [types.TextContent(type="text", text=str(result))]


@server.list_resources()
async def list_resources():
    return []


async def _main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    asyncio.run(_main())
