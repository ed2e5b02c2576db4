"""The commands that start containers: `run` and `doctor` (the run flags), `qualify` (oracle then
nop over a selection) and `demo` (the bundled demo benchmark). Each imports its implementation only
when it runs.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..defaults import PINNED_BENCH_COMMIT
from ..errors import Refusal
from ..paths import PathKind, checked_path
from ..runroot import layout
from ..vocab import DemoScenario
from .apps import (
    P_AGENT,
    P_DISK,
    P_IMAGE,
    P_LIMITS,
    P_MODE,
    P_SELECT,
    P_WHERE,
    _current_argv,
    _more,
    _one_of,
    _PanelledCommand,
    app,
)
from .run_flags import (
    BenchCommitOpt,
    BenchRootOpt,
    DockerHostOpt,
    TaskFileOpt,
    _checked_run_paths,
    _config_from_flags,
    _run_flags,
    _with_run_flags,
)

if TYPE_CHECKING:
    from ..config import RunConfig


def _run_body(cfg: RunConfig) -> None:
    if cfg.selection.trials > 1 or any(os.path.isfile(p / layout.TRIALS) for p in cfg.selection.resume_from):
        from ..run.trials import execute_trials

        raise SystemExit(execute_trials(cfg, argv=_current_argv()))
    from ..run.launch import execute_run

    raise SystemExit(execute_run(cfg, argv=_current_argv()))


def _doctor_body(cfg: RunConfig) -> None:
    from ..ops.doctor import doctor_command

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
            from ..ops.doctor import host_doctor_command

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
    from ..run.qualify import qualify_command

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
    from ..demo.scenarios import run_demo

    raise SystemExit(
        run_demo(
            run_root=checked_path(run_root, PathKind.NEW_DIR, "--run-root"),
            docker_host=docker_host,
            scenario=scenario.value,
        )
    )
