"""The `cowork-adapter` command line (also `python -m cowork_adapter`).

Thin on purpose: parse, validate into typed values, call the function that does the work. Each
command imports its implementation lazily, so `--help` and refusals stay fast and independent.
Every usage error and every Refusal prints exactly one line on stderr,
`cowork-adapter: <sentence>`, writes nothing, and exits 2.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import TyperInfo

from . import __version__
from .defaults import (
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
    InvalidFlag,
    check_env_name,
    check_http_url,
    flag_value,
    refuse_key_on_command_line,
)
from .errors import Refusal
from .paths import PathKind, checked_path
from .runroot import layout
from .vocab import DemoScenario, ExitCode, StopPath

if TYPE_CHECKING:  # config.py (its checks, msgspec) is imported only by the commands that build a RunConfig
    from .config import RunConfig

PROG = "cowork-adapter"


def _more(page: str) -> str:
    """The help's last paragraph: the page of the repository's docs/ that says more (issue 31)."""
    return f"\n\nMore: {page} in the cowork-adapter repository."


class _WholeSummaryGroup(TyperGroup):
    """Plain help (no rich) whose command list gives each command's whole first paragraph,
    wrapped, where click would cut it at one line."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, (command.help or "").split("\n\n")[0].strip()))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


app = typer.Typer(
    name=PROG,
    cls=_WholeSummaryGroup,
    help="Run an AI agent on Cowork Bench inside the benchmark's own containers, with custody of "
    "money, containers and evidence.\n\nExample: cowork-adapter demo --run-root /tmp/demo-1\n\n"
    "Start with README.md of the cowork-adapter repository; each topic has a page in its docs/ "
    "(docs/paid-campaign.md, docs/operating.md, docs/exit-codes.md, ...).",
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,  # plain click help: rendering through rich cost ~0.2 s of CPU per --help
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)
campaign_app = typer.Typer(
    cls=_WholeSummaryGroup,
    help="Inspect, reconcile or release the campaign's records (never hand-edit its JSON).\n\n"
    "Example: cowork-adapter campaign show --campaign-file /data/campaign.json" + _more("docs/operating.md"),
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(campaign_app, name="campaign")


# Help panels group the many run flags by concern.
class _PanelledCommand(TyperCommand):
    """Plain help (no rich) that still lists the options under their panel headings, in the order
    the panels first appear; options without a panel (--help) go under "Options"."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                panels.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
        for title, records in panels.items():
            with formatter.section(title):
                formatter.write_dl(records)


P_WHERE, P_SELECT, P_AGENT, P_MONEY, P_DISK = "Locations", "Selection", "Agent", "Money", "Disk"
P_PROVIDER, P_IMAGE, P_MODE, P_LIMITS = "Provider", "Image", "Mode", "Container limits"
P_HOSTS = "Hosts"  # one host of a campaign several hosts run together (config.Hosts)


# ---------------------------------------------------------------------------------------------
# The run flags, declared once and shared by `run` and `doctor`.
# ---------------------------------------------------------------------------------------------


def _choices(name: str, values: Sequence[str]) -> type[Enum]:
    """A str Enum of `values`: how typer spells a fixed choice (its members are the values)."""
    return cast("type[Enum]", Enum(name, {v: v for v in values}, type=str))  # the functional API: a class


_TaskReviewMode = _choices("TaskReviewMode", TASK_REVIEW_MODES)
_ReviewEnforcement = _choices("ReviewEnforcement", REVIEW_ENFORCEMENTS)
_SafetyMode = _choices("SafetyMode", SAFETY_MODES)
_RuntimeMode = _choices("RuntimeMode", RUNTIME_MODES)
_Probe = _choices("Probe", PROBE_CHOICES)
_StopPath = _choices("StopPathChoice", [p.value for p in StopPath])


def _one_of(values: Sequence[str]) -> str:
    return "One of: " + ", ".join(values) + "."


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
            "engine that spends nothing: 'oracle' (the task's ground truth as the agent's files) or 'nop' (nothing done).",
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
            help="Host address the run's gateway listens on and containers call (port 443 on the default route). "
            "Default: the Docker daemon's bridge gateway address.",
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
    task_validity: Annotated[
        Path | None,
        typer.Option(
            help=f"{layout.TASK_VALIDITY} from `qualify`: the report adds pass@1 over the valid tasks (the headline stays "
            "over all selected tasks).",
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
    from .config import RunConfig

    fields = {k: (v.value if isinstance(v, Enum) else v) for k, v in flags.items()}
    _checked_run_paths(fields)
    fields["resume_from"] = [
        checked_path(p, PathKind.RUN_ROOT_IF_EXISTS, "--resume-from") for p in fields.get("resume_from") or ()
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


def _run_body(cfg: RunConfig) -> None:
    from .run.launch import execute_run

    raise SystemExit(execute_run(cfg, argv=_current_argv()))


def _doctor_body(cfg: RunConfig) -> None:
    from .ops.doctor import doctor_command

    raise SystemExit(doctor_command(cfg))


app.command(
    "run",
    cls=_PanelledCommand,
    help="Run the agent on selected Cowork Bench tasks under custody of money, containers and evidence.\n\n"
    "Example: cowork-adapter run --repo-dir ~/seed --bench-root ~/cowork_bench --run-root "
    "/data/smoke-1 --task TASK_ID --campaign-file /data/campaign.json\n\n"
    "Exit codes: 0 completed; 1 incomplete (infra or not-attempted rows, cleanup unproven, crash); "
    "2 refused; 3 stopped (budget, meter, disk, signal)." + _more("docs/paid-campaign.md"),
)(_with_run_flags(_run_body))


def _doctor_command() -> Callable[..., None]:
    """`doctor`: the run flags, with --repo-dir and --run-root optional. Without them it checks the
    host only (daemon, its CPUs and memory, host tools, disk) and says what else it needs."""

    def command(**flags: Any) -> None:
        if flags.get("repo_dir") is None or flags.get("run_root") is None:
            from .ops.doctor import host_doctor_command

            folder = flags.get("resource_root")
            folder = checked_path(folder, PathKind.DIR, "--resource-root") if folder is not None else None
            raise SystemExit(
                host_doctor_command(
                    flags.get("docker_host"),
                    folder,
                    min_free_gib=flags["min_free_gib"],
                    min_root_free_gib=flags["min_root_free_gib"],
                )
            )
        _doctor_body(_config_from_flags(flags))

    signature = inspect.signature(_run_flags, eval_str=True)
    optional = {}
    for name in ("repo_dir", "run_root"):
        param = signature.parameters[name]
        option = param.annotation.__metadata__[0]
        optional[name] = param.replace(annotation=Annotated[Path | None, option], default=None)
    params = [optional.get(p.name, p) for p in signature.parameters.values()]
    # Parameters with defaults may not precede those without: the two made optional go last.
    params = [p for p in params if p.default is inspect.Parameter.empty] + [
        p for p in params if p.default is not inspect.Parameter.empty
    ]
    command.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    command.__doc__ = _run_flags.__doc__
    return command


app.command(
    "doctor",
    cls=_PanelledCommand,
    help="Check the host, daemon, checkouts, images, disk and key for the run these flags describe; "
    "start nothing. Without --repo-dir and --run-root it checks the host (daemon, its CPUs and memory, "
    "host tools, disk) and says what else it needs.\n\nExample: cowork-adapter doctor --repo-dir ~/seed "
    "--bench-root ~/cowork_bench --run-root /data/smoke-1 --dry-run\n\nExit codes: 0 every needed check OK; "
    "1 a check failed; 2 flags refused." + _more("docs/paid-campaign.md"),
)(_doctor_command())


# ---------------------------------------------------------------------------------------------
# `qualify`: oracle then nop over a selection (self-contained block; see qualify.py).
# ---------------------------------------------------------------------------------------------


def _qualify(
    repo_dir: Annotated[
        Path, typer.Option(help="Clean Ouroboros seed checkout (binds the derived image).", rich_help_panel=P_WHERE)
    ],
    run_root: Annotated[
        Path,
        typer.Option(
            help=f"New directory: the oracle and nop run roots and {layout.TASK_VALIDITY} go under it.",
            rich_help_panel=P_WHERE,
        ),
    ],
    bench_root: BenchRootOpt = None,
    bench_commit: BenchCommitOpt = PINNED_BENCH_COMMIT,
    docker_host: DockerHostOpt = None,
    resource_root: Annotated[
        Path | None,
        typer.Option(
            help="Heavy-storage filesystem for disk checks and TMPDIR. Default: the root's parent.",
            rich_help_panel=P_WHERE,
        ),
    ] = None,
    task: Annotated[
        list[str] | None,
        typer.Option("--task", help="Task id to qualify (repeatable). Default: every task.", rich_help_panel=P_SELECT),
    ] = None,
    task_file: TaskFileOpt = None,
    concurrency: Annotated[int, typer.Option(help="Tasks run at once (>= 1).", rich_help_panel=P_SELECT)] = 1,
    task_timeout: Annotated[int, typer.Option(help="Seconds per agent phase (> 0).", rich_help_panel=P_AGENT)] = 3600,
    base_image: Annotated[
        str | None,
        typer.Option(
            help="Official benchmark image. Default: cowork-pack:<first 7 of --bench-commit>.", rich_help_panel=P_IMAGE
        ),
    ] = None,
    image: Annotated[str | None, typer.Option(help="Derived image tag.", rich_help_panel=P_IMAGE)] = None,
    build_image: Annotated[
        bool, typer.Option("--build-image", help="Build the derived image if missing.", rich_help_panel=P_IMAGE)
    ] = False,
    allow_dirty_seed: Annotated[
        bool, typer.Option("--allow-dirty-seed", help="Development diagnostics only.", rich_help_panel=P_MODE)
    ] = False,
    min_free_gib: Annotated[
        float, typer.Option(help="Free-space reserve on the resource root (>= 0).", rich_help_panel=P_DISK)
    ] = 200.0,
    min_root_free_gib: Annotated[
        float, typer.Option(help="Free-space reserve on / (>= 0).", rich_help_panel=P_DISK)
    ] = 40.0,
    cpus: Annotated[
        float | None,
        typer.Option(help="CPUs per container. Default: as for run.", rich_help_panel=P_LIMITS, show_default=False),
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option(help="Memory per container. Default: as for run.", rich_help_panel=P_LIMITS, show_default=False),
    ] = None,
    pids_limit: Annotated[int, typer.Option(help="Processes per container (>= 16).", rich_help_panel=P_LIMITS)] = 512,
) -> None:
    fields: dict[str, Any] = dict(locals())
    _checked_run_paths(fields)
    fields["tasks"] = tuple(fields.pop("task") or ())
    if fields.get("docker_host") is None:
        fields["docker_host"] = ""
    fields = {k: v for k, v in fields.items() if v is not None}
    from .run.qualify import qualify_command

    raise SystemExit(qualify_command(fields, _current_argv()))


app.command(
    "qualify",
    cls=_PanelledCommand,
    help="Before paying: run --engine oracle (the task's ground truth in the workspace) and --engine nop "
    "(nothing done) over the selection, both graded by the official evaluator and spending nothing, and "
    "classify each task: valid, oracle_fails, nop_passes, environment_blocked (or undetermined).\n\n"
    "Example: cowork-adapter qualify --repo-dir ~/seed --bench-root ~/cowork_bench --run-root /data/qualify-1 "
    f"--concurrency 2\n\nWrites <run-root>/{layout.TASK_VALIDITY} and prints a table. Exit codes: 0 table written; "
    "2 refused; 3 a run was stopped." + _more("docs/paid-campaign.md"),
)(_qualify)


# ---------------------------------------------------------------------------------------------
# The other commands.
# ---------------------------------------------------------------------------------------------


@app.command(
    help="Qualify the whole adapter on the bundled demo benchmark with a local meter; spends nothing.\n\n"
    "Example: cowork-adapter demo --run-root /tmp/demo-1 --scenario pass" + _more("docs/testing.md")
)
def demo(
    run_root: Annotated[Path, typer.Option(help="New directory for the demo's runs.")],
    docker_host: Annotated[str | None, typer.Option(envvar="DOCKER_HOST", help="Docker daemon to use.")] = None,
    scenario: Annotated[
        DemoScenario,
        typer.Option(metavar="NAME", help="Which scenario to play. " + _one_of([s.value for s in DemoScenario])),
    ] = DemoScenario.ALL,
) -> None:
    if docker_host is not None and not docker_host.strip():
        raise Refusal("docker_host", "--docker-host is empty; name the Docker daemon explicitly.")
    from .demo.scenarios import run_demo

    raise SystemExit(
        run_demo(
            run_root=checked_path(run_root, PathKind.NEW_DIR, "--run-root"),
            docker_host=docker_host,
            scenario=scenario.value,
        )
    )


@app.command(
    help="Audit a finished run offline: evidence and items for manual review; never changes a verdict.\n\n"
    f"Example: cowork-adapter audit --run-dir /data/smoke-1 --output /data/smoke-1/{layout.OPERATOR_AUDIT}"
    + _more("docs/operating.md")
)
def audit(
    run_dir: Annotated[Path, typer.Option(help="Run root to audit.")],
    output: Annotated[Path | None, typer.Option(help="Write the report here (refuses an existing file).")] = None,
    workers: Annotated[int | None, typer.Option(help="Processes scanning task dumps (default: CPU count).")] = None,
) -> None:
    run_dir = checked_path(run_dir, PathKind.RUN_ROOT, "--run-dir")
    output = checked_path(output, PathKind.NEW_FILE, "--output") if output is not None else None
    from .audit import run_audit_command

    raise SystemExit(run_audit_command(run_dir, output, workers))


@app.command(
    help="Score one or more run roots with their disclosures and audit findings (offline, read-only: "
    "without --output-dir nothing is written and the Markdown report is printed; a run root is "
    "written into only when --output-dir names a folder in it).\n\n"
    "Example: cowork-adapter report /data/smoke-1 /data/smoke-2 --output-dir /data/report-smoke\n\n"
    "A campaign over several hosts: cowork-adapter report --campaign-db postgresql://db/campaigns "
    "--campaign-name c1 /copies/host-a/run-1 /copies/host-b/run-1 (every run root of the campaign; the "
    "password in PGPASSWORD or ~/.pgpass; docs/several-hosts.md)." + _more("docs/operating.md")
)
def report(
    run_roots: Annotated[list[Path], typer.Argument(help="Run roots to combine.")],
    output_dir: Annotated[
        Path | None,
        typer.Option(
            help="Write report.md, report.json and report.html here (never over an existing file). "
            "Default: write nothing, print the report."
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Concurrency assumed by the full-run time projection.")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    campaign_db: Annotated[
        str | None,
        typer.Option(
            help="One result for the campaign in this PostgreSQL database (postgresql://HOST/DB, password in "
            "PGPASSWORD): its selection is the denominator, and the run roots must be all of its hosts' runs.",
            show_default=False,
        ),
    ] = None,
    campaign_name: Annotated[str, typer.Option(help="The campaign's name in --campaign-db.")] = DEFAULT_CAMPAIGN_NAME,
    inspect: Annotated[
        bool,
        typer.Option(
            "--inspect",
            help="Also write each run root's Inspect AI log (.eval) beside the report's files in "
            "--output-dir (open it with: inspect view --log-dir DIR). Needs the `inspect` extra.",
        ),
    ] = False,
) -> None:
    campaign = _campaign_view_flags(campaign_db, campaign_name)
    roots = [checked_path(p, PathKind.RUN_ROOT, "", needs_manifest=True) for p in run_roots]
    from .report import OUTPUT_NAMES, run_report_command

    logs: tuple[str, ...] = ()
    if inspect:
        if output_dir is None:
            raise Refusal("flags", "--inspect writes the Inspect log beside the report's files: name --output-dir.")
        from .export import inspect_log_names

        logs = inspect_log_names(roots)
    # Offline and read-only: files are written only to an --output-dir the operator names.
    if output_dir is not None:
        output_dir = checked_path(
            output_dir, PathKind.OUTPUT_DIR, "--output-dir", output_names=tuple(OUTPUT_NAMES) + logs
        )
    code = run_report_command(roots, output_dir, concurrency, as_json, campaign=campaign)
    if inspect and code == ExitCode.OK and output_dir is not None:
        from .export import run_export_command

        code = run_export_command(roots, output_dir, "inspect")
    raise SystemExit(code)


@app.command(
    help="Write each run root as an Inspect AI eval log (offline, read-only over the run roots): one "
    ".eval per run root in --output-dir, never over an existing file, with every selected task a sample "
    "(its official verdict as the score, the ledger's usage, the engine's transcript). Open the logs "
    "with `inspect view --log-dir DIR`. Needs the `inspect` extra (pip install 'cowork-adapter[inspect]').\n\n"
    "Example: cowork-adapter export /data/smoke-1 --format inspect --output-dir /data/inspect-logs"
    + _more("docs/operating.md")
)
def export(
    run_roots: Annotated[list[Path], typer.Argument(help="Run roots to export (each with its recovery ancestry).")],
    output_dir: Annotated[Path, typer.Option(help="Folder the .eval logs are written to (created if absent).")],
    log_format: Annotated[
        str, typer.Option("--format", help="The log format: inspect (Inspect AI's .eval).")
    ] = "inspect",
    workers: Annotated[int | None, typer.Option(help="Processes reading task dumps (default: CPU count).")] = None,
) -> None:
    roots = [checked_path(p, PathKind.RUN_ROOT, "", needs_manifest=True) for p in run_roots]
    from .export import FORMATS, inspect_log_names, run_export_command

    if log_format not in FORMATS:
        raise Refusal("flags", f"--format must be one of {', '.join(FORMATS)}, not {log_format!r}.")
    output_dir = checked_path(output_dir, PathKind.OUTPUT_DIR, "--output-dir", output_names=inspect_log_names(roots))
    raise SystemExit(run_export_command(roots, output_dir, log_format, workers))


def _campaign_view_flags(campaign_db: str | None, campaign_name: str) -> tuple[str, str] | None:
    """(URL, name) for a view over a campaign in PostgreSQL, or None without --campaign-db."""
    if campaign_db is None:
        if campaign_name != DEFAULT_CAMPAIGN_NAME:
            raise Refusal("flags", "--campaign-name is only meaningful with --campaign-db.")
        return None
    from .config import check_campaign_db_url

    try:
        check_campaign_db_url(campaign_db)
    except InvalidFlag as exc:
        raise Refusal(exc.stage, exc.sentence) from None
    return campaign_db, campaign_name


@app.command(
    help="Show a run's progress, spending, disk headroom and stop reasons.\n\n"
    "Example: cowork-adapter status /data/smoke-1 --json\n\n"
    "A campaign over several hosts: cowork-adapter status --campaign-db postgresql://db/campaigns "
    "--campaign-name c1 [RUN_ROOT...] (its claims, host runs and leases from the database, with each "
    "given run root's progress).\n\nExit codes: 0 read; 1 read, but a run root of the campaign was not "
    "given; 2 refused (not a run root, database unreachable, unknown campaign, a run root not of it)."
    + _more("docs/operating.md")
)
def status(
    run_roots: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Run root to inspect (with --campaign-db: any of the campaign's run roots).", show_default=False
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    campaign_db: Annotated[
        str | None,
        typer.Option(
            help="Show the campaign in this PostgreSQL database over every host (password in PGPASSWORD).",
            show_default=False,
        ),
    ] = None,
    campaign_name: Annotated[str, typer.Option(help="The campaign's name in --campaign-db.")] = DEFAULT_CAMPAIGN_NAME,
) -> None:
    campaign = _campaign_view_flags(campaign_db, campaign_name)
    if campaign is not None:
        roots = [checked_path(p, PathKind.RUN_ROOT, "", needs_manifest=True) for p in run_roots or []]
        from .ops.campaign_status import campaign_status_command

        raise SystemExit(campaign_status_command(campaign[0], campaign[1], roots, as_json))
    if len(run_roots or []) != 1:
        raise Refusal("flags", "status takes exactly one run root (several only with --campaign-db).")
    run_root = checked_path(run_roots[0], PathKind.RUN_ROOT, "")  # type: ignore[index]  # exactly one, checked above
    from .ops.control import status_command

    raise SystemExit(status_command(run_root, as_json))


@app.command(
    help="Ask a running launcher to stop and clean up by its exact run label, then wait for it.\n\n"
    "Example: cowork-adapter stop /data/smoke-1 --timeout 300\n\nExit codes: 0 stopped with cleanup proven, or already ended; "
    "1 cleanup unproven, timed out, or launcher gone (it names what lives and the `clear` line); 2 not a run root."
    + _more("docs/operating.md")
)
def stop(
    run_root: Annotated[Path, typer.Argument(help="Run root of the launcher to stop.")],
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the launcher to finish (> 0).")] = 300.0,
) -> None:
    if not (0 < timeout < float("inf")):
        raise Refusal("flags", f"--timeout must be a finite number greater than 0 (got {timeout}).")
    run_root = checked_path(run_root, PathKind.RUN_ROOT, "")
    from .ops.control import stop_command

    raise SystemExit(stop_command(run_root, timeout))


@app.command(
    help="Finish the custody of a run whose launcher died: prove its processes gone, remove every container, "
    "network and volume with its exact label (proven by a fresh listing), delete its key file, rebuild its "
    "ledger and settle the campaign's active run. Flags default to what the run recorded.\n\n"
    "Example: cowork-adapter clear /data/smoke-1 --operator-note 'launcher OOM-killed at 14:02'\n\n"
    "Exit codes: 0 cleared, or already cleared; 1 labelled objects not removable or provable, ledger or "
    "campaign not written; 2 refused (bad input, a process of the run alive, no meter reading)."
    + _more("docs/operating.md")
)
def clear(
    run_root: Annotated[Path, typer.Argument(help="Run root of the dead run.")],
    operator_note: Annotated[str, typer.Option(help="What the operator checked, recorded verbatim.")],
    campaign_file: Annotated[
        Path | None,
        typer.Option(
            help="The campaign record. Default: the one the run recorded (skipped when it was never created)."
        ),
    ] = None,
    meter_url: Annotated[str | None, typer.Option(help="Base URL of the key meter. Default: the run's.")] = None,
    docker_host: Annotated[str | None, typer.Option(help="Docker daemon of the run. Default: the run's.")] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option(
            help="Environment variable holding the provider key (only to settle a campaign). Default: the run's."
        ),
    ] = None,
) -> None:
    if not operator_note.strip():
        raise Refusal("flags", "--operator-note must say what was checked; it is empty.")
    if docker_host is not None and not docker_host.strip():
        raise Refusal("docker_host", "--docker-host is empty; name the Docker daemon explicitly or omit it.")
    try:
        if api_key_env is not None:
            api_key_env = check_env_name("--api-key-env", api_key_env)
        if meter_url is not None:
            meter_url = check_http_url("--meter-url", meter_url)
    except InvalidFlag as exc:
        raise Refusal(exc.stage, exc.sentence) from None
    from .ops.clear import clear_command

    raise SystemExit(
        clear_command(
            checked_path(run_root, PathKind.RUN_ROOT, "", needs_manifest=True),
            operator_note.strip(),
            campaign_file=checked_path(campaign_file, PathKind.STATE_FILE, "--campaign-file")
            if campaign_file
            else None,
            meter_url=meter_url,
            docker_host=docker_host.strip() if docker_host else None,
            api_key_env=api_key_env,
        )
    )


@app.command(help=f"Print the adapter's version.\n\nExample: {PROG} version" + _more("README.md"))
def version() -> None:
    typer.echo(f"{PROG} {__version__}")


@campaign_app.command(
    "show",
    help="Show the campaign's ceiling, baseline, spending, active run and history.\n\n"
    "Example: cowork-adapter campaign show --campaign-file /data/campaign.json" + _more("docs/operating.md"),
)
def campaign_show(
    campaign_file: Annotated[Path | None, typer.Option(help="The campaign record.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    campaign_db: Annotated[
        str | None,
        typer.Option(help="The campaign in PostgreSQL instead (postgresql://HOST/DB, password in PGPASSWORD)."),
    ] = None,
    campaign_name: Annotated[str, typer.Option(help="The campaign's name in --campaign-db.")] = DEFAULT_CAMPAIGN_NAME,
) -> None:
    from .campaign.commands import show_command

    path, store = _campaign_store_flags(campaign_file, campaign_db, campaign_name)
    raise SystemExit(show_command(path, as_json, store=store))


def _campaign_store_flags(
    campaign_file: Path | None, campaign_db: str | None, campaign_name: str
) -> tuple[Path | None, Any]:
    """Exactly one of --campaign-file and --campaign-db: (checked path, None) or (None, PostgreSQL store)."""
    if (campaign_file is None) == (campaign_db is None):
        raise Refusal("flags", "name the campaign with --campaign-file or --campaign-db (exactly one).")
    if campaign_file is not None:
        if campaign_name != DEFAULT_CAMPAIGN_NAME:
            raise Refusal("flags", "--campaign-name is only meaningful with --campaign-db.")
        return checked_path(campaign_file, PathKind.STATE_FILE, "--campaign-file"), None
    url, name = _campaign_view_flags(campaign_db, campaign_name) or (campaign_db, campaign_name)
    from .campaign.pg_store import PostgresCampaignStore

    return None, PostgresCampaignStore(url, name)  # type: ignore[arg-type]  # a URL when --campaign-db


@campaign_app.command(
    "reconcile",
    help="After an ungraceful exit, verify the run left nothing behind, refresh the key's usage and "
    "clear the stale active run, recording the checks.\n\n"
    "Example: cowork-adapter campaign reconcile --campaign-file /data/campaign.json --run-root "
    "/data/smoke-1 --operator-note 'launcher killed by OOM, checked ps'" + _more("docs/operating.md"),
)
def campaign_reconcile(
    run_root: Annotated[Path, typer.Option(help="Run root of the stale active run.")],
    operator_note: Annotated[str, typer.Option(help="What the operator checked, recorded verbatim.")],
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the provider key.")
    ] = DEFAULT_API_KEY_ENV,
    meter_url: Annotated[str, typer.Option(help="Base URL of the key meter.")] = DEFAULT_METER_URL,
    docker_host: Annotated[str | None, typer.Option(envvar="DOCKER_HOST", help="Docker daemon to check.")] = None,
    campaign_file: Annotated[Path | None, typer.Option(help="The campaign record.")] = None,
    campaign_db: Annotated[
        str | None,
        typer.Option(help="The campaign in PostgreSQL instead (postgresql://HOST/DB, password in PGPASSWORD)."),
    ] = None,
    campaign_name: Annotated[str, typer.Option(help="The campaign's name in --campaign-db.")] = DEFAULT_CAMPAIGN_NAME,
) -> None:
    if not operator_note.strip():
        raise Refusal("flags", "--operator-note must say what was checked; it is empty.")
    if not (docker_host or "").strip():
        raise Refusal("docker_host", "--docker-host is empty; name the Docker daemon explicitly (or set DOCKER_HOST).")
    try:
        api_key_env = check_env_name("--api-key-env", api_key_env)
        meter_url = check_http_url("--meter-url", meter_url)
    except InvalidFlag as exc:
        raise Refusal(exc.stage, exc.sentence) from None
    from .campaign.commands import reconcile_command

    path, store = _campaign_store_flags(campaign_file, campaign_db, campaign_name)
    raise SystemExit(
        reconcile_command(
            campaign_file=path,  # type: ignore[arg-type]  # a file when no store
            store=store,
            run_root=checked_path(run_root, PathKind.RUN_ROOT_IF_EXISTS, "--run-root"),
            operator_note=operator_note.strip(),
            api_key_env=api_key_env,
            meter_url=meter_url,
            docker_host=docker_host.strip(),  # type: ignore[union-attr]  # checked above
        )
    )


@campaign_app.command(
    "release",
    help="Give a lapsed host run's unsettled claims back when its machine is gone for good (a shared "
    "campaign in PostgreSQL).\n\nIts lease must have lapsed; with --docker-host and that daemon answering, "
    "whatever carries the run's exact label is removed and proven gone; otherwise --confirm-fenced is the "
    "operator's attestation. One transaction then marks the run released (with the evidence, who and "
    "when) and reopens its claimed tasks; settled tasks are never touched.\n\n"
    "Example: cowork-adapter campaign release --campaign-db postgresql://db.lan/campaigns --campaign-name c1 "
    "--host-run 3f2a... --confirm-fenced --operator-note 'VM host-a deleted 09:10, its disk is gone'\n\n"
    "Exit codes: 0 released; 1 the label's cleanup not proven or the database write failed (nothing "
    "released); 2 refused (unknown run, not live, lease not lapsed, no evidence)." + _more("docs/several-hosts.md"),
)
def campaign_release(
    campaign_db: Annotated[
        str,
        typer.Option(
            help="The campaign in PostgreSQL (postgresql://HOST/DB, password in PGPASSWORD).", show_default=False
        ),
    ],
    host_run: Annotated[
        str, typer.Option(help="The host run to release (its run id, as `status` lists it).", show_default=False)
    ],
    operator_note: Annotated[str, typer.Option(help="What the operator checked, recorded verbatim.")],
    campaign_name: Annotated[str, typer.Option(help="The campaign's name in --campaign-db.")] = DEFAULT_CAMPAIGN_NAME,
    docker_host: Annotated[
        str | None,
        typer.Option(
            help="The Docker daemon the run used (never taken from DOCKER_HOST: that is this machine's).",
            show_default=False,
        ),
    ] = None,
    confirm_fenced: Annotated[
        bool,
        typer.Option(
            "--confirm-fenced",
            help="Attest that the run's machine, processes and containers are gone (needed "
            "when no --docker-host answers); recorded as the release's evidence.",
        ),
    ] = False,
) -> None:
    if not operator_note.strip():
        raise Refusal("flags", "--operator-note must say what was checked; it is empty.")
    if not host_run.strip():
        raise Refusal("flags", "--host-run is empty; name the run id `status --campaign-db` lists.")
    if docker_host is not None and not docker_host.strip():
        raise Refusal("docker_host", "--docker-host is empty; name the run's Docker daemon or omit it.")
    url, name = _campaign_view_flags(campaign_db, campaign_name)  # type: ignore[misc]  # flags checked above
    from .campaign.release import release_command

    raise SystemExit(
        release_command(
            url,
            name,
            host_run.strip(),
            operator_note.strip(),
            docker_host.strip() if docker_host else None,
            confirm_fenced,
        )
    )


# ---------------------------------------------------------------------------------------------
# Entry point: one line on stderr for every refusal or usage error.
# ---------------------------------------------------------------------------------------------

_ARGV: list[str] = [PROG]
# Typer >= 0.20 carries its own copy of click whose errors derive from TyperException; older
# releases raise click's own. Either way this is the base of every usage error, and has format_message.
_CLI_ERROR: type[typer.TyperException] = (
    getattr(typer, "TyperException", None) or importlib.import_module("click").ClickException
)


def _current_argv() -> list[str]:
    """The argv of this invocation (program name first), as the launcher records it."""
    return list(_ARGV)


def _say(sentence: str) -> None:
    print(f"{PROG}: {' '.join(sentence.split())}", file=sys.stderr, flush=True)


def _api_key_env_in(args: Sequence[str]) -> str:
    """The --api-key-env value on the command line, read before parsing (so that a usage error
    never echoes the key)."""
    given = flag_value(args, "--api-key-env")
    return DEFAULT_API_KEY_ENV if given is None else given


def _quiet_flag_types(command: Any) -> None:
    """On/off flags take no value: show no `<bool>` type for them, which also leaves their long
    names room in the help's table at 80 columns (rich would otherwise cut them)."""
    for sub in getattr(command, "commands", {}).values():
        _quiet_flag_types(sub)
    for param in getattr(command, "params", ()):
        if getattr(param, "is_flag", False) and getattr(param, "metavar", None) is None:
            param.metavar = ""


def _nothing() -> None:
    """The slimmed app's group callback: it keeps the app a group when it holds one command."""


def _app_for(args: Sequence[str]) -> typer.Typer:
    """The app holding only the command (or group) `args` starts with, when it names one.

    Turning a typer app into click commands reads every command's signature and annotations; the
    run flags alone are some sixty. Converting only the command invoked keeps start-up to what that
    command uses; its help, parsing and errors are the same, since a subcommand's help never lists
    its siblings. Anything else (no command, an option first, an unknown word) gets the whole app.
    """
    first = args[0] if args else ""
    commands = [
        info
        for info in app.registered_commands
        # a command has a callback
        if (info.name or typer.main.get_command_name(info.callback.__name__)) == first  # type: ignore[union-attr]
    ]
    groups = [info for info in app.registered_groups if info.name == first]
    if not commands and not groups:
        return app
    slim = copy.copy(app)
    slim.registered_commands, slim.registered_groups = commands, groups
    slim.registered_callback = TyperInfo(callback=_nothing)
    return slim


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry: run the command line and exit with an ExitCode (never a click traceback box)."""
    global _ARGV
    args = list(sys.argv[1:] if argv is None else argv)
    _ARGV = [sys.argv[0] if argv is None else PROG, *args]
    command = typer.main.get_command(_app_for(args))
    _quiet_flag_types(command)
    try:
        refuse_key_on_command_line(args, os.environ, _api_key_env_in(args))
        result = command.main(args=args, prog_name=PROG, standalone_mode=False)
    except Refusal as refusal:
        _say(refusal.sentence)
        sys.exit(int(refusal.exit_code))
    except _CLI_ERROR as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            # Bare `cowork-adapter` (or `campaign`): help, not an error. Rich help is printed
            # while the exception is built; plain help is its message.
            help_text = exc.format_message()
            if help_text.strip():
                typer.echo(help_text)
            sys.exit(int(ExitCode.OK))
        _say(exc.format_message().replace("Value error, ", ""))
        sys.exit(int(ExitCode.REFUSED))
    except typer.Abort:
        _say("aborted.")
        sys.exit(130)
    sys.exit(result if isinstance(result, int) else int(ExitCode.OK))
