"""The typed run config of the docker shim (the JSON file the shim reads on every call)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta
from msgspec.structs import force_setattr

from ..schemas.record import NonNegative, Positive, Record

# docker refuses memory limits below 6 MiB.
DOCKER_MIN_MEMORY_BYTES = 6 * 1024 * 1024


class ContainerLimits(Record, frozen=True):  # type: ignore[misc]  # msgspec allows a frozen Struct over a mutable base; dataclasses (mypy's model) do not
    """Hard per-container limits. Swap equals memory by default: a container gets no swap."""

    cpus: Annotated[float, Meta(gt=0)]
    memory_bytes: Annotated[int, Meta(ge=DOCKER_MIN_MEMORY_BYTES)]
    memory_swap_bytes: int | None = None
    pids_limit: Annotated[int, Meta(ge=1)]

    def _check(self) -> None:
        if self.memory_swap_bytes is None:
            force_setattr(self, "memory_swap_bytes", self.memory_bytes)
        elif self.memory_swap_bytes < self.memory_bytes:
            raise ValueError("memory_swap_bytes must be at least memory_bytes (docker counts memory+swap)")


class ShimConfig(Record, frozen=True, rename={"schema_": "schema"}):  # type: ignore[misc]  # msgspec allows a frozen Struct over a mutable base; dataclasses (mypy's model) do not
    """What the shim needs; written once per run under <run_root>/custody/, read by shim.py."""

    schema_: Literal["cowork_adapter.shim_config.v1"] = "cowork_adapter.shim_config.v1"
    real_docker: str
    docker_host: str
    run_label: str
    limits: ContainerLimits
    stop_file: str
    resource_root: str
    min_free_bytes: NonNegative
    evidence_dir: str
    agent_env_file: str | None = None
    # With --llm-gateway: the run's gateway secret (0600, under <run_root>/private); agent containers
    # then get a per-task token file instead of agent_env_file (which is None: no key file exists).
    gateway_secret_file: str | None = None
    # The default route (gateway/tls.py): agent containers resolve the provider's host to the
    # gateway's address and trust the run CA (a bundle mounted read-only, named by the CA variables).
    provider_host: str | None = None
    provider_address: str | None = None
    provider_ca_bundle: str | None = None
    provider_ca_targets: list[str] | None = None  # certifi files the bundle is mounted over too
    # The launcher holding the run's custody; the shim refuses every creation once it is gone.
    launcher_pid: Positive | None = None
    launcher_start_ticks: NonNegative | None = None
    # Where each admitted creation holds its in-flight lock until the real docker has its answer
    # (custody/creations.py); cleanup waits for them before its proof.
    creations_dir: str | None = None
    # Per-task dumps and the seal (issue 27): the run's dumps folder on the host (never mounted
    # whole), the agent short name that places a task's dump in it, the tasks the run may run (the
    # runner's container ids carry md5(task)), and the bound of one eval exec. None: an older config,
    # whose shim mounts the whole folder and seals nothing.
    dumps_dir: str | None = None
    dump_short: str | None = None
    task_names: list[str] | None = None
    # Seconds, as COWORK_EVAL_BOUND_SEC gives them (a float: 90.5 is a bound; an int field refused it).
    eval_bound_sec: Annotated[float, Meta(gt=0)] | None = None
    # `<clone path>:/workspace/<path>:ro` volumes every eval container gets (bash_env.eval_code_mounts):
    # the run's verified benchmark clone's evaluator code over the image's copy (issue 36).
    eval_mounts: list[str] | None = None
