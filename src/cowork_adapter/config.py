"""RunConfig: every `run` flag, validated once and frozen.

Build it with `RunConfig.from_flags(...)`: that turns every invalid value or combination into a
Refusal with one sentence (stage "flags" unless a more specific one applies) and resolves the
explicit task selection. Direct construction (`RunConfig(...)`) checks the same rules and raises
InvalidFlag (a ValueError) with the same sentence. Nothing here touches the disk except reading a
`--task-file` or `--task-validity`.

RunConfig is a frozen msgspec Struct, like every record the host writes (schemas/record.py), though
it is never written as such: the manifest records `applied_config()` and `budget_record`. It is made
of frozen groups, one per panel of `run --help` (Selection, Agent, Money, Hosts, Disk, Provider,
Image, Limits), each field named as its flag. Its rules are this module's functions (the one place
a `run` flag is checked), run field by field in declaration order, the groups' fields in place of
each group, and then across fields: the sentence given is the first problem's (the order and the
sentences pydantic, which described it before, gave).
"""

from __future__ import annotations

import copy
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path, PurePath
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

import msgspec

from .benchmark.selection import explicit_selection
from .campaign.db_url import PASSWORD_SENTENCE, password_part
from .defaults import (  # noqa: F401  (re-exported: config is where readers look for them)
    AGENT_CONTAINER_SLEEP_SEC,
    COMMIT_SHA,
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
    DOCKER_MIN_MEMORY_BYTES,
    ENV_NAME,
    GIB,
    MIN_KEY_LEN_FOR_SUBSTRING,
    PINNED_BENCH_COMMIT,
    PROBE_CHOICES,
    REVIEW_ENFORCEMENTS,
    RUNTIME_MODES,
    SAFETY_MODES,
    TASK_REVIEW_MODES,
    TASK_TIMEOUT_WARN_SEC,
    UPSTREAM_ENTRY,
    WORD,
    AdmissionLimits,
    InvalidFlag,
    check_env_name,
    check_http_url,
    flag_name,
    refuse_key_on_command_line,
)
from .errors import Refusal
from .schemas.validity import read_validity
from .vocab import REFERENCE_ENGINES, Capability, EngineKind, KeyRoute, ProbeKind

# Numeric rules, one table: field -> (operator, bound). Floats must also be finite.
_NUMERIC_RULES: dict[str, tuple[str, float]] = {
    "concurrency": (">=", 1),
    "max_steps": (">=", 1),
    "task_timeout": (">", 0),
    "mcp_tool_timeout": (">", 0),
    "review_slots": (">=", 0),
    "max_workers": (">=", 1),
    "subagent_depth": (">=", 0),
    "per_task_cost_usd": (">", 0),
    "llm_gateway_max_tokens": (">=", 1),
    "llm_gateway_unknown_cost_usd": (">", 0),
    "budget_usd": (">", 0),
    "campaign_budget_usd": (">", 0),
    "prior_spend_usd": (">=", 0),
    "budget_reserve_usd": (">=", 0),
    "meter_blindness_sec": (">", 20),  # more than one 15 s poll plus one 5 s read
    "min_free_gib": (">=", 0),
    "min_root_free_gib": (">=", 0),
    "dump_max_gib": (">", 0),
    "dump_max_entries": (">=", 1),
    "dump_max_depth": (">=", 1),
    "min_key_usd": (">=", 0),
    "cpus": (">", 0),
    "pids_limit": (">=", 16),
    "agent_output_cap_mib": (">=", 1),
}
_PATH_FIELDS = (
    "repo_dir",
    "bench_root",
    "resource_root",
    "run_root",
    "task_file",
    "campaign_file",
    "task_validity",
    "provider_standin_bundle",
)


# ---- the groups, one per panel of the CLI's `run --help` ---------------------------------------------
# A field's name inside its group is its flag's name (dashes as underscores), and no two groups share
# a name: the checks below, their sentences (`flag_name`) and `with_changes` find a value by that name.


class Selection(msgspec.Struct, frozen=True, kw_only=True):
    """What to run (panel Selection)."""

    tasks: tuple[str, ...] = ()
    task_file: Path | None = None
    # Resolved by from_flags (no flag): the --task ids, then the file's; None means every task.
    task_ids: tuple[str, ...] | None = None
    resume_from: tuple[Path, ...] = ()
    concurrency: int = 1
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


