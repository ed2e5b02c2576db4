"""Repairs of the benchmark image: detection (DETECT_PY, run for real over a fake server tree),
the plan (a table of cases), the repair script, the label round trip and the measured records."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cowork_adapter.image.repairs import (
    DETECT_PY,
    PSYCOPG2_PIN,
    VENDORED_MCP_PIN,
    PlannedRepair,
    finalize,
    label_value,
    major,
    plan_repairs,
    planned_from_labels,
    repair_script,
    repair_stage,
    wheel_requirements,
)


def server(name, **over):
    base = {"server": name, "venv": f"/opt/local_servers/{name}/.venv", "python": "3.11", "mcp": None,
            "psycopg2": None, "imports_psycopg2": False, "browser": False, "error": None}
    return {**base, **over}


@pytest.mark.parametrize(
    "entry, expected",
    [
        (server("hr1c", mcp="2.3.0"), [("hr1c", "mcp_sdk_2x", "2.3.0", VENDORED_MCP_PIN)]),
        (server("clickhouse", mcp="2.0.0"), [("clickhouse", "mcp_sdk_2x", "2.0.0", VENDORED_MCP_PIN)]),
        (server("ok", mcp="1.30.0"), []),
        (server("moex", mcp="1.26.0", imports_psycopg2=True), [("moex", "psycopg2_missing", None, PSYCOPG2_PIN)]),
        (server("yahoo", mcp="1.26.0", imports_psycopg2=True, psycopg2="2.9.10"), []),
        (server("both", mcp="2.1.1", imports_psycopg2=True),
         [("both", "mcp_sdk_2x", "2.1.1", VENDORED_MCP_PIN), ("both", "psycopg2_missing", None, PSYCOPG2_PIN)]),
        # No environment of its own (a node server, or one run by the benchmark's /opt/venv): nothing to repin.
        (server("node", venv=None, python=None, mcp="2.3.0", imports_psycopg2=True), []),
        (server("odd", mcp="weird"), []),
    ],
)
def test_plan_repairs_table(entry, expected):
    repairs, _ = plan_repairs({"servers": [entry], "chromium": []})
    assert [(r.server, r.fault, r.before, r.requirement) for r in repairs] == expected


def test_chromium_check_is_not_applicable_without_a_browser_server():
    repairs, checks = plan_repairs({"servers": [server("files")], "chromium": []})
    assert repairs == [] and checks == [{"check": "chromium", "result": "not_applicable",
                                         "detail": "no playwright server in the image"}]


def test_chromium_present_or_missing_for_a_browser_server():
    browser = server("playwright-mcp", venv=None, python=None, browser=True)
    _, checks = plan_repairs({"servers": [browser], "chromium": ["/root/.cache/ms-playwright/chromium-1181"]})
    assert checks[0]["result"] == "present"
    repairs, checks = plan_repairs({"servers": [browser], "chromium": []})
    assert [(r.server, r.fault) for r in repairs] == [("playwright-mcp", "chromium_missing")] and checks == []
    assert wheel_requirements(repairs) == {}  # Chromium is not a wheel


def test_wheel_requirements_group_pins_by_python():
    repairs, _ = plan_repairs({"servers": [server("a", mcp="2.3.0"), server("b", mcp="2.3.0", python="3.12"),
                                           server("c", mcp="2.0.0", imports_psycopg2=True)], "chromium": []})
    assert wheel_requirements(repairs) == {"3.11": [VENDORED_MCP_PIN, PSYCOPG2_PIN], "3.12": [VENDORED_MCP_PIN]}


def test_major():
    assert (major("2.3.0"), major("1.26.0"), major(None), major("x.1")) == (2, 1, None, None)


def test_repair_script_is_valid_sh_and_verifies_each_pip_repair(tmp_path):
    repairs, _ = plan_repairs({"servers": [server("hr1c", mcp="2.3.0"), server("moex", imports_psycopg2=True),
                                           server("playwright-mcp", venv=None, browser=True)], "chromium": []})
    script = repair_script(repairs)
    path = tmp_path / "repairs.sh"
    path.write_text(script)
    assert subprocess.run(["sh", "-n", str(path)], capture_output=True, timeout=30).returncode == 0
    assert "pipin /opt/local_servers/hr1c/.venv/bin/python \"$wh/3.11\" mcp==1.26.0" in script
    assert "mcp is still" in script and "-c 'import psycopg2'" in script
    assert "playwright install chromium" in script
    assert repair_stage([]) == "" and "repairs.sh" in repair_stage(repairs)


def test_the_verification_line_fails_while_mcp_is_2x(tmp_path):
    """The check after a repin is what fails the build when the repair did not take."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    dist = site / "mcp-2.3.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mcp\nVersion: 2.3.0\n")
    check = next(line for line in repair_script([PlannedRepair("s", "mcp_sdk_2x", "2.3.0", VENDORED_MCP_PIN,
                                                                str(venv), "3.11")]).splitlines()
                 if "mcp is still" in line)
    assert subprocess.run(["sh", "-c", check], capture_output=True, timeout=60).returncode != 0
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mcp\nVersion: 1.26.0\n")
    dist.rename(site / "mcp-1.26.0.dist-info")
    assert subprocess.run(["sh", "-c", check], capture_output=True, timeout=60).returncode == 0


