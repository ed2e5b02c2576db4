"""The docker shim and the BASH_ENV discovery, run as real subprocesses against a FAKE docker.

The fake records each argv it receives, so every test sees exactly what the real docker would
have been given; no daemon is needed.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cowork_adapter.container.procs import start_ticks
from cowork_adapter.custody import (
    labels,
    shim_admission,
    shim_argv,
    shim_dumps,
    shim_flags,
    shim_inflight,
    shim_io,
    shim_words,
)
from cowork_adapter.custody.bash_env import install_custody
from cowork_adapter.custody.creations import Settled, creations_dir, settle
from cowork_adapter.custody.shim_config import ContainerLimits
from cowork_adapter.custody.watchdog import RUN_MARKER_ENV
from cowork_adapter.demo.env import wait_for
from cowork_adapter.errors import Refusal
from cowork_adapter.runroot import custody_evidence
from cowork_adapter.vocab import ContainerState, ExitCode, ShimRefusal

LABEL = "0123456789abcdef0123456789abcdef"
LIMITS = ContainerLimits(cpus=1.5, memory_bytes=256 * 1024 * 1024, pids_limit=64)
HOST = "unix:///tmp/fake-daemon.sock"

FAKE_DOCKER = """\
#!{python}
import fcntl, json, os, sys, time
here = {here!r}

def creation_locks():
    # Each in-flight lock file of the run: True when someone holds its lock (a new open file
    # description of ours cannot take it).
    try:
        directory = json.load(open(os.environ["COWORK_SHIM_CONFIG"]))["creations_dir"]
        names = sorted(os.listdir(directory))
    except (KeyError, OSError, TypeError, ValueError):
        return None
    held = []
    for name in names:
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append(False)
        except BlockingIOError:
            held.append(True)
        finally:
            os.close(fd)
    return held

with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "docker_host": os.environ.get("DOCKER_HOST"),
                          "context": os.environ.get("DOCKER_CONTEXT"), "pgid": os.getpgid(0),
                          "pid": os.getpid(), "locks": creation_locks(),
                          "marker": os.environ.get("COWORK_RUN_LABEL")}}) + "\\n")
if os.path.exists(os.path.join(here, "sleep")):
    time.sleep(float(open(os.path.join(here, "sleep")).read()))
if sys.argv[1:2] == ["ps"] and any(a.startswith("name=agent-") for a in sys.argv):
    names = open(os.path.join(here, "ps_names")).read()
    if names == "FAIL":
        sys.exit(1)
    sys.stdout.write(names)
    sys.exit(0)