# The RunConfig fields that applied_config() leaves out, each with why: where the run is, what it may
# spend, which tasks it runs, how it is operated. Every other field changes the agent's world or its
# money and is compared across resumed and merged runs (runroot/identity.py); tests/unit/test_identity.py
# walks every field and fails on one that is in neither, so a new flag must be placed here or compared.
IDENTITY_EXEMPT: dict[str, str] = {
    "repo_dir": "where the seed is; its head is compared (manifest.seed.head)",
    "bench_root": "where the benchmark is; its commit and the clone's pin check are compared",
    "docker_host": "where containers run; the limits they get are compared",
    "resource_root": "where run roots go",
    "run_root": "where this run writes",
    "selection.tasks": "which tasks: the ledger compares tasks, not configurations",
    "selection.task_file": "which tasks",
    "selection.task_ids": "which tasks",
    "selection.resume_from": "the ancestry itself",
    "selection.concurrency": "how many tasks at once; each task's container limits are compared",
    "selection.task_validity": "which tasks the report also scores over",
    "money": "how much may be spent, and where it is counted; the per-task limit is compared",
    "hosts": "how several hosts share a campaign",
    "disk": "free-space reserves on the host",
    "provider.api_key_env": "which variable holds the key (never the key)",
    "provider.llm_gateway_host": "where the gateway listens; the route is compared (key_route)",
    "provider.llm_gateway": "compared as key_route",
    "provider.key_in_agent": "compared as key_route",
    "provider.provider_upstream_url": "a test bed's stand-in: compared as provider_standin",
    "provider.provider_standin_address": "a test bed's stand-in: compared as provider_standin",
    "provider.provider_standin_bundle": "a test bed's stand-in: compared as provider_standin",
    "image": "the image's immutable ID is compared (manifest.image.id)",
    "dry_run": "a dry run hands no task to the runner",
    "allow_dirty_seed": "a dirty seed's run is never reportable (manifest.seed.reportable)",
    "probe": "a probe hands no task to the runner",
    "accept_environment_blocked": "which tasks run; blocked tasks stay in every denominator",
    "inventory_from": "qualify's reuse of an inventory taken on the same image",
    "stop_path": "how a stop removes containers",
    "limits.agent_output_cap_mib": "what of the agent exec's output reaches the runner's log (its Status line always does)",
}


class RunConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Every `run` flag, validated and frozen, in the CLI's groups. Paths are absolute; floats finite.

    Where things are and the run's mode stay at the top: nearly every module reads run_root or
    docker_host, and dry_run / probe say what kind of run this is (is_paid), so a group for them
    would only lengthen every access without keeping any function to one part."""

    # Where things are (panel Locations).
    repo_dir: Path
    bench_root: Path
    bench_commit: str = PINNED_BENCH_COMMIT
    docker_host: str
    resource_root: Path | None = None  # the run root's parent when not given (never None once built)
    run_root: Path
    selection: Selection = msgspec.field(default_factory=Selection)
    agent: Agent = msgspec.field(default_factory=Agent)
    money: Money = msgspec.field(default_factory=Money)
    hosts: Hosts = msgspec.field(default_factory=Hosts)
    disk: Disk = msgspec.field(default_factory=Disk)
    provider: Provider = msgspec.field(default_factory=Provider)
    image: Image = msgspec.field(default_factory=Image)
    # Mode.
    dry_run: bool = False
    allow_dirty_seed: bool = False
    probe: ProbeKind | None = None
    accept_environment_blocked: bool = False
    # Set by `qualify` only (no flag): the nop pass reuses the oracle pass's inventory from this run
    # root when it was taken on the same image and covers every server the selection needs.
    inventory_from: Path | None = None
    limits: Limits = msgspec.field(default_factory=Limits)
    # How a stop removes the run's containers (vocab.StopPath). A hidden flag: the old path
    # (runner_trap) exists only so bench_stop_latency.py can measure it beside the fast one.
    stop_path: Literal["fast", "runner_trap"] = "fast"

    def __post_init__(self) -> None:
        # Built in code, a Struct is not checked by msgspec: convert and check every field here, then
        # the combinations. Each rule leaves a checked value unchanged, so a second pass is harmless.
        for name, value in _grouped(_checked_fields(self.flags())).items():
            msgspec.structs.force_setattr(self, name, value)
        self._check_combinations()

    def flags(self) -> dict[str, Any]:
        """Every value by its flag's field name, the groups flattened (names are unique across groups)."""
        flat: dict[str, Any] = {}
        for name in self.__struct_fields__:
            value = getattr(self, name)
            flat.update(msgspec.structs.asdict(value) if name in GROUPS else {name: value})
        return flat

    # ---- combinations ----

    def _check_combinations(self) -> None:
        money, hosts = self.money, self.hosts
        if self.spends_nothing:
            given, default = msgspec.structs.asdict(money), msgspec.structs.asdict(Money())
            changed = [name for name in MONEY_FIELDS if given[name] != default[name]]
            if changed:
                raise InvalidFlag(reference_money_sentence(self.agent.engine, changed[0]))
        if money.campaign_file is not None and money.campaign_db is not None:
            raise InvalidFlag("give --campaign-file or --campaign-db, not both: a campaign lives in one store.")
        if money.campaign_db is not None:
            check_campaign_db_url(money.campaign_db)
        name = money.campaign_name
        if not 1 <= len(name.strip()) <= 200 or name != name.strip():
            raise InvalidFlag("--campaign-name must be 1 to 200 characters, without leading or trailing spaces.")
        if name != DEFAULT_CAMPAIGN_NAME and money.campaign_db is None:
            raise InvalidFlag("--campaign-name is only meaningful with --campaign-db.")
        shared_problem = check_shared_flags(hosts, money, self.selection)
        if shared_problem:
            raise InvalidFlag(shared_problem)
        if self.is_paid and not money.has_campaign:
            raise InvalidFlag("a paid run needs --campaign-file (or use --dry-run or --probe).")
        if money.prior_spend_usd > 0 and not money.has_campaign:
            raise InvalidFlag("--prior-spend-usd is only meaningful with --campaign-file.")
        if self.provider.llm_gateway and self.spends_nothing:
            raise InvalidFlag(f"--llm-gateway serves model calls, and the {self.agent.engine} engine makes none.")
        self._check_key_route()
        if money.new_campaign and not money.has_campaign:
            raise InvalidFlag("--new-campaign is only meaningful with --campaign-file.")
        if not_below(money.budget_reserve_usd, money.campaign_budget_usd):
            raise InvalidFlag(
                f"--budget-reserve-usd ({money.budget_reserve_usd:g}) must be below "
                f"--campaign-budget-usd ({money.campaign_budget_usd:g})."
            )
        if _inside(self.run_root, self.repo_dir):
            raise InvalidFlag("--run-root must be outside the seed checkout (--repo-dir).")
        if _inside(self.run_root, self.bench_root):
            raise InvalidFlag("--run-root must be outside the benchmark checkout (--bench-root).")
        if money.campaign_file is not None and _inside(money.campaign_file, self.repo_dir):
            raise InvalidFlag("--campaign-file must be outside the seed checkout (--repo-dir).")
        if self.run_root in self.selection.resume_from:
            raise InvalidFlag("--resume-from must name earlier run roots, not this run's --run-root.")

    def _check_key_route(self) -> None:
        provider = self.provider
        if provider.key_in_agent and provider.llm_gateway:
            raise InvalidFlag(
                "give --key-in-agent or --llm-gateway, not both: the key is either in the "
                "agent containers or only in the launcher."
            )
        if provider.key_in_agent and self.spends_nothing:
            raise InvalidFlag(
                f"--key-in-agent gives the agent the provider key, and the {self.agent.engine} engine uses none."
            )
        gateway = "a gateway serves the run's model calls (the default OpenRouter route, or --llm-gateway)"
        if provider.llm_gateway_host and not self.served_by_gateway:
            raise InvalidFlag(f"--llm-gateway-host is only meaningful when {gateway}.")
        if provider.llm_gateway_max_tokens != DEFAULT_GATEWAY_MAX_TOKENS and not self.served_by_gateway:
            raise InvalidFlag(f"--llm-gateway-max-tokens is only meaningful when {gateway}.")
        if provider.llm_gateway_unknown_cost_usd != DEFAULT_GATEWAY_UNKNOWN_COST_USD and not self.served_by_gateway:
            raise InvalidFlag(f"--llm-gateway-unknown-cost-usd is only meaningful when {gateway}.")
        if provider.provider_upstream_url and not self.provider_tls:
            raise InvalidFlag(
                "--provider-upstream-url is only meaningful on the default OpenRouter route "
                "(no --key-in-agent, --llm-gateway or --openai-compatible-base-url)."
            )
        if bool(provider.provider_standin_address) != (provider.provider_standin_bundle is not None):
            raise InvalidFlag("--provider-standin-address and --provider-standin-bundle go together.")
        if provider.provider_standin_address and not (
            provider.key_in_agent and not provider.openai_compatible_base_url
        ):
            raise InvalidFlag(
                "--provider-standin-address is only meaningful with --key-in-agent on the OpenRouter route."
            )

    # ---- derived views ----

    @property
    def provider_tls(self) -> bool:
        """The default route: the engine keeps OpenRouter's URL, which the run's gateway serves over TLS
        (gateway/tls.py); no container holds the key. Not for a reference engine (no model calls),
        --key-in-agent (the seed's path), --llm-gateway or an OpenAI-compatible endpoint."""
        provider = self.provider
        return (
            not self.spends_nothing
            and not provider.key_in_agent
            and not provider.llm_gateway
            and not provider.openai_compatible_base_url
        )

    @property
    def key_route(self) -> KeyRoute:
        """Where the key is and how the agent's model calls reach the provider (vocab.KeyRoute)."""
        if self.spends_nothing:
            return KeyRoute.NONE
        if self.provider.llm_gateway:
            return KeyRoute.GATEWAY_OPENAI
        return KeyRoute.GATEWAY_OPENROUTER if self.provider_tls else KeyRoute.KEY_IN_AGENT

    @property
    def served_by_gateway(self) -> bool:
        """Whether a paid run's model calls go through the run's gateway (either face)."""
        return self.provider.llm_gateway or self.provider_tls

    @property
    def is_paid(self) -> bool:
        """A run that may call the model: neither a dry run, a probe, nor a reference engine."""
        return not self.dry_run and self.probe is None and not self.spends_nothing

    @property
    def spends_nothing(self) -> bool:
        """oracle or nop (Agent.spends_nothing): no model, key, meter or campaign."""
        return self.agent.spends_nothing

    def fit_to_daemon(self, daemon_cpus: int, daemon_memory_bytes: int, daemon: str | None = None) -> RunConfig:
        """This config with its container limits fitted to the daemon (Limits.fit_to_daemon)."""
        return self.with_changes(limits=self.limits.fit_to_daemon(daemon_cpus, daemon_memory_bytes, daemon))

    def with_changes(self, **changes: Any) -> RunConfig:
        """A copy with `changes`: values the program settled after the flags were checked (limits
        fitted to the daemon, money bounds from the campaign, the gateway's URL, the selection). They
        are not checked again: each caller checks what it sets and refuses with its own stage and
        sentence (run/spending.resolve_money, fit_to_daemon).

        A change names a top-level field, a whole group, or a field inside a group by its own name
        (unique across groups): `with_changes(budget_usd=5.0)` changes `money.budget_usd`."""
        changed = copy.copy(self)  # a Struct's copy runs no __post_init__
        inside: dict[str, dict[str, Any]] = {}
        for name, value in changes.items():
            group = _GROUP_OF.get(name)
            if name in GROUPS and isinstance(value, GROUPS[name]):  # a whole group (`image` is also a field)
                msgspec.structs.force_setattr(changed, name, value)
            elif group is not None:
                inside.setdefault(group, {})[name] = value
            elif name in self.__struct_fields__:
                msgspec.structs.force_setattr(changed, name, value)
            else:
                raise TypeError(f"RunConfig has no field {name!r}")
        for group, values in inside.items():
            msgspec.structs.force_setattr(changed, group, msgspec.structs.replace(getattr(changed, group), **values))
        return changed

    def applied_config(self) -> dict[str, Any]:
        """What recovery compares across ancestors: how the agent ran, not where or for how much."""
        agent, limits, provider = self.agent, self.limits, self.provider
        return {
            "bench_commit": self.bench_commit,
            "model": agent.model,
            "engine": agent.engine,
            "max_steps": agent.max_steps,
            "task_timeout": agent.task_timeout,
            "mcp_tool_timeout": agent.mcp_tool_timeout,
            "effort": agent.effort,
            "review_effort": agent.review_effort,
            "review_slots": agent.review_slots,
            "task_review_mode": agent.task_review_mode,
            "review_enforcement": agent.review_enforcement,
            "review_max_cycles": agent.review_max_cycles,
            "safety_mode": agent.safety_mode,
            "runtime_mode": agent.runtime_mode,
            "max_workers": agent.max_workers,
            "subagents": agent.subagents,
            "subagent_depth": agent.subagent_depth,
            "per_task_cost_usd": agent.per_task_cost_usd,
            "diagnostic_eval_on_truncation": agent.diagnostic_eval_on_truncation,
            "cpus": limits.cpus,
            "memory_bytes": limits.memory_bytes,
            "pids_limit": limits.pids_limit,
            "or_provider": provider.or_provider,
            "openai_compatible_base_url": provider.openai_compatible_base_url,
            "credential_setting": provider.credential_setting,
            # Where the key is and how model calls reach the provider, and what answers them: a stand-in
            # provider (the hidden test-bed flags) is another world than the provider, whatever its port.
            "key_route": self.key_route.value,
            "provider_standin": bool(provider.provider_upstream_url or provider.provider_standin_address),
            # The gateway's caps shape every request and price every answer without a cost figure.
            **(
                {
                    "llm_gateway_max_tokens": provider.llm_gateway_max_tokens,
                    "llm_gateway_unknown_cost_usd": provider.llm_gateway_unknown_cost_usd,
                }
                if self.served_by_gateway
                else {}
            ),
            # Only when given: capabilities kept beyond the default set change how the agent ran.
            **(
                {"container_cap_add": sorted(str(c) for c in limits.container_cap_add)}
                if limits.container_cap_add
                else {}
            ),
        }

    def warnings(self) -> list[str]:
        """Sentences the CLI prints on stderr before running (none of them stops the run)."""
        notes = []
        if self.agent.task_timeout > TASK_TIMEOUT_WARN_SEC:
            notes.append(
                f"--task-timeout {self.agent.task_timeout} is close to or above the {AGENT_CONTAINER_SLEEP_SEC} s "
                "the upstream agent container lives; the agent phase may lose its container."
            )
        if self.provider.openai_compatible_base_url and self.provider.credential_setting == DEFAULT_API_KEY_ENV:
            notes.append(
                "--openai-compatible-base-url is set but the key goes to OPENROUTER_API_KEY; "
                "the compatible endpoint reads --credential-setting OPENAI_COMPATIBLE_API_KEY."
            )
        if self.allow_dirty_seed:
            notes.append("--allow-dirty-seed: this run is a development diagnostic, not a reportable result.")
        return notes

    # ---- construction from the command line ----

    @classmethod
    def from_flags(
        cls,
        *,
        argv: Sequence[str] | None = None,
        environ: Mapping[str, str] | None = None,
        **flags: Any,
    ) -> RunConfig:
        """Validate `flags` (flag field names, as the CLI parses them) into a RunConfig, or raise one Refusal.

        `argv` (when given) is checked for the provider key named by `api_key_env` in `environ`.
        `prior_spend_usd=None` means the flag was not given; given without `campaign_file` it is
        refused even when 0. The explicit task selection is read here (`tasks` + `task_file`).
        """
        if argv is not None:
            refuse_key_on_command_line(argv, environ or {}, str(flags.get("api_key_env") or DEFAULT_API_KEY_ENV))
            if flags.get("engine") in REFERENCE_ENGINES:
                refuse_money_flags(str(flags["engine"]), argv)
        flags = {k: v for k, v in flags.items()}
        if flags.get("engine") in REFERENCE_ENGINES and flags.get("prior_spend_usd") is not None:
            raise Refusal("flags", reference_money_sentence(str(flags["engine"]), "prior_spend_usd"))
        if flags.get("prior_spend_usd") is None:
            flags.pop("prior_spend_usd", None)
        elif flags.get("campaign_file") is None and flags.get("campaign_db") is None:
            raise Refusal("flags", "--prior-spend-usd is only meaningful with --campaign-file.")
        for key in ("tasks", "resume_from"):
            if flags.get(key) is None:
                flags.pop(key, None)
            else:
                flags[key] = tuple(flags[key])
        try:
            # The field checks first, with the input as given (a required flag missing, an unknown
            # one), then the construction, which checks the combinations.
            config = cls(**_grouped(_checked_fields(flags)))
        except InvalidFlag as exc:
            raise Refusal(exc.stage, exc.sentence) from None
        selected = config.selection
        if selected.task_validity is not None:
            check_task_validity(selected.task_validity, config.bench_commit)
        task_ids = explicit_selection(selected.tasks, selected.task_file)
        if task_ids is None:
            return config
        return config.with_changes(task_ids=tuple(task_ids))


