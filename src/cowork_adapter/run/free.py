"""A run that spends nothing: the reference engines (oracle, nop) under a paid run's custody.

Everything a paid run does with containers and evidence is kept (the watchdog armed before the
runner, the shim with the run's label and limits, the supervised runner, the daemon watch, exact-
label cleanup proven by a relisting, the ledger, receipts, the audit). What money needs is left
out, because no model is ever called: no key is read or written, no meter is read, and no campaign
file is opened. The supervisor's meter port answers at once with "no stop": its blindness bound
then only paces the loop.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from ..container.reference import GROUNDTRUTH_DIR, STAGE_DIR
from ..custody.daemon_watch import DaemonWatch
from ..runroot.manifest import write_manifest
from .paid import NO_CAMPAIGN, PaidRun
from ..schemas.manifest import RunManifest
from .signals import LAUNCHER_SIGNALS
from ..vocab import EventKind, StopReason


def stage_groundtruth(bench_copy: Path, task_ids: list[str]) -> int:
    """For an oracle run only: each task's groundtruth_workspace copied under configs/ (mounted
    read-only into task containers), because the agent container's task tree is sanitized.
    Returns how many tasks had one to stage."""
    stage = bench_copy / "configs" / STAGE_DIR
    stage.mkdir(parents=True, exist_ok=False)
    staged = 0
    for task in task_ids:
        source = bench_copy / "tasks" / "finalpool" / task / GROUNDTRUTH_DIR
        if source.is_dir():
            shutil.copytree(source, stage / task, symlinks=True)
            staged += 1
    return staged


def run_free(cfg, manifest: RunManifest, bench_copy: Path) -> int:
    """Run the selection with a reference engine; returns the exit code (see vocab.ExitCode)."""
    run = FreeRun(cfg, manifest, bench_copy)
    try:
        return run.run()
    finally:
        run.end_watchdog()


class FreeRun(PaidRun):
    """PaidRun's custody and supervision, without a key, a meter or a campaign."""

    def __init__(self, cfg, manifest: RunManifest, bench_copy: Path) -> None:
        super().__init__(cfg, manifest, bench_copy, key="")

    def run(self) -> int:
        cfg = self.cfg
        self.event(EventKind.RUN_ADMITTED, run_root=str(cfg.run_root), run_label=self.label,
                   selected=len(self.manifest.selection.task_ids),
                   resume_generation=self.manifest.selection.resume_generation)
        write_manifest(cfg.run_root, self.manifest)
        self.progress.start_refresher()
        self.daemon_watch = DaemonWatch(cfg.docker_host, self._daemon_lost).start()
        try:
            result = self._supervise(time.monotonic())
        finally:
            self.daemon_watch.stop()
        self.progress.refresh_quietly(live=True, interruption_cause="in_progress")
        with LAUNCHER_SIGNALS.critical():  # custody always finishes
            result, cleanup_error = self._end_custody(result)
            self._record_result(result)
            self.manifest.campaign_settlement = NO_CAMPAIGN
            return self._finish(result, cleanup_error, NO_CAMPAIGN)

    def observe(self, deadline: float) -> tuple[float, StopReason | None]:
        """No meter: nothing is spent, so there is nothing to read and never a money stop."""
        return time.monotonic(), None
