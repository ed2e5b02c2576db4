"""The runner of a shared campaign's host: claim a batch, run it with the benchmark's UNCHANGED
`run_parallel.sh`, settle it by its receipts, claim the next, until nothing is left for this run.

`python -m cowork_adapter.run.batch_runner CONFIG` is what the supervisor starts as the runner
(run.py): it lives in the runner's process group, so every stop, fence and watchdog path that
kills the runner kills this loop with it, and each run_parallel.sh it starts stays in that group.
The database password reaches this process in its environment (PGPASSWORD) and is dropped, with
every other libpq variable, from run_parallel.sh's.

Each batch is appended to the run's claimed file (fsynced) BEFORE its runner starts, so the run's
ledger answers for every task it may have run. Exit code: 0 when every batch's runner exited 0,
else the last non-zero code; 75 when the database refused a claim or a settlement (the launcher
sees the same lease problem and stops).

Admission by load (admission.py, issue 20 deliverable 4): before each claim the loop takes a
reading of the host and claims only when `decide` admits. While it does not, the loop waits
(claiming nothing, so no task is held back from the other hosts; the launcher's lease thread keeps
renewing the host run) and says when the wait starts and ends, on its console and in
custody/admission.json, which `status` shows. A wait is never a failure: it changes no exit code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from ..campaign.pg_store import ClaimLost, TaskClaims
from ..campaign.shared import settle_from_receipts
from ..fileio import replace_atomic
from ..host.admission import AdmissionLimits, HostLoad, decide, read_host_load
from ..runroot import layout
from ..schemas.admission import AdmissionState
from ..schemas.multihost import BatchRunnerConfig, ClaimedBatch
from ..score.ledger import settled_attempts

CLAIM_LOST_EXIT = 75
WAIT_POLL_SEC = 2.0
# How often a host waiting for load takes a new reading: the 1-minute load average moves slowly,
# and each reading pings the daemon, so more often would only add to the load it waits on.
ADMISSION_POLL_SEC = 5.0
ADMISSION_FILE = layout.ADMISSION_FILE


def runner_env(environ: dict[str, str]) -> dict[str, str]:
    """run_parallel.sh's environment: ours without libpq's variables (no database password)."""
    return {k: v for k, v in environ.items() if not k.startswith("PG")}


def append_batch(path: Path, batch: ClaimedBatch) -> None:
    with open(path, "ab") as out:
        out.write(msgspec.json.encode(batch) + b"\n")
        out.flush()
        os.fsync(out.fileno())


def say(text: str) -> None:
    print(f"cowork-adapter batch runner: {text}", flush=True)


def wait_for_admission(
    read: Callable[[], HostLoad],
    limits: AdmissionLimits,
    *,
    stopped: Callable[[], bool],
    record: Callable[[AdmissionState], None],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    poll_sec: float = ADMISSION_POLL_SEC,
) -> bool:
    """Return once the host admits a batch (True) or the run is stopped while waiting (False).

    One console line and one state record when a wait starts and one when it ends; nothing while
    the host admits at once, so a run that never waits writes nothing."""
    started: float | None = None
    while True:
        decision = decide(read(), limits)
        if decision.admit or stopped():
            if started is not None:
                waited = clock() - started
                sentence = decision.sentence() if decision.admit else "the run was stopped while waiting for load"
                say(f"wait for load ended after {waited:.0f} s: {sentence}")
                record(AdmissionState(waiting=False, sentence=sentence, since=datetime.now(UTC), waited_sec=waited))
            return decision.admit
        if started is None:
            started = clock()
            say(decision.sentence())
            record(AdmissionState(waiting=True, sentence=decision.sentence(), since=datetime.now(UTC)))
        sleep(poll_sec)


def daemon_ping(docker_host: str, timeout: float) -> Callable[[], object]:
    """A ping of the run's daemon through one client made on first use (the Docker SDK is slow to import)."""
    client = None

    def ping() -> object:
        nonlocal client
        if client is None:
            import docker

            client = docker.APIClient(base_url=docker_host, timeout=timeout)  # type: ignore[arg-type]  # a float: see host/daemon.py
        return client.ping()

    return ping


def state_writer(run_root: Path) -> Callable[[AdmissionState], None]:
    path = run_root / ADMISSION_FILE

    def write(state: AdmissionState) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            replace_atomic(path, msgspec.json.encode(state))
        except OSError as exc:  # the console line says the same; a full disk must not stop the loop
            say(f"{path} not written ({exc.strerror})")

    return write


def main(config_path: str) -> int:
    cfg = msgspec.json.decode(Path(config_path).read_bytes(), type=BatchRunnerConfig)
    stop = Path(cfg.stop_file)
    env = runner_env(dict(os.environ))
    tried: list[str] = []
    code = 0
    batch_no = 0
    waited_since: float | None = None
    last_start = 0.0
    run_root = Path(cfg.run_root)
    limits = AdmissionLimits(**msgspec.structs.asdict(cfg.admission))
    say(f"admission limits: {asdict(limits)}")
    # A ping slower than twice the limit is as good as no answer; bounded so a stuck daemon cannot
    # hold the loop (and its stop check) for long.
    ping = daemon_ping(cfg.docker_host, timeout=min(30.0, 2 * limits.max_daemon_ping_sec + 1))
    record = state_writer(run_root)
    with TaskClaims(cfg.db_url, cfg.campaign) as claims:
        try:
            while not stop.exists():
                if not wait_for_admission(lambda: read_host_load(ping), limits, stopped=stop.exists, record=record):
                    break
                ids = claims.claim(cfg.run_id, cfg.claim_batch, exclude=tried)
                if not ids:
                    # Claims of a host whose lease lapsed come back once its run is proven fenced
                    # (the launcher's lease thread does that): wait a bounded time for them.
                    if claims.lapsed_claims() == 0:
                        break
                    waited_since = waited_since or time.monotonic()
                    if time.monotonic() - waited_since > cfg.wait_for_fence_sec:
                        say("claims of a lapsed run were not released in time; ending")
                        break
                    time.sleep(WAIT_POLL_SEC)
                    continue
                waited_since = None
                batch_no += 1
                append_batch(
                    Path(cfg.claimed_file), ClaimedBatch(batch=batch_no, tasks=ids, claimed_at=datetime.now(UTC))
                )
                tried.extend(ids)
                say(f"batch {batch_no}: {' '.join(ids)}")
                # run_parallel.sh names its log dir by the second it starts: never two batches in one.
                time.sleep(max(0.0, last_start + 1.0 - time.time()))
                last_start = time.time()
                done = subprocess.run(
                    ["bash", "run_parallel.sh", str(cfg.concurrency), *ids],
                    cwd=cfg.bench_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                )
                if done.returncode != 0:
                    code = done.returncode
                settled = settle_from_receipts(claims, cfg.run_id, cfg.run_root, ids, settled_attempts)
                say(f"batch {batch_no} settled: {settled}")
        except ClaimLost as exc:
            say(f"stopped: {exc}")
            return CLAIM_LOST_EXIT
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