# Each group's fields by name -> the group's name in RunConfig (the one place that knows the routing).
_GROUP_OF: dict[str, str] = {field: group for group, kind in GROUPS.items() for field in kind.__struct_fields__}


def _grouped(flat: Mapping[str, Any]) -> dict[str, Any]:
    """RunConfig's keyword arguments from checked flat values: each group built from its own fields."""
    top = {name: value for name, value in flat.items() if name not in _GROUP_OF}
    for group, kind in GROUPS.items():
        top[group] = kind(**{name: flat[name] for name in kind.__struct_fields__ if name in flat})
    return top


def not_below(reserve: float | None, ceiling: float | None) -> bool:
    """True when both are known and the reserve leaves nothing of the ceiling to spend."""
    return reserve is not None and ceiling is not None and reserve >= ceiling


def check_task_validity(path: Path, bench_commit: str) -> None:
    """--task-validity must be qualify's table for this benchmark commit."""
    table = read_validity(path)
    if table.bench_commit != bench_commit:
        raise Refusal(
            "flags",
            f"--task-validity {path} qualifies benchmark commit {table.bench_commit[:12]}, "
            f"not this run's {bench_commit[:12]}; qualify this commit first.",
        )


def reference_money_sentence(engine: str, field: str) -> str:
    return f"--engine {engine} spends nothing and takes no campaign, budget or meter flag; remove {flag_name(field)}."


def refuse_money_flags(engine: str, argv: Sequence[str]) -> None:
    """A money flag on the command line with a reference engine is refused, even at its default value."""
    names = {flag_name(f): f for f in MONEY_FIELDS}
    for element in argv:
        field = names.get(element.split("=", 1)[0])
        if field is not None:
            raise Refusal("flags", reference_money_sentence(engine, field))


def check_shared_flags(hosts: Hosts, money: Money, selection: Selection) -> str | None:
    """The one sentence that refuses a --shared-campaign combination, or None."""
    if not hosts.shared_campaign:
        if hosts.claim_batch != 2 or hosts.host_lease_sec != 60.0:
            return "--claim-batch and --host-lease-sec are only meaningful with --shared-campaign."
        if (hosts.max_load_per_cpu, hosts.min_mem_available_gib, hosts.max_daemon_ping_sec) != (
            DEFAULT_MAX_LOAD_PER_CPU,
            DEFAULT_MIN_MEM_AVAILABLE_BYTES / GIB,
            DEFAULT_MAX_DAEMON_PING_SEC,
        ):
            return (
                "--max-load-per-cpu, --min-mem-available-gib and --max-daemon-ping-sec are only meaningful "
                "with --shared-campaign."
            )
        return None
    if money.campaign_db is None:
        return "--shared-campaign needs --campaign-db: the hosts share the campaign through that database."
    if selection.resume_from:
        return "--shared-campaign takes its tasks from the campaign's claims, so --resume-from does not apply."
    if not 1 <= hosts.claim_batch <= 1000:
        return f"--claim-batch must be 1 to 1000, not {hosts.claim_batch}."
    if not (math.isfinite(hosts.host_lease_sec) and 8 <= hosts.host_lease_sec <= 3600):
        return f"--host-lease-sec must be 8 to 3600 seconds, not {hosts.host_lease_sec:g}."
    return check_admission_flags(hosts)


