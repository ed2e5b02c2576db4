"""`cowork-adapter doctor`: every check, broken one at a time, names the failure and its fix.

Real parts where a real break is practical: git repositories (dirty seed, dirty/unpinned
benchmark), a missing environment variable, an unreachable Docker socket, the meter stand-in
(an HTTP server on localhost) and a closed port. Docker-side probes (version, image presence, the
limit probe) are replaced here; tests/integration/test_doctor_docker.py runs them for real.
"""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cowork_adapter.config import RunConfig
from cowork_adapter.demo.bench_repo import materialize_bench
from cowork_adapter.demo.meter_standin import MeterStandin
from cowork_adapter.demo.seed_repo import make_stub_seed
from cowork_adapter.gateway.route_check import RouteCheck
from cowork_adapter.host import resources
from cowork_adapter.ops import doctor, doctor_probes
from cowork_adapter.run import daemon_check
from cowork_adapter.schemas.campaign import CampaignRecord, key_fingerprint

KEY_ENV = "COWORK_DOCTOR_TEST_KEY"
KEY = "fake-doctor-key-0123456789abcdef"
HOST = "unix:///var/run/doctor-test.sock"
GIB = 1 << 30


@pytest.fixture(scope="module")
def pins(tmp_path_factory):
    root = tmp_path_factory.mktemp("doctor-pins")
    bench = root / "bench"
    commit = materialize_bench(bench)
    seed = root / "seed"
    head = make_stub_seed(seed)
    return bench, commit, seed, head


@pytest.fixture
def meter():
    standin = MeterStandin(KEY, usage=5.0, limit=100.0).start()
    yield standin
    standin.stop()


@pytest.fixture
def healthy(monkeypatch, pins):
    """Docker probes that answer as a healthy daemon would, and the key in the environment."""
    bench, commit, seed, head = pins
    monkeypatch.setattr(doctor, "docker_version", lambda host: {"Version": "20.10.24", "ApiVersion": "1.41"})
    monkeypatch.setattr(doctor, "daemon_info", lambda host: {"NCPU": 2, "MemTotal": 24 * GIB})
    monkeypatch.setattr(resources, "daemon_info", lambda host: {"NCPU": 2, "MemTotal": 24 * GIB})  # the host advice
    monkeypatch.setattr(
        doctor, "image_present", lambda host, ref: {"Id": "sha256:" + "ab" * 32, "Config": {"Labels": {}}}
    )
    monkeypatch.setattr(doctor, "limit_probe", lambda host, image: doctor.ProbeOutcome(137, True, 64 << 20))
    monkeypatch.setattr(doctor, "free_bytes", lambda path: 500 * GIB)
    # The route's trial starts a container (gateway/route_check.py; its Docker tests): here a stand-in that
    # reaches, recording what it was asked. A given address is still bound for real first (daemon_check).
    monkeypatch.setattr(daemon_check, "check_route", ROUTE_TRIALS.reach)
    ROUTE_TRIALS.asked.clear()
    monkeypatch.setenv(KEY_ENV, KEY)
    return pins


ROUTE_HOST = "127.0.0.77"


class RouteTrials:
    """A stand-in for gateway/route_check.check_route: what it was asked, and its answer."""

    def __init__(self) -> None:
        self.asked: list[tuple[str | None, int]] = []
        self.answer: RouteCheck | None = None

    def reach(self, docker_host: str, run_label: str, *, address: str | None = None, port: int = 443) -> RouteCheck:
        self.asked.append((address, port))
        where = f"{address or '10.99.0.1'}:{port}"
        return self.answer or RouteCheck(True, f"a container reached openrouter.ai at {where}", where)


ROUTE_TRIALS = RouteTrials()


def make_cfg(tmp_path: Path, pins, meter_url: str, **over) -> RunConfig:
    bench, commit, seed, _head = pins
    (tmp_path / "runs").mkdir(exist_ok=True)
    flags = dict(
        repo_dir=seed,
        bench_root=bench,
        bench_commit=commit,
        docker_host=HOST,
        run_root=tmp_path / "runs" / "r1",
        tasks=("demo-csv-totals",),
        campaign_file=tmp_path / "campaign.json",
        new_campaign=True,
        campaign_budget_usd=50.0,
        budget_usd=20.0,
        budget_reserve_usd=5.0,
        meter_url=meter_url,
        api_key_env=KEY_ENV,
        min_key_usd=1.0,
        min_free_gib=1.0,
        min_root_free_gib=1.0,
        base_image="cowork-pack:test",
        build_image=True,
        llm_gateway_host=ROUTE_HOST,  # the default route's port 443 here (a loopback address no other test binds)
    )
    flags.update(over)
    return RunConfig.from_flags(**flags)


