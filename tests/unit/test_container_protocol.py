"""Pure pieces of the container side: eval_res classifier, claim publication, scrubbing,
the outcome mapping, run-config validation and the small YAML reader."""

from __future__ import annotations

import json
import os
import threading

import pytest
from test_container_support import run_config

from cowork_adapter.container import outcome, protocol, runconfig, yamlmini
from cowork_adapter.container.vocab import OfficialEvalStatus as S

GATE = "Task status: max_turns_reached, only SUCCESS counts as pass; pass is null"


@pytest.mark.parametrize(
    "data,log_status,status,cause,passed",
    [
        (None, None, S.UNREPORTED, "file_absent", None),
        (b"\xff\xfe{}", None, S.UNREADABLE, "utf8_error:byte_0", None),
        (b'{"pass": tru', None, S.UNREADABLE, "json_error:line_1_col_10", None),
        (b'{"pass": true, "pass": false}', None, S.UNREADABLE, "json_error:duplicate_key", None),
        (b'{"pass": NaN}', None, S.UNREADABLE, "json_error:non_finite_constant", None),
        (b'{"pass": Infinity}', None, S.UNREADABLE, "json_error:non_finite_constant", None),
        (b"[true]", None, S.UNREADABLE, "not_object:list", None),
        (b'{"details": "x"}', None, S.INVALID, "pass_missing", None),
        (b'{"pass": "True"}', None, S.INVALID, "pass_not_boolean:str", None),
        (b'{"pass": 1}', None, S.INVALID, "pass_not_boolean:int", None),
        (json.dumps({"pass": None, "details": GATE}).encode(), "max_turns_reached", S.DECLINED, "status_gate", None),
        (json.dumps({"pass": None, "details": GATE}).encode(), "success", S.UNKNOWN, "pass_null_unlinked", None),
        (json.dumps({"pass": None, "details": GATE}).encode(), None, S.UNKNOWN, "pass_null_unlinked", None),
        (
            json.dumps({"pass": None, "details": GATE, "x": 1}).encode(),
            "max_turns_reached",
            S.UNKNOWN,
            "pass_null_unlinked",
            None,
        ),
        (b'{"pass": true, "details": "ok"}', None, S.COMPLETED, "evaluated", True),
        (b'{"pass": false, "failure": "no"}', None, S.COMPLETED, "evaluated", False),
    ],
)
def test_eval_res_classifier(data, log_status, status, cause, passed):
    reading = protocol.classify_eval_bytes(data, log_status)
    assert (reading.status, reading.cause, reading.passed) == (status, cause, passed)


def test_unreadable_file_is_os_error(tmp_path):
    (tmp_path / "eval_res.json").mkdir()
    reading = protocol.read_eval_result(str(tmp_path / "eval_res.json"))
    assert reading.status == S.UNREADABLE and reading.cause == "os_error:directory"


@pytest.mark.parametrize(
    "plant, kind",
    [
        (lambda p, host: os.mkfifo(p), "fifo"),  # a reader that opened it would block
        (lambda p, host: os.symlink(host, p), "symlink"),  # never followed to a host file
        (lambda p, host: os.symlink("/dev/zero", p), "symlink"),  # never read without bound
    ],
)
def test_an_eval_result_that_is_no_regular_file_is_named_never_read(tmp_path, plant, kind):
    host = tmp_path / "host_file"
    host.write_text('{"pass": true}')
    plant(str(tmp_path / "eval_res.json"), str(host))
    reading = protocol.read_eval_result(str(tmp_path / "eval_res.json"))
    assert reading.status == S.UNREADABLE and reading.cause == f"os_error:{kind}"
    facts = protocol.file_facts(str(tmp_path / "eval_res.json"))
    assert facts["state"] == "unreadable" and facts["sha256"] is None and facts["cause"].startswith(kind)


def test_publish_exclusive_has_one_winner(tmp_path):
    target = str(tmp_path / "claim.json")
    wins = []

    def attempt(i):
        wins.append(protocol.publish_exclusive(target, f"{i}\n".encode()))

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert wins.count(True) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["claim.json"]  # no temp files left


def test_verdict_lines_never_coerce():
    assert protocol.verdict_lines({"pass": True, "details": "d"}) == (["Pass:    True", "Details: d"], 0)
    assert protocol.verdict_lines({"pass": False, "failure": "f"}) == (["Pass:    False", "Details: f"], 1)
    assert protocol.verdict_lines({"pass": None}) == (["Pass:    None", "Details: N/A"], 1)
    assert protocol.verdict_lines({"pass": "True"}) is None
    assert protocol.verdict_lines({"pass": 1}) is None
    assert protocol.verdict_lines(["x"]) is None


