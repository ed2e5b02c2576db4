"""Demo MCP server `files`: read, write and list files inside one directory (the agent workspace).

Runs over stdio on the mcp SDK (1.x). ALLOWED_DIR is the root; paths outside it are refused.
"""

import os
from pathlib import Path

from mcp.server.fastmcp import FastMCP

ROOT = Path(os.environ.get("ALLOWED_DIR") or os.getcwd()).resolve()
mcp = FastMCP("files", log_level="WARNING")


def _inside(path: str) -> Path:
    candidate = (ROOT / path).resolve()
    if candidate != ROOT and ROOT not in candidate.parents:
        raise ValueError("path %r is outside the allowed directory" % path)
    return candidate


@mcp.tool()
def read_file(path: str) -> str:
    """Return the text of a file (path relative to the workspace, or absolute inside it)."""
    return _inside(path).read_text(encoding="utf-8")


@mcp.tool()
def write_file(path: str, content: str) -> str:
    """Write text to a file, creating parent folders; returns a one-line confirmation."""
    target = _inside(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return "wrote %d characters to %s" % (len(content), target.relative_to(ROOT))


@mcp.tool()
def list_files(path: str = ".") -> list:
    """List the entries of a folder, folders with a trailing slash."""
    folder = _inside(path)
    return sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())


if __name__ == "__main__":
    mcp.run(transport="stdio")
