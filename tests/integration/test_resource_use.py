"""Per-task resource use, measured for real: a task's agent container allocates a known amount of
memory and burns CPU, the runner removes it through the shim, and the ledger row shows the
daemon's own accounting of it (peak at least what was allocated, CPU at least what was burnt).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import docker

from cowork_adapter.custody.bash_env import install_custody
from cowork_adapter.custody.docker_ops import cleanup_run
from cowork_adapter.custody.labels import path_label
from cowork_adapter.custody.shim_config import ContainerLimits
from cowork_adapter.host.resources import METHOD_SENTENCE, read_task_resources, reader_for
from cowork_adapter.schemas.ledger import TaskRow
from cowork_adapter.schemas.record import decode
from cowork_adapter.score.context import IndexContext
from cowork_adapter.score.infra import read_host_facts
from cowork_adapter.score.ledger import _classify_task_uncached

IMAGE = "cowork-testbed/base:bookworm"
LIMITS = ContainerLimits(cpus=1.0, memory_bytes=512 * 1024 * 1024, pids_limit=64)
ALLOC_MIB = 96
BURN_SEC = 1.5
TASK = "demo-resource-burn"

# The container touches every page of ALLOC_MIB (so it is resident), frees it, burns BURN_SEC of
# CPU, then marks itself done and idles: its peak is above the allocation although its usage at
# removal is far below it, which only a real high-water mark (not a sample at the end) shows.
WORKLOAD = (
    "import time\n"
    f"b = bytearray({ALLOC_MIB} * 1024 * 1024)\n"
    "for i in range(0, len(b), 4096): b[i] = 1\n"
    "del b\n"
    f"end = time.process_time() + {BURN_SEC}\n"
    "while time.process_time() < end: pass\n"
    "open('/tmp/done', 'w').close()\n"
    "time.sleep(600)\n"
)

RUNNER = f"""\
set -uo pipefail
export PATH="/usr/local/bin:/usr/bin:/bin:$PATH"
DOCKER=$(which docker)
ID="$1"
"$DOCKER" run -d --name "pg-$ID" {IMAGE} sleep 600 >/dev/null || exit 11
"$DOCKER" run -d --name "agent-$ID" {IMAGE} python3 -c "$WORKLOAD" >/dev/null || exit 12
"$DOCKER" exec "agent-$ID" sh -c 'true' --task_dir "finalpool/{TASK}" || exit 13
for _ in $(seq 1 120); do "$DOCKER" exec "agent-$ID" test -f /tmp/done && break; sleep 0.5; done
"$DOCKER" exec "agent-$ID" test -f /tmp/done || exit 14
# A process of the agent's that passes the container's memory limit: the kernel kills it (the exec
# ends 137), the container lives on, and the daemon's State.OOMKilled says so until removal.
[ "${{OOM_EXEC:-}}" = 1 ] && {{ "$DOCKER" exec "agent-$ID" python3 -c "b = bytearray({2 * LIMITS.memory_bytes // (1024 * 1024)} * 1024 * 1024)
for i in range(0, len(b), 4096): b[i] = 1"; [ $? -eq 137 ] || exit 18; }}
[ "${{LEAVE_BEHIND:-}}" = 1 ] && exit 0  # a runner killed before its cleanup: nothing removed
"$DOCKER" rm -fv "agent-$ID" >/dev/null || exit 15
"$DOCKER" stop -t 1 "pg-$ID" >/dev/null || exit 16
"$DOCKER" rm -fv "pg-$ID" >/dev/null || exit 17
"""


def _run_task(tmp_path: Path, docker_host: str, *, leave_behind: bool, oom_exec: bool = False) -> tuple[str, Path]:
    """Run the runner-like script under custody; with `leave_behind` it ends without removing
    anything and custody cleanup (with the resource reader) removes what it left."""
    real = shutil.which("docker", path="/usr/local/bin:/usr/bin:/bin")
    assert real, "the docker CLI is needed on the host"
    ident = "ctres" + uuid.uuid4().hex[:8]
    run_root = tmp_path / "run"
    label = path_label(run_root)
    resources = tmp_path / "resources"
    resources.mkdir()
    evidence = run_root / "custody" / "evidence"  # where a real run keeps it (run.Run)
    files = install_custody(
        run_root,
        real_docker=real,
        docker_host=docker_host,
        run_label=label,
        limits=LIMITS,
        stop_file=run_root / "STOP",
        resource_root=resources,
        min_free_bytes=0,
        evidence_dir=evidence,
        agent_env_file=None,
        environ={},
    )
    script = tmp_path / "runner.sh"
    script.write_text(RUNNER)
    env = files.environment(
        {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp_path),
            "WORKLOAD": WORKLOAD,
            "LEAVE_BEHIND": "1" if leave_behind else "",
            "OOM_EXEC": "1" if oom_exec else "",
        }
    )
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    try:
        done = subprocess.run(["bash", str(script), ident], env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, (done.returncode, done.stderr)
    finally:
        cleanup_run(docker_host, label, lambda record: None, before_remove=reader_for(evidence))
        for name in (f"agent-{ident}", f"pg-{ident}"):
            try:
                client.api.remove_container(name, force=True, v=True)
            except docker.errors.NotFound:
                pass
        client.close()
    return ident, evidence


def _row(tmp_path: Path) -> TaskRow:
    """The ledger row, built by the ledger's own code from the run root's evidence."""
    run_root = tmp_path / "run"
    ctx = IndexContext(run_root=run_root, manifest=None, bench=tmp_path / "no-bench")
    ctx.refresh()
    assert TASK in read_task_resources(run_root)
    row = _classify_task_uncached(ctx, TASK, live=False, interruption_cause="runner_exited")
    return decode(row.to_line(), TaskRow)  # what result_index.jsonl holds


def _assert_plausible(row: TaskRow) -> None:
    agent = next(c for c in row.resource_containers if c.role == "agent")
    pg = next(c for c in row.resource_containers if c.role == "pg")
    allocated = ALLOC_MIB * 1024 * 1024
    assert allocated <= agent.peak_memory_bytes <= LIMITS.memory_bytes
    assert BURN_SEC <= agent.cpu_seconds < 60
    assert 0 < pg.peak_memory_bytes < allocated  # an idle `sleep`: its own small peak, not the agent's
    assert row.peak_memory_bytes == agent.peak_memory_bytes + pg.peak_memory_bytes
    assert row.cpu_seconds == round(agent.cpu_seconds + pg.cpu_seconds, 3)
    assert row.resource_basis == METHOD_SENTENCE


def test_ledger_row_carries_the_daemons_peak_memory_and_cpu_time(tmp_path: Path, docker_host: str):
    ident, evidence = _run_task(tmp_path, docker_host, leave_behind=False, oom_exec=True)
    # The shim's readings: the agent's rm, the pg's stop (and its rm after, which finds no cgroup).
    lines = [json.loads(x) for x in (evidence / f"{ident}.resources.jsonl").read_text().splitlines()]
    assert [(r["container"], r["command"]) for r in lines] == [
        (f"agent-{ident}", "rm"),
        (f"pg-{ident}", "stop"),
        (f"pg-{ident}", "rm"),
    ]
    # The agent's OOM kill, read before the removal (a host fact of the infra rule): the daemon's
    # State.OOMKilled covers only the main process, so the kernel's count of its cgroup says it.
    assert (lines[0]["oom_killed"], lines[0]["state_cause"]) == (True, None), lines[0]
    assert lines[0]["oom_kills"] >= 1, lines[0]
    facts = read_host_facts(tmp_path / "run", {TASK: ident}, recorded=True, gateway=False, engine="ouroboros")
    assert facts[TASK].oom_killed is True
    assert lines[2]["memory_peak_bytes"] is None and lines[2]["cause"] in ("container_not_running", "no_memory_stats")
    _assert_plausible(_row(tmp_path))


def test_containers_a_killed_runner_left_are_read_by_custody_cleanup_before_removal(tmp_path: Path, docker_host: str):
    ident, evidence = _run_task(tmp_path, docker_host, leave_behind=True)
    lines = [json.loads(x) for x in (evidence / f"{ident}.resources.jsonl").read_text().splitlines()]
    assert sorted((r["container"], r["command"]) for r in lines) == [
        (f"agent-{ident}", "adapter_cleanup"),
        (f"pg-{ident}", "adapter_cleanup"),
    ]
    _assert_plausible(_row(tmp_path))
