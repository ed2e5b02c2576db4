"""Install the run's docker custody: shim config, `docker` wrapper and the BASH_ENV discovery script.

The upstream runner rewrites PATH so system directories come first and then runs
`DOCKER=$(which docker)`, so a shim earlier on PATH is not enough. bash sources $BASH_ENV at
startup, before the script's first line; the script defines shell functions `which` (answers
the shim for `docker`, defers to the real `which` otherwise) and `docker` (routes bare `docker`
calls and `command -v docker` users to the shim). Command substitutions and background
subshells are forks of the runner and keep the functions. BASH_ENV stays exported on purpose:
a nested bash script (which does not inherit unexported functions) re-sources the same
idempotent file and gets the same answer. A process that scrubs its environment or calls the
real docker by absolute path bypasses all of this; the supervisor detects that from
`creations.jsonl` and the daemon (see docker_ops.custody_gap).

Files, all under <run_root>/custody/ (never mounted into a container):
  shim_config.json   the ShimConfig (schema cowork_adapter.shim_config.v1)
  shim/docker        /bin/sh wrapper, 0755: sets COWORK_SHIM_CONFIG, execs `python -I -S shim.py`
  shim/shim.py       a copy of the shim program (its SHA-256 is in CustodyFiles), and beside it a copy of
                     each other file of SHIM_FILES (its sibling modules and the readers it loads)
  bash_env.sh        the discovery script
"""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Refusal
from ..fileio import create_exclusive
from ..runroot.custody_evidence import runner_digest
from ..runroot.layout import RunRoot
from ..schemas.record import RecordInvalid
from . import agent_exec, container_caps
from .creations import creations_dir
from .shim_config import ContainerLimits, ShimConfig

_HERE = Path(__file__).resolve().parent
SHIM_SOURCE = _HERE / "shim.py"
# Every file the shim needs, copied flat beside it (it runs as `python3 -I -S shim.py`, stdlib only, and
# imports these as top-level modules from its own folder); tests/unit/test_shim_files.py holds the list
# closed under the shim's imports.
SHIM_CONCERNS = ("words", "argv", "io", "admission", "dumps", "flags", "inflight", "daemon", "taskdb", "seal", "agent")
SHIM_FILES = (
    SHIM_SOURCE,
    # its concerns, split out of shim.py (issue 41)
    *(_HERE / f"shim_{name}.py" for name in SHIM_CONCERNS),
    # what it shares with the score: the seal's reading of a dump, the runner's task ids
    _HERE.parent / "runroot" / "custody_evidence.py",
    # task dumps read through the same no-follow, capped reader as every other host reader
    _HERE.parent / "container" / "safefile.py",
    _HERE / "taskdb_probe.py",  # the task database probe (issue 36)
    _HERE / "taskdb_sql.py",  # and its SQL
    # issue 37: the agent exec's bounds and the containers' log and capabilities, the staging copy narrowed
    _HERE / "agent_exec.py",
    _HERE / "container_caps.py",
    _HERE / "staging_mount.py",
)
STAGE = "custody"
# A docker found on the host that is really some run's shim wrapper carries this marker.
WRAPPER_MARKER = "cowork-adapter docker shim"


# The eval container lives 1800 s (the runner's `sleep 1800`); one eval exec is bounded well inside
# it. COWORK_EVAL_BOUND_SEC in the launcher's environment may only lower it (tests).
EVAL_BOUND_SEC = 1200.0
EVAL_BOUND_ENV = "COWORK_EVAL_BOUND_SEC"


# The benchmark code the eval phase imports from the image (issue 36): the evaluator and TaskConfig
# under /workspace/utils/ (task checkers import only the task tree, mounted from the clone already,
# and third-party packages). Every eval container gets the run's verified clone's copy mounted
# read-only over the image's, so the evaluator that runs is the pinned one whatever image was built.
EVAL_CODE_PATHS = ("utils",)
WORKSPACE = "/workspace"


def eval_code_mounts(bench_copy: Path) -> list[str]:
    """`<clone>/<path>:/workspace/<path>:ro` for each EVAL_CODE_PATHS folder the clone has."""
    return [
        f"{Path(bench_copy).resolve() / rel}:{WORKSPACE}/{rel}:ro"
        for rel in EVAL_CODE_PATHS
        if (Path(bench_copy) / rel).is_dir() and not (Path(bench_copy) / rel).is_symlink()
    ]