def run(cfg, capsys) -> tuple[int, dict[str, str]]:
    code = doctor.doctor_command(cfg)
    out = capsys.readouterr().out
    lines = {}
    for line in out.splitlines():
        if line.startswith(("OK ", "FAIL ", "SKIP ")):
            name = line[6:].split(":", 1)[0]
            lines[name] = line
    return code, lines


def only_failure(lines: dict[str, str], name: str, *dependents: str) -> str:
    """The FAIL line of `name`, asserting nothing else failed except the checks that depend on it."""
    failed = [n for n, line in lines.items() if line.startswith("FAIL")]
    assert failed == [name, *dependents], f"expected only {name} to fail, got {failed}: {lines}"
    return lines[name]


def write_campaign(path: Path, **over) -> None:
    now = datetime.now(UTC)
    fields = dict(
        fingerprint=key_fingerprint(KEY),
        ceiling_usd=50.0,
        usage_baseline=1.0,
        prior_spend_usd=0.0,
        last_usage=2.0,
        last_usage_observed_at=now,
        created_at=now,
    )
    fields.update(over)
    path.write_text(CampaignRecord(**fields).to_json())


def test_all_ok_exits_zero_and_prints_one_line_per_check(tmp_path, healthy, meter, capsys):
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url), capsys)
    assert code == 0
    assert all(line.startswith("OK") for line in lines.values()), lines
    assert set(lines) >= {
        "docker host",
        "limits enforced",
        "base image",
        "postgres image",
        "host tools",
        "benchmark",
        "seed",
        "provider key",
        "key route",
        "key meter",
        "campaign",
        "disk reserve (/)",
    }
    assert "20.10.24" in lines["docker host"]
    assert (
        lines["key route"]
        == f"OK    key route: the run serves it itself: a container reached openrouter.ai at {ROUTE_HOST}:443; "
        "no container gets the key."
    )
    assert ROUTE_TRIALS.asked == [(ROUTE_HOST, 443)]  # the address the run will listen on, tried


def test_the_default_route_needs_its_port(tmp_path, healthy, meter, capsys):
    # Another run on this daemon holds port 443 of the address: the default route cannot start there.
    import socket

    held_host = "127.0.0.78"
    with socket.create_server((held_host, 443)):
        code, lines = run(make_cfg(tmp_path, healthy, meter.base_url, llm_gateway_host=held_host), capsys)
    assert code == 1
    line = only_failure(lines, "key route")
    # The bind's real cause, as the run's preflight says it (run/daemon_check.py), not "needs root".
    assert f"the run cannot serve openrouter.ai on {held_host}:443: another process holds {held_host}:443" in line
    assert "--key-in-agent" in line and "root" not in line.split("— fix:")[0]
    # The seed's path is said for what it is.
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url, llm_gateway_host="", key_in_agent=True), capsys)
    assert code == 0 and "the agent under test can read it" in lines["key route"]


def test_the_key_is_never_printed(tmp_path, healthy, meter, capsys):
    code = doctor.doctor_command(make_cfg(tmp_path, healthy, meter.base_url))
    out = capsys.readouterr()
    assert code == 0 and KEY not in out.out and KEY not in out.err


def test_unreachable_docker_host_fails_with_fix(tmp_path, healthy, meter, capsys, monkeypatch):
    monkeypatch.undo()  # the real docker probe against a socket that does not exist
    monkeypatch.setattr(doctor, "free_bytes", lambda path: 500 * GIB)
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = make_cfg(tmp_path, healthy, meter.base_url, docker_host="unix:///nonexistent.sock")
    code, lines = run(cfg, capsys)
    assert code == 1
    assert lines["docker host"].startswith(
        "FAIL  docker host: the Docker daemon at unix:///nonexistent.sock did not answer"
    )
    assert "— fix: start the daemon, or point --docker-host" in lines["docker host"]
    for dependent in ("limits enforced", "base image", "postgres image", "derived image"):
        assert lines[dependent].endswith("— fix: fix the docker host first"), lines[dependent]