sys.stdout.write("fake-out\\n")
sys.stderr.write("fake-err\\n")
sys.exit(int(open(os.path.join(here, "exit_code")).read()))
"""


class Bed:
    """One installed custody with a fake docker; run(args) calls the real wrapper."""

    def __init__(
        self,
        root: Path,
        *,
        agent_env: bool = True,
        min_free: int = 0,
        launcher: tuple[int, int | None] | None = None,
        gateway_secret: Path | None = None,
        provider=None,
    ) -> None:
        self.fake_dir = root / "fake"
        self.fake_dir.mkdir()
        fake = self.fake_dir / "docker"
        fake.write_text(FAKE_DOCKER.format(python=sys.executable, here=str(self.fake_dir)))
        fake.chmod(0o755)
        (self.fake_dir / "exit_code").write_text("0")
        (self.fake_dir / "ps_names").write_text("")
        self.resource_root = root / "resources"
        self.resource_root.mkdir()
        self.evidence = root / "evidence"
        self.stop_file = root / "run" / "STOP"
        self.env_file = root / "secrets" / "agent.env"
        self.env_file.parent.mkdir()
        self.env_file.write_text("FAKE_PROVIDER_KEY=sk-fake-not-a-key\n")
        self.files = install_custody(
            root / "run",
            real_docker=str(fake),
            docker_host=HOST,
            run_label=LABEL,
            limits=LIMITS,
            stop_file=self.stop_file,
            resource_root=self.resource_root,
            min_free_bytes=min_free,
            evidence_dir=self.evidence,
            agent_env_file=self.env_file if agent_env else None,
            environ={},
            launcher_pid=launcher[0] if launcher else None,
            launcher_start_ticks=launcher[1] if launcher else None,
            gateway_secret_file=gateway_secret,
            provider=provider,
        )

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        base = {"PATH": os.environ["PATH"], "DOCKER_CONTEXT": "elsewhere"}
        return subprocess.run(
            [str(self.files.wrapper), *args],
            env={**base, **(env or {})},
            capture_output=True,
            text=True,
            timeout=30,
        )

    def calls(self) -> list[dict]:
        path = self.fake_dir / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def last_argv(self) -> list[str]:
        return self.calls()[-1]["argv"]

    def creations(self) -> list[dict]:
        path = self.evidence / "creations.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def bed(tmp_path: Path) -> Bed:
    return Bed(tmp_path)


def limit_flags(role: str) -> list[str]:
    return [
        "--label",
        f"org.cowork-adapter.run={LABEL}",
        "--label",
        f"org.cowork-adapter.role={role}",
        "--cpus",
        "1.5",
        "--memory",
        str(256 * 1024 * 1024),
        "--memory-swap",
        str(256 * 1024 * 1024),
        "--pids-limit",
        "64",
        "--pull=never",
    ]


# ---------------------------------------------------------------- argv rewriting table

AGENT_RUN = [
    "-d",
    "--name",
    "agent-123-abcd0123",
    "--network",
    "net-123-abcd0123",
    "-e",
    "PGHOST=pg-1",
    "-v",
    "/d:/workspace/dumps",
    "-w",
    "/workspace",
    "img:tag",
    "sleep",
    "7200",
]


@pytest.mark.parametrize(
    "argv, expected",
    [
        pytest.param(
            ["run", *AGENT_RUN],
            ["run", *limit_flags("agent"), "--env-file", "ENVFILE", *AGENT_RUN],
            id="run agent --name x",
        ),
        pytest.param(
            ["create", "--name=eval-123-abcd0123", "img", "sleep", "1800"],
            ["create", *limit_flags("eval"), "--name=eval-123-abcd0123", "img", "sleep", "1800"],
            id="create eval --name=x",
        ),
        pytest.param(
            ["container", "run", "--rm", "img", "true"],
            ["container", "run", *limit_flags("other"), "--rm", "img", "true"],
            id="container run no name",
        ),
        pytest.param(
            ["container", "create", "--name", "pg-123-abcd0123", "postgres:15"],
            ["container", "create", *limit_flags("pg"), "--name", "pg-123-abcd0123", "postgres:15"],
            id="container create pg",
        ),
        pytest.param(
            ["run", "--name=agent-9-00000000", "img"],
            ["run", *limit_flags("agent"), "--env-file", "ENVFILE", "--name=agent-9-00000000", "img"],
            id="run agent --name=x gets env file",
        ),
        pytest.param(
            ["run", "--rm", "--name", "helper-1", "img", "python3", "--memory", "9g"],
            ["run", *limit_flags("helper"), "--rm", "--name", "helper-1", "img", "python3", "--memory", "9g"],
            id="flags after the image are the command's, not a conflict",
        ),
        pytest.param(
            ["network", "create", "net-123-abcd0123"],
            [
                "network",
                "create",
                "--label",
                f"org.cowork-adapter.run={LABEL}",
                "--label",
                "org.cowork-adapter.role=network",
                "net-123-abcd0123",
            ],
            id="network create",
        ),
    ],
)
def test_creation_gets_label_limits_and_pull_never_after_the_subcommand(bed, argv, expected):
    expected = [str(bed.env_file.resolve()) if a == "ENVFILE" else a for a in expected]
    done = bed.run(*argv)
    assert done.returncode == 0, done.stderr
    assert bed.last_argv() == expected
    call = bed.calls()[-1]
    assert call["docker_host"] == HOST and call["context"] is None


@pytest.mark.parametrize(
    "argv",
    [
        ["ps", "-a", "--filter", "label=x", "--format", "{{.Names}}"],
        ["rm", "-fv", "agent-123-abcd0123"],
        ["network", "rm", "net-123-abcd0123"],
        ["inspect", "--format", "{{.Id}}", "run"],
        ["exec", "-it", "pg-1", "psql", "-c", "select 1"],
        ["exec", "eval-1-00000000", "python3", "--phase", "agent"],
        ["images"],
        ["-H", "tcp://other:2375", "ps"],
        ["container", "ls", "-a"],
        ["start", "agent-1"],
    ],
)
def test_other_commands_pass_through_byte_identical_with_output_and_exit_code(bed, argv):
    (bed.fake_dir / "exit_code").write_text("3")
    bed.stop_file.write_text("stop_requested")  # teardown must work during a stop
    done = bed.run(*argv)
    assert done.returncode == 3
    assert done.stdout == "fake-out\n" and done.stderr == "fake-err\n"
    assert bed.last_argv() == argv
    assert bed.creations() == []


def test_agent_env_file_is_only_for_agent_names(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    bed = Bed(tmp_path / "a", agent_env=False)
    bed.run("run", "--name", "agent-1-00000000", "img")
    assert "--env-file" not in bed.last_argv()
    bed2 = Bed(tmp_path / "b")
    for name in ("eval-1-00000000", "pg-1-00000000", "xagent-1", "agentless"):
        bed2.run("run", "--name", name, "img")
        assert "--env-file" not in bed2.last_argv(), name


def test_agent_containers_reach_the_provider_host_at_the_gateway_and_trust_the_run_ca(tmp_path):
    """The default route: only agent-* containers get the provider host's address, the run CA bundle
    (read-only) and the variables their HTTP clients read it from; the runner's own flags follow ours."""
    from cowork_adapter.custody.bash_env import ProviderRoute

    bundle = tmp_path / "tls dir,1" / "bundle.pem"  # a comma: --mount is one CSV record
    bundle.parent.mkdir()
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    bed = Bed(tmp_path, agent_env=False, provider=ProviderRoute("openrouter.ai", "172.17.0.1", bundle))
    assert bed.run("run", "-d", "--name", "agent-7-0000abcd", "-e", "X=1", "img").returncode == 0
    argv = bed.last_argv()
    assert argv[argv.index("--add-host") + 1] == "openrouter.ai:172.17.0.1"
    mount = argv[argv.index("--mount") + 1]
    assert mount == f'type=bind,"source={bundle}",target=/etc/cowork-adapter/provider-ca-bundle.pem,readonly'
    envs = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        assert f"{name}=/etc/cowork-adapter/provider-ca-bundle.pem" in envs
    assert argv.index("--add-host") < argv.index("img") and envs[-1] == "X=1"
    for name in ("eval-7-0000abcd", "pg-7-0000abcd", "helper-1"):
        bed.run("run", "-d", "--name", name, "img")
        assert "--add-host" not in bed.last_argv() and "--mount" not in bed.last_argv(), name
    (tmp_path / "other").mkdir()
    with pytest.raises(Refusal, match="provider CA bundle"):
        Bed(tmp_path / "other", provider=ProviderRoute("openrouter.ai", "172.17.0.1", tmp_path / "missing.pem"))


