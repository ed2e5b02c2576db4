"""`campaign show` and the guarded `campaign reconcile`: every refusal leaves the file unmodified."""

from __future__ import annotations

import io
import json
import math
import os
import socket
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from cowork_adapter.campaign.commands import reconcile_command, show_command
from cowork_adapter.campaign.meter import MeterError, MeterReading
from cowork_adapter.campaign.store import JsonFileCampaignStore, open_campaign, read_campaign
from cowork_adapter.demo.meter_standin import MeterStandin
from cowork_adapter.schemas.campaign import key_fingerprint

KEY = "sk-or-v1-fake-reconcile-key-000111"
ENV = {"FAKE_OPENROUTER_KEY": KEY}
HOST = "unix:///nonexistent/docker.sock"  # never contacted: the label check is injected


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def dead_process() -> int:
    """A pid (and process group) that existed and has been reaped."""
    child = subprocess.Popen(["true"], start_new_session=True)
    child.wait()
    return child.pid


def meter_at(usage):
    def read(_timeout: float) -> MeterReading:
        if isinstance(usage, Exception):
            raise usage
        return MeterReading(usage=usage, limit=None, limit_remaining=None, requested_at_monotonic=0.0)

    return read


class Label:
    def __init__(self, answer=True) -> None:
        self.answer, self.calls = answer, []

    def __call__(self, docker_host: str, run_label: str) -> bool:
        self.calls.append((docker_host, run_label))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def crashed(tmp_path: Path):
    """A campaign with one finished run and an active run whose launcher and runner are gone."""
    path = tmp_path / "campaign.json"
    run_root = tmp_path / "runs" / "crashed"
    run_root.mkdir(parents=True)
    store = JsonFileCampaignStore(path)
    common = dict(key_fingerprint=key_fingerprint(KEY), ceiling=1000.0, create_if_missing=True)
    with open_campaign(store, prior_spend=5.0, startup_usage=40.0, **common) as c:
        c.start_run(run_root="/runs/earlier", run_label="earlier", launcher_pid=1)
        c.record_usage(45.0)
        c.finish_run(outcome="completed")
    with open_campaign(store, startup_usage=50.0, **common) as c:
        c.start_run(run_root=str(run_root.resolve()), run_label="label-crashed", launcher_pid=dead_process())
        c.set_runner_pgid(dead_process())
    return path, run_root


def reconcile(path, run_root, **over):
    args = dict(
        campaign_file=path,
        run_root=run_root,
        operator_note="checked ps and docker by hand",
        api_key_env="FAKE_OPENROUTER_KEY",
        docker_host=HOST,
        label_is_empty=Label(True),
        read_meter=meter_at(70.0),
        clock=FakeClock(),
        environ=ENV,
    )
    args.update(over)
    return reconcile_command(**args)


def test_reconcile_clears_the_active_run_and_records_the_proof(crashed, capsys):
    path, run_root = crashed
    before = read_campaign(path)
    label = Label(True)
    assert reconcile(path, run_root, label_is_empty=label) == 0
    after = read_campaign(path)
    assert label.calls == [(HOST, "label-crashed")]
    assert after.active_run is None
    # Never a new baseline; ceiling, prior spend and earlier history are unchanged.
    assert (after.usage_baseline, after.ceiling_usd, after.prior_spend_usd) == (40.0, 1000.0, 5.0)
    assert after.runs[:-1] == before.runs and after.created_at == before.created_at
    last = after.runs[-1]
    assert (last.run_root, last.outcome, last.spent_usd) == (str(run_root.resolve()), "reconciled", 20.0)
    note = after.reconciliations[-1]
    assert note.operator_note == "checked ps and docker by hand" and note.usage_at_reconcile == 70.0
    assert note.checks["launcher_pid"]["exists"] is False and note.checks["runner_pgid"]["exists"] is False
    assert note.checks["docker_label"] == {"label": "label-crashed", "docker_host": HOST, "empty": True}
    assert after.last_usage == 70.0 and after.spent_usd == 5.0 + 70.0 - 40.0
    assert "Reconciled" in capsys.readouterr().out
    assert KEY not in path.read_text()


