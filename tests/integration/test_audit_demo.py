"""The audit of a real demo run finds exactly the planted traces, at their exact coordinates.

One paid demo run (stub engine, stand-in meter, real Docker, real PostgreSQL) on two clean tasks
and demo-audit-planted, whose plan leaves three suspicious tool calls: a files read_file path
naming groundtruth_workspace, a psql command through the terminal server's run_command, and a
path naming eval_res.json. The run writes audit.launcher.json at its end; every finding's file, line and
record index are checked against the dumped tools.jsonl itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cowork_adapter.demo.env import prepare, read_json, read_rows
from cowork_adapter.schemas.audit import launcher_audit_path

CLEAN = ["demo-csv-totals", "demo-crm-postgres"]
PLANTED_TASK = "demo-audit-planted"
RUN_TIMEOUT_S = 1500
# (reason, token, tool) of every planted trace, in plan order.
PLANTED = [
    ("answer_source_reference", "groundtruth_workspace", "mcp_files__read_file"),
    ("direct_database_access", "psql", "mcp_terminal__run_command"),
    ("eval_record_reference", "eval_res.json", "mcp_files__read_file"),
]


@pytest.fixture(scope="module")
def demo_run(docker_host, tmp_path_factory):
    root = Path(tmp_path_factory.mktemp("audit-demo")) / "demo"
    env = prepare(root, docker_host)
    try:
        proc = env.launch(env.run_args("audit", CLEAN + [PLANTED_TASK], campaign="campaign-audit.json"), "audit")
        code = proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        env.meter.stop()
    run_root = env.run_root("audit")
    log = (root / "audit.log").read_text(errors="replace")[-4000:]
    assert code == 0, f"run exit {code}\n{log}"
    return run_root


def _tool_rows(path: Path) -> list[tuple[int, dict]]:
    """(1-based line, row) of every tool-call row, in file order."""
    out = []
    for number, line in enumerate(path.read_text().split("\n"), start=1):
        if line.strip():
            row = json.loads(line)
            if row.get("type") == "tool_call":
                out.append((number, row))
    return out


def test_clean_tasks_give_no_finding_and_planted_traces_are_found_exactly(demo_run):
    rows = read_rows(demo_run)
    assert {t: rows[t]["status"] for t in CLEAN + [PLANTED_TASK]} == dict.fromkeys(CLEAN + [PLANTED_TASK], "passed")

    audit = read_json(launcher_audit_path(demo_run))
    assert audit, "the run wrote no audit.launcher.json"
    tasks = {t["instance_id"]: t for t in audit["tasks"]}
    for name in CLEAN:
        assert tasks[name]["findings_total"] == 0 and tasks[name]["findings"] == [], tasks[name]["findings"]
        assert tasks[name]["activity"]["tool_calls"] > 0  # the clean traces were really scanned

    planted = tasks[PLANTED_TASK]
    # The audit copies the verdict as evidence and never changes it.
    assert planted["ledger_status"] == "passed"
    assert planted["findings_total"] == len(PLANTED) == len(planted["findings"])
    assert audit["totals"]["findings"] == len(PLANTED)
    assert [(f["reason"], f["token"], f["tool"]) for f in planted["findings"]] == PLANTED

    tools_path = demo_run / planted["findings"][0]["file"]
    tool_rows = _tool_rows(tools_path)
    lines = tools_path.read_text().split("\n")
    for finding in planted["findings"]:
        assert not Path(finding["file"]).is_absolute()
        assert finding["file"] == f"{planted['task_dump']}/ouroboros/tools.jsonl"
        line_text = lines[finding["line"] - 1]  # 1-based line number
        assert finding["token"] in line_text
        row = json.loads(line_text)
        assert row["tool"] == finding["tool"]
        # record_index counts tool-call rows (0-based): it names the same row as the line.
        assert tool_rows[finding["record_index"]] == (finding["line"], row)
    # The planted calls all failed at the tool (the audit reports references, not successes).
    for finding in planted["findings"]:
        assert json.loads(lines[finding["line"] - 1])["is_error"] is True


def test_report_over_the_real_audit_shows_every_planted_finding_by_reason(demo_run, tmp_path):
    """`cowork-adapter report` reads the launcher's audit of the run and lists each finding."""
    out_dir = tmp_path / "report"
    before = sorted(str(p.relative_to(demo_run)) for p in demo_run.rglob("*"))
    proc = subprocess.run(
        [sys.executable, "-m", "cowork_adapter", "report", str(demo_run), "--json", "--output-dir", str(out_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    summary = json.loads(proc.stdout)["audit"]
    assert summary is not None and summary["unreadable"] == []
    expected: dict[str, int] = {}
    for reason, _, _ in PLANTED:
        expected[reason] = expected.get(reason, 0) + 1
    assert summary["findings"] == len(PLANTED) and summary["findings_by_reason"] == expected
    assert summary["tasks_with_findings"] == 1
    listed = [(f["instance_id"], f["reason"], f["token"], f["tool"]) for f in summary["items"]]
    assert listed == [(PLANTED_TASK, reason, token, tool) for reason, token, tool in PLANTED]
    markdown = (out_dir / "report.md").read_text()
    assert f"found {len(PLANTED)} findings in 1 task" in markdown
    for item in summary["items"]:
        assert f"| {PLANTED_TASK} | {item['reason']} | {item['file']}:{item['line']} |" in markdown
    # Offline, read-only: the run root gained nothing.
    assert sorted(str(p.relative_to(demo_run)) for p in demo_run.rglob("*")) == before


def test_the_seeds_audit_command_works_as_written_on_the_finished_run(demo_run):
    """Issue 21 item 5: `audit --run-dir RUN --output RUN/audit.json` on a finished run succeeds, and
    the launcher's own audit (a name of its own) is left as it was."""
    import subprocess
    import sys

    launcher_audit = demo_run / "audit.launcher.json"
    before = launcher_audit.read_bytes()
    assert not (demo_run / "audit.json").exists()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cowork_adapter",
            "audit",
            "--run-dir",
            str(demo_run),
            "--output",
            str(demo_run / "audit.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    written = read_json(demo_run / "audit.json")
    launcher = json.loads(before)
    assert written["task_count"] == launcher["task_count"] and written["totals"] == launcher["totals"]
    assert launcher_audit.read_bytes() == before


# ---------------------------------------------------------------- the same run as an Inspect AI log


@pytest.fixture(scope="module")
def exported(demo_run, tmp_path_factory):
    """`cowork-adapter export` of the demo run: (the log folder, the log)."""
    from cowork_adapter.export import log_name

    out = Path(tmp_path_factory.mktemp("inspect-export")) / "logs"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cowork_adapter",
            "export",
            str(demo_run),
            "--format",
            "inspect",
            "--output-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    return out, out / log_name(demo_run)


def test_the_export_reads_back_with_every_task_its_verdict_usage_and_transcript(demo_run, exported):
    from inspect_ai.analysis import samples_df
    from inspect_ai.log import read_eval_log

    from cowork_adapter.report import make_report
    from cowork_adapter.report.build import row_cost
    from cowork_adapter.schemas.ledger import read_index

    _, path = exported
    log = read_eval_log(str(path))
    # The demo's runner finished: the log is `success` as Inspect means it (never `cancelled`).
    assert json.loads((demo_run / "run_manifest.json").read_text())["outcome"] in ("completed", "incomplete")
    assert log.status == "success" and log.error is None
    assert log.eval.task_display_name == demo_run.name and demo_run.name in log.eval.tags
    rows = {r.instance_id: r for r in read_index(demo_run / "result_index.jsonl")}
    samples = {s.id: s for s in log.samples}
    assert sorted(samples) == sorted(rows) == sorted(CLEAN + [PLANTED_TASK])
    model = log.eval.model
    for task, row in rows.items():
        sample = samples[task]
        assert sample.scores["official"].value == ("C" if row.status.value == "passed" else "I"), task
        assert sample.scores["official"].metadata["status"] == row.status.value
        usage = sample.model_usage[model]
        assert (usage.input_tokens, usage.output_tokens) == (row.usage.prompt_tokens, row.usage.completion_tokens)
        assert usage.total_cost == pytest.approx(row_cost(row))
        # The stub engine logs every round: the conversation is there, as messages and as events.
        assert [m.role for m in sample.messages][0] == "user", task
        assert any(m.role == "assistant" and m.tool_calls for m in sample.messages), task
        assert {"model", "tool"} <= {e.event for e in sample.events}, task
    planted = samples[PLANTED_TASK]
    called = [c.function for m in planted.messages if m.role == "assistant" for c in (m.tool_calls or [])]
    remaining = iter(called)  # the planted calls appear in the transcript, in plan order
    assert all(any(c == tool for c in remaining) for _, _, tool in PLANTED), called
    assert planted.metadata["audit"]["findings_total"] == len(PLANTED)
    assert [f["token"] for f in planted.metadata["audit"]["findings"]] == [token for _, token, _ in PLANTED]
    report = make_report([demo_run], 1)
    frame = samples_df(str(path))
    assert (frame["score_official"] == "C").mean() == pytest.approx(report["pass_at_1"])
    assert log.eval.metadata["disclosures"] == report["disclosures"]


def test_inspect_view_shows_the_sample_list_and_a_transcript(demo_run, exported):
    """`inspect view` on the export, in the test bed's headless Chromium: the page's own text (not a
    file's existence) holds every task of the sample list and the planted task's tool calls."""
    from inspect_view import Viewer  # tests/inspect_view.py

    out, path = exported
    # Kept after the test (pytest prunes its old temporary folders): COWORK_TEST_ARTIFACTS, else the
    # clone's own test-artifacts/ (ignored by git), one folder per test session.
    base = os.environ.get("COWORK_TEST_ARTIFACTS") or str(Path(__file__).resolve().parents[2] / "test-artifacts")
    artifacts = Path(base) / f"inspect-view-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    print(f"inspect view screenshots and logs: {artifacts}")
    with Viewer(out, artifacts) as viewer:
        listed = viewer.page_text(f"/logs/{path.name}/samples/", CLEAN + [PLANTED_TASK], artifacts / "samples.png")
        shown = viewer.page_text(
            f"/logs/{path.name}/samples/sample/{PLANTED_TASK}/1/transcript",
            [tool for _, _, tool in PLANTED],
            artifacts / "transcript.png",
        )
    for task in CLEAN + [PLANTED_TASK]:
        assert task in listed, listed[:3000]
    assert "cowork_bench" in listed
    for _, _, tool in PLANTED:
        assert tool in shown, shown[:3000]
    assert "MODEL CALL" in shown.upper(), shown[:3000]
    assert (artifacts / "transcript.png").stat().st_size > 10_000