def check_admission_flags(hosts: Hosts) -> str | None:
    """The one sentence that refuses an admission limit, or None. The upper bounds only catch a
    typo (a unit slip); the daemon watch calls the daemon lost long before a 600 s ping."""
    if not (math.isfinite(hosts.max_load_per_cpu) and 0 < hosts.max_load_per_cpu <= 1000):
        return f"--max-load-per-cpu must be more than 0 and at most 1000, not {hosts.max_load_per_cpu:g}."
    if not (math.isfinite(hosts.min_mem_available_gib) and 0 <= hosts.min_mem_available_gib <= 65536):
        return f"--min-mem-available-gib must be 0 to 65536 GiB, not {hosts.min_mem_available_gib:g}."
    if not (math.isfinite(hosts.max_daemon_ping_sec) and 0 < hosts.max_daemon_ping_sec <= 600):
        return f"--max-daemon-ping-sec must be more than 0 and at most 600 seconds, not {hosts.max_daemon_ping_sec:g}."
    return None


def check_campaign_db_url(url: str) -> None:
    """--campaign-db: a postgresql:// URL naming a database, with no password in it (a password in
    argv is visible to every user of the host, like a provider key would be)."""
    try:
        parts = urlsplit(url)
        has_password = password_part(url) is not None
    except ValueError:
        raise InvalidFlag("--campaign-db is not a valid URL.") from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise InvalidFlag("--campaign-db must be a postgresql:// URL.")
    if has_password:
        raise InvalidFlag(PASSWORD_SENTENCE)
    if not parts.path.strip("/"):
        raise InvalidFlag("--campaign-db must name a database (postgresql://HOST[:PORT]/DATABASE).")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


# ---- the field checks -------------------------------------------------------------------------------
# Each field is converted to its declared type (msgspec, lax: "3" for an int, a str for a Path), then
# its rule below, if it has one, runs on the converted value and returns the value kept.