def _gateway_bed(tmp_path: Path) -> tuple[Bed, bytes, Path]:
    from cowork_adapter.gateway.server import new_secret

    secret, path = new_secret(tmp_path / "private")
    return Bed(tmp_path, agent_env=False, gateway_secret=path), secret, path


def test_gateway_token_file_for_agent_containers_only_and_valid_for_its_task(tmp_path):
    from cowork_adapter.gateway.server import token_task

    bed, secret, secret_path = _gateway_bed(tmp_path)
    done = bed.run("run", "-d", "--name", "agent-7-0000abcd", "img")
    assert done.returncode == 0, done.stderr
    argv = bed.last_argv()
    env_file = Path(argv[argv.index("--env-file") + 1])
    assert env_file.parent == secret_path.parent and env_file.name == "agent-7-0000abcd.env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    name, _, token = env_file.read_text().strip().partition("=")
    assert name == "COWORK_PROVIDER_KEY"
    assert token_task(secret, LABEL, token) == "7-0000abcd"
    assert token_task(secret, "f" * 32, token) is None  # another run's gateway refuses it
    for other in ("eval-7-0000abcd", "pg-7-0000abcd", "helper-1"):
        bed.run("run", "--name", other, "img")
        assert "--env-file" not in bed.last_argv(), other


def test_rm_of_an_agent_container_revokes_its_gateway_token_and_never_fails_the_rm(tmp_path):
    from cowork_adapter.gateway.server import REVOKED_SUFFIX

    bed, _, _ = _gateway_bed(tmp_path)
    assert bed.run("stop", "agent-7-0000abcd").returncode == 0  # a stop is not a removal
    assert not (bed.evidence / ("7-0000abcd" + REVOKED_SUFFIX)).exists()
    done = bed.run("rm", "-f", "agent-7-0000abcd", "eval-7-0000abcd")
    assert done.returncode == 0 and bed.last_argv() == ["rm", "-f", "agent-7-0000abcd", "eval-7-0000abcd"]
    assert (bed.evidence / ("7-0000abcd" + REVOKED_SUFFIX)).is_file()
    assert not (bed.evidence / ("7-0000abcd.eval" + REVOKED_SUFFIX)).exists()
    assert [p.name for p in bed.evidence.glob("*" + REVOKED_SUFFIX)] == ["7-0000abcd" + REVOKED_SUFFIX]
    # The same name created again (a runner clearing a name before it creates it) holds the token again;
    # the earlier revocation is kept aside.
    assert bed.run("run", "-d", "--name", "agent-7-0000abcd", "img").returncode == 0
    assert not (bed.evidence / ("7-0000abcd" + REVOKED_SUFFIX)).exists()
    assert len(list(bed.evidence.glob("7-0000abcd" + REVOKED_SUFFIX + ".before-*"))) == 1


def test_without_the_gateway_rm_leaves_no_revocation_marker(bed):
    from cowork_adapter.gateway.server import REVOKED_SUFFIX

    assert bed.run("rm", "agent-7-0000abcd").returncode == 0
    assert not list(bed.evidence.glob("*" + REVOKED_SUFFIX))


def test_gateway_token_that_cannot_be_minted_refuses_the_agent_creation(tmp_path):
    bed, _, secret_path = _gateway_bed(tmp_path)
    secret_path.write_text("not hex")
    done = bed.run("run", "--name", "agent-7-0000abcd", "img")
    assert done.returncode == ExitCode.SHIM_REFUSED
    assert ShimRefusal.GATEWAY_TOKEN_FAILED in done.stderr
    assert bed.calls() == []  # the real docker was never called
    assert bed.creations()[-1]["cause"] == ShimRefusal.GATEWAY_TOKEN_FAILED


def test_shim_and_gateway_mint_the_same_token():
    from cowork_adapter.gateway.server import mint_token

    assert shim_flags.gateway_token(b"s" * 32, LABEL, "task-1.x") == mint_token(b"s" * 32, LABEL, "task-1.x")


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "argv, cause",
    [
        (["run", "--memory", "1g", "img"], ShimRefusal.FLAG_CONFLICT),
        (["run", "-m=1g", "img"], ShimRefusal.FLAG_CONFLICT),
        (["create", "--cpus=8", "img"], ShimRefusal.FLAG_CONFLICT),
        (["run", "--pids-limit", "-1", "img"], ShimRefusal.FLAG_CONFLICT),
        (["run", "--pull", "always", "img"], ShimRefusal.FLAG_CONFLICT),
        (["run", "--memory-swap=-1", "img"], ShimRefusal.FLAG_CONFLICT),
        (["run", "--label", "org.cowork-adapter.run=someone-else", "img"], ShimRefusal.FLAG_CONFLICT),
        (["run", "-l", "org.cowork-adapter.role=agent", "img"], ShimRefusal.FLAG_CONFLICT),
        (["run", "--label-file", "/tmp/l", "img"], ShimRefusal.FLAG_CONFLICT),
        (["network", "create", "--label=org.cowork-adapter.run=x", "n"], ShimRefusal.FLAG_CONFLICT),
        (["-H", "tcp://other:2375", "run", "img"], ShimRefusal.HOST_OVERRIDE),
        (["--context=prod", "container", "create", "img"], ShimRefusal.HOST_OVERRIDE),
    ],
)
def test_creation_that_would_escape_custody_is_refused(bed, argv, cause):
    done = bed.run(*argv)
    assert done.returncode == ExitCode.SHIM_REFUSED == 75
    assert done.stderr.strip().endswith(cause.value)
    assert bed.calls() == []  # the real docker never ran


