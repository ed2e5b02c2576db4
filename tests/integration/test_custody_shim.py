"""The docker shim under a runner-like bash script, against the real private daemon.

The fake runner does what run_parallel.sh does to find docker (PATH rewrite, then
`DOCKER=$(which docker)`), so the test proves the BASH_ENV discovery, the label and the limits
on real containers and networks.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import docker
import pytest

from cowork_adapter.custody.bash_env import install_custody
from cowork_adapter.custody.creations import creations_dir
from cowork_adapter.custody.docker_ops import cleanup_run, label_is_empty
from cowork_adapter.custody.labels import ROLE_LABEL_KEY, RUN_LABEL_KEY, path_label
from cowork_adapter.custody.shim_config import ContainerLimits
from cowork_adapter.demo.env import wait_for

IMAGE = "cowork-testbed/base:bookworm"
LIMITS = ContainerLimits(cpus=0.5, memory_bytes=128 * 1024 * 1024, pids_limit=64)
FAKE_KEY = "sk-fake-0000-not-a-real-key"

RUNNER = f"""\
set -uo pipefail
export PATH="/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin:$PATH"
DOCKER=$(which docker)
ID="$1"
echo "docker=$DOCKER"
"$DOCKER" network create "net-$ID" >/dev/null || exit 11
"$DOCKER" run -d --name "agent-$ID" --network "net-$ID" {IMAGE} sleep 60 >/dev/null || exit 12
"$DOCKER" run -d --name="eval-$ID" --network "net-$ID" {IMAGE} sleep 60 >/dev/null || exit 13
echo "state=$("$DOCKER" exec "eval-$ID" sh -c 'echo $COWORK_AGENT_CONTAINER_STATE' --phase eval)"
"""

AGENT_GONE = """\
set -uo pipefail
export PATH="/usr/local/bin:/usr/bin:/bin:$PATH"
DOCKER=$(which docker)
"$DOCKER" rm -fv "agent-$1" >/dev/null
echo "state_after=$("$DOCKER" exec "eval-$1" sh -c 'echo $COWORK_AGENT_CONTAINER_STATE' --phase eval)"
"""

AFTER_STOP = f"""\
set -uo pipefail
export PATH="/usr/local/bin:/usr/bin:/bin:$PATH"
DOCKER=$(which docker)
"$DOCKER" run -d --name "agent-$1-late" {IMAGE} sleep 60 >/dev/null
echo "create_rc=$?"
"$DOCKER" ps -a --filter "name=eval-$1" --format '{{{{.Names}}}}'
echo "ps_rc=$?"
"""


@pytest.fixture
def custody(tmp_path: Path, docker_host: str):
    real = shutil.which("docker", path="/usr/local/bin:/usr/bin:/bin")
    assert real, "the docker CLI is needed on the host"
    ident = "ctshim" + uuid.uuid4().hex[:8]
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    env_file = secrets / "agent.env"
    env_file.write_text(f"FAKE_PROVIDER_KEY={FAKE_KEY}\n")
    resources = tmp_path / "resources"
    resources.mkdir()
    run_root = tmp_path / "run"
    label = path_label(run_root)
    files = install_custody(
        run_root,
        real_docker=real,
        docker_host=docker_host,
        run_label=label,
        limits=LIMITS,
        stop_file=run_root / "STOP",
        resource_root=resources,
        min_free_bytes=0,
        evidence_dir=tmp_path / "evidence",
        agent_env_file=env_file,
        environ={},
    )
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    try:
        yield {
            "files": files,
            "id": ident,
            "label": label,
            "client": client,
            "tmp": tmp_path,
            "host": docker_host,
            "stop": run_root / "STOP",
        }
    finally:
        try:
            cleanup_run(docker_host, label, lambda record: None)
        finally:
            # Anything the shim failed to label would carry our unique names: remove by exact name.
            for name in (f"agent-{ident}", f"eval-{ident}", f"agent-{ident}-late"):
                try:
                    client.api.remove_container(name, force=True, v=True)
                except docker.errors.NotFound:
                    pass
            for net in client.api.networks(names=[f"net-{ident}"]):
                if net["Name"] == f"net-{ident}":
                    client.api.remove_network(net["Id"])
            client.close()


def run_script(custody, body: str) -> subprocess.CompletedProcess:
    script = custody["tmp"] / f"runner-{uuid.uuid4().hex[:6]}.sh"
    script.write_text(body)
    env = custody["files"].environment({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(custody["tmp"])})
    env.pop("DOCKER_HOST")  # prove the shim, not the caller's environment, picks the daemon
    return subprocess.run(["bash", str(script), custody["id"]], env=env, capture_output=True, text=True, timeout=240)


def test_runner_creations_carry_label_limits_and_the_key_reaches_agent_only(custody):
    ident, label, api = custody["id"], custody["label"], custody["client"].api
    done = run_script(custody, RUNNER)
    assert done.returncode == 0, done.stderr
    assert f"docker={custody['files'].wrapper}" in done.stdout
    assert "state=present" in done.stdout

    for role in ("agent", "eval"):
        info = api.inspect_container(f"{role}-{ident}")
        assert info["Config"]["Labels"][RUN_LABEL_KEY] == label
        assert info["Config"]["Labels"][ROLE_LABEL_KEY] == role
        host = info["HostConfig"]
        assert host["NanoCpus"] == 500_000_000
        assert host["Memory"] == 128 * 1024 * 1024
        assert host["MemorySwap"] == 128 * 1024 * 1024
        assert host["PidsLimit"] == 64
        env = info["Config"]["Env"]
        has_key = f"FAKE_PROVIDER_KEY={FAKE_KEY}" in env
        assert has_key is (role == "agent"), role

    networks = [n for n in api.networks(names=[f"net-{ident}"]) if n["Name"] == f"net-{ident}"]
    assert len(networks) == 1
    assert networks[0]["Labels"] == {RUN_LABEL_KEY: label, ROLE_LABEL_KEY: "network"}

    # The key never appears in any argv the daemon saw or in the evidence.
    agent_cmd = api.inspect_container(f"agent-{ident}")["Args"]
    assert FAKE_KEY not in " ".join(agent_cmd)
    evidence = custody["tmp"] / "evidence"
    assert all(FAKE_KEY not in p.read_text() for p in evidence.iterdir())
    roles = [line for line in (evidence / "creations.jsonl").read_text().splitlines()]
    assert len(roles) == 3


def test_eval_phase_learns_the_agent_container_is_gone(custody):
    done = run_script(custody, RUNNER)
    assert done.returncode == 0, done.stderr
    assert "state=present" in done.stdout
    done = run_script(custody, AGENT_GONE)
    assert done.returncode == 0, done.stderr
    assert "state_after=absent" in done.stdout
    admission = (custody["tmp"] / "evidence" / f"{custody['id']}.eval_admission").read_text().splitlines()
    assert len(admission) == 2


def test_stop_file_refuses_creation_while_ps_still_works(custody):
    done = run_script(custody, RUNNER)
    assert done.returncode == 0, done.stderr
    custody["stop"].write_text("stop_requested")
    done = run_script(custody, AFTER_STOP)
    assert "create_rc=75" in done.stdout
    assert "admission_stopped" in done.stderr
    assert f"eval-{custody['id']}" in done.stdout  # `ps` passed through while stopped
    assert "ps_rc=0" in done.stdout
    with pytest.raises(docker.errors.NotFound):
        custody["client"].api.inspect_container(f"agent-{custody['id']}-late")


# A stand-in for a slow daemon: the "real docker" the shim runs holds a creation back (until the
# test writes the release file, or `hold` tenths of a second at most), as a loaded daemon can take
# seconds to answer a create it will finish even if its client is killed.
# It first leaves a mark: the shim runs it only once the creation is admitted, so the mark is the
# moment a stop can no longer refuse that creation (the lock file appears earlier, before the
# admission check, and a stop written between the two is refused, as designed: CI saw that race).
SLOW_DOCKER = """\
#!/bin/sh
case "$1" in run|create)
  : > {admitted}
  i=0
  while [ ! -e {release} ] && [ "$i" -lt {hold} ]; do sleep 0.1; i=$((i + 1)); done ;;
esac
exec {real} "$@"
"""

ONE_CREATION = f"""\
set -uo pipefail
DOCKER=$(which docker)
"$DOCKER" run -d --name "agent-$1" {IMAGE} sleep 60 >/dev/null
"""


def _slow_custody(tmp_path: Path, docker_host: str, hold_sec: float):
    real = shutil.which("docker", path="/usr/local/bin:/usr/bin:/bin")
    slow = tmp_path / "slow-docker"
    slow.write_text(
        SLOW_DOCKER.format(
            real=real, admitted=tmp_path / "admitted", release=tmp_path / "release", hold=int(hold_sec * 10)
        )
    )
    slow.chmod(0o755)
    (tmp_path / "resources").mkdir()
    run_root = tmp_path / "run"
    files = install_custody(
        run_root,
        real_docker=str(slow),
        docker_host=docker_host,
        run_label=path_label(run_root),
        limits=LIMITS,
        stop_file=run_root / "custody" / "stop",
        resource_root=tmp_path / "resources",
        min_free_bytes=0,
        evidence_dir=tmp_path / "evidence",
        agent_env_file=None,
        environ={},
    )
    return run_root, files


def _stopped_mid_creation(tmp_path: Path, run_root: Path, files, ident: str) -> None:
    """Start a runner-like script that creates one container, wait until the creation is admitted
    and in flight, then fence and SIGKILL the script's whole group, as the supervisor stops a runner."""
    script = tmp_path / "one.sh"
    script.write_text(ONE_CREATION)
    env = files.environment({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)})
    runner = subprocess.Popen(
        ["bash", str(script), ident],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert wait_for((tmp_path / "admitted").exists, 30, 0.05), "the creation was never admitted"
    assert any(creations_dir(run_root).iterdir()), "an admitted creation holds no lock"
    (run_root / "custody" / "stop").write_text("stop_requested\n")
    os.killpg(runner.pid, signal.SIGKILL)
    runner.wait(timeout=10)


def _remove_named(docker_host: str, name: str) -> None:
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    try:
        client.api.remove_container(name, force=True, v=True)
    except docker.errors.NotFound:
        pass
    finally:
        client.close()


def test_a_creation_landing_after_the_stop_is_waited_for_and_removed_before_the_proof(tmp_path, docker_host):
    """The flake CI found: a cleanup proved a run empty while a create it had admitted was still
    being answered, and the container appeared after the proof. The cleanup now waits for it."""
    run_root, files = _slow_custody(tmp_path, docker_host, hold_sec=4)  # never released: the daemon answers late
    ident = "inflight" + uuid.uuid4().hex[:8]
    label = path_label(run_root)
    log: list[dict] = []
    try:
        _stopped_mid_creation(tmp_path, run_root, files, ident)
        report = cleanup_run(docker_host, label, log.append, creations=creations_dir(run_root))
        assert [name for _, name in report.removed_containers] == [f"agent-{ident}"]
        assert any(entry["event"] == "cleanup_creations_settled" for entry in log)
        time.sleep(2)
        assert label_is_empty(docker_host, label)
        assert list(creations_dir(run_root).iterdir()) == []
    finally:
        _remove_named(docker_host, f"agent-{ident}")


def test_without_the_wait_that_creation_escapes_the_proof(tmp_path, docker_host):
    """The control: the same stop, proven by a cleanup that does not wait, is proven empty and then
    holds the container that landed after it (why the in-flight locks exist).

    The creation is held back until that cleanup has returned, and only then let through: a fixed
    4 s delay raced the cleanup itself, whose four listings can take longer on a loaded daemon, so
    the container landed before its listing or its proof and the control failed."""
    run_root, files = _slow_custody(tmp_path, docker_host, hold_sec=120)
    ident = "inflight" + uuid.uuid4().hex[:8]
    label = path_label(run_root)
    try:
        _stopped_mid_creation(tmp_path, run_root, files, ident)
        report = cleanup_run(docker_host, label, lambda entry: None)
        assert report.removed_containers == []
        (tmp_path / "release").write_text("")
        deadline = time.monotonic() + 30
        while label_is_empty(docker_host, label) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not label_is_empty(docker_host, label)
    finally:
        (tmp_path / "release").write_text("")  # a held creation ends, so the cleanup below can wait for it
        cleanup_run(docker_host, label, lambda entry: None, creations=creations_dir(run_root))
        _remove_named(docker_host, f"agent-{ident}")
