"""RunConfig as a msgspec Struct (the first problem, in one sentence) and flag_value; test_config.py has the rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_config import base, build, refusal  # noqa: F401 (fixture)

from cowork_adapter.config import Money, RunConfig, Selection
from cowork_adapter.defaults import flag_value
from cowork_adapter.vocab import ProbeKind

# ---- RunConfig as a msgspec Struct: the first problem, in one sentence ---------------------------


@pytest.mark.parametrize(
    "field,value,sentence",
    [
        ("concurrency", "x", "--concurrency: input should be a valid integer, unable to parse string as an integer."),
        ("concurrency", 2.5, "--concurrency: input should be a valid integer, got a number with a fractional part."),
        (
            "meter_blindness_sec",
            "x",
            "--meter-blindness-sec: input should be a valid number, unable to parse string as a number.",
        ),
        ("memory", 5, "--memory: input should be a valid string."),
        ("subagents", "maybe", "--subagents: input should be a valid boolean, unable to interpret input."),
        ("tasks", [1], "--tasks: input should be a valid string."),
        ("repo_dir", None, "--repo-dir: input should be a valid path."),
        ("safety_mode", "medium", "--safety-mode: input should be 'full', 'light' or 'off'."),
        ("review_enforcement", None, "--review-enforcement: input should be 'advisory' or 'blocking'."),
        ("probe", "everything", "--probe: input should be 'inventory' or 'stateful'."),
        ("meter_url", "http://[x", "--meter-url: value error, Invalid IPv6 URL."),
        ("repo_dir", "a\0b", "--repo-dir: value error, embedded null byte."),
        ("run_id", "x", "--run-id: extra inputs are not permitted."),
    ],
)
def test_a_value_of_the_wrong_kind_is_one_sentence(base, field, value, sentence):
    r = refusal(base, **{field: value})
    assert (r.stage, r.sentence) == ("flags", sentence)


def test_values_are_converted_to_the_declared_types(base):
    cfg = build(
        base,
        concurrency="3",
        cpus=2,
        pids_limit=16.0,
        repo_dir=str(base["repo_dir"]),
        tasks=["a"],
        probe="inventory",
        dry_run="true",
    )
    assert (cfg.selection.concurrency, cfg.limits.cpus, cfg.limits.pids_limit, cfg.selection.tasks) == (
        3,
        2.0,
        16,
        ("a",),
    )
    assert isinstance(cfg.limits.cpus, float) and isinstance(cfg.repo_dir, Path) and cfg.probe is ProbeKind.INVENTORY
    assert cfg.dry_run is True


@pytest.mark.parametrize(
    "changes,sentence",
    [
        ({"concurrency": 0, "pids_limit": 0}, "--concurrency must be at least 1 (got 0)."),  # declared first
        ({"pids_limit": 0, "bench_commit": "x"}, "--bench-commit 'x' is not a full 40-character lowercase commit id."),
        ({"zzz": 1, "concurrency": 0}, "--concurrency must be at least 1 (got 0)."),  # a value before an unknown name
        (
            {"zzz": 1, "dry_run": True, "campaign_file": None, "budget_reserve_usd": 1.0, "campaign_budget_usd": 1.0},
            "--zzz: extra inputs are not permitted.",
        ),  # an unknown name before a combination
    ],
)
def test_the_first_problem_is_reported_in_field_order(base, changes, sentence):
    assert refusal(base, **changes).sentence == sentence


def test_a_missing_flag_comes_before_a_later_bad_value(base):
    flags = {k: v for k, v in base.items() if k != "bench_root"}
    assert refusal(flags, bench_commit="x").sentence == "--bench-root is required (or set COWORK_BENCH_ROOT)."


def test_direct_construction_refuses_with_the_same_sentence(base):
    from cowork_adapter.defaults import InvalidFlag

    where = {k: v for k, v in base.items() if k != "campaign_file"}
    money = Money(campaign_file=base["campaign_file"])
    with pytest.raises(InvalidFlag) as info:
        RunConfig(**where, money=money, selection=Selection(concurrency=0))
    assert info.value.sentence == "--concurrency must be at least 1 (got 0)."
    cfg = RunConfig(**where, money=money, selection=Selection(concurrency="2"))  # type: ignore[arg-type]
    assert cfg == build(base, concurrency=2) and cfg.selection.concurrency == 2


def test_with_changes_copies_without_touching_the_original(base):
    cfg = build(base)
    changed = cfg.with_changes(cpus=2.0, memory=str(8 << 30))
    assert (changed.limits.cpus, changed.limits.memory_bytes) == (2.0, 8 << 30) and (
        cfg.limits.cpus,
        cfg.limits.memory,
    ) == (None, None)
    assert changed.with_changes() == changed
    with pytest.raises(TypeError, match="no field 'cpu'"):
        cfg.with_changes(cpu=2.0)


def test_building_a_run_config_imports_no_pydantic():
    """RunConfig is a msgspec Struct: pydantic is no dependency of the package any more."""
    import subprocess
    import sys

    probe = (
        "import sys; from pathlib import Path; from cowork_adapter.config import RunConfig; "
        "RunConfig.from_flags(repo_dir=Path('/s'), bench_root=Path('/b'), run_root=Path('/r/x'), "
        "docker_host='unix:///d', dry_run=True); print(sorted(m for m in sys.modules if m.startswith('pydantic')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "--docker-host", "tcp://h:2375", "--x"], "tcp://h:2375"),
        (["run", "--docker-host=unix:///d.sock"], "unix:///d.sock"),
        (["run", "--docker-host=a", "--docker-host", "b"], "a"),  # the first one given
        (["run", "--docker-host"], None),  # a flag without its value names nothing
        (["run", "--docker-hosts", "x"], None),  # only the exact flag
        ([], None),
    ],
)
def test_flag_value_reads_a_flag_without_parsing(argv, expected):
    assert flag_value(argv, "--docker-host") == expected
