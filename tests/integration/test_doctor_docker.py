"""`doctor` against the test-bed daemon: the demo benchmark and seed, the meter stand-in, a paid
configuration that could start (exit 0), and a limit probe that is really OOM-killed and removed.
"""

from __future__ import annotations

import docker
import pytest

from cowork_adapter.config import RunConfig
from cowork_adapter.custody.labels import RUN_LABEL_KEY
from cowork_adapter.demo.env import prepare
from cowork_adapter.ops import doctor


@pytest.fixture(scope="module")
def demo_env(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("doctor") / "root", docker_host)
    yield env
    env.meter.stop()


def doctor_labelled(docker_host: str) -> list:
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    try:
        return client.containers.list(all=True, filters={"label": doctor.DOCTOR_LABEL_KEY})
    finally:
        client.close()


def route_checks_left(docker_host: str) -> list[str]:
    """Containers and networks a route check made (labelled with the check's own run label) still there."""
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    try:
        made = [(c.name, c.labels) for c in client.containers.list(all=True, filters={"label": RUN_LABEL_KEY})]
        made += [(n.name, n.attrs.get("Labels") or {}) for n in client.networks.list(filters={"label": RUN_LABEL_KEY})]
        return [name for name, labels in made if str(labels.get(RUN_LABEL_KEY, "")).startswith("cowork-route-check-")]
    finally:
        client.close()


def demo_cfg(env, **over) -> RunConfig:
    flags = dict(
        repo_dir=env.seed,
        bench_root=env.bench,
        bench_commit=env.bench_commit,
        docker_host=env.docker_host,
        resource_root=env.storage,
        run_root=env.run_root("doctor"),
        base_image=env.pack_tag,
        build_image=True,
        model="demo/stub-model",
        tasks=("demo-csv-totals",),
        campaign_file=env.root / "campaign-doctor.json",
        new_campaign=True,
        campaign_budget_usd=50.0,
        budget_usd=20.0,
        budget_reserve_usd=5.0,
        meter_url=env.meter.base_url,
        api_key_env=env.key_env,
        min_key_usd=0.0,
        min_free_gib=1.0,
        min_root_free_gib=1.0,
        cpus=1.0,
        memory="2g",
        # The demo's paid runs take the seed's path (demo/env.py key_route); the default route is tried by
        # the test that passes key_in_agent=False (a route check container: a few seconds).
        key_in_agent=True,
    )
    flags.update(over)
    return RunConfig.from_flags(**flags)


def test_limit_probe_is_really_oom_killed_and_removed(demo_env):
    mine_before = {c.id for c in doctor_labelled(demo_env.docker_host)}
    outcome = doctor.limit_probe(demo_env.docker_host, demo_env.pack_tag)
    assert outcome.oom_killed or outcome.exit_code == doctor.OOM_EXIT, outcome
    assert outcome.memory_limit == 64 << 20
    assert {c.id for c in doctor_labelled(demo_env.docker_host)} <= mine_before  # the probe left nothing


def test_doctor_passes_for_a_paid_demo_run(demo_env, monkeypatch, capsys):
    monkeypatch.setenv(demo_env.key_env, demo_env.key)
    code = doctor.doctor_command(demo_cfg(demo_env, key_in_agent=False))
    out = capsys.readouterr().out
    assert code == 0, out
    # The default route as the run opens it (a network of its own, port 443 of its address; several runs
    # per daemon each have their own), reached by a container from its own address; nothing of it is left.
    line = next(line for line in out.splitlines() if line.startswith("OK    key route:"))
    assert "a container reached openrouter.ai at " in line and ":443" in line and "its own address" in line, out
    assert route_checks_left(demo_env.docker_host) == []
    assert "OK    limits enforced: a container held to 64m was OOM-killed" in out
    assert "OK    docker host:" in out and "OK    key meter:" in out and "OK    campaign:" in out
    assert demo_env.key not in out
    assert not (demo_env.root / "campaign-doctor.json").exists()  # read-only: nothing created
    assert not demo_env.run_root("doctor").exists()


def test_doctor_fails_on_an_absent_base_image_without_pulling(demo_env, monkeypatch, capsys):
    monkeypatch.setenv(demo_env.key_env, demo_env.key)
    absent = "cowork-pack:doctor-absent-0000"
    code = doctor.doctor_command(demo_cfg(demo_env, base_image=absent))
    out = capsys.readouterr().out
    assert code == 1
    assert f"FAIL  base image: {absent} is not present on the daemon, and runs never pull." in out
    assert "FAIL  limits enforced: cannot probe" in out


def test_doctor_fails_an_explicit_cpus_above_the_daemon_and_passes_the_default(demo_env, monkeypatch, capsys):
    """The old default --cpus 4.0 crashed every run on this 2-CPU daemon while doctor said OK."""
    monkeypatch.setenv(demo_env.key_env, demo_env.key)
    cpus = int(doctor.daemon_info(demo_env.docker_host)["NCPU"])
    code = doctor.doctor_command(demo_cfg(demo_env, cpus=float(cpus + 2)))
    out = capsys.readouterr().out
    assert code == 1
    assert f"FAIL  limits fit the daemon: --cpus {cpus + 2} is more than the {cpus} CPUs of the Docker daemon" in out
    code = doctor.doctor_command(demo_cfg(demo_env, cpus=None, memory=None))
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"OK    limits fit the daemon: {min(4, cpus)} CPUs (default)" in out