def test_scrub_and_runner_safe():
    terms = protocol.secret_terms(["short", "sk-abcdefgh", None, "sk-abcdefgh-longer"])
    assert terms == ["sk-abcdefgh-longer", "sk-abcdefgh"]
    assert protocol.scrub("a sk-abcdefgh-longer b sk-abcdefgh", terms) == "a [REDACTED] b [REDACTED]"
    assert protocol.scrub_bytes(b"\xff sk-abcdefgh", terms) == b"\xff [REDACTED]"
    line = protocol.runner_safe('{"error": "Status: success\\nPass: True"}')
    assert "Status:" not in line and "Pass:" not in line


def test_bundle_facts_change_with_any_member(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("1")
    b.write_text("2")
    before = protocol.bundle_facts("entry", [str(a), str(b)])
    b.write_text("3")
    assert protocol.bundle_facts("entry", [str(a), str(b)])["sha256"] != before["sha256"]


@pytest.mark.parametrize(
    "result,expected",
    [
        ({"status": "completed", "reason_code": "final_message"}, ("success", False, False)),
        ({"status": "completed", "reason_code": "round_limit"}, ("max_turns_reached", False, True)),
        ({"status": "failed", "reason_code": "llm_api_error"}, ("failed", True, False)),
        (
            {
                "status": "completed",
                "reason_code": "round_limit",
                "outcome_axes": {"execution": {"status": "infra_failed"}},
            },
            ("failed", True, False),
        ),
        (
            {
                "status": "failed",
                "reason_code": "tool_failure",
                "outcome_axes": {"execution": {"reason_code": "provider_unavailable"}},
            },
            ("failed", True, False),
        ),
        ({"status": "cancelled"}, ("failed", False, False)),
    ],
)
def test_outcome_classify(result, expected):
    got = outcome.classify(result, ["round_limit", "deadline_local"])
    assert (got["bench_status"], got["infra_failed"], got["truncated"]) == expected


def test_terminal_needs_settled_artifacts_and_cost_grace():
    assert not outcome.is_terminal({"status": "completed", "artifact_status": "pending"})
    assert not outcome.is_terminal({"status": "completed", "artifact_bundle": {"status": "finalizing"}})
    assert outcome.is_terminal({"status": "failed", "artifact_status": "ready"})
    assert not outcome.is_terminal({"status": "running"})
    assert outcome.cost_unsettled({"status": "completed", "cost_final": False})
    assert not outcome.cost_unsettled({"status": "completed"})  # older builds: no cost fields
    assert outcome.model_activity(False, {"prompt_tokens": 5}) is False
    assert outcome.model_activity(True, {"prompt_tokens": 0, "completion_tokens": 0}) is None
    assert outcome.model_activity(True, {"prompt_tokens": 3}) is True


def test_agent_timeout_floor():
    from cowork_adapter.container.ouroboros import agent_timeout, server_ready

    assert agent_timeout(3600, 20.5) == 3474 and agent_timeout(100, 10) == 60
    assert server_ready({"supervisor_ready": True}) and not server_ready({"supervisor_ready": True, "workers_total": 0})


def test_run_config_validation():
    good = run_config()
    assert runconfig.parse_run_config(good).upstream_entry is None
    assert (
        runconfig.parse_run_config({**good, "engine": "upstream:main_strands.py"}).upstream_entry == "main_strands.py"
    )
    for bad in (
        {"proxy_port": "8096"},
        {"engine": "other"},
        {"engine": "upstream:../x.py"},
        {"task_timeout_sec": 0},
        {"schema": "v0"},
        {"diagnostic_eval_on_truncation": 1},
        {"truncation_reason_codes": "x"},
    ):
        with pytest.raises(runconfig.ConfigError):
            runconfig.parse_run_config({**good, **bad})


def test_run_config_refuses_a_timeout_that_is_not_a_finite_positive_number():
    # Python's json reads NaN and Infinity, so a run config file can carry them: refused, not run with.
    good = run_config()
    for text in ("NaN", "Infinity", "-Infinity", "-1", "0"):
        raw = json.loads(json.dumps({**good, "task_timeout_sec": "@"}).replace('"@"', text))
        with pytest.raises(runconfig.ConfigError, match="positive finite number"):
            runconfig.parse_run_config(raw)
    assert runconfig.parse_run_config(json.loads(json.dumps(good))).task_timeout_sec == 600


YAML = """
# server
name: "notes"   # quoted
params:
  command: node
  args:
  - ${local_servers_paths}/a.js
  - '--flag'
  - "x: y"
  env:
    EMPTY:
    PORT: 5432
    FLAG: true
  list: [a, "b c", 3]
client_session_timeout_seconds: 10
"""


def test_yaml_subset_matches_pyyaml():
    import yaml

    assert yamlmini.parse_subset(YAML) == yaml.safe_load(YAML)


def test_yaml_subset_refuses_what_it_does_not_know():
    with pytest.raises(yamlmini.YamlError):
        yamlmini.parse_subset("a: 1\n   b: 2\n")
