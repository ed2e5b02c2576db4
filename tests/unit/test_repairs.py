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
    disclosed,
    finalize,
    for_selection,
    label_value,
    major,
    plan_repairs,
    planned_from_labels,
    repair_script,
    repair_stage,
    wheel_requirements,
)


def server(name, **over):
    base = {
        "server": name,
        "venv": f"/opt/local_servers/{name}/.venv",
        "python": "3.11",
        "mcp": None,
        "psycopg2": None,
        "imports_psycopg2": False,
        "browser": False,
        "error": None,
    }
    return {**base, **over}


@pytest.mark.parametrize(
    "entry, expected",
    [
        (server("hr1c", mcp="2.3.0"), [("hr1c", "mcp_sdk_2x", "2.3.0", VENDORED_MCP_PIN)]),
        (server("clickhouse", mcp="2.0.0"), [("clickhouse", "mcp_sdk_2x", "2.0.0", VENDORED_MCP_PIN)]),
        (server("ok", mcp="1.30.0"), []),
        (server("moex", mcp="1.26.0", imports_psycopg2=True), [("moex", "psycopg2_missing", None, PSYCOPG2_PIN)]),
        (server("yahoo", mcp="1.26.0", imports_psycopg2=True, psycopg2="2.9.10"), []),
        (
            server("both", mcp="2.1.1", imports_psycopg2=True),
            [("both", "mcp_sdk_2x", "2.1.1", VENDORED_MCP_PIN), ("both", "psycopg2_missing", None, PSYCOPG2_PIN)],
        ),
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
    assert repairs == [] and checks == [
        {"check": "chromium", "result": "not_applicable", "detail": "no playwright server in the image"}
    ]


BROWSER = server("playwright-mcp", venv=None, python=None, browser=True)


@pytest.mark.parametrize(
    "found,result,detail",
    [
        (
            {"chromium": ["/root/.cache/ms-playwright/chromium-1181"]},
            "present",
            "/root/.cache/ms-playwright/chromium-1181",
        ),
        (
            {"chromium_env": "/opt/chrome/chrome", "system_chromium": ["/usr/bin/chromium"]},
            "present",
            "/opt/chrome/chrome",
        ),
        ({}, "absent", "nothing is downloaded at build time"),
    ],
)
def test_a_chromium_the_server_already_finds_or_none_at_all_plans_no_repair(found, result, detail):
    repairs, checks = plan_repairs({"servers": [BROWSER], "chromium": [], **found})
    assert repairs == [] and checks[0]["check"] == "chromium" and checks[0]["result"] == result
    assert detail in checks[0]["detail"]


def test_a_system_chromium_not_yet_named_is_named_without_the_network():
    repairs, checks = plan_repairs(
        {"servers": [BROWSER], "chromium": [], "chromium_env": None, "system_chromium": ["/usr/bin/chromium"]}
    )
    assert [(r.server, r.fault, r.requirement) for r in repairs] == [
        ("playwright-mcp", "chromium_missing", "PLAYWRIGHT_MCP_EXECUTABLE_PATH=/usr/bin/chromium")
    ]
    assert checks == [] and wheel_requirements(repairs) == {}  # Chromium is not a wheel
    stage, script = repair_stage(repairs), repair_script(repairs)
    assert stage.startswith("ENV PLAYWRIGHT_MCP_EXECUTABLE_PATH=/usr/bin/chromium\n")
    assert "test -x /usr/bin/chromium" in script
    for networked in ("npx", "playwright install", "http", "curl", "wget"):
        assert networked not in stage + script


def test_a_run_plans_only_the_repairs_of_servers_its_selection_needs():
    repairs, _ = plan_repairs(
        {
            "servers": [server("hr1c", mcp="2.3.0"), server("moex", imports_psycopg2=True), BROWSER],
            "chromium": [],
            "system_chromium": ["/usr/bin/chromium"],
        }
    )
    assert {r.server for r in repairs} == {"hr1c", "moex", "playwright-mcp"}  # the image: every server
    assert [r.server for r in for_selection(repairs, {"moex", "files"})] == ["moex"]
    assert for_selection(repairs, set()) == []


def test_only_repairs_that_took_are_disclosed():
    planned = [
        PlannedRepair("quotes", "mcp_sdk_2x", "2.3.0", VENDORED_MCP_PIN, "/v", "3.11"),
        PlannedRepair("playwright-mcp", "chromium_missing", None, "PLAYWRIGHT_MCP_EXECUTABLE_PATH=/usr/bin/chromium"),
    ]
    after = {"servers": [server("quotes", mcp="1.26.0")], "chromium": [], "chromium_env": None}
    taken, failed = disclosed(finalize(planned, after))
    assert [(r["server"], r["took"]) for r in taken] == [("quotes", True)]
    assert failed == [
        {
            "check": "repair",
            "result": "did_not_take",
            "detail": "playwright-mcp: chromium_missing -> PLAYWRIGHT_MCP_EXECUTABLE_PATH=/usr/bin/chromium",
        }
    ]


def test_wheel_requirements_group_pins_by_python():
    repairs, _ = plan_repairs(
        {
            "servers": [
                server("a", mcp="2.3.0"),
                server("b", mcp="2.3.0", python="3.12"),
                server("c", mcp="2.0.0", imports_psycopg2=True),
            ],
            "chromium": [],
        }
    )
    assert wheel_requirements(repairs) == {"3.11": [VENDORED_MCP_PIN, PSYCOPG2_PIN], "3.12": [VENDORED_MCP_PIN]}


def test_major():
    assert (major("2.3.0"), major("1.26.0"), major(None), major("x.1")) == (2, 1, None, None)


def test_repair_script_is_valid_sh_and_verifies_each_pip_repair(tmp_path):
    repairs, _ = plan_repairs(
        {
            "servers": [
                server("hr1c", mcp="2.3.0"),
                server("moex", imports_psycopg2=True),
                server("playwright-mcp", venv=None, browser=True),
            ],
            "chromium": [],
        }
    )
    script = repair_script(repairs)
    path = tmp_path / "repairs.sh"
    path.write_text(script)
    assert subprocess.run(["sh", "-n", str(path)], capture_output=True, timeout=30).returncode == 0
    assert 'pipin /opt/local_servers/hr1c/.venv/bin/python "$wh/3.11" mcp==1.26.0' in script
    assert "mcp is still" in script and "-c 'import psycopg2'" in script
    assert "chromium" not in script  # no system Chromium detected: nothing planned, nothing downloaded
    assert repair_stage([]) == "" and "repairs.sh" in repair_stage(repairs)


def test_the_verification_line_fails_while_mcp_is_2x(tmp_path):
    """The check after a repin is what fails the build when the repair did not take."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    dist = site / "mcp-2.3.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mcp\nVersion: 2.3.0\n")
    check = next(
        line
        for line in repair_script(
            [PlannedRepair("s", "mcp_sdk_2x", "2.3.0", VENDORED_MCP_PIN, str(venv), "3.11")]
        ).splitlines()
        if "mcp is still" in line
    )
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
    out = subprocess.run(
        [sys.executable, "-c", DETECT_PY, str(root), str(tmp_path / "none-*")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
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
    assert finalize(again, fixed) == [
        {
            "server": "quotes",
            "fault": "mcp_sdk_2x",
            "requirement": VENDORED_MCP_PIN,
            "before": "2.3.0",
            "after": "1.26.0",
            "took": True,
        }
    ]
    still = {"servers": [server("quotes", mcp="2.3.0")], "chromium": []}
    assert finalize(again, still)[0]["took"] is False
    assert finalize(again, {"servers": []})[0] == {**finalize(again, fixed)[0], "after": None, "took": False}


def test_chromium_record_measures_the_variable_in_the_derived_image():
    repair = PlannedRepair(
        "playwright-mcp", "chromium_missing", None, "PLAYWRIGHT_MCP_EXECUTABLE_PATH=/usr/bin/chromium"
    )
    assert finalize([repair], {"chromium": [], "chromium_env": None})[0]["took"] is False
    assert finalize([repair], {"chromium_env": "/usr/bin/chromium"})[0]["after"] == "/usr/bin/chromium"
    # A repair planned by an older adapter (a download) did not take when the variable names nothing.
    old = PlannedRepair("playwright-mcp", "chromium_missing", None, "playwright install chromium", "/x")
    assert finalize([old], {"chromium": ["/root/.cache/ms-playwright/chromium-1"]})[0]["took"] is False


def test_detect_py_finds_the_chromium_the_variable_names(tmp_path):
    chrome = tmp_path / "chromium"
    chrome.write_text("#!/bin/sh\n")
    chrome.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "PLAYWRIGHT_MCP_EXECUTABLE_PATH": str(chrome)}
    out = subprocess.run(
        [sys.executable, "-c", DETECT_PY, str(tmp_path / "no-servers"), str(tmp_path / "none-*")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    ).stdout
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["chromium_env"] == str(chrome)
    env["PLAYWRIGHT_MCP_EXECUTABLE_PATH"] = str(tmp_path / "missing")
    out = subprocess.run(
        [sys.executable, "-c", DETECT_PY, str(tmp_path / "no-servers"), str(tmp_path / "none-*")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    ).stdout
    assert json.loads(out.strip().splitlines()[-1])["chromium_env"] is None