def eval_bound_sec(environ: Mapping[str, str]) -> float:
    try:
        lowered = float(environ.get(EVAL_BOUND_ENV, ""))
    except ValueError:
        return EVAL_BOUND_SEC
    return lowered if 0 < lowered < EVAL_BOUND_SEC else EVAL_BOUND_SEC


@dataclass(frozen=True)
class TaskDumps:
    """Per-task dumps (issue 27): each agent/eval container mounts only its own task's dump."""

    dumps_dir: Path  # <bench copy>/dumps: the runner's mount source, never mounted whole any more
    short: str  # the run's agent short name (TaskConfig places a dump at <short_>/SingleUserTurn-<task>)
    tasks: tuple[str, ...]  # every task the run may hand its runner
    eval_bound_sec: float  # one eval exec's bound (the runner has none)
    eval_mounts: tuple[str, ...] = ()  # eval_code_mounts(): the pinned evaluator code over the image's


@dataclass(frozen=True)
class Hardening:
    """Issue 37: the agent exec's host-side bounds and what every container gets (shim_config.py)."""

    agent_bound_sec: float  # agent_exec.agent_bound_sec(task timeout)
    agent_output_cap_bytes: int
    log_max_bytes: int
    cap_keep: tuple[str, ...] = ()

    @classmethod
    def for_run(cls, task_timeout_sec: float, output_cap_mib: int, cap_add: tuple[str, ...] = ()) -> Hardening:
        """A run's bounds from its flags (--task-timeout, --agent-output-cap-mib, --container-cap-add)."""
        return cls(
            agent_bound_sec=agent_exec.agent_bound_sec(task_timeout_sec),
            agent_output_cap_bytes=int(output_cap_mib) * 1024 * 1024,
            log_max_bytes=container_caps.DEFAULT_LOG_MAX_BYTES,
            cap_keep=tuple(sorted({str(c) for c in cap_add})),
        )

    def dropped(self, role: str) -> list[str]:
        return container_caps.dropped_for(role, self.cap_keep)


@dataclass(frozen=True)
class ProviderRoute:
    """Agent containers resolve `host` to `address` and trust `ca_bundle` (gateway/tls.py): the
    default route's gateway, or (test beds, --key-in-agent) a stand-in serving as the provider."""

    host: str
    address: str
    ca_bundle: Path
    # certifi's CA files of the image's Pythons (gateway/trust.py): the bundle is mounted over each,
    # for clients that read no variable (Ouroboros's worker httpx client: trust_env=False).
    ca_targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class CustodyFiles:
    """What install_custody wrote, and the environment the runner must be started with.

    `runner_env` holds the variables to set: BASH_ENV, DOCKER_HOST, COWORK_SHIM_CONFIG and TMPDIR.
    Use environment(base) to build the runner's full environment from a base one.
    """

    bash_env: Path
    shim_dir: Path
    shim_config: Path
    shim_program: Path
    shim_sha256: str
    tmpdir: Path
    runner_env: dict[str, str] = field(default_factory=dict)

    @property
    def wrapper(self) -> Path:
        return self.shim_dir / "docker"

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """base, minus DOCKER_CONTEXT (it could pick another daemon), plus runner_env, with the
        shim directory first on PATH (for anything that looks docker up before a PATH rewrite).

        Pass the runner's real base environment: a base without PATH gets os.defpath after the shim.
        """
        env = {k: v for k, v in base.items() if k != "DOCKER_CONTEXT"}
        env.update(self.runner_env)
        env["PATH"] = os.pathsep.join((str(self.shim_dir), base.get("PATH") or os.defpath))
        return env


