"""The audit of a real demo run finds exactly the planted traces, at their exact coordinates.

One paid demo run (stub engine, stand-in meter, real Docker, real PostgreSQL) on two clean tasks
and demo-audit-planted, whose plan leaves three suspicious tool calls: a files read_file path
naming groundtruth_workspace, a psql command through the terminal server's run_command, and a
path naming eval_res.json. The run writes audit.launcher.json at its end; every finding's file, line and
record index are checked against the dumped tools.jsonl itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cowork_adapter.demo.scenarios import prepare, read_json, read_rows
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
    proc = subprocess.run([sys.executable, "-m", "cowork_adapter", "report", str(demo_run), "--json",
                           "--output-dir", str(out_dir)], capture_output=True, text=True, timeout=300)
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
    proc = subprocess.run([sys.executable, "-m", "cowork_adapter", "audit", "--run-dir", str(demo_run),
                           "--output", str(demo_run / "audit.json")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    written = read_json(demo_run / "audit.json")
    launcher = json.loads(before)
    assert written["task_count"] == launcher["task_count"] and written["totals"] == launcher["totals"]
    assert launcher_audit.read_bytes() == before