def test_reconcile_keeps_the_usage_it_replaces_in_the_history(crashed, capsys):
    path, run_root = crashed
    before = read_campaign(path)
    assert before.last_usage == 50.0
    assert reconcile(path, run_root, read_meter=meter_at(70.0)) == 0
    raw = json.loads(path.read_text())
    assert raw["last_usage"] == 70.0
    kept = raw["reconciliations"][-1]
    assert (kept["previous_usage"], kept["usage_at_reconcile"]) == (50.0, 70.0)
    note = read_campaign(path).reconciliations[-1]
    assert note.previous_usage_observed_at == before.last_usage_observed_at
    capsys.readouterr()
    assert show_command(path, False) == 0
    shown = capsys.readouterr().out
    assert "usage before" in shown and "50.000000" in shown and "70.000000" in shown


def _refused(path, run_root, capsys, words, **over):
    before = path.read_bytes()
    assert reconcile(path, run_root, **over) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
    assert path.read_bytes() == before


def test_refuses_without_an_operator_note(crashed, capsys):
    _refused(*crashed, capsys, "operator note", operator_note="  ")


def test_refuses_without_a_key(crashed, capsys):
    _refused(*crashed, capsys, "holds no provider key", environ={})


def test_refuses_another_key(crashed, capsys):
    _refused(*crashed, capsys, "not the campaign's key", environ={"FAKE_OPENROUTER_KEY": "sk-or-v1-other-fake"})


def test_refuses_another_run_root(crashed, capsys, tmp_path):
    _refused(crashed[0], tmp_path / "runs" / "other", capsys, "active run is")


def test_refuses_a_live_launcher(crashed, capsys):
    path, run_root = crashed
    _rewrite_active(path, launcher_pid=os.getpid())
    _refused(path, run_root, capsys, f"launcher process {os.getpid()} still exists")


def test_refuses_a_live_runner_group(crashed, capsys):
    path, run_root = crashed
    _rewrite_active(path, runner_pgid=os.getpgid(0))
    _refused(path, run_root, capsys, "process group")


def test_refuses_another_host(crashed, capsys):
    path, run_root = crashed
    _rewrite_active(path, host=socket.gethostname() + "-elsewhere")
    _refused(path, run_root, capsys, "launched on host")


def test_refuses_when_containers_remain(crashed, capsys):
    _refused(*crashed, capsys, "still exist", label_is_empty=Label(False))


def test_refuses_unknown_docker_state(crashed, capsys):
    _refused(*crashed, capsys, "could not prove", label_is_empty=Label(RuntimeError("daemon unreachable")))


@pytest.mark.parametrize("usage", [math.nan, 49.0, MeterError("http_503", "down")])
def test_refuses_without_an_accepted_meter_reading(crashed, capsys, usage):
    _refused(*crashed, capsys, "no acceptable reading", read_meter=meter_at(usage))


def test_refuses_when_nothing_is_active(crashed, capsys):
    path, run_root = crashed
    assert reconcile(path, run_root) == 0
    capsys.readouterr()
    _refused(path, run_root, capsys, "no active run")


def test_refuses_while_the_campaign_is_locked(crashed, capsys):
    path, run_root = crashed
    with JsonFileCampaignStore(path).locked():
        _refused(path, run_root, capsys, "locked")


def test_refuses_a_missing_campaign(tmp_path, capsys):
    assert reconcile(tmp_path / "none.json", tmp_path) == 2
    assert not (tmp_path / "none.json").exists()


def test_reconcile_reads_the_real_meter_protocol(crashed, capsys):
    path, run_root = crashed
    with MeterStandin(KEY, usage=61.5, max_delay_sec=5.0) as standin:
        assert reconcile(path, run_root, read_meter=None, meter_url=standin.base_url) == 0
    assert read_campaign(path).reconciliations[-1].usage_at_reconcile == 61.5


def _rewrite_active(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data["active_run"].update(changes)
    path.write_text(json.dumps(data))


def test_show_prints_a_table_and_json(crashed, capsys):
    path, _ = crashed
    console = Console(file=io.StringIO(), width=200)
    assert show_command(path, as_json=False, console=console) == 0
    text = console.file.getvalue()
    assert key_fingerprint(KEY) in text and "crashed (launcher pid" in text
    assert "$1,000.00" in text and "$15.0000" in text and "/runs/earlier" in text
    assert "not stored / not stored" in text and "not recorded" in text  # created without stored bounds
    assert show_command(path, as_json=True) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["spent_usd"] == 15.0 and shown["active_run"]["run_label"] == "label-crashed"


def test_show_refuses_a_missing_file(tmp_path, capsys):
    assert show_command(tmp_path / "none.json", as_json=True) == 2
    assert "does not exist" in capsys.readouterr().err