_MISSING_HINTS = {"bench_root": " (or set COWORK_BENCH_ROOT)", "docker_host": " (or set DOCKER_HOST)"}
# Declared optional so the Struct can be built without them; required once derived (_with_derived).
_DERIVED = {"resource_root": Path, "base_image": str}
# How a type mismatch reads, by the type msgspec expected (the words pydantic used).
_EXPECTED = {
    "int": "a valid integer",
    "float": "a valid number",
    "str": "a valid string",
    "bool": "a valid boolean",
    "array": "a valid tuple",
    "Path": "a valid path",
}
# ... and why, by (expected, given).
_WHY = {
    ("int", "str"): ", unable to parse string as an integer",
    ("int", "float"): ", got a number with a fractional part",
    ("float", "str"): ", unable to parse string as a number",
    ("bool", "str"): ", unable to interpret input",
}


def _with_derived(given: Mapping[str, Any]) -> dict[str, Any]:
    """The flags with the defaults that depend on other flags filled in, before any check."""
    data = dict(given)
    if data.get("resource_root") is None and data.get("run_root") is not None:
        data["resource_root"] = Path(data["run_root"]).expanduser().resolve().parent
    if data.get("base_image") is None:
        commit = data.get("bench_commit") or PINNED_BENCH_COMMIT
        data["base_image"] = f"cowork-pack:{str(commit)[:7]}"
    if data.get("probe") == "none":
        data["probe"] = None
    if not data.get("subagents"):
        data["subagent_depth"] = 0  # the depth only means something with subagents on
    return data


def _absolute(name: str, value: Path | None) -> Path | None:
    return None if value is None else value.expanduser().resolve()


def _absolute_ancestors(name: str, value: tuple[Path, ...]) -> tuple[Path, ...]:
    resolved = tuple(p.expanduser().resolve() for p in value)
    if len(set(resolved)) != len(resolved):
        raise InvalidFlag("--resume-from names the same run root twice.")
    return resolved


def _in_range(name: str, value: float | None) -> float | None:
    if value is None:  # unset: --cpus takes the daemon-fitted default, the money bounds the campaign's
        return value
    flag = flag_name(name)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidFlag(f"{flag} must be a finite number, not {value}.")
    op, bound = _NUMERIC_RULES[name]
    ok = value >= bound if op == ">=" else value > bound
    if not ok:
        words = "at least" if op == ">=" else "greater than"
        raise InvalidFlag(f"{flag} must be {words} {bound:g} (got {value:g}).")
    return value


def _docker_host(name: str, value: str) -> str:
    if not value.strip():
        raise InvalidFlag(
            "--docker-host is empty; name the Docker daemon explicitly (or set DOCKER_HOST).", stage="docker_host"
        )
    return value.strip()


def _commit(name: str, value: str) -> str:
    if COMMIT_SHA.fullmatch(value) is None:
        raise InvalidFlag(f"--bench-commit {value!r} is not a full 40-character lowercase commit id.")
    return value


def _engine(name: str, value: str) -> str:
    if value == EngineKind.OUROBOROS.value or value in REFERENCE_ENGINES:
        return value
    kind, _, entry = value.partition(":")
    if kind != EngineKind.UPSTREAM.value or UPSTREAM_ENTRY.fullmatch(entry) is None:
        raise InvalidFlag(
            f"--engine {value!r} must be 'ouroboros', 'oracle', 'nop' or 'upstream:<entry file under /workspace>'."
        )
    return value


def _model(name: str, value: str) -> str:
    if not value or any(ch.isspace() for ch in value):
        raise InvalidFlag(f"--model {value!r} must be a non-empty model id without spaces.")
    return value


def _word(name: str, value: str) -> str:
    if WORD.fullmatch(value) is None:
        raise InvalidFlag(f"{flag_name(name)} {value!r} must be a single word.")
    return value


def _cycles(name: str, value: str) -> str:
    if not value.isascii() or not value.isdigit():
        raise InvalidFlag(f"--review-max-cycles {value!r} must be a whole number such as 2.")
    return str(int(value))


def _env_name(name: str, value: str) -> str:
    return check_env_name(flag_name(name), value)


def _url(name: str, value: str) -> str:
    """--meter-url always; --openai-compatible-base-url when given (empty means OpenRouter)."""
    return check_http_url(flag_name(name), value) if value or name == "meter_url" else ""