def test_stop_file_refuses_creation_records_eval_evidence_and_keeps_first_cause(tmp_path):
    bed = Bed(tmp_path, min_free=0)
    bed.stop_file.write_text("")
    secret_arg = "PASSWORD=hunter2-not-real"
    done = bed.run("run", "-d", "--name", "eval-77-0badc0de", "-e", secret_arg, "img")
    assert done.returncode == 75
    assert done.stderr == "docker shim: container creation refused: admission_stopped\n"
    assert secret_arg not in done.stderr + done.stdout
    refused = bed.evidence / "77-0badc0de.eval_refused"
    assert refused.read_text() == "admission_stopped\n"
    # A later refusal with another cause does not overwrite the first.
    bed.stop_file.unlink()
    shutil.rmtree(bed.resource_root)
    done = bed.run("run", "--name=eval-77-0badc0de", "img")
    assert done.returncode == 75 and "disk_probe_failed" in done.stderr
    assert refused.read_text() == "admission_stopped\n"
    assert [c["cause"] for c in bed.creations()] == ["admission_stopped", "disk_probe_failed"]
    assert all(c["admitted"] is False and c["role"] == "eval" for c in bed.creations())
    assert bed.calls() == []


def test_a_dead_launcher_refuses_every_creation_but_never_teardown(tmp_path):
    """The shim's own liveness check: it holds with no stop file and no watchdog at all."""
    launcher = subprocess.Popen(["sleep", "60"])
    try:
        bed = Bed(tmp_path, launcher=(launcher.pid, start_ticks(launcher.pid)))
        assert bed.run("run", "--name", "agent-9-00000000", "img").returncode == 0  # alive: admitted
        launcher.kill()
        # Until it has exited (a zombie, not reaped: it runs no code, so it is dead too). The kill
        # only queues SIGKILL: on a loaded machine a fixed 0.2 s could pass before the process
        # ran again to die, and the shim then rightly saw a live launcher and admitted.
        os.waitid(os.P_PID, launcher.pid, os.WEXITED | os.WNOWAIT)
        assert not bed.stop_file.exists()
        for argv in (
            ["run", "--name", "agent-9-00000001", "img"],
            ["container", "create", "img"],
            ["network", "create", "net-9-00000000"],
        ):
            done = bed.run(*argv)
            assert done.returncode == ExitCode.SHIM_REFUSED
            assert done.stderr == f"docker shim: container creation refused: {ShimRefusal.LAUNCHER_DEAD.value}\n"
        launcher.wait()
        assert bed.run("create", "img").returncode == 75  # reaped: the pid names nothing
        # The runner's own EXIT-trap cleanup still reaches the real docker.
        assert bed.run("rm", "-f", "agent-9-00000000").returncode == 0
        assert bed.last_argv() == ["rm", "-f", "agent-9-00000000"]
        assert [c["argv"][0] for c in bed.calls()] == ["run", "rm"]
        assert [c["cause"] for c in bed.creations()][1:] == [ShimRefusal.LAUNCHER_DEAD.value] * 4
    finally:
        launcher.kill()
        launcher.wait()


def test_a_reused_launcher_pid_is_dead(tmp_path):
    """Same pid, another start time: another process, so the launcher is gone."""
    bed = Bed(tmp_path, launcher=(os.getpid(), start_ticks(os.getpid()) + 1))
    done = bed.run("run", "img")
    assert done.returncode == 75 and done.stderr.strip().endswith(ShimRefusal.LAUNCHER_DEAD.value)
    assert bed.calls() == []


def test_shim_liveness_reads_proc_as_procs_does():
    me = os.getpid()
    assert shim_admission.launcher_alive(me, start_ticks(me)) is True
    assert shim_admission.launcher_alive(me, None) is True
    assert shim_admission.launcher_alive(me, start_ticks(me) + 1) is False
    with subprocess.Popen(["true"]) as gone:
        gone.wait()
    assert shim_admission.launcher_alive(gone.pid, None) is False


def test_refused_non_eval_creation_writes_no_eval_evidence(tmp_path):
    bed = Bed(tmp_path)
    bed.stop_file.write_text("x")
    for argv in (["run", "--name", "agent-5-00000000", "img"], ["network", "create", "eval-5-00000000"]):
        assert bed.run(*argv).returncode == 75
    assert sorted(p.name for p in bed.evidence.iterdir()) == ["creations.jsonl"]


def test_disk_reserve_reached(tmp_path):
    bed = Bed(tmp_path, min_free=1 << 62)
    done = bed.run("network", "create", "net-1")
    assert done.returncode == 75 and done.stderr.strip().endswith("disk_reserve_reached")
    assert bed.calls() == []


def test_statvfs_failure_is_disk_probe_failed(tmp_path):
    bed = Bed(tmp_path)
    shutil.rmtree(bed.resource_root)  # statvfs on a missing path raises
    done = bed.run("create", "--name", "eval-2-00000000", "img")
    assert done.returncode == 75 and done.stderr.strip().endswith("disk_probe_failed")
    assert (bed.evidence / "2-00000000.eval_refused").read_text() == "disk_probe_failed\n"


