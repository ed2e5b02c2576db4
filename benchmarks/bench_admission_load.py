"""Measure a real task's start-up under a series of background CPU loads, to set --max-load-per-cpu.

For each level (busy processes per CPU, made and stopped by this script) it repeats one task's
start-up on the REAL benchmark's images, as the unchanged runner and the engines do it:
* PostgreSQL: `postgres:15` on a fresh network with the runner's env and seed mount, until
  `pg_isready -h 127.0.0.1` answers inside it (the runner's TCP check). Bound: the runner's
  150 tries 2 s apart, 300 s.
* the agent container: the pack image (`$COWORK_REAL_BASE_IMAGE`) started detached, until a first
  `exec` answers. No bound of its own (the runner execs into it right away).
* the task's MCP servers (`--task`'s needed_mcp_servers, rendered from the benchmark's yamls by the
  adapter's own renderer), timed by benchmarks/admission_load_handshake.py inside that container:
  - one at a time, as mcp-proxy starts them for the adapter's Ouroboros engine (it serves nothing
    until every server has answered `initialize`); bound: the adapter's start wait, 300 s, on all;
  - four at once, as the benchmark's default engine (CAMEL's MCPToolkit) connects them; bound: each
    server's yaml `client_session_timeout_seconds` per attempt (10 s for word and pptx; 2 attempts).
Beside the samples, once a second: the daemon's ping, the runnable count (/proc/loadavg field 4,
the reader itself taken off) and MemAvailable.

Prints per level min / median / max of each time, the load per CPU reached (the mean runnable
count per CPU read for --quiet-sec before each sample: the background the next task is admitted
into, which the 1-minute load average that admission reads tends to; the mean during the samples,
the start-up's own processes included, is printed beside it) and the worst ratio of a start-up to
its bound; then the rule: the highest reached load per CPU whose adapter-path ratio (PostgreSQL
and the one-at-a-time MCP start-up over 300 s) stays at or under --fraction, at every level up to
it (admission_threshold.py), and the same for CAMEL's first connect within each yaml timeout.

Everything it starts carries the label org.cowork-adapter.bench.admission-load=<its pid> and is
removed by that label at the end, on Ctrl-C or SIGTERM; containers left by a run that was killed
(its pid gone) are removed at the next start. Busy processes exit by themselves when this process
dies. Other jobs on the machine add to the load: the reached load is measured, not assumed.

    eval "$(cat /tmp/rb.env)"   # DOCKER_HOST, COWORK_REAL_BENCH, COWORK_REAL_BASE_IMAGE
    .venv/bin/python benchmarks/bench_admission_load.py [--levels 0,1,2,4,6,8] [--level-sec 90]
        [--min-samples 2] [--task kulinar-workshop-materials] [--fraction 0.5] [--keep-going]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
from admission_threshold import LevelRow, choose_threshold

from cowork_adapter.campaign.commands import process_exists
from cowork_adapter.container import mcp
from cowork_adapter.host.admission import GIB, parse_mem_available, timed_ping

LABEL = "org.cowork-adapter.bench.admission-load"
PG_IMAGE = "postgres:15"
# The unchanged runner's PostgreSQL settings and bounds (run_parallel.sh; research/cowork-bench.md).
PG_ENV = {"POSTGRES_DB": "cowork_gym", "POSTGRES_USER": "eigent", "POSTGRES_PASSWORD": "camel"}
PG_READY_BOUND_SEC = 150 * 2.0
PG_CLIENT_ENV = {"PGPORT": "5432", "PGUSER": "eigent", "PGPASSWORD": "camel", "PGDATABASE": "cowork_gym"}
# The adapter's wait for mcp-proxy to serve (container/agent.py START_WAIT_SEC).
ADAPTER_START_WAIT_SEC = 300.0
CAMEL_CONNECT_CONCURRENCY = 4  # MCPToolkit's default (MCP_CONNECT_CONCURRENCY)
WORKSPACE = "/workspace/dumps/admission-bench/SingleUserTurn-{task}/workspace"
HANDSHAKE = Path(__file__).with_name("admission_load_handshake.py")
# A busy process: pure CPU, and it exits as soon as its parent (this script) is gone, even by SIGKILL.
BUSY = "import os\np = os.getppid()\nwhile os.getppid() == p:\n    for _ in range(100000): pass\n"


def spread(values: list[float], digits: int = 2) -> str:
    if not values:
        return "none"
    return " / ".join(f"{v:.{digits}f}" for v in (min(values), statistics.median(values), max(values)))


@dataclass
class Sample:
    pg_ready: float | None = None
    agent_start: float | None = None
    seq_all_up: float | None = None  # one at a time: the mcp-proxy path's start-up
    seq_servers: dict = field(default_factory=dict)
    conc_servers: dict = field(default_factory=dict)  # four at once: the CAMEL path
    peak_memory: int | None = None
    errors: list[str] = field(default_factory=list)

    def adapter_ratio(self) -> float:
        times = [(self.pg_ready, PG_READY_BOUND_SEC), (self.seq_all_up, ADAPTER_START_WAIT_SEC)]
        return max(float("inf") if t is None else t / bound for t, bound in times)

    def upstream_ratio(self) -> float:
        ratios = [
            float("inf") if row["init_sec"] is None else row["init_sec"] / row["timeout_sec"]
            for row in self.conc_servers.values()
        ]
        return max(ratios) if ratios else float("inf")


class HostWatch(threading.Thread):
    """Every 0.25 s the runnable count, once a second the daemon's ping and MemAvailable, until
    stopped. Runnable counts taken while `quiet` is set (no sample running) are the background the
    next task would be admitted into; the others include the measured start-up itself."""

    def __init__(self, client: docker.DockerClient) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.stop_event = threading.Event()
        self.quiet = threading.Event()
        self.pings: list[float] = []
        self.unanswered = 0
        self.runnable: list[int] = []
        self.background: list[int] = []
        self.mem: list[int] = []

    def run(self) -> None:
        tick = 0
        while not self.stop_event.wait(0.25):
            running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
            running = max(0, running - 1)  # this reader is running while it reads
            (self.background if self.quiet.is_set() else self.runnable).append(running)
            tick += 1
            if tick % 4:
                continue
            ping = timed_ping(self.client.ping)
            if ping is None:
                self.unanswered += 1
            else:
                self.pings.append(ping)
            self.mem.append(parse_mem_available(Path("/proc/meminfo").read_text()))


class Bench:
    def __init__(self, client: docker.DockerClient, bench_dir: Path, image: str, task: str) -> None:
        self.client = client
        self.bench_dir = bench_dir
        self.image = image
        self.task = task
        self.labels = {LABEL: str(os.getpid())}
        self.busy: list[subprocess.Popen] = []
        self.specs = self._server_specs()
        self.seq = 0

    def _server_specs(self) -> dict:
        config = json.loads((self.bench_dir / "tasks" / "finalpool" / self.task / "task_config.json").read_text())
        names = list(config.get("needed_mcp_servers") or [])
        configs = str(self.bench_dir / "configs" / "mcp_servers")
        workspace = WORKSPACE.format(task=self.task)
        subst = {
            "local_servers_paths": "/opt/local_servers",
            "agent_workspace": workspace,
            "task_dir": f"/workspace/tasks/finalpool/{self.task}",
        }
        rendered = mcp.render_servers(names, configs, subst=subst, env=PG_CLIENT_ENV, workspace=workspace, is_root=True)
        docs = mcp.load_server_docs(configs)
        for name, server in rendered.items():
            server["timeout"] = float(docs[name].get("client_session_timeout_seconds") or 60)
        return rendered

    # ---------------------------------------------------------------- load

    def set_busy(self, count: int) -> None:
        while len(self.busy) > count:
            self._end(self.busy.pop())
        while len(self.busy) < count:
            self.busy.append(
                subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.DEVNULL, start_new_session=True)
            )  # Ctrl-C reaches only this script

    @staticmethod
    def _end(proc: subprocess.Popen) -> None:
        proc.kill()
        proc.wait()

    # ---------------------------------------------------------------- one sample

    def sample(self) -> Sample:
        self.seq += 1
        tag = f"admload-{os.getpid()}-{self.seq}"
        out = Sample()
        network = self.client.networks.create(f"net-{tag}", labels=self.labels)
        try:
            self._pg(tag, out)
            self._agent(tag, out)
        except (docker.errors.DockerException, OSError, ValueError) as exc:
            out.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            self._remove(f"{LABEL}={os.getpid()}")
            network.remove()
        return out

    def _pg(self, tag: str, out: Sample) -> None:
        seed = self.bench_dir / "db" / "init.sql.gz"
        start = time.monotonic()
        pg = self.client.containers.run(
            PG_IMAGE,
            name=f"pg-{tag}",
            network=f"net-{tag}",
            detach=True,
            labels=self.labels,
            environment=PG_ENV,
            volumes={str(seed): {"bind": "/docker-entrypoint-initdb.d/init.sql.gz", "mode": "ro"}},
        )
        deadline = start + PG_READY_BOUND_SEC
        while time.monotonic() < deadline:
            code, _ = pg.exec_run(["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-U", "eigent", "-d", "cowork_gym"])
            if code == 0:
                out.pg_ready = time.monotonic() - start
                return
            time.sleep(0.5)
        out.errors.append("postgres not ready within the runner's 300 s")

    def _agent(self, tag: str, out: Sample) -> None:
        start = time.monotonic()
        agent = self.client.containers.run(
            self.image,
            ["sleep", "900"],
            name=f"agent-{tag}",
            network=f"net-{tag}",
            detach=True,
            labels=self.labels,
            working_dir="/workspace",
            environment={
                **PG_CLIENT_ENV,
                "PGHOST": f"pg-{tag}",
                "PG_HOST": f"pg-{tag}",
                "LOCAL_SERVERS_PATH": "/opt/local_servers",
                "PYTHON_BIN": "/opt/venv/bin/python3",
            },
            volumes={
                str(self.bench_dir / "tasks"): {"bind": "/workspace/tasks", "mode": "ro"},
                str(self.bench_dir / "configs"): {"bind": "/workspace/configs", "mode": "ro"},
                str(HANDSHAKE): {"bind": "/tmp/admission_load_handshake.py", "mode": "ro"},
            },
        )
        code, _ = agent.exec_run(["mkdir", "-p", WORKSPACE.format(task=self.task)])
        out.agent_start = time.monotonic() - start
        if code != 0:
            raise OSError("could not make the task's workspace in the agent container")
        seq_start = time.monotonic()
        seq = self._handshake(agent, concurrency=1, cap_sec=ADAPTER_START_WAIT_SEC)
        out.seq_servers = seq["servers"]
        if all(row["init_sec"] is not None and row["tools_sec"] is not None for row in seq["servers"].values()):
            out.seq_all_up = time.monotonic() - seq_start
        conc = self._handshake(agent, concurrency=CAMEL_CONNECT_CONCURRENCY)
        out.conc_servers = conc["servers"]
        out.peak_memory = conc.get("peak_memory_bytes")

    def _handshake(self, agent, concurrency: int, cap_sec: float | None = None) -> dict:
        spec = json.dumps({"servers": self.specs, "concurrency": concurrency, "cap_factor": 3.0, "cap_sec": cap_sec})
        # docker exec with stdin: the CLI (the SDK's exec has no simple stdin).
        proc = subprocess.run(
            ["docker", "exec", "-i", agent.id, "/opt/venv/bin/python3", "/tmp/admission_load_handshake.py"],
            input=spec.encode(),
            capture_output=True,
            timeout=30 * 60,
            check=False,
        )
        if proc.returncode != 0:
            raise OSError(f"handshake probe exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-300:]}")
        return json.loads(proc.stdout)

    # ---------------------------------------------------------------- cleanup

    def _remove(self, label_filter: str) -> None:
        for container in self.client.containers.list(all=True, filters={"label": label_filter}):
            container.remove(force=True, v=True)

    def remove_leftovers(self) -> list[str]:
        """Containers, then networks, of a killed run of this benchmark (its pid no longer alive)."""
        removed = []
        for container in self.client.containers.list(all=True, filters={"label": LABEL}):
            if not _alive(_owner(container.labels)):
                container.remove(force=True, v=True)
                removed.append(container.name)
        for network in self.client.networks.list(filters={"label": LABEL}):
            if not _alive(_owner(network.attrs.get("Labels") or {})):
                network.remove()
                removed.append(network.name)
        return removed

    def close(self) -> None:
        self.set_busy(0)
        self._remove(f"{LABEL}={os.getpid()}")
        for network in self.client.networks.list(filters={"label": f"{LABEL}={os.getpid()}"}):
            network.remove()


def _owner(labels: dict) -> int:
    try:
        return int(labels.get(LABEL, ""))
    except ValueError:
        return 0


def _alive(pid: int) -> bool:
    return pid > 0 and process_exists(pid)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_level(bench: Bench, per_cpu: float, cpus: int, level_sec: float, min_samples: int, quiet_sec: float) -> dict:
    busy = int(round(per_cpu * cpus))
    bench.set_busy(busy)
    watch = HostWatch(bench.client)
    load_before = _loadavg()
    watch.start()
    start = time.monotonic()
    samples: list[Sample] = []
    try:
        while len(samples) < min_samples or time.monotonic() - start < level_sec:
            watch.quiet.set()  # the host as admission would read it before this task
            time.sleep(quiet_sec)
            watch.quiet.clear()
            samples.append(bench.sample())
            print(
                f"    sample {len(samples)}: pg {_f(samples[-1].pg_ready)} s, agent {_f(samples[-1].agent_start)} s, "
                f"MCP one at a time {_f(samples[-1].seq_all_up)} s, worst first connect of four at once "
                f"{samples[-1].upstream_ratio():.2f} of its timeout"
                + (f"; {samples[-1].errors}" if samples[-1].errors else ""),
                flush=True,
            )
    finally:
        watch.stop_event.set()
        watch.join()
    return {
        "per_cpu_asked": per_cpu,
        "busy": busy,
        "samples": samples,
        "watch": watch,
        "seconds": time.monotonic() - start,
        "load_before": load_before,
        "load_after": _loadavg(),
        "reached": _mean(watch.background) / cpus,
        "during": _mean(watch.runnable) / cpus,
    }


def _mean(values: list[int]) -> float:
    return statistics.fmean(values) if values else float("nan")


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _times(samples: list[Sample], attr: str) -> list[float]:
    return [getattr(s, attr) for s in samples if getattr(s, attr) is not None]


def print_level(level: dict) -> None:
    samples: list[Sample] = level["samples"]
    watch: HostWatch = level["watch"]
    print(
        f"  level {level['per_cpu_asked']:g} busy per CPU ({level['busy']} processes): reached "
        f"{level['reached']:.2f} runnable per CPU between samples, {level['during']:.2f} during them, over "
        f"{level['seconds']:.0f} s; load average "
        f"{level['load_before']} -> {level['load_after']}; {len(samples)} samples, min / median / max:"
    )
    print(f"    PostgreSQL ready (s):            {spread(_times(samples, 'pg_ready'))}  (bound {PG_READY_BOUND_SEC:g})")
    print(f"    agent container up (s):          {spread(_times(samples, 'agent_start'))}")
    print(
        f"    MCP one at a time, all up (s):   {spread(_times(samples, 'seq_all_up'))}  (bound "
        f"{ADAPTER_START_WAIT_SEC:g}, the adapter's start wait)"
    )
    for name in bench_names(samples):
        timeout = next(s.conc_servers[name]["timeout_sec"] for s in samples if name in s.conc_servers)
        seq = [
            s.seq_servers[name]["init_sec"] for s in samples if s.seq_servers.get(name, {}).get("init_sec") is not None
        ]
        conc = [
            s.conc_servers[name]["init_sec"]
            for s in samples
            if s.conc_servers.get(name, {}).get("init_sec") is not None
        ]
        failed = sum(1 for s in samples if s.conc_servers.get(name, {}).get("init_sec") is None)
        print(
            f"      {name:<14} initialize (s) alone {spread(seq)}; four at once {spread(conc)}"
            f"{f' ({failed} no answer)' if failed else ''}; yaml timeout {timeout:g}"
        )
    peaks = [s.peak_memory / GIB for s in samples if s.peak_memory]
    print(
        f"    agent container peak memory (GiB): {spread(peaks)}; MemAvailable min "
        f"{min(watch.mem) / GIB if watch.mem else float('nan'):.2f} GiB"
    )
    print(f"    daemon ping (s): {spread(watch.pings, 3)} ({watch.unanswered} unanswered)")
    print(
        f"    worst ratio: adapter path {max(s.adapter_ratio() for s in samples):.3f}, "
        f"CAMEL first connect {max(s.upstream_ratio() for s in samples):.2f}",
        flush=True,
    )


def bench_names(samples: list[Sample]) -> list[str]:
    names: list[str] = []
    for s in samples:
        names += [n for n in s.conc_servers if n not in names]
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="0,1,2,4,6,8", help="busy processes per CPU, comma-separated")
    parser.add_argument("--level-sec", type=float, default=90.0, help="start no new sample after this long")
    parser.add_argument("--min-samples", type=int, default=2)
    parser.add_argument(
        "--keep-going", action="store_true", help="measure every level, also past the first one over --fraction"
    )
    parser.add_argument(
        "--quiet-sec", type=float, default=4.0, help="before each sample, read the background load this long"
    )
    parser.add_argument(
        "--task",
        default="kulinar-workshop-materials",
        help="whose MCP servers (default: both 10 s servers, word and pptx, and three more)",
    )
    parser.add_argument("--fraction", type=float, default=0.5, help="of a bound a start-up may take")
    args = parser.parse_args()
    missing = [v for v in ("DOCKER_HOST", "COWORK_REAL_BENCH", "COWORK_REAL_BASE_IMAGE") if not os.environ.get(v)]
    if missing:
        print(f'set {", ".join(missing)} (eval "$(cat /tmp/rb.env)" on the test bed)', file=sys.stderr)
        return 2
    try:
        levels = [float(x) for x in args.levels.split(",")]
    except ValueError:
        levels = []
    if not levels or not all(0 <= x <= 64 for x in levels):
        print(f"--levels must be numbers from 0 to 64 separated by commas (got {args.levels!r})", file=sys.stderr)
        return 2
    if not (0 < args.fraction <= 1) or args.min_samples < 1:
        print("--fraction must be in (0, 1] and --min-samples at least 1", file=sys.stderr)
        return 2
    cpus = os.cpu_count() or 1
    client = docker.DockerClient(base_url=os.environ["DOCKER_HOST"], timeout=300)
    bench = Bench(client, Path(os.environ["COWORK_REAL_BENCH"]), os.environ["COWORK_REAL_BASE_IMAGE"], args.task)
    # SIGTERM and SIGINT end through the finally below; SIGINT set here too because a shell starts a
    # background job with it ignored, and Python then leaves it ignored.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    left = bench.remove_leftovers()
    print(
        f"{args.task}: servers {', '.join(bench.specs)}; {cpus} CPU(s); load average before: {_loadavg()}"
        + (f"; removed a killed run's {', '.join(left)}" if left else ""),
        flush=True,
    )
    done: list[dict] = []
    try:
        for per_cpu in levels:
            print(f"level {per_cpu:g} busy processes per CPU ...", flush=True)
            done.append(run_level(bench, per_cpu, cpus, args.level_sec, args.min_samples, args.quiet_sec))
            print_level(done[-1])
            if not args.keep_going and max(s.adapter_ratio() for s in done[-1]["samples"]) > args.fraction:
                print(
                    "  over the fraction: a heavier level cannot move the rule's limit; stopping "
                    "(--keep-going measures them anyway)",
                    flush=True,
                )
                break
    except KeyboardInterrupt:
        print("interrupted: stopping the busy processes and removing this run's containers", file=sys.stderr)
    finally:
        bench.close()
        client.close()
    if not done:
        return 1
    rows = [LevelRow(d["reached"], max(s.adapter_ratio() for s in d["samples"])) for d in done]
    choice = choose_threshold(rows, args.fraction)
    camel = choose_threshold([LevelRow(d["reached"], max(s.upstream_ratio() for s in d["samples"])) for d in done], 1.0)
    print("summary: reached load per CPU -> worst adapter-path ratio / worst CAMEL first-connect ratio")
    for d, row in zip(done, rows, strict=True):
        print(
            f"  {row.load_per_cpu:5.2f} -> {row.worst_ratio:.3f} / {max(s.upstream_ratio() for s in d['samples']):.2f}"
        )
    print(
        f"rule (adapter path within {args.fraction:g} of its bound at every level up to it): "
        + (
            f"highest passing load {choice.limit:.2f} per CPU, rounded down {choice.rounded():g}"
            if choice.limit is not None
            else "no level passed"
        )
        + (
            f"; first failing level {choice.first_failing:.2f}"
            if choice.first_failing is not None
            else "; no level failed (a lower bound)"
        )
    )
    print(
        "CAMEL's first connect within its yaml timeout up to: "
        + (f"{camel.limit:.2f} per CPU" if camel.limit is not None else "no level")
        + (f" (fails at {camel.first_failing:.2f})" if camel.first_failing is not None else "")
    )
    print(f"load average at the end: {_loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