def install_custody(
    run_root: Path,
    *,
    real_docker: str,
    docker_host: str,
    run_label: str,
    limits: ContainerLimits | Mapping[str, Any],
    stop_file: Path,
    resource_root: Path,
    min_free_bytes: int,
    evidence_dir: Path,
    agent_env_file: Path | None,
    python: str = sys.executable,
    environ: Mapping[str, str] | None = None,
    launcher_pid: int | None = None,
    launcher_start_ticks: int | None = None,
    gateway_secret_file: Path | None = None,
    dumps: TaskDumps | None = None,
    provider: ProviderRoute | None = None,
    hardening: Hardening | None = None,
) -> CustodyFiles:
    """Write the run's custody files under <run_root>/custody/ and return them with the runner env.

    Refuses (Refusal stage "custody"): BASH_ENV already set in `environ` (default os.environ),
    an empty docker host or run label, a real docker that is not an executable file or that is
    a shim wrapper itself, a resource root that is not a directory, a negative reserve, invalid
    limits, an agent env file that is not an existing regular file, and an existing custody dir.
    Creates evidence_dir (0700) and TMPDIR = <resource_root>/tmp-<run_label[:12]> (0700).
    With `launcher_pid` (and its start time in clock ticks), the shim refuses every creation once
    that process is gone (ShimRefusal.LAUNCHER_DEAD): no container without a living supervisor.
    """
    environ = os.environ if environ is None else environ
    if environ.get("BASH_ENV") is not None:
        raise Refusal(STAGE, "BASH_ENV is already set; unset it so the run's docker discovery script is the only one.")
    if not docker_host or not docker_host.strip():
        raise Refusal(STAGE, "The Docker host is empty; pass the daemon address explicitly.")
    if not run_label:
        raise Refusal(STAGE, "The run label is empty.")
    run_root = Path(run_root).resolve()
    custody_dir = RunRoot(run_root).custody
    shim_dir = custody_dir / "shim"
    wrapper = shim_dir / "docker"
    _check_real_docker(real_docker, wrapper)
    resource_root = Path(resource_root)
    if not resource_root.is_dir():
        raise Refusal(STAGE, f"The resource root {resource_root} is not a directory.")
    if agent_env_file is not None and not Path(agent_env_file).is_file():
        raise Refusal(STAGE, f"The agent env file {agent_env_file} is not an existing regular file.")
    if provider is not None and not Path(provider.ca_bundle).is_file():
        raise Refusal(STAGE, f"The provider CA bundle {provider.ca_bundle} is not an existing regular file.")
    if gateway_secret_file is not None and not Path(gateway_secret_file).is_file():
        raise Refusal(STAGE, f"The gateway secret file {gateway_secret_file} is not an existing regular file.")
    if dumps is not None:
        digests: dict[str, str] = {}
        for task in dumps.tasks:
            other = digests.setdefault(runner_digest(task), task)
            if other != task:
                raise Refusal(
                    STAGE, f"Tasks {other} and {task} share the runner's container id; run them in separate runs."
                )
    try:
        config = ShimConfig(
            real_docker=str(Path(real_docker).resolve()),
            docker_host=docker_host,
            run_label=run_label,
            limits=limits if isinstance(limits, ContainerLimits) else ContainerLimits(**limits),
            stop_file=str(Path(stop_file).absolute()),
            resource_root=str(resource_root.resolve()),
            min_free_bytes=min_free_bytes,
            evidence_dir=str(Path(evidence_dir).absolute()),
            agent_env_file=None if agent_env_file is None else str(Path(agent_env_file).resolve()),
            launcher_pid=launcher_pid,
            launcher_start_ticks=launcher_start_ticks,
            gateway_secret_file=None if gateway_secret_file is None else str(Path(gateway_secret_file).resolve()),
            provider_host=None if provider is None else provider.host,
            provider_address=None if provider is None else provider.address,
            provider_ca_bundle=None if provider is None else str(Path(provider.ca_bundle).resolve()),
            provider_ca_targets=None if provider is None else list(provider.ca_targets),
            creations_dir=str(creations_dir(run_root)),
            dumps_dir=None if dumps is None else str(Path(dumps.dumps_dir).resolve()),
            dump_short=None if dumps is None else dumps.short,
            task_names=None if dumps is None else sorted(set(dumps.tasks)),
            eval_bound_sec=None if dumps is None else dumps.eval_bound_sec,
            eval_mounts=None if dumps is None else list(dumps.eval_mounts),
            agent_bound_sec=None if hardening is None else hardening.agent_bound_sec,
            agent_output_cap_bytes=None if hardening is None else hardening.agent_output_cap_bytes,
            log_max_bytes=None if hardening is None else hardening.log_max_bytes,
            cap_keep=None if hardening is None else list(hardening.cap_keep),
            staging_root=None
            if hardening is None or dumps is None
            else str(resource_root.resolve() / f"tmp-{run_label[:12]}"),
        )
    except (RecordInvalid, TypeError) as err:
        raise Refusal(STAGE, f"The custody settings are invalid: {err}.") from None
    try:
        custody_dir.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise Refusal(STAGE, f"{custody_dir} already exists; a run root is never reused.") from None
    shim_dir.mkdir(mode=0o700)
    creations_dir(run_root).mkdir(mode=0o700)
    _make_private_dir(Path(config.evidence_dir))
    tmpdir = resource_root.resolve() / f"tmp-{run_label[:12]}"
    _make_private_dir(tmpdir)

    config_path = RunRoot(run_root).shim_config
    _write(config_path, config.to_json(), 0o600)
    program = shim_dir / SHIM_SOURCE.name
    # The shim is several files: its digest covers each, by name, in SHIM_FILES' order.
    digest = hashlib.sha256()
    for shim_file in SHIM_FILES:
        text = shim_file.read_text(encoding="utf-8")
        _write(shim_dir / shim_file.name, text, 0o644)
        digest.update(f"{shim_file.name}\0{len(text.encode())}\0".encode() + text.encode())
    _write(
        wrapper,
        wrapper_text(python, program, config_path, run_label, real_docker=config.real_docker, docker_host=docker_host),
        0o755,
    )
    bash_env = RunRoot(run_root).bash_env
    _write(bash_env, bash_env_text(wrapper, run_label), 0o644)
    return CustodyFiles(
        bash_env=bash_env,
        shim_dir=shim_dir,
        shim_config=config_path,
        shim_program=program,
        shim_sha256=digest.hexdigest(),
        tmpdir=tmpdir,
        runner_env={
            "BASH_ENV": str(bash_env),
            "DOCKER_HOST": docker_host,
            "COWORK_SHIM_CONFIG": str(config_path),
            "TMPDIR": str(tmpdir),
        },
    )


