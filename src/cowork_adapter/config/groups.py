"""RunConfig's groups, one frozen Struct per panel of `run --help`: Selection, Agent, Money, Hosts,
Disk, Provider, Image, Limits. Each field is named as its flag (dashes as underscores) and no two groups
share a name. Their values are checked by config/fields.py when RunConfig is built, never here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from ..defaults import (
    DEFAULT_API_KEY_ENV,
    DEFAULT_CAMPAIGN_NAME,
    DEFAULT_CPUS,
    DEFAULT_GATEWAY_MAX_TOKENS,
    DEFAULT_GATEWAY_UNKNOWN_COST_USD,
    DEFAULT_MAX_DAEMON_PING_SEC,
    DEFAULT_MAX_LOAD_PER_CPU,
    DEFAULT_MEMORY_BYTES,
    DEFAULT_METER_URL,
    DEFAULT_MIN_MEM_AVAILABLE_BYTES,
    DEFAULT_MODEL,
    GIB,
    AdmissionLimits,
)
from ..errors import Refusal
from ..vocab import REFERENCE_ENGINES, Capability, EngineKind
from .fields import parse_docker_size

# ---- the groups, one per panel of the CLI's `run --help` ---------------------------------------------
# A field's name inside its group is its flag's name (dashes as underscores), and no two groups share
# a name: the checks (fields.py, checks.py), their sentences (`flag_name`) and `with_changes` find a value by that name.


class Selection(msgspec.Struct, frozen=True, kw_only=True):
    """What to run (panel Selection)."""

    tasks: tuple[str, ...] = ()
    task_file: Path | None = None
    # Resolved by from_flags (no flag): the --task ids, then the file's; None means every task.
    task_ids: tuple[str, ...] | None = None
    resume_from: tuple[Path, ...] = ()
    concurrency: int = 1
    # How many times every selected task runs, each trial a run root of its own (run/trials.py).
    trials: int = 1
    # A task_validity.json from `qualify` (the report then also scores the valid tasks).
    task_validity: Path | None = None


class Agent(msgspec.Struct, frozen=True, kw_only=True):
    """How the agent runs (panel Agent): what recovery compares across ancestors (applied_config)."""

    max_steps: int = 100
    task_timeout: int = 3600
    mcp_tool_timeout: int = 300
    model: str = DEFAULT_MODEL
    engine: str = "ouroboros"
    effort: str = "high"
    review_effort: str = "high"
    review_slots: int = 3
    task_review_mode: Literal["off", "auto", "required"] = "required"
    review_enforcement: Literal["advisory", "blocking"] = "blocking"
    review_max_cycles: str = "2"
    safety_mode: Literal["full", "light", "off"] = "off"
    runtime_mode: Literal["light", "advanced", "pro"] = "pro"
    max_workers: int = 4
    subagents: bool = False
    subagent_depth: int = 3  # recorded as 0 without --subagents
    per_task_cost_usd: float = 25.0
    # Shown in the Mode panel (its long name fits 80 columns there), but it changes how the agent's
    # task is graded and recovery compares it: it belongs with the agent.
    diagnostic_eval_on_truncation: bool = False

    @property
    def spends_nothing(self) -> bool:
        """oracle or nop: task containers run, no model is called, no key, meter or campaign is used."""
        return self.engine in REFERENCE_ENGINES

    @property
    def engine_kind(self) -> EngineKind:
        if self.engine in REFERENCE_ENGINES:
            return EngineKind(self.engine)
        return EngineKind.OUROBOROS if self.engine == EngineKind.OUROBOROS.value else EngineKind.UPSTREAM

    @property
    def upstream_entry(self) -> str | None:
        """The entry file of an `upstream:<entry>` engine, else None."""
        return self.engine.partition(":")[2] if self.engine_kind is EngineKind.UPSTREAM else None


class Money(msgspec.Struct, frozen=True, kw_only=True):
    """The campaign, the run's bounds, the meter and the key's headroom (panel Money).

    No amount is ever assumed: the three bounds are None until given, and a paid run takes what it
    lacks from the campaign it joins (run/spending.resolve_money), or is refused."""

    campaign_file: Path | None = None
    # The campaign in PostgreSQL instead (several hosts, one campaign): a postgresql:// URL without
    # a password (libpq reads PGPASSWORD or ~/.pgpass), and the campaign's name in that database.
    campaign_db: str | None = None
    campaign_name: str = DEFAULT_CAMPAIGN_NAME
    new_campaign: bool = False  # the operator's consent to create a missing campaign (a new usage baseline)
    campaign_budget_usd: float | None = None
    prior_spend_usd: float = 0.0
    budget_usd: float | None = None
    budget_reserve_usd: float | None = None
    meter_blindness_sec: float = 30.0
    meter_url: str = DEFAULT_METER_URL
    min_key_usd: float = 20.0

    @property
    def has_campaign(self) -> bool:
        return self.campaign_file is not None or self.campaign_db is not None

    def campaign_location(self) -> str:
        """How messages name the campaign: its file, or its database and name."""
        if self.campaign_db is not None:
            return f"{self.campaign_db} campaign {self.campaign_name!r}"
        return str(self.campaign_file)


# The money flags (campaign, budget, meter, key headroom): a reference engine (oracle, nop) spends
# nothing, so any of them with one is a refusal rather than a silently ignored promise. All of Money
# but --new-campaign, which has its own sentence (only meaningful with a campaign); in the order a
# refusal names the first one given.
MONEY_FIELDS = tuple(name for name in Money.__struct_fields__ if name != "new_campaign")


class Hosts(msgspec.Struct, frozen=True, kw_only=True):
    """One host of a campaign several hosts run together (panel Hosts; campaign/shared.py)."""

    shared_campaign: bool = False
    # Tasks come from the database's claims in batches of claim_batch; the host run's lease is host_lease_sec.
    claim_batch: int = 2
    host_lease_sec: float = 60.0
    # Admission by load (host/admission.py): a shared host claims a batch only while these hold.
    max_load_per_cpu: float = DEFAULT_MAX_LOAD_PER_CPU
    min_mem_available_gib: float = DEFAULT_MIN_MEM_AVAILABLE_BYTES / GIB
    max_daemon_ping_sec: float = DEFAULT_MAX_DAEMON_PING_SEC

    def admission_limits(self) -> AdmissionLimits:
        """The admission limits of the flags (checked first: AdmissionLimits refuses NaN itself)."""
        return AdmissionLimits(
            max_load_per_cpu=self.max_load_per_cpu,
            min_mem_available_bytes=int(self.min_mem_available_gib * GIB),
            max_daemon_ping_sec=self.max_daemon_ping_sec,
        )


class Disk(msgspec.Struct, frozen=True, kw_only=True):
    """Free-space reserves (panel Disk): on the resource root, and on /."""

    min_free_gib: float = 200.0
    min_root_free_gib: float = 40.0
    # What one task may leave in its dump while it runs (runroot/dump_meter.py): over any of them
    # the task's containers are stopped and its row is agent_failed, flagged dump_over_bound.
    dump_max_gib: float = 8.0
    dump_max_entries: int = 200_000
    dump_max_depth: int = 128


class Provider(msgspec.Struct, frozen=True, kw_only=True):
    """The model provider, the key's variable and route, the run's gateway (panel Provider).

    The key itself only ever comes from the environment. Where it goes (docs/security.md, the key's
    path): by default (the OpenRouter route) the run's gateway serves TLS as openrouter.ai and no
    container holds the key (gateway/tls.py); --llm-gateway serves an OpenAI-compatible face
    instead; --key-in-agent is the seed's own path."""

    or_provider: str = ""
    openai_compatible_base_url: str = ""
    api_key_env: str = DEFAULT_API_KEY_ENV
    credential_setting: str = DEFAULT_API_KEY_ENV
    llm_gateway: bool = False
    key_in_agent: bool = False
    llm_gateway_host: str = ""
    # Hidden, for test beds: where the default route's gateway forwards (else OpenRouter), and, with
    # --key-in-agent, a stand-in serving as openrouter.ai that agent containers reach (its address)
    # and trust (its CA bundle): the seed's path measured against the same stand-in.
    provider_upstream_url: str = ""
    provider_standin_address: str = ""
    provider_standin_bundle: Path | None = None
    # The gateway's caps (gateway/policy.py): output tokens one request may ask for (clamped to it), and
    # what a forwarded request whose answer carries no cost figure is counted at.
    llm_gateway_max_tokens: int = DEFAULT_GATEWAY_MAX_TOKENS
    llm_gateway_unknown_cost_usd: float = DEFAULT_GATEWAY_UNKNOWN_COST_USD