def test_admitted_when_free_space_meets_reserve(tmp_path):
    free = shim_admission.free_bytes(str(tmp_path))
    bed = Bed(tmp_path, min_free=max(free // 4, 1))
    assert bed.run("run", "img").returncode == 0


def test_evidence_write_failure_never_changes_the_exit_code(tmp_path):
    bed = Bed(tmp_path)
    bed.evidence.rmdir()
    bed.evidence.write_text("not a directory")  # every evidence write now fails
    assert bed.run("run", "--name", "agent-3-00000000", "img").returncode == 0
    assert bed.run("exec", "agent-3-00000000", "x", "--task_dir", "t").returncode == 0
    (bed.fake_dir / "ps_names").write_text("agent-3-00000000\n")
    assert bed.run("exec", "eval-3-00000000", "x", "--phase", "eval").returncode == 0
    bed.stop_file.write_text("")
    assert bed.run("run", "--name", "eval-3-00000000", "img").returncode == 75


@pytest.mark.parametrize("damage", ["not json", "missing key", "bad number", "missing file"])
def test_unreadable_config_fails_creation_closed_but_never_teardown(bed, damage):
    config = json.loads(bed.files.shim_config.read_text())
    if damage == "not json":
        bed.files.shim_config.write_text("{not json")
    elif damage == "missing key":
        del config["stop_file"]
        bed.files.shim_config.write_text(json.dumps(config))
    elif damage == "bad number":
        config["limits"]["pids_limit"] = "lots"
        bed.files.shim_config.write_text(json.dumps(config))
    else:
        bed.files.shim_config.unlink()
    for argv in (["run", "img"], ["exec", "agent-3-00000000", "true"], ["network", "create", "n"]):
        done = bed.run(*argv)
        assert done.returncode == 75 and done.stderr.strip().endswith("config_unreadable")
    assert bed.calls() == []
    # Teardown never depends on the config: the wrapper bakes in the real docker and the daemon.
    assert bed.run("ps").returncode == 0
    assert len(bed.calls()) == 1


# ---------------------------------------------------------------- exec evidence


def test_exec_agent_records_task_dir_first_value_kept_and_never_blocks(bed):
    argv = [
        "exec",
        "agent-123-abcd0123",
        "timeout",
        "-k",
        "30",
        "1800",
        "python3",
        "-u",
        "/w/main.py",
        "--task_dir",
        "finalpool/task-a",
        "--max_steps",
        "100",
    ]
    assert bed.run(*argv).returncode == 0
    assert bed.last_argv() == argv
    assert (bed.evidence / "123-abcd0123.task").read_text() == "finalpool/task-a\n"
    assert bed.run("exec", "agent-123-abcd0123", "p", "--task_dir=other").returncode == 0
    assert (bed.evidence / "123-abcd0123.task").read_text() == "finalpool/task-a\n"


@pytest.mark.parametrize(
    "ps_names, state",
    [
        ("agent-8-12345678\n", ContainerState.PRESENT),
        ("agent-8-12345678-sidecar\nxagent-8-12345678\n", ContainerState.ABSENT),
        ("", ContainerState.ABSENT),
        ("FAIL", ContainerState.UNKNOWN),
    ],
)
def test_exec_eval_injects_agent_container_state(bed, ps_names, state):
    (bed.fake_dir / "ps_names").write_text(ps_names)
    argv = [
        "exec",
        "eval-8-12345678",
        "/opt/venv/bin/python3",
        "-u",
        "/w/main.py",
        "--task_dir",
        "t",
        "--phase",
        "eval",
    ]
    assert bed.run(*argv).returncode == 0
    probe, real = bed.calls()[-2:]
    assert probe["argv"] == ["ps", "-a", "--filter", "name=agent-8-12345678", "--format", "{{.Names}}"]
    assert probe["docker_host"] == HOST
    assert real["argv"] == ["exec", "-e", f"COWORK_AGENT_CONTAINER_STATE={state.value}", *argv[1:]]
    lines = (bed.evidence / "8-12345678.eval_admission").read_text().splitlines()
    assert [json.loads(line)["agent_container_state"] for line in lines] == [state.value]


def test_container_exec_eval_with_phase_equals_form(bed):
    (bed.fake_dir / "ps_names").write_text("agent-8-12345678\n")
    bed.run("container", "exec", "-w", "/w", "eval-8-12345678", "py", "--phase=eval")
    assert bed.last_argv() == [
        "container",
        "exec",
        "-e",
        "COWORK_AGENT_CONTAINER_STATE=present",
        "-w",
        "/w",
        "eval-8-12345678",
        "py",
        "--phase=eval",
    ]


def creation_files(bed: Bed) -> list[Path]:
    return sorted(creations_dir(bed.files.shim_config.parent.parent).iterdir())


def test_an_admitted_creation_holds_its_lock_outside_the_callers_group_until_docker_returns(bed):
    """The real docker of a creation runs in its own process group, without the run's marker (a
    stop of the runner's group or the watchdog's sweep does not cut a request the daemon would
    finish unseen) and holds the creation's lock while it runs; the file is gone once it returned.
    Other commands keep the caller's group and marker, and take no lock."""
    done = bed.run("run", "-d", "--name", "agent-1-abc", "img", env={RUN_MARKER_ENV: LABEL})
    assert done.returncode == 0
    call = bed.calls()[-1]
    assert call["locks"] == [True]  # exactly one lock, held while the docker ran
    assert call["pgid"] == call["pid"] and call["marker"] is None
    assert creation_files(bed) == []
    bed.run("network", "create", "net-1")
    assert bed.calls()[-1]["locks"] == [True] and creation_files(bed) == []
    bed.run("exec", "agent-1-abc", "true", env={RUN_MARKER_ENV: LABEL})
    call = bed.calls()[-1]
    assert call["locks"] == [] and call["pgid"] == os.getpgid(0) and call["marker"] == LABEL


def test_a_refused_creation_leaves_no_lock_and_a_lock_that_cannot_be_made_refuses(tmp_path):
    bed = Bed(tmp_path)
    bed.stop_file.write_text("")
    assert bed.run("run", "-d", "--name", "agent-1-abc", "img").returncode == 75
    assert creation_files(bed) == []
    bed.stop_file.unlink()
    directory = creations_dir(bed.files.shim_config.parent.parent)
    directory.rmdir()
    directory.write_text("")  # not a directory: no lock file can be made there
    done = bed.run("run", "-d", "--name", "agent-1-abc", "img")
    assert done.returncode == 75 and done.stderr.strip().endswith(ShimRefusal.CREATION_LOCK_FAILED.value)
    assert bed.calls() == [] and bed.creations()[-1]["cause"] == ShimRefusal.CREATION_LOCK_FAILED


def test_the_lock_outlives_a_killed_shim_while_its_docker_runs(bed):
    """SIGKILL of the shim alone (or of the runner's group) leaves the request running: its lock
    stays held, so cleanup waits for it (settle), and is taken once the docker has returned."""
    (bed.fake_dir / "sleep").write_text("3")
    # A shell leads the group and calls the wrapper, as the runner's bash does.
    proc = subprocess.Popen(
        ["sh", "-c", '"$0" run -d --name agent-2-abc img; exit $?', str(bed.files.wrapper)],
        env={"PATH": os.environ["PATH"]},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while not bed.calls() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert bed.calls(), "the fake docker never started"
    os.killpg(proc.pid, signal.SIGKILL)  # the caller's whole group, as a stop of the runner does
    proc.wait(timeout=10)
    directory = creations_dir(bed.files.shim_config.parent.parent)
    early = settle(directory, time.monotonic() + 0.3)
    assert early == Settled(ended=0, in_flight=1)
    late = settle(directory, time.monotonic() + 20)
    assert late == Settled(ended=1, in_flight=0) and creation_files(bed) == []


def test_a_signal_to_the_shim_reaches_its_docker_and_the_exit_code_says_so(bed):
    (bed.fake_dir / "sleep").write_text("30")
    proc = subprocess.Popen(
        [str(bed.files.wrapper), "run", "-d", "--name", "agent-3-abc", "img"],
        env={"PATH": os.environ["PATH"]},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # A SIGTERM before the shim has set its forwarding handlers (Python's start-up) kills the
    # shim itself (-15, not 143). The fake docker's call proves only that the docker runs: wait for
    # both, the handler read from the kernel's record of caught signals.
    assert wait_for(lambda: bool(bed.calls()) and catches(proc.pid, signal.SIGTERM), 20, 0.05), (
        "the shim never ran its docker with handlers set"
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM
    assert creation_files(bed) == []


def test_a_signal_before_the_docker_starts_is_forwarded_once_it_runs(tmp_path, monkeypatch):
    """The gap the handlers once left: a SIGTERM to the shim after admission but before its docker
    started ended the shim itself (-15). It is now kept and sent to the docker once it runs, and
    the exit code says the docker was terminated (143). The signal is sent from inside the start,
    in this process, where the shim's code runs (run_creation called directly)."""
    docker = tmp_path / "docker"
    docker.write_text("#!/bin/sh\nexec sleep 5\n")
    docker.chmod(0o755)
    (tmp_path / "creations").mkdir()
    config = {"real_docker": str(docker), "docker_host": HOST, "creations_dir": str(tmp_path / "creations")}
    lock = shim_inflight.hold_creation_lock(config)
    assert lock, "no creation lock"
    reached = []  # the signal reached a handler other than the shim's: the gap is open
    start = subprocess.Popen

    def start_after_a_signal(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # handled before the next line runs (main thread)
        return start(*args, **kwargs)

    saved = {signum: signal.getsignal(signum) for signum in shim_io.FORWARDED_SIGNALS}
    signal.signal(signal.SIGTERM, lambda sig, _frame: reached.append(sig))
    monkeypatch.setattr(shim_inflight.subprocess, "Popen", start_after_a_signal)
    began = time.monotonic()
    try:
        code = shim_inflight.run_creation(config, ["run", "-d", "img"], lock)
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert reached == []
    assert code == 128 + signal.SIGTERM and time.monotonic() - began < 4  # not the docker's own 5 s end
    assert list((tmp_path / "creations").iterdir()) == []  # the lock released once the docker ended


def catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (the SigCgt mask of /proc/<pid>/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:")), 0)
    return bool(mask & (1 << (signum - 1)))


def test_settle_reads_ended_and_held_locks_and_a_missing_directory(tmp_path):
    assert settle(tmp_path / "none", time.monotonic()) == Settled(0, 0)
    assert settle(None, time.monotonic()) == Settled(0, 0)
    (tmp_path / "a.lock").write_text("")  # its holder is gone: ended
    (tmp_path / "other").write_text("")  # not a lock file: ignored
    held = tmp_path / "b.lock"
    fd = os.open(held, os.O_WRONLY | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert settle(tmp_path, time.monotonic() + 0.2) == Settled(ended=1, in_flight=1)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["b.lock", "other"]
    finally:
        os.close(fd)
    assert settle(tmp_path, time.monotonic() + 5) == Settled(ended=1, in_flight=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]


def test_creations_are_recorded_one_line_each(bed):
    bed.run("network", "create", "net-4-00000000")
    bed.run("run", "-d", "--name=pg-4-00000000", "postgres:15")
    bed.run("run", "--rm", "img", "true")
    recs = bed.creations()
    assert [(r["subcommand"], r["name"], r["role"], r["admitted"]) for r in recs] == [
        ("network create", "net-4-00000000", "network", True),
        ("run", "pg-4-00000000", "pg", True),
        ("run", None, "other", True),
    ]
    assert all(isinstance(r["ts"], float) for r in recs)


# ---------------------------------------------------------------- pure parts and constants


def test_shim_constants_match_the_vocabulary_and_labels():
    assert shim_words.RUN_LABEL_KEY == labels.RUN_LABEL_KEY and shim_words.ROLE_LABEL_KEY == labels.ROLE_LABEL_KEY
    assert shim_words.RUN_MARKER_ENV == RUN_MARKER_ENV
    assert shim_words.EXIT_REFUSED == ExitCode.SHIM_REFUSED
    from cowork_adapter.gateway.server import REVOKED_SUFFIX

    assert shim_words.AGENT_REMOVED_SUFFIX == REVOKED_SUFFIX
    causes = {
        shim_words.ADMISSION_STOPPED,
        shim_words.DISK_PROBE_FAILED,
        shim_words.DISK_RESERVE_REACHED,
        shim_words.CONFIG_UNREADABLE,
        shim_words.FLAG_CONFLICT,
        shim_words.HOST_OVERRIDE,
        shim_words.LAUNCHER_DEAD,
        shim_words.GATEWAY_TOKEN_FAILED,
        shim_words.CREATION_LOCK_FAILED,
        shim_words.DUMP_MOUNT_REFUSED,
        shim_words.TASK_UNKNOWN,
        shim_words.STAGING_MOUNT_REFUSED,
    }
    assert causes == set(ShimRefusal.values())
    # The names the shim shares with the eval phase and the protocol (it cannot import either).
    from cowork_adapter.container import agent, evalphase, protocol
    from cowork_adapter.runroot import layout
    from cowork_adapter.schemas.seal import SEAL_SCHEMA

    assert (shim_words.ENTRY_ENV, shim_words.SUMMARY_SHA_ENV, shim_words.BOUND_ENV) == (
        evalphase.ENTRY_ENV,
        evalphase.SUMMARY_SHA_ENV,
        evalphase.BOUND_ENV,
    )
    assert (custody_evidence.CLAIM_NAME, custody_evidence.RECEIPT_PREFIX, custody_evidence.EVAL_RES_NAME) == (
        protocol.CLAIM_NAME,
        protocol.RECEIPT_PREFIX,
        protocol.EVAL_RES_NAME,
    )
    assert custody_evidence.SUMMARY_NAME == agent.SUMMARY_NAME
    assert shim_words.SEAL_SCHEMA == SEAL_SCHEMA
    assert (shim_words.SEAL_SUFFIX, shim_words.SEAL_HEAD_SUFFIX, shim_words.HELD_SUMMARY_SUFFIX) == (
        layout.SEAL_SUFFIX,
        layout.SEAL_HEAD_SUFFIX,
        layout.HELD_SUMMARY_SUFFIX,
    )
    assert (
        shim_dumps.task_of(
            {"task_names": ["a", "demo-csv-totals"]}, "77-" + custody_evidence.runner_digest("demo-csv-totals")
        )
        == "demo-csv-totals"
    )
    assert {shim_words.ABSENT, shim_words.PRESENT, shim_words.UNKNOWN} == set(ContainerState.values())
    for name in ("agent-1", "eval-x", "pg-2", "helper-3", "net-1", None, "", "agent"):
        assert shim_argv.role_for_name(name) == labels.role_for_name(name)


def test_the_path_label_is_sha256_prefix_of_the_resolved_root(tmp_path):
    import hashlib

    (tmp_path / "a").mkdir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "a")
    expected = hashlib.sha256(str((tmp_path / "a").resolve()).encode()).hexdigest()[:32]
    assert labels.path_label(link) == labels.path_label(tmp_path / "a") == expected
    assert labels.path_label(tmp_path / "b") != expected


def test_a_run_label_is_unique_per_run_even_for_the_same_path(tmp_path):
    import hashlib

    (tmp_path / "a").mkdir()
    resolved = str((tmp_path / "a").resolve())
    first, nonce = labels.new_run_label(tmp_path / "a")
    second, other = labels.new_run_label(tmp_path / "link-free-same-path" / ".." / "a")
    assert nonce != other and first != second  # two hosts (or two runs) on one path, one daemon
    assert first == hashlib.sha256(f"{resolved}\0{nonce}".encode()).hexdigest()[:32]
    assert labels.label_of_resolved_root(resolved, nonce) == first  # recomputable from what is recorded
    assert labels.path_label(tmp_path / "a") not in (first, second)  # never the old, path-only label
    assert len(first) == labels.RUN_LABEL_HEX_CHARS


def test_the_label_of_a_run_root_is_the_one_it_recorded_old_or_new(tmp_path):
    from cowork_adapter.schemas.manifest import RunManifest

    def root_with(name, **label):
        root = tmp_path / name
        root.mkdir()
        (root / "run_manifest.json").write_text(
            RunManifest(
                run_root=str(root),
                created_at="2026-01-01T00:00:00Z",
                updated_at="2026-01-01T00:00:00Z",
                argv=[],
                adapter={"version": "0"},
                **label,
            ).to_json()
        )
        return root

    new = tmp_path / "new"
    label, nonce = labels.new_run_label(new)
    assert labels.run_label(root_with("new", run_label=label, run_nonce=nonce)) == label
    old = root_with("old", run_label=labels.path_label(tmp_path / "old"))  # a run root from before the nonce
    assert labels.run_label(old) == labels.path_label(old)
    with pytest.raises(OSError):
        labels.run_label(tmp_path / "never-ran")  # never guessed from the path


def test_parse_options_short_clusters_and_attached_values():
    opts, first = shim_argv.parse_options(
        ["-dit", "-eA=1", "-p", "80:80", "--rm", "img", "-e", "x"], shim_argv.RUN_BOOL_LONG, shim_argv.RUN_BOOL_SHORT
    )
    assert opts == [("-d", None), ("-i", None), ("-t", None), ("-e", "A=1"), ("-p", "80:80"), ("--rm", None)]
    assert first == 5


# ---------------------------------------------------------------- install_custody and BASH_ENV


def install(tmp_path: Path, **overrides):
    real = tmp_path / "bin" / "docker"
    if not real.exists():
        real.parent.mkdir(exist_ok=True)
        real.write_text("#!/bin/sh\nexit 0\n")
        real.chmod(0o755)
    (tmp_path / "res").mkdir(exist_ok=True)
    kwargs = dict(
        real_docker=str(real),
        docker_host=HOST,
        run_label=LABEL,
        limits=LIMITS,
        stop_file=tmp_path / "STOP",
        resource_root=tmp_path / "res",
        min_free_bytes=0,
        evidence_dir=tmp_path / "ev",
        agent_env_file=None,
        environ={},
    )
    kwargs.update(overrides)
    return install_custody(tmp_path / "run", **kwargs)


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"environ": {"BASH_ENV": "/etc/x"}}, "BASH_ENV"),
        ({"docker_host": ""}, "Docker host"),
        ({"docker_host": "  "}, "Docker host"),
        ({"real_docker": "docker"}, "not an executable"),
        ({"real_docker": "/nonexistent/docker"}, "not an executable"),
        ({"resource_root": Path("/nonexistent-root")}, "not a directory"),
        ({"min_free_bytes": -1}, "min_free_bytes"),
        ({"limits": {"cpus": 0, "memory_bytes": 1 << 30, "pids_limit": 10}}, "cpus"),
        ({"agent_env_file": Path("/nonexistent/agent.env")}, "agent env file"),
    ],
)
def test_install_refusals(tmp_path, overrides, words):
    with pytest.raises(Refusal) as caught:
        install(tmp_path, **overrides)
    assert caught.value.stage == "custody" and words in caught.value.sentence
    assert not (tmp_path / "run" / "custody").exists()


def test_install_refuses_a_docker_that_is_a_shim_and_a_reused_root(tmp_path):
    files = install(tmp_path)
    with pytest.raises(Refusal, match="already exists"):
        install(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(Refusal, match="resolves to a docker shim"):
        install(other, real_docker=str(files.wrapper))
    link = other / "docker-link"
    link.symlink_to(files.wrapper)
    with pytest.raises(Refusal, match="resolves to a docker shim"):
        install(other, real_docker=str(link))


def test_install_writes_files_modes_and_runner_env(tmp_path):
    files = install(tmp_path)
    assert files.wrapper.stat().st_mode & 0o777 == 0o755
    assert files.shim_config.stat().st_mode & 0o777 == 0o600
    assert files.tmpdir == (tmp_path / "res" / f"tmp-{LABEL[:12]}").resolve()
    assert files.tmpdir.stat().st_mode & 0o777 == 0o700
    assert set(files.runner_env) == {"BASH_ENV", "DOCKER_HOST", "COWORK_SHIM_CONFIG", "TMPDIR"}
    config = json.loads(files.shim_config.read_text())
    assert config["schema"] == "cowork_adapter.shim_config.v1"
    assert config["limits"]["memory_swap_bytes"] == config["limits"]["memory_bytes"]
    env = files.environment({"PATH": "/usr/bin", "DOCKER_CONTEXT": "x", "HOME": "/root"})
    assert "DOCKER_CONTEXT" not in env and env["HOME"] == "/root"
    assert env["PATH"] == f"{files.shim_dir}:/usr/bin"
    assert files.environment({})["PATH"] == f"{files.shim_dir}:{os.defpath}"


RUNNER_PROBE = """\
set -uo pipefail
export PATH="/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin:$PATH"
DOCKER=$(which docker)
echo "which=$DOCKER"
echo "which_ls=$(which ls)"
echo "command_v=$(command -v docker)"
( echo "background=$(which docker)" ) &
wait
echo "nested=$(bash -c 'export PATH=/usr/local/bin:/usr/bin:/bin; which docker')"
"$DOCKER" ps --format x
docker images
"""


def test_bash_env_makes_which_docker_answer_the_shim_after_a_path_rewrite(tmp_path):
    bed = Bed(tmp_path)
    script = tmp_path / "runner.sh"
    script.write_text(RUNNER_PROBE)
    env = bed.files.environment({"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    shim_path = str(bed.files.wrapper)
    lines = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert lines["which"] == shim_path
    assert lines["background"] == shim_path
    assert lines["nested"] == shim_path
    assert lines["which_ls"] == subprocess.run(["which", "ls"], capture_output=True, text=True).stdout.strip()
    assert lines["command_v"] == "docker"  # the function, which routes to the shim
    assert [c["argv"] for c in bed.calls()] == [["ps", "--format", "x"], ["images"]]


def test_without_bash_env_the_rewritten_path_would_bypass_the_shim(tmp_path):
    # The premise of BASH_ENV: a shim merely first on PATH loses to the runner's PATH rewrite.
    bed = Bed(tmp_path)
    env = bed.files.environment({"PATH": os.environ["PATH"]})
    env.pop("BASH_ENV")
    real = subprocess.run(
        ["bash", "-c", "command which docker"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
    ).stdout.strip()
    if not real:
        pytest.skip("no docker CLI in the system directories of this machine")
    done = subprocess.run(
        ["bash", "-c", textwrap.dedent(RUNNER_PROBE).splitlines()[1] + "; which docker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.stdout.strip() == real != str(bed.files.wrapper)