def wrapper_text(
    python: str, program: Path, config_path: Path, run_label: str, *, real_docker: str, docker_host: str
) -> str:
    """The `docker` wrapper: its config path is baked in, so a scrubbed environment still works.

    Commands the shim rewrites or records (creations, exec, rm/stop with their resource readings,
    global flags) go to the shim program; every other command execs the real docker at once,
    against the run's daemon and no context, so the runner's many `ps`/`inspect` calls cost no
    Python start-up.
    """
    q = shlex.quote
    return (
        "#!/bin/sh\n"
        f"# {WRAPPER_MARKER} for run {run_label}\n"
        f"COWORK_SHIM_CONFIG={q(str(config_path))}\n"
        "export COWORK_SHIM_CONFIG\n"
        'case "${1-}" in\n'
        f'  run|create|container|network|exec|rm|stop|-*|"") exec {q(python)} -I -S {q(str(program))} "$@" ;;\n'
        "esac\n"
        "unset DOCKER_CONTEXT\n"
        f"DOCKER_HOST={q(docker_host)}\n"
        "export DOCKER_HOST\n"
        f'exec {q(real_docker)} "$@"\n'
    )


def bash_env_text(wrapper: Path, run_label: str) -> str:
    """The BASH_ENV script: `which docker` and bare `docker` both answer the run's shim."""
    shim = shlex.quote(str(wrapper))
    return (
        f"# cowork-adapter docker custody for run {run_label}; sourced by bash at startup.\n"
        "# `which docker` answers the run's shim whatever PATH says; other lookups use the real which.\n"
        "which() {\n"
        '    if [ "$#" -eq 1 ] && [ "$1" = docker ]; then\n'
        f"        printf '%s\\n' {shim}\n"
        "        return 0\n"
        "    fi\n"
        '    command which "$@"\n'
        "}\n"
        "# A bare `docker` (or DOCKER=$(command -v docker)) reaches the shim too.\n"
        "docker() {\n"
        f'    {shim} "$@"\n'
        "}\n"
    )


def _check_real_docker(real_docker: str, wrapper: Path) -> None:
    if not real_docker:
        raise Refusal(STAGE, "No docker CLI was found on PATH.")
    path = Path(real_docker)
    if not path.is_absolute() or not path.is_file() or not os.access(path, os.X_OK):
        raise Refusal(STAGE, f"The docker CLI {real_docker} is not an executable file given by absolute path.")
    resolved = path.resolve()
    if resolved == wrapper.resolve() or resolved.parent == wrapper.parent.resolve() or _is_wrapper(resolved):
        raise Refusal(STAGE, f"The docker CLI {real_docker} resolves to a docker shim, not the real docker.")


def _is_wrapper(path: Path) -> bool:
    # A wrapper is a tiny script; the real CLI is a large binary, so read only the head.
    try:
        with path.open("rb") as handle:
            head = handle.read(512)
    except OSError:
        return False
    return head.startswith(b"#!") and WRAPPER_MARKER.encode() in head


def _make_private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, stat.S_IRWXU)


def _write(path: Path, text: str, mode: int) -> None:
    create_exclusive(path, text, mode=mode)  # exactly `mode`: the umask does not narrow it
