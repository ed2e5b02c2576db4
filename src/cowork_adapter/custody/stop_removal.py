"""The fast stop's removal: what a stop does itself instead of waiting for the runner's EXIT trap.

Called right after the run is fenced (the stop file: the shim refuses every later creation) and
its runner group signalled, by the launcher's supervisor (StopPath.FAST) and by `cowork-adapter
stop` on a run whose launcher is gone. It is custody's one exact-label cleanup
(docker_ops.cleanup_run): the run's containers listed and removed at once, in parallel, every
admitted creation waited for (custody/creations.py) with a pass every short round for what
landed, then networks and volumes, proven by a fresh listing. A container's accounting is not
read first (host/resources.unread_by_stop: the daemon's answer takes about a second, and a bounded
read of 0.25 s timed out for 20 of 23 containers in bench_stop_latency.py runs at load 5), so
nothing stands between the decision and the removals but one listing. Nothing without the run's
exact label is touched. Killed midway, the caller leaves the fence in place; a removal the daemon
accepted finishes there, and the next cleanup (the watchdog's, the launcher's final one, `clear`)
waits for it and proves the rest.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import CustodyError
from ..host.resources import unread_by_stop  # the stop's note in place of a container's reading
from ..runroot.layout import RunRoot
from .creations import creations_dir
from .docker_ops import cleanup_run


@dataclass(frozen=True)
class StopRemoval:
    removed: int  # containers, networks and volumes removed by this call
    error: str | None  # None: proven (nothing with the label, no creation in flight)
    seconds: float  # from the call to its proof (or its failure)

    @property
    def proven(self) -> bool:
        return self.error is None

    def sentence(self) -> str:
        if self.proven:
            return (
                f"removed {self.removed} object(s) with the run's label in {self.seconds:.2f} s, "
                "proven by a fresh listing"
            )
        return f"could NOT prove the run's labelled objects removed ({self.error})"


def log_line(entry: dict) -> None:
    """A removal error, one JSON line on stderr (the launcher's and `stop`'s console)."""
    print(json.dumps({"event": "cowork_cleanup", **entry}), file=sys.stderr, flush=True)


def remove_for_stop(run_root: Path, docker_host: str, label: str) -> StopRemoval:
    """Remove everything with the run's exact label and prove it; never raises."""
    started = time.monotonic()
    removed, error = 0, None
    try:
        report = cleanup_run(
            docker_host,
            label,
            log_line,
            before_remove=unread_by_stop(RunRoot(run_root).evidence),
            creations=creations_dir(run_root),
        )
        removed = len(report.removed_containers) + len(report.removed_networks) + len(report.removed_volumes)
    except CustodyError as exc:
        error = str(exc)[:500]
    except Exception as exc:  # noqa: BLE001 - the group must still be stopped; a later cleanup judges
        error = f"{type(exc).__name__}: {exc}"[:500]
    return StopRemoval(removed, error, round(time.monotonic() - started, 3))
