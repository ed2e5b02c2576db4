"""The typed run config of the docker shim (the JSON file the shim reads on every call)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# docker refuses memory limits below 6 MiB.
DOCKER_MIN_MEMORY_BYTES = 6 * 1024 * 1024


class ContainerLimits(BaseModel):
    """Hard per-container limits. Swap equals memory by default: a container gets no swap."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpus: float = Field(gt=0)
    memory_bytes: int = Field(ge=DOCKER_MIN_MEMORY_BYTES)
    memory_swap_bytes: int | None = None
    pids_limit: int = Field(ge=1)

    @model_validator(mode="after")
    def _no_swap_by_default(self) -> "ContainerLimits":
        if self.memory_swap_bytes is None:
            object.__setattr__(self, "memory_swap_bytes", self.memory_bytes)
        elif self.memory_swap_bytes < self.memory_bytes:
            raise ValueError("memory_swap_bytes must be at least memory_bytes (docker counts memory+swap)")
        return self


class ShimConfig(BaseModel):
    """What the shim needs; written once per run under <run_root>/custody/, read by shim.py."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_: Literal["cowork_adapter.shim_config.v1"] = Field(
        default="cowork_adapter.shim_config.v1", alias="schema"
    )
    real_docker: str
    docker_host: str
    run_label: str
    limits: ContainerLimits
    stop_file: str
    resource_root: str
    min_free_bytes: int = Field(ge=0)
    evidence_dir: str
    agent_env_file: str | None = None
    # With --llm-gateway: the run's gateway secret (0600, under <run_root>/private); agent containers
    # then get a per-task token file instead of agent_env_file (which is None: no key file exists).
    gateway_secret_file: str | None = None
    # The launcher holding the run's custody; the shim refuses every creation once it is gone.
    launcher_pid: int | None = Field(default=None, gt=0)
    launcher_start_ticks: int | None = Field(default=None, ge=0)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"
