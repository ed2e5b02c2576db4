"""A trial set's spending projection (run/trial_money.py): hand-computed figures, the refusal rule over
generated inputs, a refused set that writes nothing and leaves the campaign as it was, a dry run that says
what the set would cost, and `status R` showing the set's spend against the projection."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from test_recovery import make_run  # noqa: E402  (same directory; pytest puts it on sys.path)

from cowork_adapter.config import RunConfig
from cowork_adapter.ops.trial_control import trial_set_status
from cowork_adapter.run.trial_money import limit_usd, project, projection_for, projection_line, refusal_sentence
from cowork_adapter.run.trials import _projection, execute_trials
from cowork_adapter.runroot.layout import TRIALS
from cowork_adapter.schemas.campaign import CampaignRecord, RunRecord, key_fingerprint
from cowork_adapter.schemas.monitor import MeterState, Monitor, Spending
from cowork_adapter.schemas.trials import TrialSet, read_trial_set, trial_names

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_hand_computed_projection_and_refusal() -> None:
    # Earlier runs: $6 over 3 tasks, $0 over none (left out), $2 over 1 task: $8 / 4 tasks = $2 per task.
    p = project(
        k=3, tasks=4, per_task_cap_usd=2.5, history=[(6.0, 3), (0.0, 0), (2.0, 1)], budget_usd=20.0, available_usd=40.0
    )
    assert (p.observed_cost_per_task_usd, p.observed_runs) == (2.0, 2)
    assert p.expected_usd == 24.0 and p.worst_case_usd == 30.0
    assert limit_usd(p) == 20.0
    sentence = refusal_sentence(p)
    assert sentence is not None and "$24.00" in sentence and "$20.00" in sentence and "--budget-usd" in sentence
    room = project(k=3, tasks=4, per_task_cap_usd=2.5, history=[(8.0, 4)], budget_usd=25.0, available_usd=None)
    assert refusal_sentence(room) is None
    assert "worst case $30.00" in projection_line(room) and "a trial may stop" in projection_line(room)
    fresh = project(k=2, tasks=5, per_task_cap_usd=25.0, history=[], budget_usd=20.0, available_usd=45.0)
    assert fresh.expected_usd is None and refusal_sentence(fresh) is None  # no history: nothing to refuse on
    assert "no expected cost" in projection_line(fresh)


money = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    k=st.integers(1, 20),
    tasks=st.integers(0, 500),
    cap=st.floats(min_value=0.01, max_value=100, allow_nan=False),
    history=st.lists(st.tuples(money, st.integers(0, 500)), max_size=8),
    budget=st.none() | money,
    available=st.none() | money,
)
def test_refused_exactly_when_the_expected_cost_is_above_what_the_set_may_spend(
    k: int, tasks: int, cap: float, history: list[tuple[float, int]], budget: float | None, available: float | None
) -> None:
    p = project(k=k, tasks=tasks, per_task_cap_usd=cap, history=history, budget_usd=budget, available_usd=available)
    limits = [v for v in (budget, available) if v is not None]
    handed = sum(t for _, t in history if t > 0)
    expected = None if not handed else k * tasks * sum(s for s, t in history if t > 0) / handed
    assert p.worst_case_usd == k * tasks * cap
    assert (p.expected_usd is None) == (expected is None)
    if expected is not None:
        assert abs((p.expected_usd or 0.0) - expected) <= 1e-9 * max(1.0, expected)
    should = p.expected_usd is not None and bool(limits) and p.expected_usd > min(limits)
    assert (refusal_sentence(p) is not None) == should
    assert projection_line(p).startswith(f"{k} trials of {tasks} tasks")


def _campaign(tmp_path: Path, runs: list[RunRecord]) -> Path:
    path = tmp_path / "campaign.json"
    record = CampaignRecord(
        fingerprint=key_fingerprint("k"),
        ceiling_usd=100.0,
        usage_baseline=0.0,
        prior_spend_usd=0.0,
        last_usage=10.0,  # $10 spent: $90 left, $80 above the $10 reserve
        last_usage_observed_at=NOW,
        created_at=NOW,
        reserve_usd=10.0,
        run_budget_usd=50.0,
        runs=tuple(runs),
    )
    path.write_text(record.to_json())
    return path


def _earlier(tmp_path: Path) -> list[RunRecord]:
    # One earlier run handed 2 tasks to its runner and spent $10: $5 per task.
    root = make_run(tmp_path / "earlier", ["a", "b"], {"a": "pass", "b": "fail"})
    return [
        RunRecord(
            run_root=str(root), run_label="l", outcome="completed", spent_usd=10.0, started_at=NOW, finished_at=NOW
        ),
        # A refused run handed its runner nothing, whatever its manifest selected: left out.
        RunRecord(
            run_root=str(root),
            run_label="r",
            outcome="refused",
            spent_usd=0.0,
            started_at=NOW,
            finished_at=NOW,
        ),
        # A run root that is gone prices nothing (and refuses nothing).
        RunRecord(
            run_root=str(tmp_path / "gone"),
            run_label="m",
            outcome="completed",
            spent_usd=99.0,
            started_at=NOW,
            finished_at=NOW,
        ),
    ]


def _cfg(tmp_path: Path, campaign: Path, **over) -> RunConfig:
    flags = dict(
        repo_dir=tmp_path / "seed",
        bench_root=tmp_path / "bench",
        docker_host="unix:///nonexistent",
        run_root=tmp_path / "set",
        campaign_file=campaign,
        task_ids=("a", "b", "c"),
        trials=3,
        per_task_cost_usd=8.0,
    )
    flags.update(over)
    return RunConfig.from_flags(**flags)


def test_a_set_expected_above_its_money_is_refused_with_nothing_written(tmp_path: Path, capsys) -> None:
    campaign = _campaign(tmp_path, _earlier(tmp_path))
    before = campaign.read_bytes()
    listing = sorted(p.name for p in tmp_path.iterdir())
    # 3 trials x 3 tasks x $5 = $45 expected, above --budget-usd 30 (the campaign has $80 above its reserve).
    cfg = _cfg(tmp_path, campaign, budget_usd=30.0)
    assert execute_trials(cfg, ["cowork-adapter", "run"]) == 2
    err = capsys.readouterr().err
    assert "expected to cost $45.00" in err and "$30.00 the set may spend" in err
    assert err.count("\n") == 2  # the projection line and the one refusal sentence
    assert not (tmp_path / "set").exists() and sorted(p.name for p in tmp_path.iterdir()) == listing
    assert campaign.read_bytes() == before


def test_the_campaign_remainder_bounds_the_set_too(tmp_path: Path) -> None:
    campaign = _campaign(tmp_path, _earlier(tmp_path))
    # --budget-usd 500 is not what binds: the campaign's $80 above its reserve is; 6 trials x 3 x $5 = $90.
    p = projection_for(_cfg(tmp_path, campaign, budget_usd=500.0, trials=6))
    assert p is not None and p.expected_usd == 90.0 and p.campaign_available_usd == 80.0
    assert "the campaign's $80.00 above its reserve" in (refusal_sentence(p) or "")
    # The stored run budget stands in for a --budget-usd not given.
    stored = projection_for(_cfg(tmp_path, campaign, trials=2))
    assert stored is not None and stored.budget_usd == 50.0 and refusal_sentence(stored) is None
    # A set that spends nothing is never priced.
    assert projection_for(_cfg(tmp_path, campaign, engine="nop", campaign_file=None)) is None


def test_a_dry_run_says_what_the_set_would_cost_and_is_not_refused(tmp_path: Path, capsys) -> None:
    campaign = _campaign(tmp_path, _earlier(tmp_path))
    cfg = _cfg(tmp_path, campaign, budget_usd=30.0, dry_run=True)
    p = _projection(cfg, None, trial_names(3), ["cowork-adapter", "run", "--dry-run"])
    assert p is not None and p.expected_usd == 45.0 and p.worst_case_usd == 72.0
    err = capsys.readouterr().err
    assert "3 trials of 3 tasks: expected $45.00 at the campaign's $5.00 per task; worst case $72.00" in err
    assert "without --dry-run this set would be refused" in err


def test_status_shows_the_sets_spend_against_its_projection(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    p = project(k=2, tasks=2, per_task_cap_usd=5.0, history=[(6.0, 2)], budget_usd=15.0, available_usd=40.0)
    record = TrialSet(created_at="2026-01-01T00:00:00Z", k=2, run_roots=trial_names(2), projection=p)
    (folder / TRIALS).write_text(record.to_json())
    assert read_trial_set(folder).projection == p
    trial = make_run(folder / "trial-1", ["a", "b"], {"a": "pass"})
    monitor = Monitor(
        observed_at="2026-01-01T04:00:00Z",
        launcher_pid=1,
        finished=True,
        spending=Spending(run_spent_usd=4.25),
        meter=MeterState(blindness_sec=30.0),
    )
    (trial / "monitor.json").write_text(monitor.to_json())
    assert trial_set_status(folder, True) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["spent_usd"] == 4.25 and doc["trials_without_spend"] == 0
    assert doc["projection"]["expected_usd"] == 12.0 and doc["projection"]["worst_case_usd"] == 20.0
    assert trial_set_status(folder, False) == 0
    text = capsys.readouterr().out
    assert "spend so far $4.25 of the expected $12.00; worst case $20.00; the set may spend $15.00" in text
