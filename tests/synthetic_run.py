"""Synthetic run roots with the launcher's layout, for the tests and benchmarks/bench_ledger_report.py.

Nothing here is evidence: every file is made up. The layout and record shapes follow the
run-root contract (manifest, summary.csv, task dumps with claim/receipt, custody evidence).
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

from cowork_adapter.container import protocol
from cowork_adapter.schemas.manifest import (
    BenchIdentity,
    ImageIdentity,
    RunManifest,
    SeedIdentity,
    Selection,
    SharedRun,
)
from cowork_adapter.schemas.monitor import MeterState, Monitor, Spending

SHORT_NAME = "ouroboros_test_model"
SEED_HEAD = "a" * 40
BENCH_COMMIT = "d943e75bc0fc8e3b27141979300cd8cbcd1e890d"
IMAGE_ID = "sha256:" + "b" * 64
CONFIG = {"model": "test/model", "task_timeout_sec": 3600, "diagnostic_eval_on_truncation": False}
DOMAINS = ("canvas", "excel", "fetch", "kulinar", "moex", "teamly", "word", "insales")
SERVERS = ("filesystem", "excel", "emails", "terminal", "word", "google_calendar", "pptx")


def write_manifest(
    root: Path,
    tasks: list[str],
    *,
    task_ids: list[str] | None = None,
    resume_from: list[str] | None = None,
    generation: int = 0,
    applied_config: dict[str, Any] | None = None,
    seed_head: str | None = SEED_HEAD,
    bench_commit: str | None = BENCH_COMMIT,
    image_id: str | None = IMAGE_ID,
    outcome: str = "completed",
    inventory: dict[str, Any] | None = None,
    campaign_file: str | None = None,
    campaign_name: str | None = None,
    shared_run: SharedRun | None = None,
    seed_dirty: bool = False,
    engine: str = "ouroboros",
    created_at: str = "2026-01-01T00:00:00Z",
) -> RunManifest:
    root.mkdir(parents=True, exist_ok=True)
    manifest = RunManifest(
        run_root=str(root),
        run_label=f"cowork-run-{root.name}",
        created_at=created_at,
        updated_at=created_at,
        argv=["cowork-adapter", "run"],
        adapter={"version": "0.1.0"},
        seed=SeedIdentity(repo_dir="/seed", head=seed_head, dirty=seed_dirty, reportable=not seed_dirty),
        bench=BenchIdentity(
            root="/bench",
            working_copy=str(root / "bench"),
            commit=bench_commit,
            expected_commit=BENCH_COMMIT,
            dataset_size=496,
        ),
        image=ImageIdentity(tag="cowork-pack:test", id=image_id),
        engine=engine,
        selection=Selection(
            task_ids=list(tasks if task_ids is None else task_ids),
            selection_task_ids=list(tasks),
            resume_from=list(resume_from or []),
            resume_generation=generation,
        ),
        applied_config=dict(CONFIG if applied_config is None else applied_config),
        inventory=inventory,
        outcome=outcome,
        campaign_file=campaign_file,
        campaign_name=campaign_name,
        shared_run=shared_run,
    )
    (root / "run_manifest.json").write_text(manifest.to_json(), encoding="utf-8")
    return manifest


def dump_dir(root: Path, task: str) -> Path:
    path = root / "bench" / "dumps" / SHORT_NAME / f"SingleUserTurn-{task}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_runner_rows(root: Path, rows: list[tuple[str, str, str, float]]) -> None:
    folder = root / "bench" / "benchmark_logs" / "fully_parallel_20260101_000000"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "summary.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["task", "status", "eval_pass", "duration_s"])
        writer.writerows(rows)


def write_task_config(root: Path, task: str, servers: list[str]) -> None:
    folder = root / "bench" / "tasks" / "finalpool" / task
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task_config.json").write_text(json.dumps({"needed_mcp_servers": servers, "meta": {}}), encoding="utf-8")


def summary(
    bench_status: str = "success",
    *,
    infra_failed: Any = False,
    reason_code: str | None = None,
    truncated: bool = False,
    cost: float | None = 0.5,
    elapsed: float = 300.0,
    submitted: bool = True,
) -> dict[str, Any]:
    return {
        "schema": "cowork_adapter.adapter_summary.v1",
        "engine": "ouroboros",
        "bench_status": bench_status,
        "infra_failed": infra_failed,
        "reason_code": reason_code,
        "truncated": truncated,
        "task_submission_started": submitted,
        "model_activity_observed": submitted,
        "prompt_tokens": 1000 if submitted else 0,
        "completion_tokens": 200 if submitted else 0,
        "accounted_upper_bound_usd": cost,
        "cost_known": cost is not None,
        "elapsed_sec": elapsed,
        "error": None,
    }


def write_summary(dump: Path, data: dict[str, Any]) -> None:
    (dump / "ouroboros_summary.json").write_text(json.dumps(data), encoding="utf-8")


def write_start_evidence(
    dump: Path, *, usage_rows: int = 0, tokens: int = 100, cost: float | None = 0.01, other_rows: int = 0
) -> None:
    """ouroboros/ with an events.jsonl of `usage_rows` llm_usage rows, and the adapter logs."""
    folder = dump / "ouroboros"
    folder.mkdir(exist_ok=True)
    lines = []
    for i in range(usage_rows):
        lines.append(
            json.dumps(
                {
                    "ts": f"2026-01-01T00:00:{i % 60:02d}Z",
                    "type": "llm_usage",
                    "task_id": "t1",
                    "model": "test/model",
                    "prompt_tokens": tokens,
                    "completion_tokens": tokens // 4,
                    "cost": cost,
                    "cost_known": cost is not None,
                }
            )
        )
    for i in range(other_rows):
        lines.append(json.dumps({"ts": "2026-01-01T00:00:00Z", "type": "task_progress", "text": "x" * 80, "i": i}))
    (folder / "events.jsonl").write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    (dump / "applied_settings.json").write_text("{}", encoding="utf-8")
    (dump / "preprocess.log").write_text("ok\n", encoding="utf-8")


def write_traj_log(dump: Path, status: str) -> None:
    (dump / "traj_log.json").write_text(json.dumps({"config": {}, "status": status}), encoding="utf-8")


def write_eval(dump: Path, result: Any, *, mode: str = "completed", raw: bytes | None = None) -> None:
    """eval_res.json plus the attempt records of `mode`.

    completed: claim + receipt returning `result`, linked to the file; unclaimed_prior: a prior
    file, a claim, and a receipt with official_run false; claimed_unfinished: claim only;
    raised: receipt with raised=RuntimeError; none: the file alone (no attempt records);
    changed: a completed receipt, then the file replaced.
    """
    data = raw if raw is not None else (json.dumps(result).encode("utf-8") if result is not None else None)
    res_path = dump / "eval_res.json"
    if data is not None:
        res_path.write_bytes(data)
    if mode == "none":
        return
    prior = protocol.file_facts(str(res_path))
    claim = {
        "schema": protocol.CLAIM_SCHEMA,
        "kind": "official",
        "attempt_id": "c" * 32,
        "created_at": "2026-01-01T00:00:00Z",
        "eval_host": "eval-x",
        "pid": 1,
        "bindings": {"task_dir": dump.name, "task_root": str(dump)},
        "evidence": {"agent_container_state": "absent", "prior_result": prior},
    }
    (dump / protocol.CLAIM_NAME).write_bytes(protocol.dump_record(claim))
    if mode == "claimed_unfinished":
        return
    if mode == "unclaimed_prior":
        receipt = protocol.new_receipt(claim, official_run=False, cause="unclaimed_prior_result", result_file=prior)
    elif mode == "raised":
        receipt = protocol.new_receipt(
            claim,
            official_run=True,
            cause="raised",
            raised="RuntimeError",
            result_file=protocol.file_facts(str(res_path)),
        )
    else:
        receipt = protocol.new_receipt(
            claim, official_run=True, cause="evaluated", returned=result, result_file=protocol.file_facts(str(res_path))
        )
    (dump / f"{protocol.RECEIPT_PREFIX}{claim['attempt_id']}.json").write_bytes(protocol.dump_record(receipt))
    if mode == "changed":
        res_path.write_text(json.dumps({"pass": True, "details": "edited afterwards"}), encoding="utf-8")


def ledger_run(
    root: Path,
    selection: list[str],
    outcomes: dict[str, str],
    *,
    task_ids: list[str] | None = None,
    resume_from: tuple = (),
    generation: int = 0,
    **manifest_kw: Any,
) -> Path:
    """A finished run with its ledger whose tasks end as `outcomes` (pass/fail/agent/infra; the
    others are not attempted)."""
    from cowork_adapter.score.ledger import build_index, write_index

    write_manifest(
        root,
        selection,
        task_ids=task_ids,
        resume_from=[str(p) for p in resume_from],
        generation=generation,
        **manifest_kw,
    )
    for task, outcome in outcomes.items():
        dump = dump_dir(root, task)
        write_start_evidence(dump)
        if outcome == "infra":
            continue  # started, no summary: interrupted
        if outcome == "agent":
            write_summary(dump, summary("max_turns_reached", reason_code="round_limit", truncated=True))
            continue
        write_summary(dump, summary("success"))
        write_traj_log(dump, "success")
        write_eval(dump, {"pass": outcome == "pass"})
    write_index(root, build_index(root, live=False, interruption_cause="runner_exited"))
    return root


def task_names(n: int) -> list[str]:
    return [f"{DOMAINS[i % len(DOMAINS)]}-synthetic-task-{i:03d}" for i in range(n)]


def synth_run(
    root: Path, n: int = 496, *, seed: int = 7, usage_rows: int = 40, other_rows: int = 200, events: bool = True
) -> list[str]:
    """A finished run root of `n` tasks with a realistic mix of outcomes; returns the task ids."""
    rng = random.Random(seed)
    tasks = task_names(n)
    write_manifest(root, tasks)
    runner_rows = []
    for task in tasks:
        write_task_config(root, task, rng.sample(SERVERS, 3))
        roll = rng.random()
        if roll < 0.02:
            runner_rows.append((task, "pg_fail", "null", 300.0))
            continue
        if roll < 0.04:
            continue  # never started
        dump = dump_dir(root, task)
        write_start_evidence(dump, usage_rows=usage_rows, other_rows=other_rows)
        duration = rng.uniform(120, 1800)
        if roll < 0.06:
            runner_rows.append((task, "unknown", "null", duration))
            continue  # started, no summary: interrupted
        if roll < 0.14:
            write_summary(
                dump,
                summary(
                    "max_turns_reached",
                    reason_code="round_limit",
                    truncated=True,
                    cost=rng.uniform(0.2, 2.0),
                    elapsed=duration,
                ),
            )
            write_traj_log(dump, "max_turns_reached")
            gate = {"pass": None, "details": protocol.GATE_TEXT.format(status="max_turns_reached")}
            write_eval(dump, gate)
            runner_rows.append((task, "unknown", "null", duration))
            continue
        passed = rng.random() < 0.7
        write_summary(dump, summary("success", cost=rng.uniform(0.1, 1.5), elapsed=duration))
        write_traj_log(dump, "success")
        write_eval(dump, {"pass": passed, "details": "synthetic"})
        runner_rows.append((task, "success", str(passed), duration))
    write_runner_rows(root, runner_rows)
    if events:
        lines = []
        spent = 0.0
        for minute in range(0, 240, 1):
            spent += rng.uniform(0.5, 1.5)
            lines.append(
                json.dumps(
                    {
                        "schema": "cowork_adapter.event.v1",
                        "ts": f"2026-01-01T{minute // 60:02d}:{minute % 60:02d}:00Z",
                        "kind": "meter_reading",
                        "phase": "poll",
                        "usage": 100 + spent,
                        "run_spent_usd": spent,
                    }
                )
            )
        (root / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        monitor = Monitor(
            observed_at="2026-01-01T04:00:00Z",
            launcher_pid=1,
            finished=True,
            spending=Spending(run_spent_usd=spent),
            meter=MeterState(blindness_sec=30.0),
        )
        (root / "monitor.json").write_text(monitor.to_json(), encoding="utf-8")
    return tasks


def one_task_audit_run(root: Path) -> Path:
    """A finished run root of one task whose tool log reads the ground truth: one audit finding."""
    logs = root / "bench" / "dumps" / "abc" / "SingleUserTurn-t1" / "ouroboros"
    logs.mkdir(parents=True)
    (root / "run_manifest.json").write_text(
        json.dumps({"schema": "cowork_adapter.run_manifest.v1", "applied_config": {}})
    )
    (root / "monitor.json").write_text(json.dumps({"finished": True}))
    (logs / "tools.jsonl").write_text(
        json.dumps(
            {
                "ts": "2026-01-01T00:00:00+00:00",
                "type": "tool_call",
                "tool": "run_command",
                "args": {"command": "cat tasks/finalpool/x/groundtruth_workspace/answer.xlsx"},
                "result_preview": "",
                "is_error": False,
            }
        )
        + "\n"
    )
    (root / "result_index.jsonl").write_text(
        json.dumps(
            {
                "instance_id": "t1",
                "status": "passed",
                "reason_code": "passed",
                "official_eval_status": "completed",
                "task_dump": "bench/dumps/abc/SingleUserTurn-t1",
            }
        )
        + "\n"
    )
    return root
