"""The scored report: Wilson values, denominator, merge provenance, the audit's real findings,
disclosures in sentences, outputs only where told, and plots with labelled axes."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)
from test_recovery import make_run  # noqa: E402  (same directory; pytest puts it on sys.path)

from cowork_adapter.audit import audit_run
from cowork_adapter.report import make_report, run_report_command
from cowork_adapter.report.render import to_markdown
from cowork_adapter.report.stats import project_full_run, quantile, wilson_interval
from cowork_adapter.report.svg import bar_chart, histogram, step_line
from cowork_adapter.schemas.audit import launcher_audit_path, read_launcher_audit
from cowork_adapter.schemas.campaign import CampaignRecord, key_fingerprint
from cowork_adapter.schemas.inventory import Inventory, RepairRecord, ServerInventory
from cowork_adapter.score.ledger import build_index, write_index


@pytest.mark.parametrize(
    "k,n,lo,hi",
    [
        (363, 496, 0.6912, 0.7690),  # the published Kimi K3 row (hand-computed)
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (5, 10, 0.2366, 0.7634),
    ],
)
def test_wilson_interval_values(k, n, lo, hi):
    got = wilson_interval(k, n)
    assert got == pytest.approx((lo, hi), abs=1e-4)


def test_quantile_and_projection():
    assert quantile([1, 2, 3, 4, 5], 0.9) == pytest.approx(4.6)
    p = project_full_run([1.0, 3.0], [100.0, 300.0], tasks=496, concurrency=4)
    assert p["projected_cost_usd"] == pytest.approx(992.0)
    assert p["projected_wall_s"] == pytest.approx(496 * 200 / 4)


def test_denominator_is_the_selection_not_the_attempted(tmp_path):
    tasks = ["a-1", "a-2", "b-1", "b-2", "c-1"]
    root = make_run(tmp_path / "r0", tasks, {"a-1": "pass", "a-2": "fail", "b-1": "infra"})
    r = make_report([root], 4)
    assert r["denominator"] == 5 and r["passed"] == 1
    assert r["pass_at_1"] == pytest.approx(0.2)
    assert r["counts"]["not_attempted"] == 2 and r["counts"]["infra_failed"] == 1
    assert r["wilson95"] == pytest.approx(list(wilson_interval(1, 5)))
    assert {g["name"]: g["tasks"] for g in r["by_domain"]} == {"a": 2, "b": 2, "c": 1}
    assert any("subset" in d for d in r["disclosures"])


def test_recovery_merge_takes_latest_settled_with_provenance(tmp_path):
    r0 = make_run(tmp_path / "r0", ["a", "b", "c"], {"a": "pass", "b": "infra", "c": "infra"})
    r1 = make_run(tmp_path / "r1", ["a", "b", "c"], {"b": "fail"}, task_ids=["b", "c"], resume_from=[r0], generation=1)
    r = make_report([r1], 2)
    rows = {t["instance_id"]: t for t in r["tasks"]}
    assert (rows["a"]["status"], rows["a"]["provenance"]) == ("passed", str(r0))
    assert (rows["b"]["status"], rows["b"]["provenance"]) == ("failed", str(r1))
    # c was not attempted in r1: the earlier infra row is kept, not the later not_attempted one.
    assert (rows["c"]["status"], rows["c"]["provenance"]) == ("infra_failed", str(r0))
    assert r["denominator"] == 3 and len(r["runs"]) == 2


def test_report_refuses_mixed_configurations(tmp_path):
    r0 = make_run(tmp_path / "r0", ["a"], {"a": "pass"})
    r1 = make_run(tmp_path / "r1", ["b"], {"b": "pass"}, image_id="sha256:" + "9" * 64)
    assert run_report_command([r0, r1], tmp_path / "out", 1, False) == 2
    assert not (tmp_path / "out").exists()


TS = "2026-01-01T00:00:00Z"


def _tool_call(tool: str, args: dict) -> str:
    return json.dumps(
        {
            "ts": TS,
            "type": "tool_call",
            "task_id": "t1",
            "tool": tool,
            "args": args,
            "result_preview": "ok",
            "is_error": False,
            "status": "ok",
        }
    )


# One planted tool call per finding reason the audit knows (the rules of audit_rules.py).
PLANTED = {
    "answer_source_reference": _tool_call(
        "run_command", {"command": "cat tasks/finalpool/x/groundtruth_workspace/a.xlsx"}
    ),
    "direct_database_access": _tool_call("run_command", {"command": "psql -h pg -U app -c 'select 1'"}),
    "eval_record_reference": _tool_call("mcp_filesystem__read_file", {"path": "/workspace/../dumps/eval_res.json"}),
    "evaluator_reference": _tool_call(
        "mcp_filesystem__read_file", {"path": "/bench/tasks/finalpool/x/evaluation/main.py"}
    ),
}
CLEAN_CALL = _tool_call("mcp_filesystem__list_directory", {"path": "/workspace"})


def _audited_run(root: Path) -> list[str]:
    """A synthetic finished run with planted traces in two task dumps, then the real audit of it."""
    tasks = synth.synth_run(root, 12, usage_rows=2, other_rows=2)
    write_index(root, build_index(root, live=False, interruption_cause="runner_exited"))
    dumps = sorted((root / "bench" / "dumps" / synth.SHORT_NAME).iterdir())
    assert len(dumps) >= 3
    reasons = sorted(PLANTED)
    plants = {
        dumps[0]: [CLEAN_CALL] + [PLANTED[r] for r in reasons[:2]],
        dumps[1]: [PLANTED[r] for r in reasons[2:]] + [PLANTED["direct_database_access"]],
        dumps[2]: [CLEAN_CALL],
    }
    for dump, lines in plants.items():
        (dump / "ouroboros" / "tools.jsonl").write_text("".join(line + "\n" for line in lines))
    audit_run(root)
    return tasks


def test_report_shows_every_finding_of_a_real_audit_by_reason(tmp_path, capsys):
    root = tmp_path / "run"
    _audited_run(root)
    audit = read_launcher_audit(root)
    assert audit is not None and audit.totals.findings == 5  # the audit really found the planted calls
    expected = sorted((t.instance_id, f.reason.value, f.file, f.line) for t in audit.tasks for f in t.findings)
    assert {reason for _, reason, _, _ in expected} == set(PLANTED)

    out = tmp_path / "out"
    assert run_report_command([root], out, 4, True) == 0
    printed = json.loads(capsys.readouterr().out)
    a = printed["audit"]
    assert a["findings"] == 5 and a["tasks_with_findings"] == 2
    assert a["findings_by_reason"] == {
        "answer_source_reference": 1,
        "direct_database_access": 2,
        "eval_record_reference": 1,
        "evaluator_reference": 1,
    }
    assert a["findings_by_reason"] == dict(audit.totals.findings_by_reason)
    assert sorted((f["instance_id"], f["reason"], f["file"], f["line"]) for f in a["items"]) == expected
    assert a["runs_with_audit"] == [str(root.resolve())] and a["unreadable"] == []
    # Every finding is in the files a person reads, by reason and place.
    for name in ("report.md", "report.html"):
        text = (out / name).read_text()
        assert "5 findings in 2 tasks" in text
        for task, reason, file, line in expected:
            assert reason in text and f"{file}:{line}" in text and task in text


def test_an_unreadable_audit_is_disclosed_never_shown_as_no_findings(tmp_path):
    root = tmp_path / "run"
    synth.synth_run(root, 4, usage_rows=1, other_rows=0)
    write_index(root, build_index(root, live=False, interruption_cause="runner_exited"))
    # The shape the report once read (and the audit never wrote) is refused by the typed reader.
    launcher_audit_path(root).write_text(
        json.dumps({"manual_review_tasks": ["x"], "tasks": [{"manual_review": [{"reason": "direct_database_access"}]}]})
    )
    r = make_report([root], 1)
    assert r["audit"]["unreadable"] and r["audit"]["runs_with_audit"] == []
    assert any(
        d.startswith(f"The audit of run {root.resolve()} is not shown: ") and "is not an audit report" in d
        for d in r["disclosures"]
    )


def test_outputs_written_only_where_told_and_never_overwritten(tmp_path, capsys):
    root = tmp_path / "run"
    synth.synth_run(root, 24, usage_rows=2, other_rows=2)
    write_index(root, build_index(root, live=False, interruption_cause="runner_exited"))
    before_tree = sorted(p.relative_to(root) for p in root.rglob("*"))
    # No --output-dir: nothing is written anywhere, the Markdown report goes to stdout.
    assert run_report_command([root], None, 4, False) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# Cowork Bench report") and "## Disclosures" in printed
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before_tree
    assert run_report_command([root], None, 4, True) == 0
    assert json.loads(capsys.readouterr().out)["denominator"] == 24
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before_tree

    out = tmp_path / "report"
    assert run_report_command([root], out, 4, True) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads((out / "report.json").read_text())["passed"] == printed["passed"]
    assert printed["audit"] is None  # the run has no audit: no audit section, not "0 findings"
    html = (out / "report.html").read_text()
    assert html.count("<svg") == 4 and "http" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    before = (out / "report.md").read_bytes()
    assert run_report_command([root], out, 4, False) == 2
    assert (out / "report.md").read_bytes() == before
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before_tree


def test_monitor_spend_is_read_through_its_schema(tmp_path):
    root = tmp_path / "run"
    synth.synth_run(root, 3, usage_rows=1, other_rows=0)
    write_index(root, build_index(root, live=False, interruption_cause="runner_exited"))
    monitor = json.loads((root / "monitor.json").read_text())
    monitor["spending"]["run_spent_usd"] = 12.5  # the final figure, different from the last meter reading
    (root / "monitor.json").write_text(json.dumps(monitor))
    assert make_report([root], 1)["runs"][0]["run_spent_usd"] == 12.5


SECTION_CITED = re.compile(r" \(METHODOLOGY\.md §\w+\)$")  # every disclosure names its section


def test_disclosures_are_sentences_with_correct_plurals(tmp_path):
    inventory = Inventory(
        image_id="sha256:" + "b" * 64,
        started_at=TS,
        finished_at=TS,
        servers={
            "excel": ServerInventory(health="repaired", tool_count=3, repair="mcp 2.1.0 -> 1.30.0"),
            "word": ServerInventory(health="failed", error="ImportError: no module named docx\ntraceback..."),
        },
        repairs=[
            RepairRecord(
                server="excel", fault="mcp_sdk_2x", requirement="mcp==1.30.0", before="2.1.0", after="1.30.0", took=True
            )
        ],
    ).to_manifest()
    one = make_run(tmp_path / "one", ["a-1", "a-2", "a-3"], {"a-1": "pass", "a-2": "infra"}, inventory=inventory)
    cited = make_report([one], 1)["disclosures"]
    assert all(SECTION_CITED.search(n) for n in cited), cited
    notes = [SECTION_CITED.sub("", n) for n in cited]
    assert "1 infrastructure failure counts as not passed." in notes
    assert "1 selected task was never attempted and counts as not passed." in notes
    assert any(n.startswith("The denominator is 3 selected tasks:") for n in notes)
    assert f"MCP server excel in run {one.resolve()} was repaired in the derived image (mcp 2.1.0 -> 1.30.0)." in notes
    assert (
        f"MCP server word in run {one.resolve()} failed its environment check: ImportError: no module named docx."
        in notes
    )
    assert (
        f"Environment repair in run {one.resolve()}: MCP server excel had the fault mcp_sdk_2x; mcp==1.30.0 was "
        "installed (before: 2.1.0, after: 1.30.0)."
    ) in notes
    for note in notes:
        assert "{" not in note and "}" not in note and note.endswith("."), note

    markdown = to_markdown(make_report([one], 1))
    assert "| Known cost (accounted / llm_usage) | $0.50 over 1 attempt |" in markdown

    two = make_run(tmp_path / "two", ["b-1", "b-2", "b-3"], {"b-1": "infra", "b-2": "infra"})
    notes = [SECTION_CITED.sub("", n) for n in make_report([two], 1)["disclosures"]]
    assert "2 infrastructure failures count as not passed." in notes
    assert "1 selected task was never attempted and counts as not passed." in notes


def test_projection_warns_over_campaign_remainder(tmp_path):
    campaign = tmp_path / "campaign.json"
    campaign.write_text(
        CampaignRecord(
            fingerprint=key_fingerprint("k"),
            ceiling_usd=100.0,
            usage_baseline=10.0,
            prior_spend_usd=0.0,
            last_usage=105.0,
            last_usage_observed_at=TS,
            created_at=TS,
        ).to_json()
    )
    root = make_run(tmp_path / "r0", ["a", "b"], {"a": "pass", "b": "fail"}, campaign_file=str(campaign))
    r = make_report([root], 1)
    assert r["projection"]["campaign_remaining_usd"] == pytest.approx(5.0)
    assert r["projection"]["warnings"] and "exceeds the campaign remainder" in r["projection"]["warnings"][0]
    # A file that is not a campaign record is said to be unreadable, not guessed at.
    campaign.write_text(json.dumps({"ceiling_usd": 100.0, "spent_usd": 95.0}))
    r = make_report([root], 1)
    assert r["projection"]["campaign_remaining_usd"] is None
    assert r["projection"]["warnings"] == [
        f"The campaign file {campaign} could not be read; the projection is not checked against a remainder."
    ]


SVG = "{http://www.w3.org/2000/svg}"


def _axis_label(chart: str, kind: str) -> str:
    labels = [t.text for t in ET.fromstring(chart).iter(f"{SVG}text") if t.get("class") == kind]
    assert len(labels) == 1, (kind, labels)
    return labels[0]


def test_svg_charts_are_well_formed_with_labelled_axes():
    charts = [
        (
            bar_chart("t", ["a", "b<"], [0.5, 1.0], x_label="domain", y_label="pass@1 (%)", y_max=1.0),
            "domain",
            "pass@1 (%)",
        ),
        (
            histogram("h", [1, 2, 2, 3], x_label="cost (USD)", y_label="attempts (count)"),
            "cost (USD)",
            "attempts (count)",
        ),
        (step_line("s", [(0, 0), (3600, 2.5)], x_label="time", y_label="spend (USD)"), "time (min)", "spend (USD)"),
        (step_line("s", [(0, 0), (3 * 3600, 2.5)], x_label="time", y_label="spend (USD)"), "time (h)", "spend (USD)"),
    ]
    for chart, x_label, y_label in charts:
        assert (_axis_label(chart, "x-label"), _axis_label(chart, "y-label")) == (x_label, y_label)
    ET.fromstring(histogram("empty", [], x_label="x", y_label="y"))


def test_every_report_plot_names_both_axes_with_units(tmp_path):
    root = tmp_path / "run"
    synth.synth_run(root, 24, usage_rows=2, other_rows=2)
    write_index(root, build_index(root, live=False, interruption_cause="runner_exited"))
    assert run_report_command([root], tmp_path / "out", 4, True) == 0
    html = (tmp_path / "out" / "report.html").read_text()
    plots = html.split("<div class='plots'>", 1)[1].split("</div>", 1)[0]
    charts = [c + "</svg>" for c in plots.split("</svg>") if "<svg" in c]
    assert len(charts) == 4
    for i, chart in enumerate(charts):
        x_label, y_label = _axis_label(chart, "x-label"), _axis_label(chart, "y-label")
        # A unit in parentheses on every numeric axis: (USD), (s), (h), (%), (count)...
        assert y_label.endswith(")") and "(" in y_label, y_label
        if i == 0:
            assert x_label == "task domain"  # categories, no unit
        else:
            assert x_label.endswith(")") and "(" in x_label, x_label


def test_the_launchers_audit_is_read_first_and_an_older_runs_audit_json_still_counts(tmp_path):
    from cowork_adapter.report.merge import load_runs

    old = tmp_path / "old"
    synth.synth_run(old, 4, usage_rows=1, other_rows=0)
    write_index(old, build_index(old, live=False, interruption_cause="runner_exited"))
    audit_run(old)
    launcher_audit_path(old).rename(old / "audit.json")  # where a launcher before the rename wrote it
    assert load_runs([old])[0].audit is not None
    new = tmp_path / "new"
    synth.synth_run(new, 4, usage_rows=1, other_rows=0)
    write_index(new, build_index(new, live=False, interruption_cause="runner_exited"))
    audit_run(new)
    (new / "audit.json").write_text("not the launcher's audit")  # the operator's file is not read
    record = load_runs([new])[0]
    assert record.audit is not None and not record.audit_unreadable


def test_the_report_points_to_methodology_and_every_disclosure_names_an_existing_section(tmp_path):
    """Issue 21 item 6: METHODOLOGY.md exists in the repository, the report links it, and each
    disclosure ends with `(METHODOLOGY.md §<section>)` for a section the file really has."""
    import re
    from pathlib import Path

    from cowork_adapter.report.render import to_html, to_markdown

    methodology = Path(__file__).resolve().parents[2] / "METHODOLOGY.md"
    sections = set(re.findall(r"^## (\w+)$", methodology.read_text(), flags=re.MULTILINE))
    assert {
        "scoring",
        "denominator",
        "statuses",
        "infra",
        "environment",
        "diagnostic",
        "validity",
        "claims",
    } <= sections
    r0 = make_run(tmp_path / "r0", ["a", "b", "c"], {"a": "pass", "b": "infra"})
    r1 = make_run(tmp_path / "r1", ["a", "b", "c"], {"b": "fail"}, task_ids=["b", "c"], resume_from=[r0], generation=1)
    r = make_report([r1], 2)
    assert r["methodology"] == str(methodology)
    assert len(r["disclosures"]) >= 4  # engine, subset, not attempted / infra, merged runs
    for note in r["disclosures"]:
        cited = re.search(r"\(METHODOLOGY\.md §(\w+)\)$", note)
        assert cited and cited.group(1) in sections, note
    assert f"[METHODOLOGY.md]({methodology})" in to_markdown(r)
    assert f"href='file://{methodology}'" in to_html(r)


def test_a_dry_run_root_is_refused_in_one_sentence_that_says_it_was_a_dry_run(tmp_path):
    """A dry run has a manifest and no ledger; `report` says so instead of naming an exception class."""
    from cowork_adapter.errors import Refusal
    from cowork_adapter.report.merge import load_run

    root = tmp_path / "dry"
    manifest = synth.write_manifest(root, ["task-a"], outcome="dry_run")
    manifest.dry_run = True
    (root / "run_manifest.json").write_text(manifest.to_json(), encoding="utf-8")
    with pytest.raises(Refusal) as refused:
        load_run(str(root))
    assert "was a dry run" in str(refused.value) and "Error" not in str(refused.value)
    manifest.dry_run = False  # a run that should have a ledger: the reason is the OS's words, not a class name
    (root / "run_manifest.json").write_text(manifest.to_json(), encoding="utf-8")
    with pytest.raises(Refusal) as refused:
        load_run(str(root))
    assert "No such file or directory" in str(refused.value) and "FileNotFoundError" not in str(refused.value)


def test_a_run_that_gave_its_agents_the_key_says_the_agent_could_read_it(tmp_path):
    # A run without a gateway record (--key-in-agent, or a compatible endpoint without --llm-gateway)
    # put the key in every agent container: disclosed, per run.
    paid = make_run(tmp_path / "paid", ["a"], {"a": "pass"})
    notes = [SECTION_CITED.sub("", n) for n in make_report([paid], 1)["disclosures"]]
    assert [n for n in notes if "gave the provider key to its agent containers" in n] == [
        f"Run {paid.resolve()} gave the provider key to its agent containers: the agent under test could read it "
        "(its environment, the engine's settings file, `docker inspect`) and spend outside this run's meter "
        "readings (--key-in-agent, or an OpenAI-compatible endpoint without --llm-gateway); the default OpenRouter "
        "route and --llm-gateway keep it on the host."
    ]
    # A reference engine (oracle, nop) is given no key at all.
    free = make_run(tmp_path / "free", ["a"], {"a": "pass"}, engine="oracle")
    notes = make_report([free], 1)["disclosures"]
    assert not [n for n in notes if "provider key" in n]
