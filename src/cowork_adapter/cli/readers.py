"""The commands that read finished run roots offline: `audit`, `report` and `export`. Read-only over
the run roots; each writes only where its output flag names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..defaults import DEFAULT_CAMPAIGN_NAME
from ..errors import Refusal
from ..paths import PathKind, checked_path, checked_result_root
from ..runroot import layout
from ..vocab import ExitCode
from .apps import _campaign_view_flags, _more, app


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
    from ..audit import run_audit_command

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
    roots = [checked_result_root(p) for p in run_roots]  # run roots or trial sets (run --trials)
    from ..report import OUTPUT_NAMES, run_report_command

    logs: tuple[str, ...] = ()
    if inspect:
        if output_dir is None:
            raise Refusal("flags", "--inspect writes the Inspect log beside the report's files: name --output-dir.")
        from ..export import inspect_log_names

        logs = inspect_log_names(roots)
    # Offline and read-only: files are written only to an --output-dir the operator names.
    if output_dir is not None:
        output_dir = checked_path(
            output_dir, PathKind.OUTPUT_DIR, "--output-dir", output_names=tuple(OUTPUT_NAMES) + logs
        )
    code = run_report_command(roots, output_dir, concurrency, as_json, campaign=campaign)
    if inspect and code == ExitCode.OK and output_dir is not None:
        from ..export import run_export_command

        code = run_export_command(roots, output_dir, "inspect")
    raise SystemExit(code)


@app.command(
    help="Compare two configurations task by task over the tasks both selected (offline, read-only): per-task "
    "outcomes, the difference in pass rate with a paired interval, an exact McNemar test (one trial a side) or a "
    "paired permutation test (trials), the same by domain and MCP server, cost and time per task. Each side is "
    "run roots or a trial set (run --trials); sides of different benchmark commits, task trees or evaluator "
    "code are refused (exit 2).\n\n"
    "Example: cowork-adapter compare /data/trials-a --against /data/trials-b --output-dir /data/a-vs-b"
    + _more("docs/operating.md"),
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    options_metavar="[OPTIONS] A... --against B...",
)
def compare(
    ctx: typer.Context,
    output_dir: Annotated[
        Path | None,
        typer.Option(help="Write comparison.md, .json and .html here (never over a file). Default: print it."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    # A... --against B...: split by hand, as click would give a path after --against B1 to side A.
    words = [str(w) for w in ctx.args]
    if words.count("--against") != 1 or words.index("--against") in (0, len(words) - 1):
        raise Refusal("flags", "compare takes run roots or trial sets on both sides: compare A... --against B...")
    cut = words.index("--against")
    a = [checked_result_root(p) for p in words[:cut]]
    b = [checked_result_root(p, "--against") for p in words[cut + 1 :]]
    from ..report.compare import OUTPUT_NAMES, run_compare_command

    if output_dir is not None:
        output_dir = checked_path(output_dir, PathKind.OUTPUT_DIR, "--output-dir", output_names=OUTPUT_NAMES)
    raise SystemExit(run_compare_command(a, b, output_dir, as_json))


@app.command(
    help="Write each run root as an Inspect AI eval log (offline, read-only over the run roots): one "
    ".eval per run root in --output-dir, never over an existing file, with every selected task a sample "
    "(its official verdict as the score, the ledger's usage, the engine's transcript). Open the logs "
    "with `inspect view --log-dir DIR`. Run roots that are trials of one configuration (same identity, same "
    "tasks) make one log, an epoch per trial. Needs the `inspect` extra (pip install 'cowork-adapter[inspect]').\n\n"
    "Example: cowork-adapter export /data/smoke-1 --format inspect --output-dir /data/inspect-logs"
    + _more("docs/operating.md")
)
def export(
    run_roots: Annotated[
        list[Path], typer.Argument(help="Run roots or trial sets to export (each with its recovery ancestry).")
    ],
    output_dir: Annotated[Path, typer.Option(help="Folder the .eval logs are written to (created if absent).")],
    log_format: Annotated[
        str, typer.Option("--format", help="The log format: inspect (Inspect AI's .eval).")
    ] = "inspect",
    workers: Annotated[int | None, typer.Option(help="Processes reading task dumps (default: CPU count).")] = None,
) -> None:
    roots = [checked_result_root(p) for p in run_roots]  # run roots or trial sets (run --trials)
    from ..export import FORMATS, inspect_log_names, run_export_command

    if log_format not in FORMATS:
        raise Refusal("flags", f"--format must be one of {', '.join(FORMATS)}, not {log_format!r}.")
    output_dir = checked_path(output_dir, PathKind.OUTPUT_DIR, "--output-dir", output_names=inspect_log_names(roots))
    raise SystemExit(run_export_command(roots, output_dir, log_format, workers))