def test_limits_not_enforced(tmp_path, healthy, meter, capsys, monkeypatch):
    monkeypatch.setattr(doctor, "limit_probe", lambda host, image: doctor.ProbeOutcome(0, False, 64 << 20))
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url), capsys)
    line = only_failure(lines, "limits enforced")
    assert (
        code == 1 and "does not enforce memory limits" in line and "— fix: use a daemon whose cgroups enforce" in line
    )


@pytest.mark.parametrize(
    "missing,check,fix",
    [
        ("cowork-pack:test", "base image", "docker build -t cowork-pack:test"),
        ("postgres:15", "postgres image", "docker pull postgres:15"),
    ],
)
def test_missing_images(tmp_path, healthy, meter, capsys, monkeypatch, missing, check, fix):
    present = {"Id": "sha256:" + "cd" * 32, "Config": {"Labels": {}}}
    monkeypatch.setattr(doctor, "image_present", lambda host, ref: None if ref == missing else present)
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url), capsys)
    failed = [n for n, line in lines.items() if line.startswith("FAIL")]
    assert code == 1 and check in failed
    assert "is not present on the daemon, and runs never pull" in lines[check] and fix in lines[check]
    if check == "base image":  # the limit probe runs the base image: it says why it could not
        assert "cannot probe" in lines["limits enforced"]


def test_derived_image_missing_without_build_flag(tmp_path, healthy, meter, capsys, monkeypatch):
    monkeypatch.setattr(
        doctor, "image_present", lambda host, ref: None if ref.startswith("cowork-ouroboros:") else {"Id": "sha256:x"}
    )
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url, build_image=False), capsys)
    assert code == 1 and only_failure(lines, "derived image").endswith("— fix: add --build-image")


def test_low_disk_on_resource_root(tmp_path, healthy, meter, capsys, monkeypatch):
    monkeypatch.setattr(doctor, "free_bytes", lambda path: (500 if str(path) == "/" else 0.5) * GIB)
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url), capsys)
    line = only_failure(lines, "disk reserve (resource root)")
    assert "below the --min-free-gib reserve of 1 GiB" in line and "— fix: free at least" in line


def test_low_disk_on_root(tmp_path, healthy, meter, capsys, monkeypatch):
    monkeypatch.setattr(doctor, "free_bytes", lambda path: (0.2 if str(path) == "/" else 500) * GIB)
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url), capsys)
    assert "--min-root-free-gib" in only_failure(lines, "disk reserve (/)")


def test_existing_run_root(tmp_path, healthy, meter, capsys):
    cfg = make_cfg(tmp_path, healthy, meter.base_url)
    cfg.run_root.mkdir()
    code, lines = run(cfg, capsys)
    assert "already exists" in only_failure(lines, "run root") and "— fix: choose a new --run-root" in lines["run root"]


def test_missing_host_tool_and_old_bash(tmp_path, healthy, meter, capsys, monkeypatch):
    real_which = doctor_probes.which
    monkeypatch.setattr(doctor_probes, "which", lambda tool: None if tool == "rsync" else real_which(tool))
    monkeypatch.setattr(doctor_probes, "bash_version", lambda: (4, 2))
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url), capsys)
    line = only_failure(lines, "host tools")
    assert "bash is 4.2, older than 4.4" in line and "missing on PATH: rsync" in line and "— fix: install" in line


def _git(repo: Path, *args: str) -> None:
    import subprocess

    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, timeout=60)


def test_dirty_benchmark(tmp_path, healthy, meter, capsys):
    bench, commit, seed, head = healthy
    copy = tmp_path / "bench-copy"
    _git(bench, "clone", "--quiet", str(bench), str(copy))
    (copy / "tasks" / "finalpool" / "demo-csv-totals" / "stray.txt").write_text("edit\n")
    cfg = make_cfg(tmp_path, (copy, commit, seed, head), meter.base_url)
    code, lines = run(cfg, capsys)
    assert code == 1
    assert "uncommitted changes" in lines["benchmark"] and "— fix: use an unmodified checkout" in lines["benchmark"]
    assert lines["derived image"].startswith("FAIL") and "benchmark checks pass" in lines["derived image"]


