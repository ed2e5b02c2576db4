"""The task database's diff in the audit (issue 36): which changed tables the transcript's tool
calls account for. Evidence for review, never a verdict (the ledger's own flags are
score/taskdb.py's).

A PostgreSQL-backed MCP server is one whose config in the benchmark's `configs/mcp_servers/`
sets PostgreSQL connection variables: its tools are the sanctioned route to the task's database,
but they name no tables, so one non-error call of such a server accounts for every changed
table. A database client in a shell tool (the audit's direct_database_access finding) accounts
for them too, as a finding of its own. A table changed with neither is for review: the agent
changed its database without its tools (SQL through a channel the transcript does not show).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..container import safefile
from ..runroot import layout
from ..schemas.audit import McpServerActivity, TaskDbAudit, TaskDbTable
from ..schemas.taskdb import TaskDbDiff
from ..vocab import AuditFindingReason

MCP_CONFIGS = Path(layout.CONFIGS, "mcp_servers")
CONFIG_CAP = 1 << 20
CONFIGS_MAX = 500
PG_VARIABLE = re.compile(rb"^\s*(PG_?HOST|PG_?DATABASE|PG_?USER)\s*:", re.MULTILINE)
NAME_LINE = re.compile(rb"^name:\s*['\"]?([A-Za-z0-9_.-]+)", re.MULTILINE)


def pg_servers(bench: Path) -> list[str] | None:
    """Names of the benchmark's PostgreSQL-backed MCP servers, from its own configs (capped
    reads, no link followed); None when the folder cannot be listed."""
    folder = bench / MCP_CONFIGS
    try:
        names = sorted(os.listdir(folder))[:CONFIGS_MAX]
    except OSError:
        return None
    out = []
    for name in names:
        if not name.endswith((".yaml", ".yml")):
            continue
        got = safefile.read_bytes(str(folder / name), cap=CONFIG_CAP)
        data = got.data or b""
        if not got.ok or not PG_VARIABLE.search(data):
            continue
        named = NAME_LINE.search(data)
        out.append(named.group(1).decode() if named else name.rsplit(".", 1)[0])
    return sorted(set(out))


def account(
    diff: TaskDbDiff,
    servers: Mapping[str, McpServerActivity],
    findings_by_reason: Mapping[str, int],
    pg: list[str] | None,
) -> TaskDbAudit:
    """The audit's view of one task's database diff, each changed table with what accounts for it."""
    pg_calls = sum(max(0, a.calls - a.errors) for name, a in servers.items() if pg is None or name in pg)
    shell = findings_by_reason.get(AuditFindingReason.DIRECT_DATABASE_ACCESS.value, 0) > 0
    by = "pg_mcp_call" if pg_calls else ("shell_database_client" if shell else None)
    tables = [TaskDbTable(**{f: getattr(t, f) for f in t.__struct_fields__}, accounted_by=by) for t in diff.tables]
    return TaskDbAudit(
        baseline=diff.when,
        code=list(diff.code),
        settings=list(diff.settings),
        processes=list(diff.processes),
        catalog=list(diff.catalog),
        problems=list(diff.problems),
        tables=tables,
        pg_servers=pg,
        pg_tool_calls=pg_calls,
        for_review=any(t.accounted_by is None for t in tables),
    )


def bench_of(root: Path, manifest: Mapping[str, Any]) -> Path:
    """The run's benchmark working copy as its manifest names it, else `<run root>/bench`."""
    bench = manifest.get("bench") if isinstance(manifest, Mapping) else None
    working = bench.get("working_copy") if isinstance(bench, Mapping) else None
    return Path(working) if isinstance(working, str) and Path(working).is_dir() else root / layout.BENCH
