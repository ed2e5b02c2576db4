"""The scored report: merge runs with their recovery ancestry, score, disclose, plot.

`run_report_command()` is the `report` command's body. It is offline and read-only over the run
roots: without an output directory it writes nothing and prints the report (Markdown, or JSON
with --json) on stdout; with one it writes report.md, report.json and report.html there, never
over an existing file. A run root is written into only when the operator names it as the output
directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..campaign.records import match_runs, missing_runs, missing_sentence, read_snapshot
from ..errors import Refusal
from ..fileio import create_exclusive
from ..runroot.trials import expand_run_roots
from ..vocab import ExitCode
from .build import build_report, row_cost
from .campaign import campaign_view, check_identities, merge_campaign
from .merge import load_run, load_runs, meter_usage_series
from .render import headline, to_html, to_markdown, valid_line
from .trials import trial_report

OUTPUT_NAMES = ("report.md", "report.json", "report.html")


def make_report(roots: list[Path], concurrency: int) -> dict[str, Any]:
    """The report dict for `roots` and their ancestry (raises Refusal, stage "report")."""
    if not roots:
        raise Refusal("report", "The report needs at least one run root.")
    if concurrency < 1:
        raise Refusal("report", "The projection concurrency must be at least 1.")
    groups = expand_run_roots(roots)
    if len(groups) == 1 and groups[0].trial_set is None and groups[0].k == 1:
        return build_report(load_runs(roots), concurrency=concurrency)  # one run and its ancestry: as always
    if len(groups) != 1:
        load_runs([root for group in groups for root in group.roots])  # names the identity difference, if any
        raise Refusal(
            "report", "A report covers one configuration: name one trial set, or the run roots of one configuration."
        )
    return trial_report(groups[0], concurrency)


def make_campaign_report(url: str, name: str, roots: list[Path], concurrency: int) -> dict[str, Any]:
    """The one report of campaign `name` from its database and every host's run root (Refusal, stage
    "report" or "campaign": unreachable, unknown, a root not of it, a root of it missing)."""
    if concurrency < 1:
        raise Refusal("report", "The projection concurrency must be at least 1.")
    snap = read_snapshot(url, name)
    loaded = {rec.root: rec for rec in (load_run(str(Path(r).resolve())) for r in roots)}
    matched = {
        run_id: loaded[root]
        for run_id, root in match_runs(snap.runs, [(rec.root, rec.manifest) for rec in loaded.values()], name).items()
    }
    missing = missing_runs(snap.runs, matched)
    if missing:
        raise Refusal("report", missing_sentence(missing, name))
    merge = merge_campaign(snap.claims, snap.runs, matched)
    merge.image_notes = check_identities(matched, snap.runs)
    usage = [p for rec in matched.values() for p in meter_usage_series(rec.root)]
    view = campaign_view(snap, matched, merge, row_cost=row_cost, usage_series=usage)
    started = {r.run_id: r.started_at for r in snap.runs}
    runs = [rec for _, rec in sorted(matched.items(), key=lambda kv: (started[kv[0]], kv[0]))]
    return build_report(runs, concurrency=concurrency, campaign=view)


def write_report(report: dict[str, Any], output_dir: Path) -> list[Path]:
    existing = [output_dir / n for n in OUTPUT_NAMES if (output_dir / n).exists()]
    if existing:
        raise Refusal(
            "report", f"{existing[0]} already exists, and a report never overwrites one; choose another --output-dir."
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    payload = json.dumps(report, indent=2, allow_nan=False) + "\n"
    outputs = {"report.md": to_markdown(report), "report.json": payload, "report.html": to_html(report)}
    paths = []
    for name in OUTPUT_NAMES:
        # Exclusive: a file that appeared since the check above is still never overwritten.
        create_exclusive(output_dir / name, outputs[name])
        paths.append(output_dir / name)
    return paths


def run_report_command(
    roots: list[Path], output_dir: Path | None, concurrency: int, as_json: bool, campaign: tuple[str, str] | None = None
) -> int:
    """Build the report (`campaign`: (database URL, name) for one campaign over its hosts); write
    its files only into `output_dir` when one is given. Returns an exit code.

    stdout: the JSON (as_json); else the Markdown report without an output directory, or the
    headline, warnings and the files written with one."""
    try:
        report = (
            make_campaign_report(campaign[0], campaign[1], [Path(r) for r in roots], concurrency)
            if campaign
            else make_report([Path(r) for r in roots], concurrency)
        )
        paths = write_report(report, Path(output_dir)) if output_dir is not None else []
    except Refusal as refusal:
        print(f"cowork-adapter report refused ({refusal.stage}): {refusal.sentence}", file=sys.stderr)
        return int(ExitCode.REFUSED)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2, allow_nan=False) + "\n")
    elif not paths:
        sys.stdout.write(to_markdown(report))
    else:
        print(headline(report))
        if valid_line(report):
            print(valid_line(report))
        for warning in report["projection"]["warnings"]:
            print(f"warning: {warning}")
        print("wrote " + ", ".join(str(p) for p in paths))
    return int(ExitCode.OK)
