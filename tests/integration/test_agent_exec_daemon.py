"""Issue 37 on the real daemon: one agent container made through the run's shim, then the attacks.

The container gets the bounded json-file log and the task role's --cap-drop set (HostConfig, as
the daemon reports it), so mknod fails in its dump; the agent exec's output is capped on the host
with the Status line through; an exec whose output a leftover holds ends at the shim's bound; and
after the exec, one kill(-1) ends every process in the container, a fork bomb's included.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid

import docker
import pytest

from cowork_adapter.custody import container_caps
from cowork_adapter.custody.agent_exec import PROTOCOL_LINE_MAX
from cowork_adapter.custody.bash_env import Hardening, TaskDumps, install_custody, runner_digest
from cowork_adapter.custody.docker_ops import cleanup_run
from cowork_adapter.custody.labels import path_label
from cowork_adapter.custody.shim_config import ContainerLimits
from cowork_adapter.demo.env import wait_for

IMAGE = "cowork-testbed/base:bookworm"
TASK = "demo-csv-totals"
SHORT = "openrouter/m"
CAP = 64 * 1024
BOUND_SEC = 15.0
STATUS = b"====== Status: success ======\n"
# PID 1 of the test's container reaps what is orphaned to it. The runner's is `sleep`, which does
# not: there a bomb that forks as it goes fills the PIDs limit with zombies, the shim's kill cannot
# start, and the container's removal (the runner's next step) is what ends it (docs/security.md).
REAPER = (
    "import os, time\n"
    "while True:\n"
    "    try:\n"
    "        os.wait()\n"
    "    except ChildProcessError:\n"
    "        time.sleep(0.05)\n"
)


@pytest.fixture(scope="module")
def agent(tmp_path_factory, docker_host):
    tmp = tmp_path_factory.mktemp("agent-exec")
    real = shutil.which("docker", path="/usr/local/bin:/usr/bin:/bin")
    assert real, "the docker CLI is needed on the host"
    ident = f"{os.getpid()}{uuid.uuid4().hex[:4]}-{runner_digest(TASK)}"
    (tmp / "resources").mkdir()
    dumps = tmp / "run" / "bench" / "dumps"
    dumps.mkdir(parents=True)
    run_root = tmp / "run"
    label = path_label(run_root)
    files = install_custody(
        run_root,
        real_docker=real,
        docker_host=docker_host,
        run_label=label,
        limits=ContainerLimits(cpus=0.5, memory_bytes=128 * 1024 * 1024, pids_limit=64),
        stop_file=run_root / "STOP",
        resource_root=tmp / "resources",
        min_free_bytes=0,
        evidence_dir=run_root / "custody" / "evidence",
        agent_env_file=None,
        environ={},
        dumps=TaskDumps(dumps_dir=dumps, short=SHORT, tasks=(TASK,), eval_bound_sec=60.0),
        hardening=Hardening(agent_bound_sec=BOUND_SEC, agent_output_cap_bytes=CAP, log_max_bytes=1 << 20),
    )
    env = files.environment({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp)})

    def shim(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run([str(files.wrapper), *args], env=env, capture_output=True, timeout=timeout)

    client = docker.DockerClient(base_url=docker_host, timeout=60)
    name = f"agent-{ident}"
    try:
        made = shim("run", "-d", "--name", name, "-v", f"{dumps}:/workspace/dumps", IMAGE, "python3", "-c", REAPER)
        assert made.returncode == 0, made.stderr
        yield {
            "name": name,
            "id": ident,
            "shim": shim,
            "api": client.api,
            "dump": dumps / "openrouter_m" / f"SingleUserTurn-{TASK}",
            "evidence": run_root / "custody" / "evidence",
            "real": real,
            "host": docker_host,
        }
    finally:
        try:
            cleanup_run(docker_host, label, lambda record: None)
        finally:
            try:
                client.api.remove_container(name, force=True, v=True)
            except docker.errors.NotFound:
                pass
            client.close()


def live_processes(agent) -> list[tuple[str, str]]:
    """(pid in the container, command) of every process there but PID 1 that is not a zombie."""
    done = subprocess.run(
        [agent["real"], "exec", agent["name"], "ps", "-eo", "pid=,stat=,comm="],
        env={**os.environ, "DOCKER_HOST": agent["host"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split(None, 2) for line in done.stdout.splitlines() if line.strip()]
    return [(pid, comm) for pid, stat, comm in rows if pid != "1" and not stat.startswith("Z") and comm != "ps"]


def exec_facts(agent) -> list[dict]:
    path = agent["evidence"] / f"{agent['id']}.agent_exec.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_container_has_a_bounded_log_and_no_device_or_raw_socket_capability(agent):
    host = agent["api"].inspect_container(agent["name"])["HostConfig"]
    assert host["LogConfig"] == {"Type": "json-file", "Config": {"max-size": str(1 << 20), "max-file": "2"}}
    dropped = {container_caps.normal_cap(c) for c in host["CapDrop"]}  # the daemon spells them CAP_*
    assert dropped == set(container_caps.TASK_DROP)
    assert {"MKNOD", "NET_RAW", "SETFCAP"} <= dropped and not host["CapAdd"]


def test_mknod_fails_in_the_agents_own_dump(agent):
    done = agent["shim"](
        "exec",
        agent["name"],
        "sh",
        "-c",
        f"mknod /workspace/dumps/openrouter_m/SingleUserTurn-{TASK}/node c 1 3; echo rc=$?",
    )
    assert b"Operation not permitted" in done.stderr and b"rc=1" in done.stdout
    assert agent["dump"].is_dir() and not os.path.lexists(agent["dump"] / "node")


def test_the_agent_execs_output_is_capped_on_the_host_and_its_status_line_gets_through(agent):
    flood = (
        "head -c 3000000 /dev/zero | tr '\\0' f; "
        "head -c 1000 /dev/zero | tr '\\0' e >&2; "
        "echo '====== Status: success ======'"
    )
    before = len(exec_facts(agent)) if (agent["evidence"] / f"{agent['id']}.agent_exec.jsonl").exists() else 0
    done = agent["shim"]("exec", agent["name"], "sh", "-c", flood)
    assert done.returncode == 0
    # The cap, the drop line, and the Status line as the tail of the line it ended (no newline before it).
    assert len(done.stdout) + len(done.stderr) < CAP + 200 + PROTOCOL_LINE_MAX
    dropped = 3000000 + 1000 + len(STATUS) - CAP
    assert done.stdout.endswith(
        b"\n[cowork-adapter] agent exec output capped at %d bytes: %d bytes dropped" % (CAP, dropped)
        + b" (stdout %d, stderr 1000)\n" % (dropped - 1000)
        + b"f" * (PROTOCOL_LINE_MAX - len(STATUS))
        + STATUS
    )
    fact = exec_facts(agent)[before]
    assert fact["dropped_bytes"] == dropped and fact["hung"] is False and fact["leftovers_kill"] == 0


def test_an_exec_that_never_ends_by_itself_ends_at_the_bound_and_what_it_left_with_it(agent):
    # The exec's own process never ends (as when the agent stops the runner's `timeout` and the
    # entrypoint with SIGSTOP), and a process it left in the background holds its stdout.
    before = len(exec_facts(agent)) if (agent["evidence"] / f"{agent['id']}.agent_exec.jsonl").exists() else 0
    done = agent["shim"](
        "exec", agent["name"], "sh", "-c", "sleep 3600 & echo '====== Status: success ======'; kill -STOP $$"
    )
    assert STATUS in done.stdout
    fact = exec_facts(agent)[before]
    assert fact["hung"] is True and fact["bound_sec"] == BOUND_SEC
    assert live_processes(agent) == []


def test_one_kill_after_the_exec_ends_a_fork_bomb_that_a_walk_over_proc_would_miss(agent):
    # Detached processes that keep forking (each parent leaves), up against the PIDs limit.
    bomb = (
        "import os, time\n"
        "while True:\n"
        "    try:\n"
        "        os.fork() and os._exit(0)\n"
        "    except OSError:\n"
        "        time.sleep(0.01)\n"
    )
    for _ in range(3):
        started = subprocess.run(
            [agent["real"], "exec", "-d", agent["name"], "python3", "-c", bomb],
            env={**os.environ, "DOCKER_HOST": agent["host"]},
            capture_output=True,
            timeout=60,
        )
        assert started.returncode == 0, started.stderr
    assert wait_for(lambda: len(live_processes(agent)) >= 3, 120, 0.2), "the fork bomb is running"
    done = agent["shim"]("exec", agent["name"], "true")
    assert done.returncode == 0
    assert live_processes(agent) == []
