"""Names the agent sees for MCP tools: `mcp_<server-slug>__<tool-slug>` (both releases)."""

from __future__ import annotations

import hashlib
import re

_NOT_SLUG = re.compile(r"[^a-z0-9_]")
_UNDERSCORES = re.compile(r"_+")


def _capped(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    return text[: limit - 9] + "_" + digest


def slug(text: str) -> str:
    lowered = _NOT_SLUG.sub("_", text.lower())
    return _UNDERSCORES.sub("_", lowered).strip("_")


def mcp_tool_name(server_id: str, tool: str) -> str:
    name = f"mcp_{_capped(slug(server_id), 24)}__{_capped(slug(tool), 32)}"
    if len(name) > 64:
        name = name[:55] + "_" + hashlib.sha1(name.encode("utf-8")).hexdigest()[:8]
    return name
