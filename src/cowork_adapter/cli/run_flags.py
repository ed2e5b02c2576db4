"""The run flags, declared once as the signature of `_run_flags` and shared by `run` and `doctor`
(`qualify` shares a few word for word), and their conversion into a checked RunConfig.

Each flag's help panel is its RunConfig group (docs/layout.md); the defaults come from defaults.py so
that `--help` never imports config/ (msgspec).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from ..defaults import (
    DEFAULT_API_KEY_ENV,
    DEFAULT_CAMPAIGN_NAME,
    DEFAULT_GATEWAY_MAX_TOKENS,
    DEFAULT_GATEWAY_UNKNOWN_COST_USD,
    DEFAULT_MAX_DAEMON_PING_SEC,
    DEFAULT_MAX_LOAD_PER_CPU,
    DEFAULT_METER_URL,
    DEFAULT_MIN_MEM_AVAILABLE_BYTES,
    DEFAULT_MODEL,
    GIB,
    PINNED_BENCH_COMMIT,
    PROBE_CHOICES,
    REVIEW_ENFORCEMENTS,
    RUNTIME_MODES,
    SAFETY_MODES,
    TASK_REVIEW_MODES,
)
from ..paths import PathKind, checked_path, checked_result_root
from ..runroot import layout
from ..vocab import StopPath
from .apps import (
    P_AGENT,
    P_DISK,
    P_HOSTS,
    P_IMAGE,
    P_LIMITS,
    P_MODE,
    P_MONEY,
    P_PROVIDER,
    P_SELECT,
    P_WHERE,
    _current_argv,
    _one_of,
    _say,
)

if TYPE_CHECKING:  # config/ (its checks, msgspec) is imported only by the commands that build a RunConfig
    from ..config import RunConfig


def _choices(name: str, values: Sequence[str]) -> type[Enum]:
    """A str Enum of `values`: how typer spells a fixed choice (its members are the values)."""
    return cast("type[Enum]", Enum(name, {v: v for v in values}, type=str))  # the functional API: a class


_TaskReviewMode = _choices("TaskReviewMode", TASK_REVIEW_MODES)
_ReviewEnforcement = _choices("ReviewEnforcement", REVIEW_ENFORCEMENTS)
_SafetyMode = _choices("SafetyMode", SAFETY_MODES)
_RuntimeMode = _choices("RuntimeMode", RUNTIME_MODES)
_Probe = _choices("Probe", PROBE_CHOICES)
_StopPath = _choices("StopPathChoice", [p.value for p in StopPath])


# Options `run`, `doctor` and `qualify` share word for word.
BenchRootOpt = Annotated[
    Path | None,
    typer.Option(
        envvar="COWORK_BENCH_ROOT", help="Cowork Bench checkout at --bench-commit. Required.", rich_help_panel=P_WHERE
    ),
]
BenchCommitOpt = Annotated[str, typer.Option(help="Pinned benchmark commit.", rich_help_panel=P_WHERE)]
DockerHostOpt = Annotated[
    str | None,
    typer.Option(
        envvar="DOCKER_HOST", help="Docker daemon to use, named explicitly; empty is refused.", rich_help_panel=P_WHERE
    ),
]
TaskFileOpt = Annotated[
    Path | None,
    typer.Option(help="Newline-separated task ids; blank lines and # comments skipped.", rich_help_panel=P_SELECT),
]


def _run_flags(
    repo_dir: Annotated[
        Path, typer.Option(help="Clean Ouroboros seed checkout (the agent under test).", rich_help_panel=P_WHERE)
    ],
    run_root: Annotated[
        Path, typer.Option(help="New directory for this invocation; never reused.", rich_help_panel=P_WHERE)
    ],
    bench_root: BenchRootOpt = None,
    bench_commit: BenchCommitOpt = PINNED_BENCH_COMMIT,
    docker_host: DockerHostOpt = None,
    resource_root: Annotated[
        Path | None,
        typer.Option(
            help="Heavy-storage filesystem for disk checks and TMPDIR. Default: the run root's parent.",
            rich_help_panel=P_WHERE,
        ),
    ] = None,
    task: Annotated[
        list[str] | None, typer.Option("--task", help="Task id to run (repeatable).", rich_help_panel=P_SELECT)
    ] = None,
    task_file: TaskFileOpt = None,
    resume_from: Annotated[
        list[Path] | None,
        typer.Option("--resume-from", help="Earlier run root to recover from (repeatable).", rich_help_panel=P_SELECT),
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Tasks run at once (>= 1).", rich_help_panel=P_SELECT)] = 1,
    trials: Annotated[
        int,
        typer.Option(
            help="Run every task this many times (>= 1), each trial a run root <run-root>/trial-N of one campaign.",
            rich_help_panel=P_SELECT,
        ),
    ] = 1,
    max_steps: Annotated[int, typer.Option(help="Agent rounds per task (>= 1).", rich_help_panel=P_AGENT)] = 100,
    task_timeout: Annotated[
        int, typer.Option(help="Seconds per agent phase (> 0; warned above 7100).", rich_help_panel=P_AGENT)
    ] = 3600,
    mcp_tool_timeout: Annotated[
        int, typer.Option(help="Seconds per MCP tool call (> 0).", rich_help_panel=P_AGENT)
    ] = 300,
    model: Annotated[str, typer.Option(help="Model pinned to every slot.", rich_help_panel=P_AGENT)] = DEFAULT_MODEL,
    engine: Annotated[
        str,
        typer.Option(
            help="'ouroboros', 'upstream:<entry file>' (the benchmark's own engine, unchanged), or a reference "
            "engine that spends nothing: 'oracle' (the task's ground truth as the agent's files) or 'nop' "
            "(nothing done).",
            rich_help_panel=P_AGENT,
        ),
    ] = "ouroboros",
    effort: Annotated[str, typer.Option(help="Task reasoning effort.", rich_help_panel=P_AGENT)] = "high",
    review_effort: Annotated[str, typer.Option(help="Effort of each review seat.", rich_help_panel=P_AGENT)] = "high",
    review_slots: Annotated[int, typer.Option(help="Identical review seats (>= 0).", rich_help_panel=P_AGENT)] = 3,
    # Choices show as a short metavar with the values in the help, so flag names fit 80 columns.
    task_review_mode: Annotated[
        # a run-time Enum (typer)
        _TaskReviewMode,  # type: ignore[valid-type]
        typer.Option(metavar="MODE", help=_one_of(TASK_REVIEW_MODES), rich_help_panel=P_AGENT),
    ] = "required",
    review_enforcement: Annotated[
        # a run-time Enum (typer)
        _ReviewEnforcement,  # type: ignore[valid-type]
        typer.Option(metavar="MODE", help=_one_of(REVIEW_ENFORCEMENTS), rich_help_panel=P_AGENT),
    ] = "blocking",
    review_max_cycles: Annotated[
        str, typer.Option(help="Review cycles (whole number).", rich_help_panel=P_AGENT)
    ] = "2",
    safety_mode: Annotated[
        # a run-time Enum (typer)
        _SafetyMode,  # type: ignore[valid-type]
        typer.Option(metavar="MODE", help=_one_of(SAFETY_MODES), rich_help_panel=P_AGENT),
    ] = "off",
    runtime_mode: Annotated[
        # a run-time Enum (typer)
        _RuntimeMode,  # type: ignore[valid-type]
        typer.Option(metavar="MODE", help=_one_of(RUNTIME_MODES), rich_help_panel=P_AGENT),
    ] = "pro",
    max_workers: Annotated[int, typer.Option(help="Server worker processes (>= 1).", rich_help_panel=P_AGENT)] = 4,
    subagents: Annotated[
        bool, typer.Option("--subagents", help="Keep schedule_subagent enabled.", rich_help_panel=P_AGENT)
    ] = False,
    subagent_depth: Annotated[
        int, typer.Option(help="Subagent depth; recorded as 0 without --subagents.", rich_help_panel=P_AGENT)
    ] = 3,
    per_task_cost_usd: Annotated[
        float, typer.Option(help="Agent's own per-task cost limit (> 0).", rich_help_panel=P_AGENT)
    ] = 25.0,
    diagnostic_eval_on_truncation: Annotated[
        bool,
        typer.Option(
            "--diagnostic-eval-on-truncation",
            help="Audit-only residual checker rerun after a truncation.",
            rich_help_panel=P_MODE,
        ),
    ] = False,  # in Mode, where its long name fits 80 columns
    budget_usd: Annotated[
        float | None,
        typer.Option(
            help="Spending bound for this invocation (> 0). Required to create a campaign; else the campaign's.",
            rich_help_panel=P_MONEY,
            show_default=False,
        ),
    ] = None,
    campaign_file: Annotated[
        Path | None, typer.Option(help="Shared campaign record; required for a paid run.", rich_help_panel=P_MONEY)
    ] = None,
    campaign_db: Annotated[
        str | None,
        typer.Option(
            help="The campaign in PostgreSQL instead of a file (several hosts): postgresql://HOST/DB, password in "
            "PGPASSWORD.",
            rich_help_panel=P_MONEY,
            show_default=False,
        ),
    ] = None,
    campaign_name: Annotated[
        str, typer.Option(help="The campaign's name in --campaign-db.", rich_help_panel=P_MONEY)
    ] = DEFAULT_CAMPAIGN_NAME,
    shared_campaign: Annotated[
        bool,
        typer.Option(
            "--shared-campaign",
            help="Be one host of a campaign several hosts run together: take tasks from "
            "--campaign-db's claims in batches; no exclusive hold.",
            rich_help_panel=P_HOSTS,
        ),
    ] = False,
    claim_batch: Annotated[
        int, typer.Option(help="Tasks claimed per batch with --shared-campaign (1-1000).", rich_help_panel=P_HOSTS)
    ] = 2,
    host_lease_sec: Annotated[
        float,
        typer.Option(
            help="This host's lease with --shared-campaign (8-3600 s): a dead launcher's claims move after it.",
            rich_help_panel=P_HOSTS,
        ),
    ] = 60.0,
    max_load_per_cpu: Annotated[
        float,
        typer.Option(
            help="With --shared-campaign: claim a batch only while the 1-minute load average per CPU is at most this.",
            rich_help_panel=P_HOSTS,
        ),
    ] = DEFAULT_MAX_LOAD_PER_CPU,
    min_mem_available_gib: Annotated[
        float,
        typer.Option(
            help="With --shared-campaign: claim a batch only while MemAvailable is at least this (GiB).",
            rich_help_panel=P_HOSTS,
        ),
    ] = DEFAULT_MIN_MEM_AVAILABLE_BYTES / GIB,
    max_daemon_ping_sec: Annotated[
        float,
        typer.Option(
            help="With --shared-campaign: claim a batch only while the Docker daemon answers a ping within this.",
            rich_help_panel=P_HOSTS,
        ),
    ] = DEFAULT_MAX_DAEMON_PING_SEC,
    new_campaign: Annotated[
        bool,
        typer.Option(
            "--new-campaign",
            help="Create --campaign-file if it does not exist (a new usage baseline).",
            rich_help_panel=P_MONEY,
        ),
    ] = False,
    campaign_budget_usd: Annotated[
        float | None,
        typer.Option(
            help="Campaign ceiling (> 0). Required to create a campaign; else the campaign's, never changed.",
            rich_help_panel=P_MONEY,
            show_default=False,
        ),
    ] = None,
    prior_spend_usd: Annotated[
        float | None,
        typer.Option(
            help="Spending before the campaign baseline, only when creating it (>= 0). Default 0.0.",
            rich_help_panel=P_MONEY,
        ),
    ] = None,
    budget_reserve_usd: Annotated[
        float | None,
        typer.Option(
            help="Allowance for delayed/in-flight charges (>= 0, below the ceiling). Required to create a campaign; "
            "else the campaign's.",
            rich_help_panel=P_MONEY,
            show_default=False,
        ),
    ] = None,
    meter_blindness_sec: Annotated[
        float, typer.Option(help="Longest time without an accepted meter reading (> 20).", rich_help_panel=P_MONEY)
    ] = 30.0,
    meter_url: Annotated[
        str, typer.Option(help="Base URL of the key meter.", rich_help_panel=P_MONEY)
    ] = DEFAULT_METER_URL,
    min_key_usd: Annotated[
        float, typer.Option(help="Minimum key headroom at start (>= 0).", rich_help_panel=P_MONEY)
    ] = 20.0,
    min_free_gib: Annotated[
        float, typer.Option(help="Free-space reserve on the resource root (>= 0).", rich_help_panel=P_DISK)
    ] = 200.0,
    min_root_free_gib: Annotated[
        float, typer.Option(help="Free-space reserve on / (>= 0).", rich_help_panel=P_DISK)
    ] = 40.0,
    dump_max_gib: Annotated[
        float, typer.Option(help="Disk one task's dump may take while it runs (> 0).", rich_help_panel=P_DISK)
    ] = 8.0,
    dump_max_entries: Annotated[
        int, typer.Option(help="Files and folders in one task's dump (>= 1).", rich_help_panel=P_DISK)
    ] = 200_000,
    dump_max_depth: Annotated[
        int, typer.Option(help="Folder levels in one task's dump (>= 1).", rich_help_panel=P_DISK)
    ] = 128,
    or_provider: Annotated[
        str, typer.Option(help="OUROBOROS_OR_PROVIDER, set only when non-empty.", rich_help_panel=P_PROVIDER)
    ] = "",
    openai_compatible_base_url: Annotated[
        str,
        typer.Option(
            help="Route the model to this OpenAI-compatible endpoint instead of OpenRouter.", rich_help_panel=P_PROVIDER
        ),
    ] = "",
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the provider key.", rich_help_panel=P_PROVIDER)
    ] = DEFAULT_API_KEY_ENV,
    llm_gateway: Annotated[
        bool,
        typer.Option(
            "--llm-gateway",
            help="Serve the model through the launcher's gateway as an OpenAI-compatible endpoint "
            "(the engine routes openai-compatible::<model>) instead of as openrouter.ai (the default). Either way "
            "the key never enters a container (each task gets its own token), every request is logged and costed, "
            "and the run's budget is fenced per request.",
            rich_help_panel=P_PROVIDER,
        ),
    ] = False,
    key_in_agent: Annotated[
        bool,
        typer.Option(
            "--key-in-agent",
            help="The seed's own path: give the provider key to every agent container (its "
            "environment, the engine's settings, `docker inspect`), where the agent under test can read it. "
            "Default (OpenRouter route): the run serves openrouter.ai itself over TLS on port 443 of the address "
            "containers reach (a run-scoped CA they trust) and adds the key on the host.",
            rich_help_panel=P_PROVIDER,
        ),
    ] = False,
    llm_gateway_host: Annotated[
        str,
        typer.Option(
            help="Address the run's gateway listens on, in the Docker daemon's network namespace, and containers "
            "call (port 443 on the default route). Default: the default route's own network's gateway address "
            "(one per run); with --llm-gateway, the daemon's bridge gateway address.",
            rich_help_panel=P_PROVIDER,
        ),
    ] = "",
    llm_gateway_max_tokens: Annotated[
        int,
        typer.Option(
            help="With a gateway (default route or --llm-gateway): the most output tokens one request may ask for "
            "(larger asks are clamped, none becomes this).",
            rich_help_panel=P_PROVIDER,
        ),
    ] = DEFAULT_GATEWAY_MAX_TOKENS,
    llm_gateway_unknown_cost_usd: Annotated[
        float,
        typer.Option(
            help="With a gateway (default route or --llm-gateway): USD a request is counted at when the provider's "
            "answer has no cost.",
            rich_help_panel=P_PROVIDER,
        ),
    ] = DEFAULT_GATEWAY_UNKNOWN_COST_USD,
    provider_upstream_url: Annotated[
        str,
        typer.Option(
            hidden=True,
            help="Test beds only: where the default route's gateway forwards, instead of https://openrouter.ai/api/v1.",
        ),
    ] = "",
    provider_standin_address: Annotated[
        str,
        typer.Option(
            hidden=True,
            help="Test beds only, with --key-in-agent: agent containers resolve openrouter.ai to this "
            "address (a stand-in serving it over TLS).",
        ),
    ] = "",
    provider_standin_bundle: Annotated[
        Path | None,
        typer.Option(
            hidden=True, help="Test beds only, with --provider-standin-address: the CA bundle agent containers trust."
        ),
    ] = None,
    credential_setting: Annotated[
        str, typer.Option(help="Settings key the provider key is given as.", rich_help_panel=P_PROVIDER)
    ] = DEFAULT_API_KEY_ENV,
    base_image: Annotated[
        str | None,
        typer.Option(
            help="Official benchmark image. Default: cowork-pack:<first 7 of --bench-commit>.", rich_help_panel=P_IMAGE
        ),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            help="Derived image tag. Default: cowork-ouroboros: then the seed's commit [:12], the benchmark's "
            "[:7] and the entrypoint's digest [:8], joined by '-'.",
            rich_help_panel=P_IMAGE,
        ),
    ] = None,
    build_image: Annotated[
        bool, typer.Option("--build-image", help="Build the derived image if missing.", rich_help_panel=P_IMAGE)
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Record the configuration; call no model.", rich_help_panel=P_MODE)
    ] = False,
    allow_dirty_seed: Annotated[
        bool,
        typer.Option(
            "--allow-dirty-seed",
            help="Development diagnostics only: record an unclean seed instead of refusing.",
            rich_help_panel=P_MODE,
        ),
    ] = False,
    probe: Annotated[
        # a run-time Enum (typer)
        _Probe,  # type: ignore[valid-type]
        typer.Option(
            metavar="KIND",
            help="Run a tool probe instead of tasks (no model calls). " + _one_of(PROBE_CHOICES),
            rich_help_panel=P_MODE,
        ),
    ] = "none",
    accept_environment_blocked: Annotated[
        bool,
        typer.Option(
            "--accept-environment-blocked",
            help="Run even when a needed MCP server failed the inventory.",
            rich_help_panel=P_MODE,
        ),
    ] = False,
    cpus: Annotated[
        float | None,
        typer.Option(
            help="CPUs per container (> 0; at most the daemon's). Default: the smaller of 4 and the daemon's CPUs.",
            rich_help_panel=P_LIMITS,
            show_default=False,
        ),
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option(
            help="Memory per container, Docker size syntax (at most the daemon's). Default: the smaller of 16g and "
            "the daemon's memory.",
            rich_help_panel=P_LIMITS,
            show_default=False,
        ),
    ] = None,
    pids_limit: Annotated[int, typer.Option(help="Processes per container (>= 16).", rich_help_panel=P_LIMITS)] = 512,
    agent_output_cap_mib: Annotated[
        int,
        typer.Option(
            help="MiB of one agent exec's output (stdout and stderr) that reach the runner's task log (>= 1); the rest "
            "is dropped and one line says how much.",
            rich_help_panel=P_LIMITS,
        ),
    ] = 32,
    container_cap_add: Annotated[
        list[str] | None,
        typer.Option(
            "--container-cap-add",
            metavar="CAP",
            help="Keep a capability the run's containers would drop (repeatable; recorded in the manifest). "
            "Default: task containers keep CHOWN, DAC_OVERRIDE, FOWNER, SETUID, SETGID, KILL only.",
            rich_help_panel=P_LIMITS,
            show_default=False,
        ),
    ] = None,
    accept_unenforced_limits: Annotated[
        bool,
        typer.Option(
            "--accept-unenforced-limits",
            envvar="COWORK_ACCEPT_UNENFORCED_LIMITS",
            help="Run on a daemon that does not enforce the memory, CPU or process limits (a rootless daemon on a "
            "cgroup v1 host): recorded in the manifest and disclosed by the report. Default: refused.",
            rich_help_panel=P_LIMITS,
        ),
    ] = False,
    task_validity: Annotated[
        Path | None,
        typer.Option(
            help=f"{layout.TASK_VALIDITY} from `qualify`: the report adds pass@1 over the valid tasks "
            "(the headline stays over all selected tasks).",
            rich_help_panel=P_SELECT,
        ),
    ] = None,
    stop_path: Annotated[
        # a run-time Enum (typer)
        _StopPath,  # type: ignore[valid-type]
        typer.Option(
            hidden=True,
            help="Benchmarks only: runner_trap stops the old way (the runner's own EXIT trap removes "
            "its containers one by one) so bench_stop_latency.py can measure it beside the default.",
        ),
    ] = "fast",
) -> None:
    """Template of the run flags: never registered itself."""


def _with_run_flags(body: Callable[[RunConfig], None]) -> Callable[..., None]:
    """A command with the run flags' signature that validates them into a RunConfig for `body`."""

    @functools.wraps(_run_flags)
    def command(**flags: Any) -> None:
        body(_config_from_flags(flags))

    return command


