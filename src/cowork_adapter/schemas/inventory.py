"""The environment inventory the manifest keeps (`run_manifest.json` → `inventory`).

Format read by score/context.py IndexContext._blocked_tasks and report/: `servers` {name: {health, ...}},
`blocked_tasks` {task: reason}, `repairs` [records]. The manifest stores it as a plain dict
(`Inventory.to_manifest()`).
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from ..vocab import ServerHealth
from .record import Record

SCHEMA: Final = "cowork_adapter.inventory.v1"


class ServerInventory(Record):
    """One MCP server as the inventory found it in the derived image."""

    health: ServerHealth
    tool_count: int = 0
    tools: list[str] = msgspec.field(default_factory=list)
    error: str | None = None  # the failure, with the tail of the server's stderr
    log: str | None = None  # host path of the server's stderr log
    tasks: list[str] = msgspec.field(default_factory=list)  # selected tasks that need the server
    repair: str | None = None  # one line naming the repair, when health is `repaired`


class RepairRecord(Record):
    server: str
    fault: str
    requirement: str
    before: str | None = None
    after: str | None = None  # measured in the derived image
    took: bool


class Inventory(Record, rename={"schema_": "schema"}):
    schema_: Literal["cowork_adapter.inventory.v1"] = SCHEMA
    image_id: str
    started_at: str
    finished_at: str
    servers: dict[str, ServerInventory] = msgspec.field(default_factory=dict)
    blocked_tasks: dict[str, str] = msgspec.field(default_factory=dict)
    repairs: list[RepairRecord] = msgspec.field(default_factory=list)
    checks: list[dict[str, Any]] = msgspec.field(default_factory=list)  # e.g. chromium: not_applicable
    accepted_blocked: bool = False  # the operator passed --accept-environment-blocked
    probe_dir: str | None = None
    # `qualify`'s nop pass: the run root whose inventory (same image, same servers) this one reuses.
    reused_from: str | None = None

    def to_manifest(self) -> dict[str, Any]:
        return self.to_dict()
