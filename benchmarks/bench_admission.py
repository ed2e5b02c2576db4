"""Measure what admission by load (admission.py) reads on this host, to set and check its defaults.

Takes --samples readings --interval seconds apart: the 1-minute load average per CPU, MemAvailable
and the Docker daemon's ping time (the SDK's /_ping, what admission times), then prints min /
median / p99 / max of each and the decision the default limits would take at each reading.

    DOCKER_HOST=unix:///var/lib/cowork-testbed/docker.sock .venv/bin/python benchmarks/bench_admission.py \
        [--samples 60] [--interval 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import docker

from cowork_adapter.host.admission import GIB, AdmissionLimits, decide, read_host_load


def spread(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return f"{ordered[0]:.3f} / {statistics.median(ordered):.3f} / {p99:.3f} / {ordered[-1]:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    host = os.environ.get("DOCKER_HOST")
    if not host:
        print("set DOCKER_HOST to the daemon to measure", file=sys.stderr)
        return 2
    client = docker.DockerClient(base_url=host, timeout=30)
    limits = AdmissionLimits()
    readings = []
    for _ in range(args.samples):
        readings.append(read_host_load(client.ping))
        time.sleep(args.interval)
    client.close()
    pings = [r.daemon_ping_sec for r in readings if r.daemon_ping_sec is not None]
    loads = [r.load_per_cpu for r in readings if r.load_per_cpu is not None]
    mems = [r.mem_available_bytes / GIB for r in readings if r.mem_available_bytes is not None]
    admitted = sum(decide(r, limits).admit for r in readings)
    print(f"{len(readings)} readings, {args.interval:g} s apart, {readings[0].cpus} CPU(s); min / median / p99 / max")
    print(f"  daemon ping (s):          {spread(pings)}  ({len(readings) - len(pings)} unanswered)")
    print(f"  load average per CPU:     {spread(loads)}")
    print(f"  MemAvailable (GiB):       {spread(mems)}")
    print(
        f"  default limits (load/CPU <= {limits.max_load_per_cpu:g}, MemAvailable >= "
        f"{limits.min_mem_available_bytes / GIB:g} GiB, ping <= {limits.max_daemon_ping_sec:g} s): "
        f"{admitted}/{len(readings)} readings admitted"
    )
    print(f"  load average at the end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
