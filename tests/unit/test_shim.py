"""The docker shim and the BASH_ENV discovery, run as real subprocesses against a FAKE docker.

The fake records each argv it receives, so every test sees exactly what the real docker would
have been given; no daemon is needed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cowork_adapter.container.procs import start_ticks
from cowork_adapter.custody import (
    shim_admission,
    shim_flags,
)
from cowork_adapter.custody.bash_env import install_custody
from cowork_adapter.custody.shim_config import ContainerLimits
from cowork_adapter.errors import Refusal
from cowork_adapter.vocab import ExitCode, ShimRefusal

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
