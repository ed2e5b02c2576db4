"""Where a run root's files are: the one place in the host's code that spells their names.

`RunRoot(path)` maps a run root to each of its files; every command reads and writes them through
it, with the typed readers and writers of runroot/ and schemas/. The bare names below are for
sentences and records that name a file (a write failure, a status's source); the task dumps' own
files are the container's and are named in container/ (protocol.py, ouroboros.py), but for the engine's log.

This module imports nothing of the project, so any layer may use it (tests/unit/test_runroot_layout.py
fails when a name below is spelled anywhere else in src/).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# The run's own records, at the top of the run root.
MANIFEST = "run_manifest.json"
EVENTS = "events.jsonl"
RESULT_INDEX = "result_index.jsonl"
MONITOR = "monitor.json"
# The launcher's audit at the run's end; the seed's own audit command writes `--output RUN/audit.json`,
# so that name stays the operator's (runs from before the launcher's audit had its own name wrote theirs there).
LAUNCHER_AUDIT = "audit.launcher.json"
OPERATOR_AUDIT = "audit.json"
TASK_VALIDITY = "task_validity.json"
TASK_VALIDITY_HTML = "task_validity.html"  # the same table for people, beside it
WATCHDOG_LOG = "watchdog.log"
CONSOLE_LOG = "console.log"
# The launcher's own output once its terminal closed (SIGHUP): the run goes on, and says so here.
LAUNCHER_OUTPUT = "launcher-output.log"
IMAGE_BUILD_LOG = "image_build.log"
CLAIMED = "claims.jsonl"  # a shared-campaign host's claimed batches
SHARED_RUNNER = "shared_runner.json"  # a shared-campaign host's batch runner configuration
TRIALS = "trials.json"  # a trial-set folder's record (run --trials): written before any trial starts
TRIAL_PREFIX = "trial-"  # a trial set's run roots: trial-1 ... trial-K

# custody/: the launcher's custody of the run's processes and containers.
CUSTODY = "custody"
CUSTODY_PROCESSES = "processes.json"
STOP = "stop"
ADMISSION = "admission.json"
SHIM_CONFIG = "shim_config.json"
BASH_ENV = "bash_env.sh"
EVIDENCE = "evidence"  # custody/evidence/: the shim's seals, held summaries, readings, creations log
CREATIONS_LOG = "creations.jsonl"
CREATIONS = "creations"  # custody/creations/: a lock per container creation in flight
CUSTODY_PROCESSES_FILE = f"{CUSTODY}/{CUSTODY_PROCESSES}"  # as a recorded pid's source names it
ADMISSION_FILE = f"{CUSTODY}/{ADMISSION}"

# private/: what the agent must never read (the key variable, the gateway's secret).
PRIVATE = "private"
AGENT_ENV = "agent.env"
GATEWAY_SECRET = "gateway.secret"
PROVIDER_LEAF_KEY = "provider-leaf.key"  # the default route's TLS key (gateway/tls.py), 0600

# tls/: the default route's public certificates (gateway/tls.py); the bundle is mounted into agent containers.
TLS = "tls"
PROVIDER_BUNDLE = "provider-ca-bundle.pem"
RUN_CA_CERT = "run-ca.pem"
PROVIDER_LEAF_CERT = "provider-leaf.pem"

# gateway/: the opt-in model gateway's request log.
GATEWAY = "gateway"
GATEWAY_REQUESTS = "requests.jsonl"

# bench/: the run's copy of the benchmark; its dumps/ hold the task dumps.
BENCH = "bench"
DUMPS = "dumps"
CONFIGS = "configs"
RELATIVE_DUMPS = Path(BENCH, DUMPS)  # bench/dumps, relative to a run root
RUN_CONFIG = "cowork_adapter_run.json"  # the run flags the container reads, in the bench copy's configs/
TMP = "tmp"

# The engine's own log, copied into a task dump's ouroboros/ by container/ouroboros.py: another file that has
# the run log's name (named here so the host's readers of dumps spell it once too; container/ cannot import this).
ENGINE_EVENTS = "events.jsonl"

# The dumps the launcher's meter found over a bound while their task ran (runroot/dump_meter.py), in custody/evidence/.
DUMP_BOUNDS_LOG = "dump_bounds.jsonl"

# Seal files of one eval exec, in custody/evidence/ under the shim's runner id.
SEAL_SUFFIX = ".seal.json"
SEAL_HEAD_SUFFIX = ".seal-head.json"
HELD_SUMMARY_SUFFIX = ".agent_summary.json"
# The task database between the phases (custody/taskdb_probe.py writes them, score/taskdb.py reads them).
TASKDB_BASELINE_SUFFIX = ".taskdb-baseline.json"
TASKDB_SUFFIX = ".taskdb.json"

# What makes a folder a run root (any one of them: a run killed early may have only its events).
MARKERS = (MANIFEST, MONITOR, EVENTS, RESULT_INDEX)
# Files of a run root that commands read, relative to it; each must be a regular file when present.
READ_FILES = (*MARKERS, OPERATOR_AUDIT, LAUNCHER_AUDIT, CUSTODY_PROCESSES_FILE, f"{CUSTODY}/{STOP}")


@dataclass(frozen=True)
class RunRoot:
    """A run root and where each of its files is (paths only: nothing is read or checked here)."""

    path: Path

    def __init__(self, path: Path | str | os.PathLike[str]) -> None:
        object.__setattr__(self, "path", Path(path))

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    # -------------------------------------------------------------- the run's records

    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST

    @property
    def events(self) -> Path:
        return self.path / EVENTS

    @property
    def result_index(self) -> Path:
        return self.path / RESULT_INDEX

    @property
    def monitor(self) -> Path:
        return self.path / MONITOR

    @property
    def launcher_audit(self) -> Path:
        return self.path / LAUNCHER_AUDIT

    @property
    def operator_audit(self) -> Path:
        return self.path / OPERATOR_AUDIT

    @property
    def task_validity(self) -> Path:
        return self.path / TASK_VALIDITY

    @property
    def task_validity_html(self) -> Path:
        return self.path / TASK_VALIDITY_HTML

    @property
    def watchdog_log(self) -> Path:
        return self.path / WATCHDOG_LOG

    @property
    def console_log(self) -> Path:
        return self.path / CONSOLE_LOG

    @property
    def launcher_output(self) -> Path:
        return self.path / LAUNCHER_OUTPUT

    @property
    def image_build_log(self) -> Path:
        return self.path / IMAGE_BUILD_LOG

    @property
    def image_context(self) -> Path:
        """The derived image's build folder (tmp/image)."""
        return self.path / TMP / "image"

    @property
    def claimed(self) -> Path:
        return self.path / CLAIMED

    @property
    def shared_runner(self) -> Path:
        return self.path / SHARED_RUNNER

    # -------------------------------------------------------------- custody/

    @property
    def custody(self) -> Path:
        return self.path / CUSTODY

    @property
    def custody_processes(self) -> Path:
        return self.custody / CUSTODY_PROCESSES

    @property
    def stop_file(self) -> Path:
        return self.custody / STOP

    @property
    def admission(self) -> Path:
        return self.custody / ADMISSION

    @property
    def shim_config(self) -> Path:
        return self.custody / SHIM_CONFIG

    @property
    def bash_env(self) -> Path:
        return self.custody / BASH_ENV

    @property
    def creations(self) -> Path:
        return self.custody / CREATIONS

    @property
    def evidence(self) -> Path:
        return self.custody / EVIDENCE

    @property
    def creations_log(self) -> Path:
        return self.evidence / CREATIONS_LOG

    @property
    def dump_bounds_log(self) -> Path:
        return self.evidence / DUMP_BOUNDS_LOG

    def seal(self, runner_id: str) -> Path:
        return self.evidence / (runner_id + SEAL_SUFFIX)

    def held_summary(self, runner_id: str) -> Path:
        return self.evidence / (runner_id + HELD_SUMMARY_SUFFIX)

    # -------------------------------------------------------------- private/ and gateway/

    @property
    def private(self) -> Path:
        return self.path / PRIVATE

    @property
    def agent_env(self) -> Path:
        return self.private / AGENT_ENV

    @property
    def gateway_secret(self) -> Path:
        return self.private / GATEWAY_SECRET

    @property
    def provider_leaf_key(self) -> Path:
        return self.private / PROVIDER_LEAF_KEY

    @property
    def tls(self) -> Path:
        return self.path / TLS

    @property
    def gateway_requests(self) -> Path:
        return self.path / GATEWAY / GATEWAY_REQUESTS

    # -------------------------------------------------------------- bench/

    @property
    def bench(self) -> Path:
        return self.path / BENCH

    @property
    def dumps(self) -> Path:
        return dumps_of(self.bench)

    @property
    def run_config(self) -> Path:
        """The run flags the container reads (RUN_CONFIG under a bench copy's CONFIGS)."""
        return self.bench / CONFIGS / RUN_CONFIG


def dumps_of(bench: Path) -> Path:
    """The task dumps' folder of a benchmark copy (a run's own bench/, or the working copy its manifest names)."""
    return Path(bench) / DUMPS
