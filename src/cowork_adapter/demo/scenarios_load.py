"""Demo scenario `hostile-load`: one agent cannot starve its siblings, stop the run or fill the host.

One paid run (meter stand-in; model traffic through --llm-gateway to a local chat stand-in that bills
a small cost per answer) of the demo bench's `load_agent.py` as `--engine upstream:load_agent.py`,
four tasks at concurrency 4, so the honest task runs beside every attacker:

| task              | what its engine does (load_agent.PLANS)                          | what must hold                  |
|-------------------|------------------------------------------------------------------|---------------------------------|
| demo-csv-totals   | 40 model calls through the gateway (half streamed) while the     | passed; every call answered     |
|                   | others attack, then the demo's own engine                        | (none refused), p99 stated      |
| demo-wrong-answer | floods the gateway with requests from 12 threads for 20 s, drops | its row names the gateway's     |
|                   | 6 streams after their headers, holds 300 connections for 40 s    | refusals; the run is not fenced |
| demo-round-limit  | prints 160 MiB, allocates 1.5 GiB and makes 120,000 files in     | its row names the dump bound it |
|                   | its dump, then lingers (the run's bounds: 0.25 GiB, 20,000)      | crossed (dump_over_bound)       |
| demo-crm-postgres | JSON nested 300,000 levels deep as its claim and a receipt       | its own row, flagged; no other  |
|                   |                                                                  | reader fails                    |

Checks: the run ends by itself (exit 0 or 1) within RUN_BOUND_SEC, not stopped by any attacker (no
stop reason, the gateway never fenced on money); the honest task passes and the gateway answered
every one of its model calls (p99 latency in the detail); each attacker's row names what it did;
`status`, `report`, `audit`, `export` and `clear` each finish within COMMAND_BOUND_SEC; the run
root's files (the runner's task logs) never outgrow LOG_BOUND_BYTES; nothing labelled is left; the campaign is settled.

The output, dump and reader bounds are the adapter's defences against the last three attackers
(issue 37: the entrypoint's output cap, the dump bounds, nesting-safe host readers); the gateway's
fair shares, token on every path, reservations and bounded refusal log against the first.
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
from pathlib import Path

from ..container import safefile
from ..schemas.gateway import read_requests
from ..score.resources import task_runner_ids
from ..vocab import ExitCode, TaskStatus
from .chaos import cli
from .chat_standin import ChatStandin
from .env import Check, DemoEnv, campaign_checks, custody_checks, read_json, read_rows

ENGINE = "upstream:load_agent.py"
HONEST = "demo-csv-totals"
GATEWAY_ATTACKER = "demo-wrong-answer"
FLOODER = "demo-round-limit"
NESTER = "demo-crm-postgres"
TASKS = [HONEST, GATEWAY_ATTACKER, FLOODER, NESTER]
MODEL_CALLS = 40  # load_agent.MODEL_CALLS (the engine runs in the image and cannot import this)
CONCURRENCY = 4
COST_PER_ANSWER_USD = 0.0001  # what the chat stand-in bills: the honest task's 30 calls stay far below its limit
RUN_BOUND_SEC = 900
COMMAND_BOUND_SEC = 120.0  # each host command, on a loaded 2-core host
# The run's dump bounds, set below what the flooder makes (1.5 GiB, 120,000 files) so that it crosses
# them while it lingers. They stop a task at the meter's next look, not at the byte: an allocation made
# in one call (fallocate) lands whole, so the run root's size is not asserted (docs/security.md).
DUMP_MAX_GIB = "0.25"
DUMP_MAX_ENTRIES = "20000"
LOG_BOUND_BYTES = 64 << 20  # the entrypoint's output cap is tens of MiB; the attacker prints 160 MiB
WALK_CAP = 2_000_000  # the check's own walk stops counting here
AGENT_RECORD_CAP = 1 << 20
# Words that name each attacker's deed in its ledger row (status, reason, tampering kinds and details).
DEEDS = {
    FLOODER: ("dump_over_bound",),
    # Its nested claim and receipt are set aside as planted (named on the row); no reader fails on them.
    NESTER: ("planted_before_eval",),
}


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (p99 of 40 calls is the slowest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)] if ordered else float("nan")


def agent_record(run_root: Path, task: str, name: str) -> dict | None:
    """A JSON record the engine wrote in its dump, read as untrusted output (bounded, no link, any bytes)."""
    found = sorted((run_root / "bench" / "dumps").glob(f"*/SingleUserTurn-{task}/{name}"))
    if not found:
        return None
    read = safefile.read_bytes(str(found[0]), cap=AGENT_RECORD_CAP, below=str(run_root))
    try:
        record = json.loads(read.data) if read.ok and read.data is not None else None
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def usage_of_tree(root: Path, skip_largest: str = "bench/dumps") -> tuple[int, int, int, str]:
    """(bytes allocated, entries, largest file's bytes and its path outside `skip_largest`) under
    `root`: walked without recursion, no link followed, at most WALK_CAP entries counted."""
    blocks = entries = largest = 0
    where = ""
    stack = [str(root)]
    while stack and entries < WALK_CAP:
        top = stack.pop()
        try:
            with os.scandir(top) as listing:
                for entry in listing:
                    entries += 1
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    blocks += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(entry.path)
                    elif stat.S_ISREG(info.st_mode) and info.st_size > largest:
                        rel = os.path.relpath(entry.path, root)
                        if not rel.startswith(skip_largest + os.sep):
                            largest, where = info.st_size, rel
        except OSError:
            continue
    return blocks, entries, largest, where


def row_text(row: dict) -> str:
    parts = [str(row.get("status")), str(row.get("reason_code"))]
    for finding in row.get("tampering") or []:
        if isinstance(finding, dict):
            parts += [str(finding.get("kind")), str(finding.get("detail"))]
    return " ".join(parts).lower()


def honest_checks(run_root: Path, rows: dict[str, dict]) -> list[Check]:
    row = rows.get(HONEST, {})
    runner = task_runner_ids(run_root).get(HONEST)
    mine = [r for r in read_requests(run_root) if runner is not None and r.task == runner]
    forwarded = [r for r in mine if r.refused is None and r.path.rstrip("/").endswith("/chat/completions")]
    refused = {r.refused: r.count for r in mine if r.refused is not None}
    latencies = [r.latency_ms for r in forwarded]
    calls = (agent_record(run_root, HONEST, "load_model_calls.json") or {}).get("calls") or []
    seen = [c.get("status") for c in calls if isinstance(c, dict)]
    return [
        Check(
            f"{HONEST} (the honest engine) passed",
            row.get("status") == TaskStatus.PASSED.value,
            f"got {row.get('status')} ({row.get('reason_code')})",
        ),
        Check(
            f"the gateway answered every one of its {MODEL_CALLS} model calls (none refused)",
            len(forwarded) == MODEL_CALLS
            and not refused
            and all(r.status == 200 for r in forwarded)
            and seen == [200] * MODEL_CALLS,
            f"{len(forwarded)} forwarded, statuses {sorted({r.status for r in forwarded})}, refused {refused}; "
            f"the engine saw {sorted(set(map(str, seen)))}; p50 {percentile(latencies, 50):.0f} ms, "
            f"p99 {percentile(latencies, 99):.0f} ms at the gateway",
        ),
    ]


def attacker_checks(run_root: Path, rows: dict[str, dict], manifest: dict) -> list[Check]:
    record = manifest.get("llm_gateway") or {}
    row = rows.get(GATEWAY_ATTACKER, {})
    spend = row.get("gateway") or {}
    refused = spend.get("refused") or {}
    attempts = {
        a.get("attack"): a
        for a in (agent_record(run_root, GATEWAY_ATTACKER, "load_attempts.json") or {}).get("attempts", [])
        if isinstance(a, dict)
    }
    held = (attempts.get("hold_connections") or {}).get("counts") or {}
    shares = sum(r.count for r in read_requests(run_root) if r.refused in ("peer_share", "full"))
    checks = [
        Check(
            "the gateway attacker's row names its refused flood (the gateway's refusals by cause)",
            sum(refused.values()) >= 100 and bool({"task_busy", "shape", "task_budget"} & set(refused)),
            f"refused {refused}, forwarded {spend.get('forwarded')}",
        ),
        Check(
            "the gateway attacker's dropped streams were counted against it alone (assumed figures on its row)",
            (spend.get("unknown_cost_requests") or 0) >= 1 and (spend.get("assumed_cost_usd") or 0) > 0,
            f"unknown-cost {spend.get('unknown_cost_requests')}, assumed ${spend.get('assumed_cost_usd')}",
        ),
        Check(
            "the connections it held past its share were closed on accept (counted, a few rows)",
            shares >= 1 and (held.get("closed_by_gateway") or 0) >= 1,
            f"{shares} refused on accept; the engine saw {held}",
        ),
        Check(
            "the gateway never fenced the run on money",
            record.get("fence_reason") != "gateway_budget",
            f"fence {record.get('fence_reason')}, assumed ${record.get('assumed_usd')}, spent "
            f"${record.get('spent_usd')}",
        ),
    ]
    for task, words in DEEDS.items():
        deed_row = rows.get(task)
        text = row_text(deed_row or {})
        checks.append(
            Check(
                f"{task}'s row names what it did ({' / '.join(words)})",
                deed_row is not None
                and deed_row.get("status") != TaskStatus.PASSED.value
                and any(w in text for w in words),
                text[:200] if deed_row else "no row",
            )
        )
    return checks


def command_checks(env: DemoEnv, run_root: Path, campaign: str) -> list[Check]:
    """Each host command over the attacked run, within its bound; clear last."""
    out = env.root / "load-out"
    commands = {
        "status": ["status", str(run_root), "--json"],
        "report": ["report", str(run_root), "--json", "--output-dir", str(out / "report")],
        "audit": ["audit", "--run-dir", str(run_root), "--output", str(out / "audit.json")],
        "export": ["export", str(run_root), "--output-dir", str(out / "export")],
        "clear": [
            "clear",
            str(run_root),
            "--operator-note",
            "hostile-load scenario: the run ended by itself",
            "--campaign-file",
            str(env.root / campaign),
            "--meter-url",
            env.meter.base_url,
            "--docker-host",
            env.docker_host,
            "--api-key-env",
            env.key_env,
        ],
    }
    out.mkdir(exist_ok=True)
    checks = []
    for name, args in commands.items():
        started = time.monotonic()
        try:
            proc = cli(env, *args, timeout=COMMAND_BOUND_SEC * 2)
            code, said = proc.returncode, (proc.stderr or proc.stdout or "").strip()
        except Exception as exc:  # noqa: BLE001 - past twice its bound: the failed check says so
            code, said = None, f"{type(exc).__name__}"
        took = time.monotonic() - started
        checks.append(
            Check(
                f"`{name}` finishes within {COMMAND_BOUND_SEC:.0f} s (exit 0 or 1, no traceback)",
                code in (ExitCode.OK, ExitCode.FAILED) and took < COMMAND_BOUND_SEC and "Traceback" not in said,
                f"exit {code} after {took:.1f} s: {said[-200:]}",
            )
        )
    return checks


def disk_checks(run_root: Path) -> list[Check]:
    _, _, largest, where = usage_of_tree(run_root)
    return [
        Check(
            f"no file of the run outside the dumps (the runner's task logs) outgrew {LOG_BOUND_BYTES >> 20} MiB",
            largest < LOG_BOUND_BYTES,
            f"largest {where}: {largest >> 20} MiB",
        ),
    ]


def scenario_hostile_load(env: DemoEnv) -> list[Check]:
    name, campaign = "hostile-load", "campaign-hostile-load.json"
    run_root = env.run_root(name)
    # A pause before each streamed chunk: a stream hung up on after its headers is a stream dropped.
    chat = ChatStandin(host="127.0.0.1", cost_per_request=COST_PER_ANSWER_USD, chunk_delay_sec=0.05).start()
    try:
        extra = [
            "--engine",
            ENGINE,
            "--llm-gateway",
            "--openai-compatible-base-url",
            chat.base_url,
            "--credential-setting",
            "OPENAI_COMPATIBLE_API_KEY",
            "--dump-max-gib",
            DUMP_MAX_GIB,
            "--dump-max-entries",
            DUMP_MAX_ENTRIES,
        ]
        started = time.monotonic()
        proc = env.launch(env.run_args(name, TASKS, campaign=campaign, extra=extra, concurrency=CONCURRENCY), name)
        try:
            code = proc.wait(timeout=RUN_BOUND_SEC)
        except Exception:  # noqa: BLE001 - a run past its bound is the failed check below, then stopped
            proc.kill()
            code = proc.wait()
        elapsed = time.monotonic() - started
    finally:
        chat.stop()
    rows = read_rows(run_root)
    manifest = read_json(run_root / "run_manifest.json")
    checks = [
        Check(
            f"the run ended by itself within {RUN_BOUND_SEC} s (exit 0 or 1)",
            code in (ExitCode.OK, ExitCode.FAILED) and elapsed < RUN_BOUND_SEC,
            f"exit {code} after {elapsed:.0f} s",
        ),
        Check(
            "no attacker stopped the run (no stop reason)",
            manifest.get("stop_reason") is None,
            str(manifest.get("stop_reason")),
        ),
        Check("every task has its own ledger row", set(rows) == set(TASKS), f"rows for {sorted(rows)}"),
    ]
    checks += honest_checks(run_root, rows) + attacker_checks(run_root, rows, manifest)
    checks += disk_checks(run_root)
    checks += command_checks(env, run_root, campaign)
    return checks + custody_checks(env, run_root) + campaign_checks(env, campaign, run_root)
