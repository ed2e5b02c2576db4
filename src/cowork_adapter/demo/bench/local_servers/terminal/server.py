"""Demo MCP server `terminal`: a shell tool that refuses every command.

It exists so a scripted plan can leave a shell-tool trace (`mcp_terminal__run_command`) for the
offline audit to find, without the demo ever executing an agent's command.
Runs over stdio on the mcp SDK (1.x).
"""

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("terminal", log_level="WARNING")


@mcp.tool()
def run_command(command: str) -> str:
    """Run a shell command (in the demo: always refused, the call is recorded as an error)."""
    raise ValueError("the demo terminal runs no commands (refused: %r)" % command[:200])


if __name__ == "__main__":
    mcp.run(transport="stdio")
