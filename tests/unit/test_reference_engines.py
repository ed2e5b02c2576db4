"""The reference engines on the host: flags, refusals, the run config they render, and qualify's
classification (pure, from verdicts only) and its table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_refusals import Case, _play

from cowork_adapter.config import MONEY_FIELDS, RunConfig
from cowork_adapter.errors import Refusal
from cowork_adapter.run.qualify import (
    build_validity,
    classify,
    evaluator_words,
    qualify_configs,
    render_html,
    render_table,
    verdict_of,
)
from cowork_adapter.schemas.ledger import OfficialReceipt, TaskRow
from cowork_adapter.schemas.record import convert, decode
from cowork_adapter.schemas.run_config import agent_short_name, build_run_config, model_provider
from cowork_adapter.schemas.validity import EngineVerdict, TaskValidity
from cowork_adapter.vocab import EngineKind, OfficialEvalStatus, TaskStatus, TaskValidityClass


@pytest.fixture
def flags(tmp_path) -> dict:
    """The smallest valid flags of a reference-engine run: no campaign at all."""
    (tmp_path / "storage").mkdir()
    return {
        "repo_dir": tmp_path / "seed",
        "bench_root": tmp_path / "bench",
        "run_root": tmp_path / "storage" / "run-1",
        "docker_host": "unix:///var/run/docker.sock",
    }


# ---- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["oracle", "nop"])
def test_reference_engine_needs_no_campaign_and_is_not_paid(flags, engine):
    cfg = RunConfig.from_flags(engine=engine, **flags)
    assert cfg.agent.engine == engine and cfg.agent.engine_kind is EngineKind(engine)
    assert cfg.spends_nothing and not cfg.is_paid
    assert cfg.agent.upstream_entry is None
    assert model_provider(cfg) == engine and agent_short_name(cfg) == f"{engine}/{cfg.agent.model}"
    rendered = build_run_config(cfg)
    assert rendered.engine == engine and rendered.settings == {} and rendered.disabled_tools == []


def test_without_a_reference_engine_a_run_without_campaign_is_still_refused(flags):
    with pytest.raises(Refusal) as info:
        RunConfig.from_flags(**flags)
    assert "--campaign-file" in info.value.sentence


@pytest.mark.parametrize("field", MONEY_FIELDS)
def test_every_money_flag_with_a_reference_engine_is_refused_in_one_sentence(flags, tmp_path, field):
    values = {
        "campaign_file": tmp_path / "c.json",
        "campaign_budget_usd": 500.0,
        "prior_spend_usd": 1.0,
        "budget_usd": 10.0,
        "budget_reserve_usd": 1.0,
        "meter_blindness_sec": 60.0,
        "meter_url": "http://127.0.0.1:9",
        "min_key_usd": 1.0,
        "campaign_db": "postgresql://db/campaigns",
        "campaign_name": "q4",
    }
    with pytest.raises(Refusal) as info:
        RunConfig.from_flags(engine="oracle", **{**flags, field: values[field]})
    sentence = info.value.sentence
    assert (
        sentence == f"--engine oracle spends nothing and takes no campaign, budget or meter flag; "
        f"remove --{field.replace('_', '-')}."
    )


def test_a_money_flag_at_its_default_value_is_refused_from_argv(flags):
    argv = ["cowork-adapter", "run", "--engine", "nop", "--budget-usd=150"]
    with pytest.raises(Refusal) as info:
        RunConfig.from_flags(argv=argv, environ={}, engine="nop", budget_usd=150.0, **flags)
    assert info.value.sentence.endswith("remove --budget-usd.")
    # The same value without the flag on the command line is the default, not a request.
    RunConfig.from_flags(argv=["cowork-adapter", "run", "--engine", "nop"], environ={}, engine="nop", **flags)


@pytest.mark.parametrize("engine", ["oracle2", "upstream:", "Oracle"])
def test_unknown_engines_are_refused(flags, engine):
    with pytest.raises(Refusal) as info:
        RunConfig.from_flags(engine=engine, campaign_file=flags["run_root"].parent / "c.json", **flags)
    assert "'oracle', 'nop'" in info.value.sentence


# ---- the command line: one sentence, exit 2, nothing written ---------------------------------------

CLI_CASES = [
    Case("oracle with the base campaign file", ["--engine", "oracle"], words="remove --campaign-file"),
    Case(
        "nop with budget at its default",
        ["--engine", "nop", "--budget-usd", "150"],
        drop=("--campaign-file",),
        words="--engine nop spends nothing and takes no campaign, budget or meter flag; remove --budget-usd",
    ),
    Case(
        "oracle with prior spend",
        ["--engine", "oracle", "--prior-spend-usd", "0"],
        drop=("--campaign-file",),
        words="remove --prior-spend-usd",
    ),
    Case(
        "nop with a meter url",
        ["--engine", "nop", "--meter-url=http://127.0.0.1:1"],
        drop=("--campaign-file",),
        words="remove --meter-url",
    ),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.name for c in CLI_CASES])
def test_cli_refuses_money_flags_with_reference_engines(tmp_path, case):
    out = _play(case, tmp_path / "case")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cowork-adapter: ") and case.words in lines[0], out.stderr
    assert out.stdout == "" and not out.run_root.parent.exists() and out.after == out.before


def test_qualify_configs_refuse_an_existing_root_and_write_nothing(flags, tmp_path):
    flags["run_root"].mkdir()
    with pytest.raises(Refusal) as info:
        qualify_configs(dict(flags), [])
    assert "already exists" in info.value.sentence


def test_qualify_configs_are_one_oracle_and_one_nop_accepting_blocked_tasks(flags):
    root, configs = qualify_configs(dict(flags, tasks=("a",)), ["cowork-adapter", "qualify"])
    assert not root.exists()
    assert [c.agent.engine for c in configs.values()] == ["oracle", "nop"]
    assert {c.run_root for c in configs.values()} == {root / "oracle", root / "nop"}
    assert all(
        c.accept_environment_blocked and not c.is_paid and c.selection.task_ids == ("a",) for c in configs.values()
    )
    # The nop pass may reuse the oracle pass's inventory (probes.reusable_inventory decides when it starts).
    assert configs["oracle"].inventory_from is None and configs["nop"].inventory_from == root / "oracle"


# ---- classification: from the verdicts only ---------------------------------------------------------


def V(status: str, passed=None, reason=None) -> EngineVerdict:
    return EngineVerdict(status=TaskStatus(status), passed=passed, reason=reason)


@pytest.mark.parametrize(
    "oracle,nop,klass",
    [
        (V("passed", True), V("failed", False, "[FAIL] x"), TaskValidityClass.VALID),
        (V("failed", False, "[FAIL] customer 2 is active"), V("failed", False), TaskValidityClass.ORACLE_FAILS),
        (V("infra_failed", None, "infra_failed: preprocess_failed"), V("infra_failed"), TaskValidityClass.ORACLE_FAILS),
        (V("failed", False, "[FAIL] y"), V("passed", True), TaskValidityClass.ORACLE_FAILS),
        (V("passed", True), V("passed", True), TaskValidityClass.NOP_PASSES),
        (
            V("environment_blocked", None, "mcp_server_failed:quotes"),
            V("environment_blocked"),
            TaskValidityClass.ENVIRONMENT_BLOCKED,
        ),
        (V("passed", True), V("infra_failed", None, "infra_failed: x"), TaskValidityClass.UNDETERMINED),
        (V("not_attempted", None, "not_attempted: missing_result"), V("failed", False), TaskValidityClass.UNDETERMINED),
    ],
)
def test_classify(oracle, nop, klass):
    got, reason = classify(oracle, nop)
    assert got is klass
    if klass is TaskValidityClass.VALID:
        assert reason is None
    elif klass is TaskValidityClass.ORACLE_FAILS:
        assert reason == oracle.reason
    else:
        assert reason


def test_evaluator_words_prefer_its_fail_lines():
    out = "[PASS] a exists\n[FAIL] customer 2 is active (got lead)\n[FAIL] no stray notes []\nresult: failure\n"
    assert (
        evaluator_words({"pass": False, "failure": out})
        == "[FAIL] customer 2 is active (got lead); [FAIL] no stray notes []"
    )
    assert evaluator_words({"pass": False, "failure": "Traceback\nKeyError: 'x'\n"}) == "KeyError: 'x'"
    assert evaluator_words({"pass": False, "details": "no log file"}) == "no log file"


def test_evaluator_words_never_give_decoration_and_say_when_the_evaluator_gave_no_reason():
    # Seen on the real benchmark: a database error ending in a caret line, a banner, an output that
    # stops after passing checks, and an empty failure text.
    db = (
        "Fetching expected data...\n"
        'Error querying database: relation "moex.stock_prices" does not exist\n'
        "LINE 3: FROM x\n   ^\n\n"
    )
    assert evaluator_words({"pass": False, "failure": db}).startswith("Error querying database: relation")
    banner = "=" * 70 + "\nMOEX STOCK COMPARISON WORD - EVALUATION\n" + "=" * 70 + "\n"
    assert evaluator_words({"pass": False, "failure": banner}) == (
        "the evaluator said False with no failing check; its output ends: MOEX STOCK COMPARISON WORD - EVALUATION"
    )
    passed_then_stopped = "\n=== Checking Excel File ===\n  [PASS] Excel file exists\n"
    assert evaluator_words({"pass": False, "failure": passed_then_stopped}) == (
        "the evaluator said False with no failing check; its output ends: [PASS] Excel file exists"
    )
    assert evaluator_words({"pass": False, "failure": ""}) == "the evaluator said False and printed no reason"
    assert evaluator_words(None) is None and evaluator_words({"pass": False}) is None


def _row(task: str, status: str, *, passed=None, receipt: Path | None = None, reason="r", blocked=None) -> TaskRow:
    official = OfficialEvalStatus.COMPLETED if isinstance(passed, bool) else OfficialEvalStatus.NOT_RUN
    return TaskRow(
        ts="2026-01-01T00:00:00Z",
        instance_id=task,
        status=TaskStatus(status),
        reason_code=reason,
        official_eval_status=official,
        environment_blocked=blocked,
        official_receipt=OfficialReceipt(path=str(receipt) if receipt else None, pass_=passed),
    )


def _ledger(root: Path, rows: list[TaskRow]) -> None:
    root.mkdir()
    (root / "result_index.jsonl").write_text("".join(r.to_line() for r in rows))


def test_build_validity_reads_the_evaluator_words_from_the_receipt_and_counts_every_class(tmp_path):
    receipt = tmp_path / "receipt.json"
    receipt.write_text(json.dumps({"returned": {"pass": False, "failure": "[FAIL] totals.json is valid JSON\n"}}))
    oracle, nop = tmp_path / "oracle", tmp_path / "nop"
    _ledger(
        oracle,
        [
            _row("t-valid", "passed", passed=True),
            _row("t-bad", "failed", passed=False, receipt=receipt),
            _row("t-blocked", "environment_blocked", blocked="mcp_server_failed:quotes"),
        ],
    )
    _ledger(
        nop,
        [
            _row("t-valid", "failed", passed=False, receipt=receipt),
            _row("t-bad", "failed", passed=False),
            _row("t-blocked", "environment_blocked", blocked="mcp_server_failed:quotes"),
        ],
    )
    validity = build_validity(oracle, nop, ["t-valid", "t-bad", "t-blocked", "t-missing"], "c" * 40)
    classes = {r.instance_id: r.class_ for r in validity.tasks}
    assert classes == {
        "t-valid": TaskValidityClass.VALID,
        "t-bad": TaskValidityClass.ORACLE_FAILS,
        "t-blocked": TaskValidityClass.ENVIRONMENT_BLOCKED,
        "t-missing": TaskValidityClass.UNDETERMINED,
    }
    bad = next(r for r in validity.tasks if r.instance_id == "t-bad")
    assert bad.reason == "[FAIL] totals.json is valid JSON" and bad.oracle.passed is False
    assert validity.counts == {
        "valid": 1,
        "oracle_fails": 1,
        "nop_passes": 0,
        "environment_blocked": 1,
        "undetermined": 1,
    }
    again = decode(validity.to_json(), TaskValidity)
    assert again == validity and json.loads(validity.to_json())["tasks"][0]["class"] == "valid"
    table = render_table(validity).splitlines()
    assert table[0].split() == ["task", "oracle", "nop", "class", "reason"]
    assert table[2].split()[:4] == ["t-bad", "fail", "fail", "oracle_fails"] and table[2].endswith("valid JSON")
    assert table[-1] == "4 tasks: 1 valid, 1 oracle_fails, 0 nop_passes, 1 environment_blocked, 1 undetermined"


def test_the_html_page_shows_every_task_and_class_escaped_and_loads_nothing(tmp_path):
    receipt = tmp_path / "receipt.json"
    receipt.write_text(
        json.dumps({"returned": {"pass": False, "failure": "[FAIL] <script>alert(1)</script> & rows\n"}})
    )
    oracle, nop = tmp_path / "oracle", tmp_path / "nop"
    _ledger(oracle, [_row("t-valid", "passed", passed=True), _row("t-bad", "failed", passed=False, receipt=receipt)])
    _ledger(nop, [_row("t-valid", "failed", passed=False), _row("t-bad", "failed", passed=False)])
    page = render_html(build_validity(oracle, nop, ["t-valid", "t-bad"], "c" * 40))
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert "<td>t-valid</td><td>pass</td><td>fail</td><td>valid</td><td></td>" in page
    # The evaluator's words are shown, as text: nothing it printed can run in the reader's browser.
    assert "<td>t-bad</td><td>fail</td><td>fail</td><td>oracle_fails</td><td>[FAIL] &lt;script&gt;alert(1)" in page
    assert "<script" not in page and "&amp; rows" in page
    assert "<td>valid</td><td>1</td>" in page and "<td>oracle_fails</td><td>1</td>" in page
    assert "<td>undetermined</td><td>0</td>" in page and "c" * 40 in page
    assert not any(word in page for word in ("src=", "href=", "@import", "url("))


def test_verdict_of_a_missing_row_is_not_attempted():
    assert verdict_of(None).status is TaskStatus.NOT_ATTEMPTED


# ---- --task-validity and the report ------------------------------------------------------------------


def _table(path: Path, classes: dict[str, str], bench_commit: str) -> Path:
    rows = [
        {
            "instance_id": t,
            "class": k,
            "oracle": {"status": "passed", "passed": True},
            "nop": {"status": "failed", "passed": False},
        }
        for t, k in classes.items()
    ]
    counts = {k.value: sum(1 for v in classes.values() if v == k.value) for k in TaskValidityClass}
    table = convert(
        {
            "created_at": "2026-01-01T00:00:00Z",
            "bench_commit": bench_commit,
            "oracle_run_root": "/q/oracle",
            "nop_run_root": "/q/nop",
            "counts": counts,
            "tasks": rows,
        },
        TaskValidity,
    )
    path.write_text(table.to_json())
    return path


def test_task_validity_flag_must_be_a_qualify_table_of_this_commit(flags, tmp_path):
    from cowork_adapter.defaults import PINNED_BENCH_COMMIT

    base = dict(flags, campaign_file=tmp_path / "storage" / "c.json")
    good = _table(tmp_path / "ok.json", {"a": "valid"}, PINNED_BENCH_COMMIT)
    assert RunConfig.from_flags(task_validity=good, **base).selection.task_validity == good.resolve()
    other = _table(tmp_path / "other.json", {"a": "valid"}, "f" * 40)
    with pytest.raises(Refusal) as info:
        RunConfig.from_flags(task_validity=other, **base)
    assert "qualifies benchmark commit ffffffffffff, not this run's d943e75bc0fc" in info.value.sentence
    junk = tmp_path / "junk.json"
    junk.write_text('{"tasks": []}')
    with pytest.raises(Refusal) as info:
        RunConfig.from_flags(task_validity=junk, **base)
    assert info.value.sentence.endswith("is not a task_validity.json written by qualify.")
    with pytest.raises(Refusal) as info:
        RunConfig.from_flags(task_validity=tmp_path / "absent.json", **base)
    assert "cannot be read" in info.value.sentence


def test_report_scores_valid_tasks_beside_the_full_set_headline(tmp_path):
    import synthetic_run as synth
    from test_recovery import make_run

    from cowork_adapter.report import make_report
    from cowork_adapter.report.render import headline, to_html, to_markdown, valid_line
    from cowork_adapter.report.stats import wilson_interval

    tasks = ["a-1", "a-2", "b-1", "b-2", "c-1"]
    root = make_run(tmp_path / "r0", tasks, {"a-1": "pass", "a-2": "fail", "b-1": "pass", "b-2": "fail"})
    _table(
        root / "task_validity.json",
        {"a-1": "valid", "a-2": "valid", "b-1": "nop_passes", "b-2": "oracle_fails"},
        synth.BENCH_COMMIT,
    )
    r = make_report([root], 1)
    assert r["denominator"] == 5 and r["passed"] == 2  # the headline is over every selected task
    v = r["validity"]
    assert (v["valid_denominator"], v["valid_passed"]) == (2, 1)
    assert v["valid_wilson95"] == pytest.approx(list(wilson_interval(1, 2)))
    assert v["classes"] == {
        "valid": 2,
        "oracle_fails": 1,
        "nop_passes": 1,
        "environment_blocked": 0,
        "undetermined": 0,
        "unqualified": 1,
    }
    assert {t["instance_id"]: t["validity_class"] for t in r["tasks"]}["c-1"] == "unqualified"
    assert any(d.startswith("Task validity from") and "1 unqualified" in d for d in r["disclosures"])
    md, html = to_markdown(r), to_html(r)
    assert md.index(headline(r)) < md.index(valid_line(r)) and "## Task validity" in md
    assert valid_line(r).startswith("pass@1 over valid tasks = 1/2 = 50.0 %") and "<h2>Task validity</h2>" in html
    assert (
        "| task | status | reason | cost | peak memory | CPU time | run | validity |" in md and "| b-2 | failed |" in md
    )
    assert "<td>oracle_fails</td>" in html


def test_report_without_a_table_has_no_validity_block(tmp_path):
    from test_recovery import make_run

    from cowork_adapter.report import make_report
    from cowork_adapter.report.render import to_markdown

    r = make_report([make_run(tmp_path / "r0", ["a"], {"a": "pass"})], 1)
    assert r["validity"] is None and "Task validity" not in to_markdown(r)
    assert r["tasks"][0]["validity_class"] is None


# ---- a run that spends nothing: no key, meter or campaign ----------------------------------------------------------


def test_a_run_spending_nothing_has_no_meter_no_campaign_and_never_asks_to_stop(flags, tmp_path):
    import synthetic_run as synth

    from cowork_adapter.container.reference import stage_groundtruth
    from cowork_adapter.run.run import Run
    from cowork_adapter.run.spending import NO_CAMPAIGN, SETTLED, NoSpending

    cfg = RunConfig.from_flags(engine="nop", **flags)
    manifest = synth.write_manifest(cfg.run_root, ["a"], engine="nop")
    run = Run(cfg, manifest, cfg.run_root / "bench", NoSpending(cfg))
    assert not run.spending.spends and run.spending.persistence_error is None and run.key == ""
    at, decision = run.spending.observe(0.0)
    assert decision is None and isinstance(at, float)
    run._runner_started(4242)  # no campaign to record the runner's group in: nothing raises
    assert NO_CAMPAIGN in SETTLED

    bench = tmp_path / "bench-copy"
    (bench / "tasks" / "finalpool" / "a" / "groundtruth_workspace").mkdir(parents=True)
    (bench / "tasks" / "finalpool" / "a" / "groundtruth_workspace" / "x.txt").write_text("x")
    (bench / "tasks" / "finalpool" / "b").mkdir(parents=True)
    assert stage_groundtruth(bench, ["a", "b"]) == 1
    staged = bench / "configs" / "cowork_oracle_groundtruth"
    assert (staged / "a" / "x.txt").read_text() == "x" and not (staged / "b").exists()
