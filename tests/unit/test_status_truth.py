"""`status`, `stop` and `report` tell the truth in the words of docs/exit-codes.md.

Counts add up to the denominator (environment_blocked, infra_failed and not_attempted included);
"stopping" only while the run is stopping; exit codes named as that page's table names them; a
folder that holds run roots (a demo root) is answered with the run roots inside; `report` on a
folder that is not a run root gives one sentence.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cowork_adapter import cli
from cowork_adapter.ops.run_view import EXIT_WORDS
from cowork_adapter.ops.status import status_command
from cowork_adapter.run.live import summary_line, tally
from cowork_adapter.schemas.manifest import RunManifest
from cowork_adapter.schemas.monitor import MeterState, Monitor, Progress
from cowork_adapter.vocab import ExitCode

REPO = Path(__file__).resolve().parents[2]


def _manifest(run_root: Path, **over) -> RunManifest:
    fields = dict(
        run_root=str(run_root),
        run_label="cd" * 16,
        created_at="2026-03-01T12:00:00Z",
        updated_at="2026-03-01T12:00:00Z",
        argv=["cowork-adapter", "run"],
        adapter={"version": "0"},
    )
    fields.update(over)
    return RunManifest(**fields)


def _meter_outage_run(root: Path) -> Path:
    """The shape of the demo's meter-outage run: one task, settled infra_failed, never finished by
    the runner, stopped for budget_meter_unavailable, launcher gone (pid 1 is no launcher)."""
    root.mkdir(parents=True)
    (root / "run_manifest.json").write_text(
        _manifest(
            root,
            outcome="stopped",
            stop_reason="budget_meter_unavailable",
            stop_causes=["budget_meter_unavailable"],
            exit_code=3,
            finished_at="2026-03-01T12:05:00Z",
            campaign_settlement="recorded",
        ).to_json()
    )
    mon = Monitor(
        observed_at=datetime(2026, 3, 1, 12, 5, tzinfo=UTC),
        launcher_pid=1,
        finished=True,
        progress=Progress(selected=1, done=0, infra_failed=1),
        meter=MeterState(blindness_sec=30.0),
        stop_reason="budget_meter_unavailable",
        stop_causes=["budget_meter_unavailable"],
        campaign_settlement="recorded",
    )
    (root / "monitor.json").write_text(mon.to_json())
    return root


def _numbers(line: str) -> dict[str, int]:
    return {name: int(n) for n, name in re.findall(r"(\d+) ([a-z_]+)", line)}


def test_status_counts_add_up_and_a_finished_run_is_not_stopping(tmp_path, capsys):
    root = _meter_outage_run(tmp_path / "meter-outage")
    assert status_command(root, as_json=False) == 0
    out = capsys.readouterr().out
    summary = next(line for line in out.splitlines() if " done | " in line).strip()
    assert summary.startswith("1/1 done | 0 passed | 0 failed | 0 agent_failed | 1 infra_failed"), summary
    counts = _numbers(summary)
    parts = (
        "passed",
        "failed",
        "agent_failed",
        "infra_failed",
        "running",
        "environment_blocked",
        "not_attempted",
        "waiting",
    )
    assert sum(counts[p] for p in parts) == 1
    assert "stopping" not in out and "stopped: budget_meter_unavailable" in out
    assert "exit code: 3 (stopped)" in out


def test_a_live_stop_still_says_stopping():
    mon = Monitor(
        observed_at=datetime(2026, 3, 1, tzinfo=UTC),
        launcher_pid=1,
        finished=False,
        progress=Progress(selected=4, done=1, passed=1, running=2),
        meter=MeterState(blindness_sec=30.0),
        stop_reason="signal_15",
        stop_causes=["signal_15"],
    )
    assert summary_line(mon).endswith("stopping: signal_15")
    assert summary_line(mon, stopped=True).endswith("stopped: signal_15")


@pytest.mark.parametrize(
    "progress",
    [
        Progress(selected=10, done=4, passed=1, failed=1, agent_failed=1, infra_failed=1, running=2),
        Progress(selected=25, done=3, passed=3, environment_blocked=19, running=1),
        Progress(selected=5, done=0, not_attempted=5),
        Progress(selected=3, done=3, passed=1, running=0),  # two finished by the runner, awaiting verdicts
    ],
)
def test_tally_partitions_the_denominator(progress):
    settled, waiting = tally(progress)
    assert settled + progress.running + waiting == progress.selected
    line = summary_line(
        Monitor(
            observed_at=datetime(2026, 3, 1, tzinfo=UTC),
            launcher_pid=1,
            progress=progress,
            meter=MeterState(blindness_sec=30.0),
        )
    )
    counts = _numbers(line)
    assert line.startswith(f"{settled}/{progress.selected} done")
    assert sum(v for k, v in counts.items() if k != "done") == progress.selected


def test_exit_codes_are_named_as_the_docs_name_them():
    page = (REPO / "docs" / "exit-codes.md").read_text()
    table = page.split("## Exit codes", 1)[1].split("\n\n", 2)[1]
    for code, word in EXIT_WORDS.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| {int(code)} |"))
        assert f"**{word}**" in row, (code, word, row)
    assert EXIT_WORDS[ExitCode.FAILED] == "incomplete"


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        cli.main(args)
    out = capsys.readouterr()
    return int(done.value.code), out.out, out.err


def test_a_demo_root_is_answered_with_its_run_roots(tmp_path, capsys):
    demo = tmp_path / "demo-1"
    for name in ("pass", "meter-outage"):
        run = demo / "runs" / name
        run.mkdir(parents=True)
        (run / "events.jsonl").write_text("")
    (demo / "storage").mkdir()
    for command in (
        ["status", str(demo)],
        ["stop", str(demo)],
        ["report", str(demo)],
        ["audit", "--run-dir", str(demo)],
    ):
        code, out, err = _cli(command, capsys)
        assert code == 2 and out == ""
        assert len(err.splitlines()) == 1, err
        assert (
            "holds 2 run root(s)" in err
            and str(demo / "runs" / "meter-outage") in err
            and str(demo / "runs" / "pass") in err
        ), err
        assert "Error" not in err


def test_report_on_a_folder_without_a_manifest_says_so_in_one_sentence(tmp_path, capsys):
    half = tmp_path / "killed-early"
    half.mkdir()
    (half / "events.jsonl").write_text("")  # a run killed before its manifest: status reads it, report cannot
    code, out, err = _cli(["report", str(half)], capsys)
    assert code == 2 and out == ""
    assert err.strip() == f"cowork-adapter: {half} is not a run root (no run_manifest.json)."
    assert "FileNotFoundError" not in err and not (half / "report").exists()