class Image(msgspec.Struct, frozen=True, kw_only=True):
    """The official image and the derived one (panel Image)."""

    base_image: str | None = None  # cowork-pack:<bench_commit[:7]> when not given (never None once built)
    image: str | None = None  # resolved by the launcher (cowork-ouroboros:<seed[:12]>-<commit[:7]>-<entry[:8]>)
    build_image: bool = False


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """Per-container limits (panel Container limits). None = the default, fitted to the daemon."""

    cpus: float | None = None
    memory: str | None = None
    pids_limit: int = 512
    # Issue 37: what of one agent exec's output reaches the runner's task log (custody/agent_exec.py),
    # and the capabilities a run keeps that the shim would drop (custody/container_caps.py).
    agent_output_cap_mib: int = 32
    container_cap_add: tuple[Capability, ...] = ()
    # Issue 38: run on a daemon that enforces no limits (host/daemon_kind.py); compared and disclosed when given.
    accept_unenforced_limits: bool = False

    @property
    def memory_bytes(self) -> int:
        """The memory limit; DEFAULT_MEMORY_BYTES until `fit_to_daemon` has fitted an unset --memory."""
        return DEFAULT_MEMORY_BYTES if self.memory is None else parse_docker_size(self.memory)

    @property
    def memory_swap_bytes(self) -> int:
        """Equal to the memory limit: containers get no swap on top of it."""
        return self.memory_bytes

    def fit_to_daemon(self, daemon_cpus: int, daemon_memory_bytes: int, daemon: str | None = None) -> Limits:
        """These limits settled against the daemon's resources (docker info NCPU, MemTotal).

        An unset --cpus / --memory becomes the smaller of the default and what the daemon has, so
        the applied configuration records the value every container gets (and a resumed run on
        the same daemon derives the same one). An explicit value above the daemon's is a Refusal:
        Docker would refuse (CPUs) or never enforce (memory) it, and only at container creation.
        """
        where = f"the Docker daemon at {daemon}" if daemon else "the Docker daemon"
        if self.cpus is not None and self.cpus > daemon_cpus:
            raise Refusal(
                "limits",
                f"--cpus {self.cpus:g} is more than the {daemon_cpus} CPUs of {where}; "
                f"pass --cpus {daemon_cpus} or less.",
            )
        if self.memory is not None and self.memory_bytes > daemon_memory_bytes:
            raise Refusal(
                "limits",
                f"--memory {self.memory} is more than the {daemon_memory_bytes / (1 << 30):.1f} GiB "
                f"of memory of {where}; pass a smaller --memory.",
            )
        cpus = float(min(DEFAULT_CPUS, daemon_cpus)) if self.cpus is None else self.cpus
        memory = str(min(DEFAULT_MEMORY_BYTES, daemon_memory_bytes)) if self.memory is None else self.memory
        return msgspec.structs.replace(self, cpus=cpus, memory=memory)


# The groups by their name in RunConfig, in the order their fields are checked.
GROUPS: dict[str, type[msgspec.Struct]] = {
    "selection": Selection,
    "agent": Agent,
    "money": Money,
    "hosts": Hosts,
    "disk": Disk,
    "provider": Provider,
    "image": Image,
    "limits": Limits,
}
