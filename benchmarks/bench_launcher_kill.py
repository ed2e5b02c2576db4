"""Benchmark the watchdog: from a SIGKILL of the launcher to the fence, and to "no container left".

N paid demo runs (meter stand-in, stub engine, concurrency 2, more tasks than slots). In each, once
agents are at work, the launcher is SIGKILLed (alternately by pid and by its process group) and the
script polls every 20 ms:

  fence  launcher death → the run's stop file exists (from then on the shim refuses every creation;
         the first refusal recorded in the shim's creations.jsonl after the kill is shown when a
         creation was attempted at all)
  gone   launcher death → the last container of the run's exact label is gone (daemon listing)
  key    launcher death → the key's env file is deleted

and prints min/median/max of each over the N kills, against the targets (fence 5 s; gone and key
within the meter-blindness bound, 30 s).

    DOCKER_HOST=unix:///var/lib/cowork-testbed/docker.sock .venv/bin/python benchmarks/bench_launcher_kill.py --kills 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cowork_adapter.custody.docker_ops import list_labelled
from cowork_adapter.custody.labels import run_label
from cowork_adapter.custody.watchdog import custody_paths
from cowork_adapter.demo.env import agent_started, prepare, wait_for

TASKS = ["demo-hang", "demo-csv-totals", "demo-crm-postgres", "demo-wrong-answer"]
POLL_S = 0.02
FENCE_TARGET, BOUND = 5.0, 30.0


def first_refusal_after(run_root: Path, since: float) -> float | None:
    path = run_root / "custody" / "evidence" / "creations.jsonl"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if not item.get("admitted") and item.get("ts", 0) >= since:
            return item["ts"] - since
    return None


def one_kill(env, index: int, how: str) -> dict:
    name = f"bench-kill-{index}"
    run_root = env.run_root(name)
    paths = custody_paths(run_root)
    args = env.run_args(name, TASKS, campaign=f"campaign-{name}.json", extra=["--task-timeout", "90"])
    with open(env.root / f"{name}.log", "ab") as log:
        launcher = subprocess.Popen(
            args,
            env={**os.environ, env.key_env: env.key},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    if (
        not wait_for(lambda: agent_started(run_root) or launcher.poll() is not None, 600, 0.1)
        or launcher.poll() is not None
    ):
        launcher.kill()
        raise SystemExit(f"run {name} ended before an agent started (see {env.root / name}.log)")
    # The label holds a per-run nonce the launcher writes to the manifest: read it once an agent runs.
    label = run_label(run_root)
    time.sleep(2)
    killed = time.time()
    t0 = time.monotonic()
    if how == "pid":
        os.kill(launcher.pid, signal.SIGKILL)
    else:
        os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait()
    fence = gone = key = None
    next_listing = 0.0
    while time.monotonic() - t0 < BOUND + 30 and (fence is None or gone is None or key is None):
        now = time.monotonic() - t0
        if fence is None and paths["stop"].exists():
            fence = now
        if key is None and not paths["agent_env"].exists():
            key = now
        if gone is None and now >= next_listing:  # a daemon listing costs more than a stat: every 0.2 s
            if not list_labelled(env.docker_host, label, timeout=10).containers:
                gone = time.monotonic() - t0
            next_listing = now + 0.2
        time.sleep(POLL_S)
    return {"how": how, "fence": fence, "gone": gone, "key": key, "refusal": first_refusal_after(run_root, killed)}


def summary(values: list[float | None]) -> str:
    seen = [v for v in values if v is not None]
    if not seen:
        return "none observed"
    missing = len(values) - len(seen)
    text = f"min {min(seen):6.2f} s  median {statistics.median(seen):6.2f} s  max {max(seen):6.2f} s"
    return text + (f"  ({missing} never within the wait)" if missing else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="keep the scratch demo root")
    args = parser.parse_args()
    docker_host = os.environ.get("DOCKER_HOST")
    if not docker_host:
        print("set DOCKER_HOST to the test bed's daemon", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="bench-launcher-kill-"))
    env = prepare(scratch / "root", docker_host)
    results = []
    try:
        for i in range(args.kills):
            how = "pid" if i % 2 == 0 else "group"
            result = one_kill(env, i, how)
            results.append(result)
            print(
                f"kill {i + 1}/{args.kills} by {how}: "
                + ", ".join(f"{k} {v:.2f} s" if v is not None else f"{k} -" for k, v in result.items() if k != "how"),
                flush=True,
            )
    finally:
        env.meter.stop()
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nover {len(results)} launcher kills (SIGKILL; half by pid, half by process group), agents in flight:")
    print(
        f"  death → fence (stop file)          {summary([r['fence'] for r in results])}   target ≤ {FENCE_TARGET:g} s"
    )
    print(
        f"  death → first shim refusal         {summary([r['refusal'] for r in results])}"
        "   (only when a creation was tried)"
    )
    print(f"  death → key file deleted           {summary([r['key'] for r in results])}   target ≤ {BOUND:g} s")
    print(f"  death → last container of run gone {summary([r['gone'] for r in results])}   target ≤ {BOUND:g} s")
    fences = [r["fence"] for r in results]
    gones = [r["gone"] for r in results]
    ok = all(f is not None and f <= FENCE_TARGET for f in fences) and all(g is not None and g <= BOUND for g in gones)
    print(f"  ratio max(gone) / bound: {max(g for g in gones if g is not None) / BOUND:.2f}" if any(gones) else "")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
