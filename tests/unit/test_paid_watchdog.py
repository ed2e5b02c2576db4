"""The launcher's side of the watchdog in run/run.py: no watchdog, no runner; every exit says done."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from cowork_adapter.custody.watchdog import WatchdogError
from cowork_adapter.run import run as runmod
from cowork_adapter.run.spending import NoSpending
from cowork_adapter.vocab import EventKind, StopReason


def bare_run(tmp_path: Path) -> tuple[runmod.Run, list]:
    run = object.__new__(runmod.Run)
    events: list = []
    run.cfg = SimpleNamespace(
        run_root=tmp_path,
        docker_host="unix:///nowhere.sock",
        money=SimpleNamespace(meter_blindness_sec=30.0),
        provider=SimpleNamespace(api_key_env="COWORK_TEST_KEY"),
    )
    run.label = "0" * 32
    run.key = "not-a-key"
    run.tmpdir = tmp_path / "tmp"
    run.agent_env = tmp_path / "private" / "agent.env"
    run.watchdog = None
    run.processes = None
    run.event = lambda kind, **payload: events.append((kind, payload))
    return run, events


def test_a_watchdog_that_cannot_start_stops_the_run_before_the_key_and_the_runner(tmp_path, monkeypatch):
    run, events = bare_run(tmp_path)

    def no_watchdog(**_kw):
        raise WatchdogError("the watchdog exited within 60 s")

    def forbidden(*_a, **_kw):
        raise AssertionError("nothing may be prepared for the runner without a watchdog")

    monkeypatch.setattr(runmod, "start_watchdog", no_watchdog)
    monkeypatch.setattr(runmod, "write_agent_env", forbidden)
    monkeypatch.setattr(runmod, "install_custody", forbidden)
    monkeypatch.setattr(runmod, "Supervisor", forbidden)
    result = run._supervise(anchor=0.0)
    assert result.stop_reason == StopReason.SUPERVISOR_ERROR
    assert result.runner_exit_code is None and "WatchdogError" in result.supervisor_error
    assert not run.agent_env.exists()
    assert EventKind.WATCHDOG_STARTED not in [kind for kind, _ in events]


def test_a_run_ends_the_watchdog_on_every_way_out(tmp_path, monkeypatch):
    ended: list[bool] = []

    class Handle:
        def end(self):
            ended.append(True)

    def boom(self):
        self.watchdog = Handle()
        raise RuntimeError("a crash after the watchdog started")

    def no_init(self, *_a):
        self.agent_env = tmp_path / "private" / "agent.env"

    monkeypatch.setattr(runmod.Run, "__init__", no_init)
    monkeypatch.setattr(runmod.Run, "run", boom)
    monkeypatch.setattr(runmod.Run, "watchdog", None, raising=False)
    with pytest.raises(RuntimeError):
        runmod.run_in_custody(
            SimpleNamespace(),
            None,
            tmp_path,
            NoSpending(SimpleNamespace(money=SimpleNamespace(meter_blindness_sec=30.0))),
            key="k",
        )
    assert ended == [True]


@pytest.mark.parametrize("error", [RuntimeError("a crash mid-run"), KeyboardInterrupt()])
def test_the_key_file_is_deleted_when_the_run_raises_mid_run(tmp_path, monkeypatch, error):
    key_file = tmp_path / "private" / "agent.env"
    seen: list[bool] = []

    def init(self, *_a):
        self.agent_env = key_file

    def crash_mid_run(self):
        runmod.write_agent_env(self.agent_env, "sk-or-v1-not-a-real-key")  # as _supervise writes it
        seen.append(self.agent_env.exists())
        raise error

    monkeypatch.setattr(runmod.Run, "__init__", init)
    monkeypatch.setattr(runmod.Run, "run", crash_mid_run)
    monkeypatch.setattr(runmod.Run, "watchdog", None, raising=False)
    with pytest.raises(type(error)):
        runmod.run_in_custody(
            SimpleNamespace(),
            None,
            tmp_path,
            NoSpending(SimpleNamespace(money=SimpleNamespace(meter_blindness_sec=30.0))),
            key="k",
        )
    assert seen == [True]
    assert not key_file.exists()


def test_the_cleanup_deletes_the_key_file_even_when_it_fails_unexpectedly(tmp_path, monkeypatch):
    key_file = tmp_path / "private" / "agent.env"
    runmod.write_agent_env(key_file, "sk-or-v1-not-a-real-key")

    def broken(*_a, **_kw):
        raise ValueError("an unexpected answer of the daemon")

    monkeypatch.setattr(runmod, "cleanup_run", broken)
    cfg = SimpleNamespace(docker_host="unix:///nowhere.sock", run_root=tmp_path)
    with pytest.raises(ValueError):
        runmod._cleanup(cfg, "0" * 32, None, None, tmp_path / "tmp", key_file)
    assert not key_file.exists()
