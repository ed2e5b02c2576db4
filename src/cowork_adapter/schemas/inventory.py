"""The environment inventory the manifest keeps (`run_manifest.json` → `inventory`).

Format read by ledger.IndexContext._blocked_tasks and report/: `servers` {name: {health, ...}},
`blocked_tasks` {task: reason}, `repairs` [records]. The manifest stores it as a plain dict
(`Inventory.model_dump(mode="json")`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..vocab import ServerHealth

SCHEMA = "cowork_adapter.inventory.v1"


class ServerInventory(BaseModel):
    """One MCP server as the inventory found it in the derived image."""

    model_config = ConfigDict(extra="forbid")

    health: ServerHealth
    tool_count: int = 0
    tools: list[str] = Field(default_factory=list)
    error: str | None = None  # the failure, with the tail of the server's stderr
    log: str | None = None  # host path of the server's stderr log
    tasks: list[str] = Field(default_factory=list)  # selected tasks that need the server
    repair: str | None = None  # one line naming the repair, when health is `repaired`


class RepairRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str
    fault: str
    requirement: str
    before: str | None = None
    after: str | None = None  # measured in the derived image
    took: bool


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_: Literal["cowork_adapter.inventory.v1"] = Field(SCHEMA, alias="schema")
    image_id: str
    started_at: str
    finished_at: str
    servers: dict[str, ServerInventory] = Field(default_factory=dict)
    blocked_tasks: dict[str, str] = Field(default_factory=dict)
    repairs: list[RepairRecord] = Field(default_factory=list)
    checks: list[dict[str, Any]] = Field(default_factory=list)  # e.g. chromium: not_applicable
    accepted_blocked: bool = False  # the operator passed --accept-environment-blocked
    probe_dir: str | None = None
    # `qualify`'s nop pass: the run root whose inventory (same image, same servers) this one reuses.
    reused_from: str | None = None

    def to_manifest(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
