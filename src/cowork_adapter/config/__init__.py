"""RunConfig: every `run` flag, validated once and frozen.

Build it with `RunConfig.from_flags(...)`: that turns every invalid value or combination into a
Refusal with one sentence (stage "flags" unless a more specific one applies) and resolves the
explicit task selection. Direct construction (`RunConfig(...)`) checks the same rules and raises
InvalidFlag (a ValueError) with the same sentence. Nothing here touches the disk except reading a
`--task-file` or `--task-validity`.

RunConfig is a frozen msgspec Struct, like every record the host writes (schemas/record.py), though
it is never written as such: the manifest records `applied_config()` and `budget_record`. It is made
of frozen groups, one per panel of `run --help` (Selection, Agent, Money, Hosts, Disk, Provider,
Image, Limits), each field named as its flag. Its rules are this package's functions (the one place
a `run` flag is checked), run field by field in declaration order, the groups' fields in place of
each group, and then across fields: the sentence given is the first problem's (the order and the
sentences pydantic, which described it before, gave).

This module holds RunConfig itself; its parts are beside it: groups.py (the groups), fields.py (the
field checks), checks.py (the checks across fields), identity.py (the fields runs may differ in). The
flags' defaults are defaults.py's.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from ..benchmark.selection import explicit_selection
from ..defaults import (
    AGENT_CONTAINER_SLEEP_SEC,
    DEFAULT_API_KEY_ENV,
    DEFAULT_CAMPAIGN_NAME,
    DEFAULT_GATEWAY_MAX_TOKENS,
    DEFAULT_GATEWAY_UNKNOWN_COST_USD,
    PINNED_BENCH_COMMIT,
    TASK_TIMEOUT_WARN_SEC,
    InvalidFlag,
    refuse_key_on_command_line,
)
from ..errors import Refusal
from ..vocab import REFERENCE_ENGINES, KeyRoute, ProbeKind
from .checks import (
    check_admission_flags,
    check_campaign_db_url,
    check_shared_flags,
    check_task_validity,
    not_below,
    reference_money_sentence,
    refuse_money_flags,
)
from .fields import checked_fields, parse_docker_size
from .groups import GROUPS, MONEY_FIELDS, Agent, Disk, Hosts, Image, Limits, Money, Provider, Selection
from .identity import IDENTITY_EXEMPT

__all__ = [
    "GROUPS",
    "IDENTITY_EXEMPT",
    "MONEY_FIELDS",
    "Agent",
    "Disk",
    "Hosts",
    "Image",
    "Limits",
    "Money",
    "Provider",
    "RunConfig",
    "Selection",
    "check_admission_flags",
    "check_campaign_db_url",
    "check_shared_flags",
    "check_task_validity",
    "not_below",
    "parse_docker_size",
    "reference_money_sentence",
    "refuse_money_flags",
]


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
        for name, value in _grouped(checked_fields(self.flags(), _fields())).items():
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
            # Only when given: limits a daemon may not have enforced are another world than enforced ones.
            **({"accept_unenforced_limits": True} if limits.accept_unenforced_limits else {}),
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
            config = cls(**_grouped(checked_fields(flags, _fields())))
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


@functools.cache
def _fields() -> tuple[msgspec.structs.FieldInfo, ...]:
    """Every flag's field, the groups' fields in place of each group, in declaration order."""
    flat: list[msgspec.structs.FieldInfo] = []
    for field in msgspec.structs.fields(RunConfig):
        kind = GROUPS.get(field.name)
        flat.extend(msgspec.structs.fields(kind) if kind is not None else (field,))
    return tuple(flat)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents
