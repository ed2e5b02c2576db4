"""The scored report: Wilson values, denominator, merge provenance, outputs and no overwrite."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from cowork_adapter.ledger import build_index, write_index
from cowork_adapter.report import make_report, run_report_command
from cowork_adapter.report import synth
from cowork_adapter.report.stats import project_full_run, quantile, wilson_interval
from cowork_adapter.report.svg import bar_chart, histogram, step_line

from test_recovery import make_run  # noqa: E402  (same directory; pytest puts it on sys.path)


@pytest.mark.parametrize("k,n,lo,hi", [
    (363, 496, 0.6912, 0.7690),   # the published Kimi K3 row (hand-computed)
    (0, 10, 0.0, 0.2775),
    (10, 10, 0.7225, 1.0),
    (5, 10, 0.2366, 0.7634),
])
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


def test_outputs_written_once_and_never_overwritten(tmp_path, capsys):
    root = tmp_path / "run"
    synth.synth_run(root, 24, usage_rows=2, other_rows=2)
    write_index(root, build_index(root, live=False, interruption_cause="runner_exited"))
    (root / "audit.launcher.json").write_text(json.dumps({"manual_review_tasks": ["x"], "tasks": [
        {"manual_review": [{"reason": "possible_direct_postgres_access"}]}]}))
    assert run_report_command([root], None, 4, True) == 0
    printed = json.loads(capsys.readouterr().out)
    out = root / "report"
    assert json.loads((out / "report.json").read_text())["passed"] == printed["passed"]
    assert printed["audit"]["findings_by_reason"] == {"possible_direct_postgres_access": 1}
    html = (out / "report.html").read_text()
    assert html.count("<svg") == 4 and "http" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    before = (out / "report.md").read_bytes()
    assert run_report_command([root], None, 4, False) == 2
    assert (out / "report.md").read_bytes() == before


def test_projection_warns_over_campaign_remainder(tmp_path):
    campaign = tmp_path / "campaign.json"
    campaign.write_text(json.dumps({"ceiling_usd": 100.0, "spent_usd": 95.0}))
    root = make_run(tmp_path / "r0", ["a", "b"], {"a": "pass", "b": "fail"}, campaign_file=str(campaign))
    r = make_report([root], 1)
    assert r["projection"]["campaign_remaining_usd"] == pytest.approx(5.0)
    assert r["projection"]["warnings"] and "exceeds the campaign remainder" in r["projection"]["warnings"][0]


def test_svg_charts_are_well_formed():
    for chart in (bar_chart("t", ["a", "b<"], [0.5, 1.0], y_max=1.0), histogram("h", [1, 2, 2, 3]),
                  step_line("s", [(0, 0), (3600, 2.5)]), histogram("empty", [])):
        ET.fromstring(chart)


def test_the_launchers_audit_is_read_first_and_an_older_runs_audit_json_still_counts(tmp_path):
    from cowork_adapter.report.merge import load_runs

    old = make_run(tmp_path / "old", ["a"], {"a": "pass"})
    (old / "audit.json").write_text(json.dumps({"from": "an older launcher"}))
    assert load_runs([old])[0].audit == {"from": "an older launcher"}
    new = make_run(tmp_path / "new", ["a"], {"a": "pass"})
    (new / "audit.launcher.json").write_text(json.dumps({"from": "the launcher"}))
    (new / "audit.json").write_text(json.dumps({"from": "the operator"}))
    assert load_runs([new])[0].audit == {"from": "the launcher"}


def test_the_report_points_to_methodology_and_every_disclosure_names_an_existing_section(tmp_path):
    """Issue 21 item 6: METHODOLOGY.md exists in the repository, the report links it, and each
    disclosure ends with `(METHODOLOGY.md §<section>)` for a section the file really has."""
    import re
    from pathlib import Path

    from cowork_adapter.report.render import to_html, to_markdown

    methodology = Path(__file__).resolve().parents[2] / "METHODOLOGY.md"
    sections = set(re.findall(r"^## (\w+)$", methodology.read_text(), flags=re.MULTILINE))
    assert {"scoring", "denominator", "statuses", "infra", "environment", "diagnostic", "validity",
            "claims"} <= sections
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
