"""Benchmark the campaign stop: from the boundary-crossing meter reading to "no labelled container".

One paid demo run at concurrency 4 on four tasks (demo-hang and three others) with the meter
stand-in. Once four agents are in flight, the stand-in's usage jumps to just below the campaign
boundary (ceiling − reserve) and then climbs at --rate USD/s. By default the crossing is placed
1 s before the supervisor's next poll (read from events.jsonl), so the stop begins with the tasks
still in flight; --no-align crosses --cross-after seconds after the jump instead. The script tails
events.jsonl and polls the daemon for the run's exact label every 0.2 s, and prints:

  detect   true crossing (from the meter schedule) → the supervisor's accepted crossing reading
  stop     the crossing reading (its ts, and when the script saw it) → no labelled resource left
  total    true crossing → no labelled resource left
  overshoot_usd = rate × total (what a provider spending at --rate would charge past the boundary)
  and the campaign file's own spent-beyond-boundary after settlement.

The detect part is bounded by one poll (15 s) plus one read slice (5 s); stop is what the
adapter controls directly (stop marker, runner group signal, exact-label cleanup proof).

    DOCKER_HOST=unix:///var/lib/cowork-testbed/docker.sock .venv/bin/python benchmarks/bench_stop_latency.py --rate 0.25
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.scenarios import prepare, read_json
from cowork_adapter.campaign.observe import POLL_SEC, READ_SLICE_SEC
from cowork_adapter.events import parse_ts

TASKS = ["demo-hang", "demo-deck-stateful", "demo-crm-postgres", "demo-round-limit"]
CEILING, RESERVE = 50.0, 5.0
POLL_S = 0.2


def in_flight(run_root: Path) -> int:
    """Agents started (shim evidence) minus tasks with a summary row."""
    evidence = run_root / "custody" / "evidence"
    started = len(list(evidence.glob("*.task"))) if evidence.is_dir() else 0
    done = 0
    for path in (run_root / "bench" / "benchmark_logs").glob("fully_parallel_*/summary.csv"):
        done += max(0, len(path.read_text().splitlines()) - 1)
    return started - done


def read_events(run_root: Path) -> list[dict]:
    path = run_root / "events.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip().endswith("}")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST", ""))
    parser.add_argument("--rate", type=float, default=0.25, help="spending rate after the jump, USD/s")
    parser.add_argument("--cross-after", type=float, default=3.0, help="seconds from the jump to the crossing")
    parser.add_argument("--no-align", action="store_true",
                        help="cross --cross-after s after the jump instead of just before the next poll")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    if not args.docker_host or args.rate <= 0:
        print("bench_stop_latency: pass --docker-host (or DOCKER_HOST) and a positive --rate", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="cowork-bench-stop-"))
    env = prepare(work / "demo", args.docker_host)
    name, campaign = "stop", "campaign-stop.json"
    run_root = env.run_root(name)
    label = run_label(run_root)
    boundary = CEILING - RESERVE
    try:
        proc = env.launch(env.run_args(name, TASKS, campaign=campaign, budget_usd=1000,
                                       extra=["--concurrency", "4"]), name)
        deadline = time.monotonic() + 900
        first_agent = None
        while in_flight(run_root) < 4 and proc.poll() is None and time.monotonic() < deadline:
            if first_agent is None and in_flight(run_root) > 0:
                first_agent = time.monotonic()
            if first_agent is not None and time.monotonic() - first_agent > 120:
                break  # four never overlapped: go on with what is in flight, and say so below
            time.sleep(POLL_S)
        flight_at_jump = in_flight(run_root)
        record = read_json(env.root / campaign)
        baseline, prior = record["usage_baseline"], record.get("prior_spend_usd", 0.0)
        # Jump so that spent = boundary − rate × cross_after, then climb: crossing at t0 + cross_after.
        lead = args.cross_after
        if not args.no_align:
            # Cross just before the supervisor's next poll, so the stop starts with the tasks in flight.
            last_poll = max((parse_ts(e.get("ts")) or 0.0 for e in read_events(run_root)
                             if e.get("kind") == "meter_reading"), default=0.0)
            next_poll = last_poll + POLL_SEC if last_poll else time.time() + args.cross_after
            while next_poll - time.time() < 1.5:
                next_poll += POLL_SEC
            lead = next_poll - 1.0 - time.time()
        usage_now = env.meter.state()["usage"]
        spent_now = usage_now - baseline + prior
        env.meter.add_usage(boundary - spent_now - args.rate * lead)
        env.meter.set_rate(args.rate)
        t0_mono, t0_wall = time.monotonic(), time.time()
        usage_at_t0 = env.meter.state()["usage"]
        cross_mono = t0_mono + (boundary - (usage_at_t0 - baseline + prior)) / args.rate
        cross_wall = t0_wall + (cross_mono - t0_mono)

        seen_mono = reading_wall = None
        flight_at_reading = None
        empty_mono = None
        offset = 0
        events_path = run_root / "events.jsonl"
        while time.monotonic() < deadline:
            if seen_mono is None and events_path.is_file():
                with events_path.open("rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read()
                complete = chunk[: chunk.rfind(b"\n") + 1]
                offset += len(complete)
                for line in complete.splitlines():
                    event = json.loads(line)
                    remaining = event.get("campaign_remaining_usd")
                    if event.get("kind") == "meter_reading" and remaining is not None and remaining <= RESERVE + 1e-9:
                        seen_mono, reading_wall = time.monotonic(), parse_ts(event.get("ts"))
                        flight_at_reading = in_flight(run_root)
                        break
            if seen_mono is not None and label_is_empty(args.docker_host, label):
                empty_mono = time.monotonic()
                break
            time.sleep(POLL_S)
        code = proc.wait(timeout=600)
    finally:
        env.meter.set_rate(0.0005)
        env.meter.stop()
    if seen_mono is None or empty_mono is None:
        print(f"bench_stop_latency: no crossing reading or no empty label before the deadline (exit {code}); see {run_root}",
              file=sys.stderr)
        return 2
    empty_wall = time.time() - (time.monotonic() - empty_mono)
    final = read_json(env.root / campaign)
    spent = final["last_usage"] - final["usage_baseline"] + final.get("prior_spend_usd", 0.0)
    manifest = read_json(run_root / "run_manifest.json")
    detect = reading_wall - cross_wall
    stop_from_ts = empty_wall - reading_wall
    stop_from_seen = empty_mono - seen_mono
    total = empty_mono - cross_mono
    print(f"tasks {TASKS} at concurrency 4; in flight at the jump {flight_at_jump}, at the crossing reading {flight_at_reading}")
    print(f"launcher exit {code}, stop reason {manifest.get('stop_reason')}")
    print(f"rate ${args.rate:g}/s; boundary ${boundary:g} (ceiling {CEILING:g} − reserve {RESERVE:g})")
    print(f"detect  true crossing → accepted crossing reading      {detect:7.2f} s")
    print(f"stop    crossing reading (ts) → no labelled container   {stop_from_ts:7.2f} s")
    print(f"stop    crossing reading (seen) → no labelled container {stop_from_seen:7.2f} s")
    print(f"total   true crossing → no labelled container           {total:7.2f} s")
    print(f"overshoot at ${args.rate:g}/s: stop part ${args.rate * stop_from_ts:.2f}, total ${args.rate * total:.2f}")
    print(f"campaign file: spent ${spent:.2f}, beyond the boundary ${spent - boundary:.2f} (settled after cleanup)")
    worst = POLL_SEC + READ_SLICE_SEC + stop_from_ts
    print(f"worst case (crossing just after a poll: {POLL_SEC:g} s poll + {READ_SLICE_SEC:g} s read slice + stop): "
          f"{worst:.1f} s = ${args.rate * worst:.2f} at ${args.rate:g}/s")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if manifest.get("stop_reason") == "campaign_budget_reserve" else 2


if __name__ == "__main__":
    sys.exit(main())