def test_detect_py_reads_a_real_tree(tmp_path):
    """DETECT_PY over a fake /opt/local_servers: a venv with mcp 2.x metadata, a source importing
    psycopg2, a server without an environment; the plan then names exactly the two faults."""
    root = tmp_path / "local_servers"
    venv = root / "hr1c" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "mcp-2.3.0.dist-info").mkdir()
    (site / "mcp-2.3.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: mcp\nVersion: 2.3.0\n")
    (root / "hr1c" / "src").mkdir()
    (root / "hr1c" / "src" / "db.py").write_text("import os\nfrom psycopg2 import connect\n")
    (root / "plain").mkdir()
    (root / "plain" / "server.py").write_text("# mentions import psycopg2 only in a comment\nprint(1)\n")
    out = subprocess.run([sys.executable, "-c", DETECT_PY, str(root), str(tmp_path / "none-*")],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    doc = json.loads(out.strip().splitlines()[-1])
    by_name = {s["server"]: s for s in doc["servers"]}
    assert by_name["hr1c"]["mcp"] == "2.3.0" and by_name["hr1c"]["imports_psycopg2"] is True
    assert by_name["hr1c"]["psycopg2"] is None and by_name["plain"]["venv"] is None
    assert by_name["plain"]["imports_psycopg2"] is False and doc["chromium"] == []
    repairs, _ = plan_repairs(doc)
    assert [(r.server, r.fault) for r in repairs] == [("hr1c", "mcp_sdk_2x"), ("hr1c", "psycopg2_missing")]


def test_label_round_trip_and_measured_records():
    repairs, checks = plan_repairs({"servers": [server("quotes", mcp="2.3.0")], "chromium": []})
    again, checks_again = planned_from_labels({"org.cowork-adapter.repairs": label_value(repairs, checks)})
    assert again == repairs and checks_again == checks
    assert planned_from_labels({}) == ([], [])
    fixed = {"servers": [server("quotes", mcp="1.26.0")], "chromium": []}
    assert finalize(again, fixed) == [{"server": "quotes", "fault": "mcp_sdk_2x", "requirement": VENDORED_MCP_PIN,
                                       "before": "2.3.0", "after": "1.26.0", "took": True}]
    still = {"servers": [server("quotes", mcp="2.3.0")], "chromium": []}
    assert finalize(again, still)[0]["took"] is False
    assert finalize(again, {"servers": []})[0] == {**finalize(again, fixed)[0], "after": None, "took": False}


def test_chromium_record_measures_the_binary():
    repair = PlannedRepair("playwright-mcp", "chromium_missing", None, "playwright install chromium", "/x")
    assert finalize([repair], {"chromium": []})[0]["took"] is False
    assert finalize([repair], {"chromium": ["/root/.cache/ms-playwright/chromium-1"]})[0]["after"].endswith("chromium-1")
