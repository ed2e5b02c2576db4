"""The shim's pure parts and constants, and install_custody with the BASH_ENV discovery, run as real subprocesses
against a FAKE docker (test_shim.py's Bed).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from test_shim import HOST, LABEL, LIMITS, Bed

from cowork_adapter.custody import labels, shim_argv, shim_dumps, shim_words
from cowork_adapter.custody.bash_env import install_custody
from cowork_adapter.custody.watchdog import RUN_MARKER_ENV
from cowork_adapter.errors import Refusal
from cowork_adapter.runroot import custody_evidence
from cowork_adapter.vocab import ContainerState, ExitCode, ShimRefusal

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
