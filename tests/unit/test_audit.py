"""The offline audit on a small synthetic run root: findings, gaps, counts, and no writes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from cowork_adapter.audit import audit_run, build_audit, run_audit_command
from cowork_adapter.errors import Refusal
from cowork_adapter.schemas.audit import read_report

TS = "2026-01-01T00:00:00+00:00"


def _tool(tool: str, args: object, is_error: bool = False) -> str:
    row = {
        "ts": TS,
        "type": "tool_call",
        "task_id": "t1",
        "tool": tool,
        "args": args,
        "result_preview": "ok",
        "is_error": is_error,
        "status": "error" if is_error else "ok",
    }
    return json.dumps(row)


def _usage(
    prompt: int = 100,
    completion: int = 10,
    cost: float | None = 0.01,
    known: bool = True,
    nested: bool = False,
    **extra: object,
) -> str:
    body = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cached_tokens": 0,
        "cost": cost,
        "cost_known": known,
        "cost_estimated": False,
    }
    row: dict[str, object] = {
        "ts": TS,
        "type": "llm_usage",
        "task_id": "t1",
        "model": "test/model",
        "provider": "openrouter",
        **extra,
    }
    if nested:
        row["usage"] = body
    else:
        row.update(body)
    return json.dumps(row)


def _write_dump(root: Path, task: str, tools: list[str], events: list[str], skip_logs: tuple[str, ...] = ()) -> Path:
    dump = root / "bench" / "dumps" / "abc123" / f"SingleUserTurn-{task}"
    logs = dump / "ouroboros"
    logs.mkdir(parents=True)
    files = {
        "tools.jsonl": tools,
        "events.jsonl": events,
        "progress.jsonl": [json.dumps({"ts": TS, "task_id": "t1", "text": "working"})],
        "chat.jsonl": [json.dumps({"ts": TS, "direction": "out", "text": "done"})],
        "supervisor.jsonl": [json.dumps({"ts": TS, "type": "worker_ready"})],
    }
    for name, lines in files.items():
        if name not in skip_logs:
            (logs / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return dump


def _row(task: str, dump: Path | None, root: Path, **extra: object) -> dict[str, object]:
    row: dict[str, object] = {
        "instance_id": task,
        "status": "passed",
        "reason_code": "passed",
        "official_eval_status": "completed",
        "official_receipt": {"path": "x", "bytes": 1, "sha256": "0" * 64, "pass": True, "cause": "evaluated"},
        "paid_activity": "observed",
        "task_dump": os.path.relpath(dump, root) if dump else None,
    }
    row.update(extra)
    return row


SHELL_ANSWER = _tool("run_command", {"command": "cat tasks/finalpool/x/groundtruth_workspace/answer.xlsx"})
JSON_PSQL = _tool("run_command", {"payload": json.dumps({"cmd": "PGPASSWORD=hunter2 psql -h pg -U app -c 'select 1'"})})
PY_PSYCOPG = _tool("python_execute", {"code": "import psycopg2\nconn = psycopg2.connect('dbname=x')"})
EVAL_RES = _tool("mcp_filesystem__read_file", {"path": "/workspace/../dumps/eval_res.json"})


@pytest.fixture()
def run_root(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    root.mkdir()
    (root / "run_manifest.json").write_text(
        json.dumps(
            {"schema": "cowork_adapter.run_manifest.v1", "applied_config": {"diagnostic_eval_on_truncation": True}}
        )
    )
    (root / "monitor.json").write_text(json.dumps({"finished": True}))
    clean = _write_dump(
        root,
        "clean-task",
        [
            _tool("mcp_filesystem__read_file", {"path": "/workspace/report.md"}),
            _tool("mcp_postgres__execute_sql", {"sql": "select * from orders"}),
            _tool("mcp_postgres__execute_sql", {"sql": "select broken"}, is_error=True),
        ],
        [_usage(), _usage(nested=True, response_provider="Anthropic"), json.dumps({"ts": TS, "type": "task_done"})],
    )
    planted = _write_dump(
        root,
        "planted-task",
        [
            _tool("mcp_filesystem__list_directory", {"path": "/workspace"}),  # line 1, record 0
            SHELL_ANSWER,  # line 2, record 1
            '{"ts": "broken',  # line 3: malformed, not a record
            JSON_PSQL,  # line 4, record 2
            PY_PSYCOPG,  # line 5, record 3
            EVAL_RES,  # line 6, record 4
        ],
        [
            _usage(),
            _usage(cost=None, known=False),
            json.dumps({"ts": TS, "type": "capability_omission", "capability": "web_search"}),
        ],
    )
    (planted / "ouroboros_eval_claim.json").write_text(json.dumps({"attempt_id": "a" * 32}))
    (planted / f"ouroboros_eval_receipt-{'a' * 32}.json").write_text(
        json.dumps({"attempt_id": "a" * 32, "official_run": True, "cause": "evaluated", "returned": {"pass": False}})
    )
    (planted / "ouroboros_diagnostic_claim.json").write_text(json.dumps({"attempt_id": "a" * 32}))
    (planted / f"ouroboros_diagnostic_receipt-{'a' * 32}.json").write_text(
        json.dumps({"outcome": "checks_failed", "reason": "checker_exit_1", "eligible": True})
    )
    rows = [
        _row("clean-task", clean, root),
        _row(
            "planted-task",
            planted,
            root,
            status="agent_failed",
            official_eval_status="declined",
            official_receipt={"pass": None, "cause": "status_gate"},
        ),
        _row("missing-task", None, root, status="infra_failed", official_eval_status="unreported"),
    ]
    (root / "result_index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evidence = root / "custody" / "evidence"
    evidence.mkdir(parents=True)
    (evidence / "r7.task").write_text("/bench/tasks/finalpool/missing-task\n")
    (evidence / "r7.eval_refused").write_text("admission_stopped\n")
    return root


def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[str(path.relative_to(root))] = "dir"
    return out


def _task(report, name):
    return next(t for t in report.tasks if t.instance_id == name)


def test_clean_task_has_no_finding_and_counts_activity(run_root: Path) -> None:
    report = build_audit(run_root)
    clean = _task(report, "clean-task")
    assert clean.findings == [] and clean.findings_total == 0
    assert clean.gaps == []
    assert clean.activity.tool_calls == 3
    assert clean.activity.mcp_calls == 3 and clean.activity.mcp_error_calls == 1
    assert clean.activity.mcp_by_server["postgres"].calls == 2
    assert clean.activity.mcp_by_server["postgres"].errors == 1
    assert clean.activity.mcp_by_server["postgres"].tools == {"execute_sql": 2}
    assert clean.activity.usage_records == 2  # one top-level, one nested under `usage`
    assert clean.activity.prompt_tokens == 200 and clean.activity.completion_tokens == 20
    assert clean.cost.complete is True and clean.cost.known_usd == pytest.approx(0.02)
    assert clean.response_providers == ["Anthropic"]
    assert clean.response_provider_coverage == "observed_subset"
    assert clean.official_pass is True and clean.model_activity_observed is True


def test_planted_traces_are_found_at_exact_coordinates(run_root: Path) -> None:
    report = build_audit(run_root)
    planted = _task(report, "planted-task")
    tools_rel = "bench/dumps/abc123/SingleUserTurn-planted-task/ouroboros/tools.jsonl"
    got = {(f.reason.value, f.file, f.line, f.record_index, f.tool) for f in planted.findings}
    assert ("answer_source_reference", tools_rel, 2, 1, "run_command") in got
    assert ("direct_database_access", tools_rel, 4, 2, "run_command") in got
    assert ("direct_database_access", tools_rel, 5, 3, "python_execute") in got
    assert ("eval_record_reference", tools_rel, 6, 4, "mcp_filesystem__read_file") in got
    assert not any(f.line == 1 for f in planted.findings)
    for finding in planted.findings:
        assert finding.token in finding.excerpt
        assert len(finding.excerpt) <= len(finding.token) + 80
        assert "hunter2" not in finding.excerpt  # a typed password never reaches the report
    psql = [f for f in planted.findings if f.token == "psql"]
    assert psql and psql[0].line == 4


def test_malformed_line_is_a_counted_gap_and_the_audit_completes(run_root: Path) -> None:
    report = build_audit(run_root)
    planted = _task(report, "planted-task")
    malformed = [g for g in planted.gaps if g.reason.value == "malformed_line"]
    assert [(g.file.endswith("tools.jsonl"), g.line) for g in malformed] == [(True, 3)]
    assert planted.activity.tool_calls == 5  # the malformed line is not a record
    assert report.task_count == 3


def test_missing_dump_is_a_gap(run_root: Path) -> None:
    report = build_audit(run_root)
    missing = _task(report, "missing-task")
    assert [g.reason.value for g in missing.gaps] == ["missing_task_dump"]
    assert missing.activity.tool_calls == 0 and missing.cost.complete is False
    assert missing.eval_attempts.eval_refusal == "admission_stopped"
    assert report.eval_attempts.eval_refusals == {"missing-task": "admission_stopped"}


def test_unknown_cost_makes_cost_incomplete(run_root: Path) -> None:
    planted = _task(build_audit(run_root), "planted-task")
    assert planted.cost.unknown_records == 1
    assert planted.cost.complete is False
    assert planted.cost.known_usd == pytest.approx(0.01)
    assert planted.gaps_by_reason.get("unknown_cost") == 1


def test_verdicts_are_copied_never_changed(run_root: Path) -> None:
    report = build_audit(run_root)
    planted = _task(report, "planted-task")
    # The receipt says pass False, but the row is declined: no verdict is invented or altered.
    assert planted.ledger_status == "agent_failed"
    assert planted.official_eval_status == "declined" and planted.official_pass is None
    assert planted.eval_attempts.receipts[0].official_run is True
    assert planted.eval_attempts.diagnostic.outcome == "checks_failed"
    assert report.eval_attempts.official_declined == 1
    assert report.eval_attempts.diagnostic_checked == 1 and report.eval_attempts.diagnostic_eligible == 1
    assert report.eval_attempts.cleanup_proven is True
    assert report.eval_attempts.diagnostic_enabled is True


def test_the_audit_finds_every_diagnostic_file_under_the_seeds_names(run_root: Path) -> None:
    """Issue 21 item 4: the diagnostic's claim, receipt, report and log all use `ouroboros_diagnostic_*`
    names, and the audit counts each kind (the log under its own name, not a look-alike)."""
    from cowork_adapter.container import diagnostic

    planted = next(p for p in run_root.rglob("ouroboros_diagnostic_claim.json")).parent
    log = Path(diagnostic.log_path(str(planted), "a" * 32))
    assert log.name.startswith("ouroboros_diagnostic_") and log.name.endswith(".log")
    log.write_text("checker output\n")
    (planted / f"ouroboros_diagnostic_report-{'a' * 32}.json").write_text(json.dumps({"stage": "started"}))
    facts = _task(build_audit(run_root), "planted-task").eval_attempts.diagnostic
    assert (facts.receipts, facts.reports, facts.logs) == (1, 1, 1)
    for name in (diagnostic.CLAIM_NAME, diagnostic.RECEIPT_PREFIX, diagnostic.REPORT_PREFIX, diagnostic.LOG_PREFIX):
        assert name.startswith("ouroboros_diagnostic_"), name


def test_capability_omission_is_counted_with_its_reference(run_root: Path) -> None:
    planted = _task(build_audit(run_root), "planted-task")
    assert planted.capability_omissions.count == 1
    assert planted.capability_omissions.references[0].line == 3


def test_missing_log_is_an_explicit_gap(tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    dump = _write_dump(root, "t", [], [_usage()], skip_logs=("tools.jsonl",))
    (root / "result_index.jsonl").write_text(json.dumps(_row("t", dump, root)) + "\n")
    task = build_audit(root).tasks[0]
    assert [(g.reason.value, g.file.rsplit("/", 1)[-1]) for g in task.gaps] == [("missing_log", "tools.jsonl")]


def test_output_refuses_to_overwrite_and_leaves_the_file(run_root: Path, tmp_path: Path, capsys) -> None:
    output = tmp_path / "audit.json"
    output.write_bytes(b"precious")
    assert run_audit_command(run_root, output) == 2
    assert output.read_bytes() == b"precious"
    assert "already exists" in capsys.readouterr().err


def test_output_is_created_and_parses(run_root: Path, tmp_path: Path) -> None:
    output = tmp_path / "new-audit.json"
    assert run_audit_command(run_root, output) == 0
    data = json.loads(output.read_text())
    assert data["schema"] == "cowork_adapter.audit.v1" and data["task_count"] == 3
    assert data["totals"]["findings_by_reason"]["direct_database_access"] == 3  # PGPASSWORD=, psql, psycopg2
    report = read_report(output.read_bytes())  # the file holds to its typed schema, field by field
    assert report.task_count == 3 and report.tasks[0].findings_total == data["tasks"][0]["findings_total"]


def test_audit_never_modifies_the_run_dir(run_root: Path, capsys) -> None:
    before = _tree_digest(run_root)
    assert run_audit_command(run_root, None) == 0
    assert json.loads(capsys.readouterr().out)["task_count"] == 3
    assert _tree_digest(run_root) == before


def test_audit_run_writes_exclusively_then_numbers(run_root: Path) -> None:
    audit_run(run_root)
    first = (run_root / "audit.launcher.json").read_bytes()
    audit_run(run_root)
    assert (run_root / "audit.launcher.json").read_bytes() == first
    assert json.loads((run_root / "audit.launcher-1.json").read_text())["task_count"] == 3
    assert not (run_root / "audit.json").exists()  # the seed's name stays free for the operator


def test_the_seeds_output_name_is_free_after_the_launchers_audit(run_root: Path) -> None:
    audit_run(run_root)  # what the launcher does at the end of every run
    assert run_audit_command(run_root, run_root / "audit.json") == 0
    assert json.loads((run_root / "audit.json").read_text())["task_count"] == 3


def test_not_a_run_is_refused(tmp_path: Path, capsys) -> None:
    with pytest.raises(Refusal):
        build_audit(tmp_path)
    assert run_audit_command(tmp_path, None) == 2
    err = capsys.readouterr().err.strip()
    assert err.count(".") >= 1 and "\n" not in err


def test_oversized_and_undecodable_lines_are_gaps_with_bounded_reads(tmp_path: Path, monkeypatch) -> None:
    import cowork_adapter.audit.read as scan_mod

    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 64)
    monkeypatch.setattr(scan_mod, "MAX_LINE_BYTES", 600)  # the ledger row fits, the huge call does not
    root = tmp_path / "run"
    root.mkdir()
    huge = _tool("run_command", {"command": "echo " + "x" * 1000 + " groundtruth_workspace"})
    dump = _write_dump(
        root, "t", [_tool("mcp_a__b", {}), huge, _tool("run_command", {"command": "cat eval_res.json"})], [_usage()]
    )
    with open(dump / "ouroboros" / "events.jsonl", "ab") as handle:
        handle.write(b'{"type": "llm_usage", "bad": "\xff\xfe"}\n')
    (root / "result_index.jsonl").write_text(json.dumps(_row("t", dump, root)) + "\n")
    task = build_audit(root).tasks[0]
    assert [(g.reason.value, g.line) for g in task.gaps] == [("oversized_line", 2), ("malformed_line", 2)]
    assert task.activity.tool_calls == 2  # the oversized line is skipped, the lines around it counted
    assert [(f.token, f.line, f.record_index) for f in task.findings] == [("eval_res.json", 3, 1)]
    assert task.cost.complete is False  # an events.jsonl gap makes cost incomplete


def test_without_a_ledger_the_manifest_selection_is_audited(tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    _write_dump(root, "a", [], [_usage()])
    (root / "run_manifest.json").write_text(json.dumps({"selection": {"selection_task_ids": ["a", "b"]}}))
    report = build_audit(root)
    assert [t.instance_id for t in report.tasks] == ["a", "b"]
    assert [g.reason.value for g in report.run_gaps] == ["missing_result_index", "missing_monitor"]
    assert report.tasks[0].activity.usage_records == 1
    assert report.tasks[1].gaps[0].reason.value == "missing_task_dump"


def test_the_ledger_reads_usage_as_the_audit_does(tmp_path: Path) -> None:
    """One reading of llm_usage records: a task's ledger row and its audit agree, nested
    fallbacks, unknown costs and malformed lines included."""
    from cowork_adapter.score.taskread import scan_usage

    root = tmp_path / "run"
    root.mkdir()
    events = [
        _usage(),
        _usage(prompt=0, completion=0, cost=0.0),
        _usage(cost=None),
        _usage(nested=True),
        json.dumps(
            {
                "type": "llm_usage",
                "prompt_tokens": None,
                "usage": {"prompt_tokens": 7, "completion_tokens": 1, "cost": 0.5},
            }
        ),
        '{"type": "llm_usage", "prompt_tokens": 5',
        json.dumps({"type": "round_start"}),
    ]
    dump = _write_dump(root, "t", [], events)
    (root / "result_index.jsonl").write_text(json.dumps(_row("t", dump, root)) + "\n")
    facts = scan_usage(dump / "ouroboros" / "events.jsonl")
    task = build_audit(root).tasks[0]
    assert facts is not None
    assert (
        facts.records,
        facts.token_records,
        facts.prompt_tokens,
        facts.completion_tokens,
        facts.unknown_cost_records,
    ) == (5, 4, 307, 31, 1)
    assert (
        facts.records,
        facts.token_records,
        facts.prompt_tokens,
        facts.completion_tokens,
        facts.unknown_cost_records,
    ) == (
        task.activity.usage_records,
        task.activity.token_bearing_usage_records,
        task.activity.prompt_tokens,
        task.activity.completion_tokens,
        task.cost.unknown_records,
    )
    assert facts.known_cost_usd == pytest.approx(task.cost.known_usd) == pytest.approx(0.52)
    assert scan_usage(tmp_path / "absent.jsonl") is None
    assert scan_usage(tmp_path).unreadable is True  # a directory where the log should be


@pytest.mark.parametrize(
    "manifest, gap",
    [
        (None, ("missing_manifest", "run_manifest.json", "absent")),
        (b"{not json", ("unreadable_record", "run_manifest.json", "json_error")),
    ],
)
def test_an_absent_or_unreadable_manifest_is_a_run_gap(tmp_path: Path, manifest, gap) -> None:
    root = tmp_path / "run"
    root.mkdir()
    dump = _write_dump(root, "t", [], [_usage()])
    (root / "result_index.jsonl").write_text(json.dumps(_row("t", dump, root)) + "\n")
    if manifest is not None:
        (root / "run_manifest.json").write_bytes(manifest)
    report = build_audit(root)
    assert [(g.reason.value, g.file, g.detail) for g in report.run_gaps] == [
        gap,
        ("missing_monitor", "monitor.json", "absent"),
    ]
    assert report.tasks[0].activity.usage_records == 1  # the ledger still carries the audit


def test_a_dump_that_cannot_be_listed_is_a_gap_and_nothing_of_it_is_read(run_root: Path, monkeypatch) -> None:
    """A dump the host cannot open (no read permission) is read through container.safefile, which
    opens every component as a directory it lists: nothing of it is read, and the task says why
    (a missing_task_dump gap naming the cause); the other tasks are read as ever."""
    import cowork_adapter.audit.task as audit_mod  # the task's dump is opened there

    open_nofollow = audit_mod.safefile.open_nofollow

    def refuse_dumps(path, below=None):
        if str(path).endswith("SingleUserTurn-planted-task"):
            return None, audit_mod.safefile.UNREADABLE, "os_error:EACCES"
        return open_nofollow(path, below=below)

    monkeypatch.setattr(audit_mod.safefile, "open_nofollow", refuse_dumps)
    planted = _task(build_audit(run_root, workers=1), "planted-task")
    assert planted.eval_attempts.claims == 0 and planted.eval_attempts.receipts == []
    assert [(g.reason.value, g.detail) for g in planted.gaps] == [("missing_task_dump", "unreadable")]
    clean = _task(build_audit(run_root, workers=1), "clean-task")
    assert clean.eval_attempts.claims == 0 and clean.eval_attempts.diagnostic.present is False
    assert clean.activity.usage_records > 0


def test_a_lone_surrogate_in_a_log_never_stops_the_audit_from_writing(run_root: Path, tmp_path: Path) -> None:
    """JSON may escape a lone surrogate (\\udcff); decoded, it cannot be written as UTF-8. The report
    keeps it as visible escaped text instead of crashing."""
    events = next(run_root.glob("bench/dumps/*/*/ouroboros/events.jsonl"))
    with events.open("a", encoding="utf-8") as fh:
        fh.write(_usage(model="bad\\udcffmodel").replace("bad\\\\udcffmodel", "bad\\udcffmodel") + "\n")
    assert "\\udcff" in events.read_text(encoding="utf-8")
    output = tmp_path / "surrogate-audit.json"
    assert run_audit_command(run_root, output) == 0
    text = output.read_text(encoding="utf-8")
    read_report(output.read_bytes())
    assert "bad\\\\udcffmodel" in text  # the escape, visible as text
