"""The command line, in-process: each command calls its implementation with the parsed values, and its help."""

from __future__ import annotations

import sys
import types

import pytest

from cowork_adapter import cli
from cowork_adapter.config import RunConfig

# ---------------------------------------------------------------------------------------------
# Wiring (in-process): each command calls its implementation with the parsed values.
# ---------------------------------------------------------------------------------------------


def _invoke(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    return info.value.code


def _stand_in(monkeypatch, module: str, *names: str, result: int = 0) -> list:
    """Put a stand-in `module` with functions `names` in sys.modules (the lazy imports find it
    there first); returns the list of (function, args, kwargs) calls."""
    calls: list = []
    stand_in = types.ModuleType(module)
    for name in names:

        def fake(*args, _name=name, **kwargs):
            calls.append((_name, args, kwargs))
            return result

        setattr(stand_in, name, fake)
    monkeypatch.setitem(sys.modules, module, stand_in)
    return calls


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("DOCKER_HOST", "COWORK_BENCH_ROOT", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(var, raising=False)


def test_run_wiring(monkeypatch, tmp_path, clean_env, capsys):
    calls = _stand_in(monkeypatch, "cowork_adapter.run.launch", "execute_run", result=3)
    monkeypatch.setenv("COWORK_BENCH_ROOT", str(tmp_path / "bench"))
    monkeypatch.setenv("DOCKER_HOST", "unix:///x.sock")
    argv = [
        "run",
        "--repo-dir",
        str(tmp_path / "seed"),
        "--run-root",
        str(tmp_path / "s" / "r"),
        "--dry-run",
        "--task",
        "b",
        "--task",
        "a",
        "--safety-mode",
        "light",
        "--probe",
        "none",
        "--memory",
        "8g",
        "--task-timeout",
        "7200",
        "--subagent-depth",
        "9",
    ]
    assert _invoke(argv) == 3
    ((_, args, kwargs),) = calls
    cfg = args[0]
    assert isinstance(cfg, RunConfig)
    assert cfg.bench_root == (tmp_path / "bench").resolve() and cfg.docker_host == "unix:///x.sock"
    assert cfg.selection.task_ids == ("b", "a") and cfg.agent.safety_mode == "light" and cfg.probe is None
    assert cfg.limits.memory_bytes == 8 * 1024**3 and cfg.agent.subagent_depth == 0 and cfg.money.prior_spend_usd == 0.0
    assert kwargs["argv"] == ["cowork-adapter", *argv]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("cowork-adapter: warning: --task-timeout 7200")


def test_doctor_wiring_shares_run_flags(monkeypatch, tmp_path, clean_env):
    calls = _stand_in(monkeypatch, "cowork_adapter.ops.doctor", "doctor_command")
    argv = [
        "doctor",
        "--repo-dir",
        str(tmp_path / "seed"),
        "--run-root",
        str(tmp_path / "s" / "r"),
        "--bench-root",
        str(tmp_path / "b"),
        "--docker-host",
        "unix:///y",
        "--probe",
        "inventory",
        "--pids-limit",
        "64",
    ]
    assert _invoke(argv) == 0
    cfg = calls[0][1][0]
    assert cfg.probe == "inventory" and cfg.limits.pids_limit == 64


def test_doctor_refuses_like_run(tmp_path, clean_env, capsys):
    argv = [
        "doctor",
        "--repo-dir",
        str(tmp_path / "seed"),
        "--run-root",
        str(tmp_path / "r"),
        "--bench-root",
        str(tmp_path / "b"),
        "--docker-host",
        "unix:///y",
        "--dry-run",
        "--cpus",
        "inf",
    ]
    assert _invoke(argv) == 2
    assert capsys.readouterr().err == "cowork-adapter: --cpus must be a finite number, not inf.\n"


def test_demo_wiring(monkeypatch, tmp_path, clean_env):
    calls = _stand_in(monkeypatch, "cowork_adapter.demo.scenarios", "run_demo")
    assert (
        _invoke(["demo", "--run-root", str(tmp_path / "d"), "--scenario", "budget-stop", "--docker-host", "unix:///z"])
        == 0
    )
    assert calls == [
        (
            "run_demo",
            (),
            {"run_root": (tmp_path / "d").resolve(), "docker_host": "unix:///z", "scenario": "budget-stop"},
        )
    ]


def test_audit_wiring(monkeypatch, tmp_path):
    calls = _stand_in(monkeypatch, "cowork_adapter.audit", "run_audit_command")
    (tmp_path / "run_manifest.json").write_text("{}")  # the path resolver admits only run roots
    assert _invoke(["audit", "--run-dir", str(tmp_path), "--output", str(tmp_path / "a.json"), "--workers", "2"]) == 0
    assert calls == [("run_audit_command", (tmp_path.resolve(), (tmp_path / "a.json").resolve(), 2), {})]


def test_report_wiring(monkeypatch, tmp_path):
    calls = _stand_in(monkeypatch, "cowork_adapter.report", "run_report_command")
    sys.modules["cowork_adapter.report"].OUTPUT_NAMES = ("report.md", "report.json", "report.html")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run_manifest.json").write_text("{}")
    assert _invoke(["report", str(tmp_path / "a"), str(tmp_path / "b"), "--concurrency", "2", "--json"]) == 0
    # Without --output-dir nothing is to be written: no folder is handed on.
    assert _invoke(["report", str(tmp_path / "a"), "--output-dir", str(tmp_path / "out")]) == 0
    db = "postgresql://pg.example/campaigns"
    assert _invoke(["report", str(tmp_path / "a"), "--campaign-db", db, "--campaign-name", "c1"]) == 0
    assert calls == [
        (
            "run_report_command",
            ([(tmp_path / "a").resolve(), (tmp_path / "b").resolve()], None, 2, True),
            {"campaign": None},
        ),
        (
            "run_report_command",
            ([(tmp_path / "a").resolve()], (tmp_path / "out").resolve(), 1, False),
            {"campaign": None},
        ),
        ("run_report_command", ([(tmp_path / "a").resolve()], None, 1, False), {"campaign": (db, "c1")}),
    ]


@pytest.mark.parametrize(
    "args,says",
    [
        (["report", "RUN", "--campaign-name", "c1"], "--campaign-name is only meaningful with --campaign-db"),
        (["report", "RUN", "--campaign-db", "postgresql://u:secret@pg/db"], "must not carry a password"),
        (["report", "RUN", "--campaign-db", "postgresql://pg/db?password=secret"], "must not carry a password"),
        (["status", "--campaign-db", "postgresql://pg/db?user=u&password=secret"], "must not carry a password"),
        (["campaign", "show", "--campaign-db", "postgresql://pg/db?password=secret"], "must not carry a password"),
        (
            [
                "campaign",
                "reconcile",
                "--campaign-db",
                "postgresql://pg/db?password=secret",
                "--run-root",
                "RUN",
                "--operator-note",
                "n",
                "--docker-host",
                "unix:///nonexistent/docker.sock",
            ],
            "must not carry a password",
        ),
        (["status", "--campaign-db", "http://pg/db"], "must be a postgresql:// URL"),
        (["status", "--campaign-db", "postgresql://pg"], "must name a database"),
        (["status"], "exactly one run root"),
        (["status", "RUN", "RUN"], "exactly one run root"),
    ],
)
def test_campaign_view_flags_refused(tmp_path, capsys, args, says):
    (tmp_path / "run_manifest.json").write_text("{}")
    assert _invoke([str(tmp_path) if a == "RUN" else a for a in args]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.splitlines()) == 1 and "secret" not in err


def test_status_and_stop_wiring(monkeypatch, tmp_path):
    status_calls = _stand_in(monkeypatch, "cowork_adapter.ops.status", "status_command")
    stop_calls = _stand_in(monkeypatch, "cowork_adapter.ops.stop", "stop_command")
    (tmp_path / "events.jsonl").write_text("")  # the path resolver admits only run roots
    assert _invoke(["status", str(tmp_path), "--json"]) == 0
    assert _invoke(["stop", str(tmp_path), "--timeout", "12.5"]) == 0
    assert status_calls + stop_calls == [
        ("status_command", (tmp_path.resolve(), True), {}),
        ("stop_command", (tmp_path.resolve(), 12.5), {}),
    ]


def test_campaign_status_wiring(monkeypatch, tmp_path):
    calls = _stand_in(monkeypatch, "cowork_adapter.ops.campaign_status", "campaign_status_command")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run_manifest.json").write_text("{}")
    db = "postgresql://pg.example/campaigns"
    assert _invoke(["status", "--campaign-db", db, str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    assert _invoke(["status", "--campaign-db", db, "--campaign-name", "c2"]) == 0  # the database alone
    assert calls == [
        (
            "campaign_status_command",
            (db, "default", [(tmp_path / "a").resolve(), (tmp_path / "b").resolve()], True),
            {},
        ),
        ("campaign_status_command", (db, "c2", [], False), {}),
    ]


def test_stop_refuses_bad_timeout(tmp_path, capsys):
    assert _invoke(["stop", str(tmp_path), "--timeout", "nan"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_campaign_wiring(monkeypatch, tmp_path, clean_env):
    calls = _stand_in(monkeypatch, "cowork_adapter.campaign.commands", "show_command", "reconcile_command")
    assert _invoke(["campaign", "show", "--campaign-file", str(tmp_path / "c.json"), "--json"]) == 0
    assert (
        _invoke(
            [
                "campaign",
                "reconcile",
                "--campaign-file",
                str(tmp_path / "c.json"),
                "--run-root",
                str(tmp_path / "r"),
                "--operator-note",
                " checked ps ",
                "--docker-host",
                "unix:///d",
                "--meter-url",
                "http://127.0.0.1:9/api/v1/",
            ]
        )
        == 0
    )
    assert calls == [
        ("show_command", ((tmp_path / "c.json").resolve(), True), {"store": None}),
        (
            "reconcile_command",
            (),
            {
                "campaign_file": (tmp_path / "c.json").resolve(),
                "store": None,
                "run_root": (tmp_path / "r").resolve(),
                "operator_note": "checked ps",
                "api_key_env": "OPENROUTER_API_KEY",
                "meter_url": "http://127.0.0.1:9/api/v1",
                "docker_host": "unix:///d",
            },
        ),
    ]


def test_campaign_commands_take_a_postgres_campaign(monkeypatch, tmp_path, clean_env, capsys):
    calls = _stand_in(monkeypatch, "cowork_adapter.campaign.commands", "show_command", "reconcile_command")
    assert _invoke(["campaign", "show", "--campaign-db", "postgresql://db/c", "--campaign-name", "q4"]) == 0
    assert (
        _invoke(
            [
                "campaign",
                "reconcile",
                "--campaign-db",
                "postgresql://db/c",
                "--run-root",
                str(tmp_path / "r"),
                "--operator-note",
                "checked",
                "--docker-host",
                "unix:///d",
            ]
        )
        == 0
    )
    (show_args, show_kw), (_, reconcile_kw) = calls[0][1:], calls[1][1:]
    assert show_args == (None, False) and (show_kw["store"].url, show_kw["store"].name) == ("postgresql://db/c", "q4")
    assert reconcile_kw["campaign_file"] is None and reconcile_kw["store"].name == "default"
    for argv, words in (
        (["campaign", "show"], "exactly one"),
        (
            ["campaign", "show", "--campaign-db", "postgresql://db/c", "--campaign-file", str(tmp_path / "c.json")],
            "exactly one",
        ),
        (["campaign", "show", "--campaign-db", "postgresql://u:pw@db/c"], "PGPASSWORD"),
        (
            ["campaign", "show", "--campaign-file", str(tmp_path / "c.json"), "--campaign-name", "x"],
            "only meaningful with --campaign-db",
        ),
    ):
        assert _invoke(argv) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.splitlines()) == 1 and ":pw@" not in err


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--operator-note", "  "], "--operator-note"),
        (["--operator-note", "ok", "--api-key-env", "1X"], "--api-key-env"),
        (["--operator-note", "ok", "--meter-url", "nope"], "--meter-url"),
        (["--operator-note", "ok", "--docker-host", ""], "--docker-host"),
    ],
)
def test_campaign_reconcile_refusals(tmp_path, clean_env, capsys, argv, words):
    base = [
        "campaign",
        "reconcile",
        "--campaign-file",
        str(tmp_path / "c"),
        "--run-root",
        str(tmp_path / "r"),
        "--docker-host",
        "unix:///d",
    ]
    assert _invoke(base + argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and words in err[0]


def test_version(capsys):
    assert _invoke(["version"]) == 0
    from cowork_adapter import __version__

    assert capsys.readouterr().out == f"cowork-adapter {__version__}\n"


COMMANDS = [
    [],
    ["campaign"],
    ["run"],
    ["doctor"],
    ["demo"],
    ["audit"],
    ["report"],
    ["status"],
    ["stop"],
    ["version"],
    ["campaign", "show"],
    ["campaign", "reconcile"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) or "(top)" for c in COMMANDS])
def test_every_command_help_has_an_example(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert _invoke([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Example: cowork-adapter " + (command[0] if command else "") in out


def test_run_and_doctor_share_every_flag():
    import typer

    group = typer.main.get_command(cli.app)
    names = {c: sorted(p.name for p in group.commands[c].params) for c in ("run", "doctor")}
    assert names["run"] == names["doctor"] and len(names["run"]) > 50


def test_shell_completion_is_offered(capsys):
    assert _invoke(["--help"]) == 0
    assert "--install-completion" in capsys.readouterr().out