def test_benchmark_at_another_commit(tmp_path, healthy, meter, capsys):
    bench, commit, seed, head = healthy
    copy = tmp_path / "bench-moved"
    _git(bench, "clone", "--quiet", str(bench), str(copy))
    _git(copy, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "--quiet", "--allow-empty", "-m", "moved")
    code, lines = run(make_cfg(tmp_path, (copy, commit, seed, head), meter.base_url), capsys)
    assert "not at the pinned commit" in lines["benchmark"] and f"checkout --detach {commit}" in lines["benchmark"]


def test_dirty_seed_fails_and_is_allowed_only_as_a_diagnostic(tmp_path, healthy, meter, capsys):
    bench, commit, seed, head = healthy
    copy = tmp_path / "seed-copy"
    _git(seed, "clone", "--quiet", str(seed), str(copy))
    (copy / "untracked.py").write_text("x = 1\n")
    code, lines = run(make_cfg(tmp_path, (bench, commit, copy, head), meter.base_url), capsys)
    line = only_failure(lines, "seed", "derived image")
    assert code == 1 and "uncommitted changes" in line and "— fix: commit the changes, or create a clean" in line
    code, lines = run(make_cfg(tmp_path, (bench, commit, copy, head), meter.base_url, allow_dirty_seed=True), capsys)
    assert code == 0 and "allowed by --allow-dirty-seed" in lines["seed"]


def test_missing_key(tmp_path, healthy, meter, capsys, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url), capsys)
    assert code == 1
    assert f"the environment variable {KEY_ENV} is empty or unset" in lines["provider key"]
    assert f"— fix: export {KEY_ENV}" in lines["provider key"]
    assert lines["key meter"].endswith("— fix: fix the provider key check first")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_meter(tmp_path, healthy, capsys):
    url = f"http://127.0.0.1:{_closed_port()}/api/v1"
    code, lines = run(make_cfg(tmp_path, healthy, url), capsys)
    line = only_failure(lines, "key meter")
    assert "did not give a usable reading (transport" in line and "— fix: check --meter-url" in line


def test_wrong_key_is_refused_by_the_meter_without_printing_it(tmp_path, healthy, meter, capsys, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "fake-wrong-key-zzzzzzzzzzzzzzzz")
    code = doctor.doctor_command(make_cfg(tmp_path, healthy, meter.base_url))
    out = capsys.readouterr().out
    assert code == 1 and "FAIL  key meter:" in out and "http_401" in out and "fake-wrong-key" not in out


def test_meter_headroom_below_minimum(tmp_path, healthy, meter, capsys):
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url, min_key_usd=99.0), capsys)
    line = only_failure(lines, "key meter")
    assert "below --min-key-usd 99" in line and "— fix: add credits" in line


def test_campaign_with_active_run_points_to_reconcile(tmp_path, healthy, meter, capsys):
    cfg = make_cfg(tmp_path, healthy, meter.base_url)
    write_campaign(
        cfg.money.campaign_file,
        active_run={
            "run_root": "/data/old-run",
            "run_label": "ab" * 16,
            "launcher_pid": 4242,
            "started_at": datetime.now(UTC),
            "host": "h",
            "usage_at_start": 2.0,
        },
    )
    code, lines = run(cfg, capsys)
    line = only_failure(lines, "campaign")
    assert "unsettled active run /data/old-run" in line
    assert "cowork-adapter campaign reconcile --campaign-file" in line and "--run-root /data/old-run" in line


def test_campaign_of_another_key(tmp_path, healthy, meter, capsys):
    cfg = make_cfg(tmp_path, healthy, meter.base_url)
    write_campaign(cfg.money.campaign_file, fingerprint=key_fingerprint("another-fake-key"))
    code, lines = run(cfg, capsys)
    assert "belongs to key sha256:" in only_failure(lines, "campaign")


def test_campaign_ceiling_mismatch(tmp_path, healthy, meter, capsys):
    cfg = make_cfg(tmp_path, healthy, meter.base_url)
    write_campaign(cfg.money.campaign_file, ceiling_usd=70.0)
    code, lines = run(cfg, capsys)
    line = only_failure(lines, "campaign")
    assert "a ceiling never changes" in line and "— fix: pass --campaign-budget-usd 70" in line