_SIZE = re.compile(r"(\d+(?:\.\d+)?) ?([kmgtp])?(?:i?b)?", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


def parse_docker_size(text: str) -> int:
    """Bytes of a Docker size string: `16g`, `512m`, `1.5GiB`, `1024` (binary multipliers)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise InvalidFlag(f"--memory {text!r} is not a Docker size such as 16g or 512m.")
    unit = match.group(2).lower() if match.group(2) else None
    number = float(match.group(1)) * _SIZE_UNITS[unit]
    if number == float("inf"):  # hundreds of digits: no size, and int() of it would raise OverflowError
        raise InvalidFlag(f"--memory {text[:20]!r}... is too large to be a memory size.")
    value = int(number)
    if value < DOCKER_MIN_MEMORY_BYTES:
        raise InvalidFlag(f"--memory {text!r} is below Docker's minimum of 6 MiB.")
    return value


def _memory(name: str, value: str | None) -> str | None:
    if value is None:
        return value
    parse_docker_size(value)
    return value.strip()


_RULES: dict[str, Callable[[str, Any], Any]] = {
    **dict.fromkeys(_PATH_FIELDS, _absolute),
    "resume_from": _absolute_ancestors,
    **dict.fromkeys(_NUMERIC_RULES, _in_range),
    "docker_host": _docker_host,
    "bench_commit": _commit,
    "engine": _engine,
    "model": _model,
    **dict.fromkeys(("effort", "review_effort", "runtime_mode"), _word),
    "review_max_cycles": _cycles,
    **dict.fromkeys(("api_key_env", "credential_setting"), _env_name),
    **dict.fromkeys(("meter_url", "openai_compatible_base_url", "provider_upstream_url"), _url),
    "memory": _memory,
}


@functools.cache
def _fields() -> tuple[msgspec.structs.FieldInfo, ...]:
    """Every flag's field, the groups' fields in place of each group, in declaration order."""
    flat: list[msgspec.structs.FieldInfo] = []
    for field in msgspec.structs.fields(RunConfig):
        kind = GROUPS.get(field.name)
        flat.extend(msgspec.structs.fields(kind) if kind is not None else (field,))
    return tuple(flat)


def _checked_fields(given: Mapping[str, Any]) -> dict[str, Any]:
    """Every flag field of RunConfig converted and checked, in declaration order, or InvalidFlag with the
    first problem's sentence: a missing required flag, a value of the wrong type, a rule broken; then
    a name that is no flag. Defaults are checked too."""
    data = _with_derived(given)
    checked = {}
    for field in _fields():
        value = data.get(field.name, field.default)
        if value is msgspec.NODEFAULT or (field.name in _DERIVED and value is None):
            raise InvalidFlag(f"{flag_name(field.name)} is required{_MISSING_HINTS.get(field.name, '')}.")
        value = _converted(field.name, value, _DERIVED.get(field.name, field.type))
        rule = _RULES.get(field.name)
        if rule is not None:
            try:
                value = rule(field.name, value)
            except InvalidFlag:
                raise
            except ValueError as exc:  # from the standard library (a NUL in a path, a malformed URL)
                raise InvalidFlag(f"{flag_name(field.name)}: value error, {exc}.") from None
        checked[field.name] = value
    unknown = [name for name in data if name not in checked]
    if unknown:
        raise InvalidFlag(f"{flag_name(unknown[0])}: extra inputs are not permitted.")
    return checked


def _as_path(kind: type, value: Any) -> Any:
    if kind is Path and isinstance(value, (str, PurePath)):
        return Path(value)
    raise TypeError(f"Expected `{getattr(kind, '__name__', kind)}`, got `{type(value).__name__}`")


def _converted(name: str, value: Any, kind: Any) -> Any:
    """`value` as the declared type `kind`, or InvalidFlag saying what the flag should be."""
    try:
        return msgspec.convert(value, kind, strict=False, dec_hook=_as_path)
    except msgspec.ValidationError as exc:
        choices = _choices(kind)
        if choices:
            problem = "input should be " + _one_of_words(choices)
        else:
            message = str(exc).split(" - at ")[0]
            expected = re.match(r"Expected `(\w+)[^`]*`, got `(\w+)`", message)  # `str | null`: the first type
            words = _EXPECTED.get(expected.group(1)) if expected else None
            if words and expected:
                problem = f"input should be {words}{_WHY.get((expected.group(1), expected.group(2)), '')}"
            else:
                problem = message[:1].lower() + message[1:]
        raise InvalidFlag(f"{flag_name(name)}: {problem}.") from None


def _choices(kind: Any) -> tuple[str, ...]:
    """The allowed values of a Literal or an Enum field (None aside), else ()."""
    if get_origin(kind) is Literal:
        return tuple(get_args(kind))
    if get_origin(kind) in (Union, UnionType):
        return next((c for c in map(_choices, get_args(kind)) if c), ())
    if isinstance(kind, type) and issubclass(kind, Enum):
        return tuple(str(member.value) for member in kind)
    return ()


def _one_of_words(choices: Sequence[str]) -> str:
    quoted = [f"'{c}'" for c in choices]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