# How `run` and `doctor` use each path flag (absent checkouts are left to the launcher's own sentences).
_RUN_PATH_KINDS = {
    "repo_dir": PathKind.DIR_IF_EXISTS,
    "bench_root": PathKind.DIR_IF_EXISTS,
    "run_root": PathKind.NEW_DIR,
    "resource_root": PathKind.DIR_IF_EXISTS,
    "task_file": PathKind.FILE,
    "campaign_file": PathKind.STATE_FILE,
    "task_validity": PathKind.FILE,
    "provider_standin_bundle": PathKind.FILE,
}


def _checked_run_paths(fields: dict[str, Any]) -> None:
    """Every path flag of run, doctor and qualify through the one checked resolver (paths.py)."""
    for name, kind in _RUN_PATH_KINDS.items():
        if fields.get(name) is not None:
            fields[name] = checked_path(fields[name], kind, "--" + name.replace("_", "-"))


def _config_from_flags(flags: dict[str, Any]) -> RunConfig:
    from ..config import RunConfig

    fields = {k: (v.value if isinstance(v, Enum) else v) for k, v in flags.items()}
    _checked_run_paths(fields)
    fields["resume_from"] = [  # a run root, or a trial set (run --trials resumes each of its trials)
        checked_result_root(p, "--resume-from")
        if os.path.isfile(Path(p, layout.TRIALS))
        else checked_path(p, PathKind.RUN_ROOT_IF_EXISTS, "--resume-from")
        for p in fields.get("resume_from") or ()
    ]
    fields["tasks"] = tuple(fields.pop("task") or ())
    fields["resume_from"] = tuple(fields.pop("resume_from") or ())
    # `cap_net_raw`, `CAP_NET_RAW` and `net_raw` all name Docker's NET_RAW (vocab.Capability).
    fields["container_cap_add"] = tuple(
        str(c).strip().upper().removeprefix("CAP_") for c in fields.get("container_cap_add") or ()
    )
    if fields.get("docker_host") is None:
        fields["docker_host"] = ""  # unset reads as empty, which RunConfig refuses by name
    fields = {k: v for k, v in fields.items() if v is not None or k == "prior_spend_usd"}
    cfg = RunConfig.from_flags(argv=_current_argv(), environ=os.environ, **fields)
    for note in cfg.warnings():
        _say(f"warning: {note}")
    return cfg