def test_campaign_spent_down_to_the_reserve(tmp_path, healthy, meter, capsys):
    cfg = make_cfg(tmp_path, healthy, meter.base_url)
    write_campaign(cfg.money.campaign_file, prior_spend_usd=44.0)
    code, lines = run(cfg, capsys)
    assert "not above the $5 reserve" in only_failure(lines, "campaign")


def test_a_missing_campaign_without_new_campaign_fails_as_a_new_baseline(tmp_path, healthy, meter, capsys):
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url, new_campaign=False), capsys)
    assert "new usage baseline" in only_failure(lines, "campaign")
    assert not (tmp_path / "campaign.json").exists()


def test_a_missing_campaign_without_a_reserve_names_the_flag(tmp_path, healthy, meter, capsys):
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url, budget_reserve_usd=None), capsys)
    line = only_failure(lines, "campaign")
    assert "needs --budget-reserve-usd given explicitly" in line


def test_campaign_with_another_diagnostic_setting(tmp_path, healthy, meter, capsys):
    cfg = make_cfg(tmp_path, healthy, meter.base_url)
    write_campaign(cfg.money.campaign_file, diagnostic_eval_on_truncation=True)
    code, lines = run(cfg, capsys)
    line = only_failure(lines, "campaign")
    assert "same setting" in line and "— fix: pass --diagnostic-eval-on-truncation" in line


def test_unreadable_campaign(tmp_path, healthy, meter, capsys):
    cfg = make_cfg(tmp_path, healthy, meter.base_url)
    cfg.money.campaign_file.write_text("{not json")
    code, lines = run(cfg, capsys)
    assert "never recreate it" in only_failure(lines, "campaign")


def test_existing_settled_campaign_is_ok(tmp_path, healthy, meter, capsys):
    cfg = make_cfg(tmp_path, healthy, meter.base_url)
    write_campaign(cfg.money.campaign_file)
    code, lines = run(cfg, capsys)
    assert code == 0 and "no active run" in lines["campaign"]
    assert json.loads(cfg.money.campaign_file.read_text())["last_usage"] == 2.0  # doctor never writes the campaign


def test_dry_run_needs_no_key_meter_or_campaign(tmp_path, healthy, capsys, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    cfg = make_cfg(tmp_path, healthy, "http://127.0.0.1:9/api/v1", dry_run=True, campaign_file=None, new_campaign=False)
    code, lines = run(cfg, capsys)
    assert code == 0
    for name in ("provider key", "key meter", "campaign"):
        assert lines[name].startswith(f"SKIP  {name}: not needed: a --dry-run run"), lines[name]


def test_doctor_writes_nothing(tmp_path, healthy, meter, capsys):
    cfg = make_cfg(tmp_path, healthy, meter.base_url)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code, _ = run(cfg, capsys)
    assert code == 0 and sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_check_that_crashes_is_a_failed_line_not_a_traceback(tmp_path, healthy, meter, capsys, monkeypatch):
    def boom(path):
        raise RuntimeError("statfs exploded")

    monkeypatch.setattr(doctor, "free_bytes", boom)
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url), capsys)
    assert code == 1 and "the check itself failed (RuntimeError: statfs exploded)" in lines["resource disk"]


def test_default_limits_fit_a_two_cpu_daemon(tmp_path, healthy, meter, capsys):
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url), capsys)
    assert code == 0
    assert lines["limits fit the daemon"].startswith(
        "OK    limits fit the daemon: 2 CPUs (default) and 16.0 GiB (default) per container, within the daemon's 2 CPUs"
    )


@pytest.mark.parametrize(
    "over,words",
    [
        ({"cpus": 4.0}, "--cpus 4 is more than the 2 CPUs of the Docker daemon at " + HOST),
        ({"memory": "32g"}, "--memory 32g is more than the 24.0 GiB of memory of the Docker daemon"),
    ],
)
def test_explicit_limit_above_the_daemon_fails(tmp_path, healthy, meter, capsys, over, words):
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url, **over), capsys)
    line = only_failure(lines, "limits fit the daemon")
    assert code == 1 and words in line and "— fix: lower the limit" in line


def test_concurrency_says_nothing_is_measured_for_a_new_campaign(tmp_path, healthy, meter, capsys):
    code, lines = run(make_cfg(tmp_path, healthy, meter.base_url), capsys)
    assert code == 0
    assert lines["concurrency"].startswith("OK")
    assert "no task's resource use has been measured yet" in lines["concurrency"].lower()


def test_concurrency_is_suggested_from_the_campaigns_measured_tasks(tmp_path, healthy, meter, capsys):
    from cowork_adapter.schemas.ledger import RunnerRow, TaskRow

    earlier = tmp_path / "runs" / "r0"
    earlier.mkdir(parents=True)
    rows = [
        TaskRow(
            ts="2026-12-01T00:00:00Z",
            instance_id=f"t{i}",
            status="passed",
            reason_code="official_pass",
            official_eval_status="completed",
            peak_memory_bytes=4 * GIB,
            cpu_seconds=60.0,
            runner_row=RunnerRow(status="success", duration_s=60.0),
        )
        for i in range(3)
    ]
    (earlier / "result_index.jsonl").write_text("".join(r.to_line() for r in rows))
    now = datetime.now(UTC)
    cfg = make_cfg(tmp_path, healthy, meter.base_url, concurrency=3)
    write_campaign(
        cfg.money.campaign_file,
        runs=[
            {
                "run_root": str(earlier),
                "run_label": "cd" * 16,
                "outcome": "completed",
                "spent_usd": 1.0,
                "started_at": now,
                "finished_at": now,
            }
        ],
    )
    code, lines = run(cfg, capsys)
    line = lines["concurrency"]
    # 2 CPUs / 1.0 CPU per task -> 2; memory: 80 % of 24 GiB / 4 GiB -> 4.
    assert line.startswith("OK") and "Suggested concurrency 2 for this host (2 CPUs, 24.0 GiB" in line
    assert "memory allows 4" in line and "CPU allows 2" in line and "over 3 task(s)" in line
    assert "measured in 1 run root(s)" in line and "--concurrency 3 is above it" in line


ROOTLESS_V1 = json.loads((Path(__file__).parent / "daemon_info" / "rootless_cgroup_v1.json").read_text())


def test_a_rootless_cgroup_v1_daemon_fails_the_daemon_kind_and_the_key_route(
    tmp_path, healthy, meter, capsys, monkeypatch
):
    # This machine's rootless daemon as `docker info` answered (recorded): no limit enforced, its bridge
    # in RootlessKit's namespace. The run's preflight refuses both (run/daemon_check.py); doctor says why.
    monkeypatch.setattr(doctor, "daemon_info", lambda host: ROOTLESS_V1)
    ROUTE_TRIALS.answer = RouteCheck(False, "no container's connection reached 10.99.0.1:443: nothing within 60 s")
    try:
        code, lines = run(make_cfg(tmp_path, healthy, meter.base_url, llm_gateway_host=""), capsys)
    finally:
        ROUTE_TRIALS.answer = None
    assert code == 1
    assert "rootless daemon on a cgroup v1 host enforces no limit" in lines["daemon kind"]
    assert "--accept-unenforced-limits" in lines["daemon kind"]
    # The default route is tried where the run opens it (a network of its own: no address given, nothing
    # bound on this host), and its sentence is the line's.
    assert ROUTE_TRIALS.asked == [(None, 443)]
    assert lines["key route"].startswith("FAIL  key route: no container's connection reached 10.99.0.1:443")


def test_accepted_unenforced_limits_pass_the_daemon_kind_and_key_in_agent_the_route(
    tmp_path, healthy, meter, capsys, monkeypatch
):
    monkeypatch.setattr(doctor, "daemon_info", lambda host: ROOTLESS_V1)
    monkeypatch.setattr(doctor, "limit_probe", lambda host, image: doctor.ProbeOutcome(0, False, None))
    cfg = make_cfg(
        tmp_path, healthy, meter.base_url, llm_gateway_host="", key_in_agent=True, accept_unenforced_limits=True
    )
    code, lines = run(cfg, capsys)
    assert lines["daemon kind"].startswith("OK") and "accepted: --accept-unenforced-limits" in lines["daemon kind"]
    assert lines["limits enforced"].startswith("OK") and "not enforced" in lines["limits enforced"]
    assert lines["key route"].startswith("OK") and "agent under test can read it" in lines["key route"]
    assert code == 0, lines
