"""The export of a trial set, opened in Inspect's own viewer (`inspect view` on loopback) in headless
Chromium: the log list shows distinct runs with their statuses (a finished trial set `success`, a stopped
run `cancelled`), and a sample whose task failed for an infrastructure reason shows its error.

No Docker: synthetic run roots (tests/synthetic_run.py). The viewer and Chromium are stopped by their pids.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from inspect_view import ROW_TITLES, Viewer  # tests/inspect_view.py
from synthetic_run import CONFIG, ledger_run

from cowork_adapter.export import export_inspect

SELECTION = ["t-pass", "t-fail", "t-infra"]
OUTCOMES = {"t-pass": "pass", "t-fail": "fail", "t-infra": "infra"}


def test_the_viewer_lists_distinct_runs_with_their_status_and_shows_an_infrastructure_error(tmp_path: Path) -> None:
    trials = [ledger_run(tmp_path / "set-a" / f"trial-{i}", SELECTION, OUTCOMES, outcome="incomplete") for i in (1, 2)]
    stopped = ledger_run(
        tmp_path / "run-b", SELECTION, OUTCOMES, outcome="stopped", applied_config={**CONFIG, "model": "other/model"}
    )
    out = tmp_path / "logs"
    trial_log, stopped_log = export_inspect([*trials, stopped], out, workers=1)
    base = os.environ.get("COWORK_TEST_ARTIFACTS") or str(Path(__file__).resolve().parents[2] / "test-artifacts")
    artifacts = Path(base) / f"inspect-view-trials-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    print(f"inspect view screenshots and logs: {artifacts}")
    # Each page is read once it shows everything asserted below: the viewer lists a log's name before it
    # has loaded its header (status, model, tags), and one log's header can come long after the other's on
    # a loaded machine. Waiting for the names and one status word alone let the list be read half-loaded.
    with Viewer(out, artifacts) as viewer:
        rows = viewer.page_text(
            "/logs",
            [trial_log.name, stopped_log.name, " | success | ", " | cancelled | ", "trials:2", "other/model"],
            artifacts / "list.png",
            expression=ROW_TITLES,
        )
        error = viewer.page_text(
            f"/logs/{trial_log.name}/samples/sample/t-infra/2/error",
            ["infra_failed", "No official verdict", "Epoch 2"],
            artifacts / "error.png",
            ready=lambda text: "SAMPLE ERROR" in text.upper(),
        )
    # One row per log, each with its own name, model and tags, and its status as the viewer shows it.
    by_file = {line.split(" | ")[0]: line for line in rows.splitlines() if line.endswith(".eval") or ".eval |" in line}
    assert set(by_file) == {trial_log.name, stopped_log.name}, rows
    assert " | success | " in by_file[trial_log.name] and "trials:2" in by_file[trial_log.name], rows
    assert "set-a" in by_file[trial_log.name] and "test/model" in by_file[trial_log.name], rows
    assert " | cancelled | " in by_file[stopped_log.name] and "other/model" in by_file[stopped_log.name], rows
    # The infrastructure failure is the sample's error, apart from its score.
    assert "SAMPLE ERROR" in error.upper() and "No official verdict" in error, error[:3000]
    assert "infra_failed" in error and "Epoch 2" in error, error[:3000]
