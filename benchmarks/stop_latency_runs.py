"""bench_stop_latency.py's runs: one paid demo run crossing the campaign boundary on the meter, the same with the
model gateway (the crossing request from inside an agent container), and one `cowork-adapter stop`; and the
readings of a run root and of the daemon's labelled containers they time. The figures and the command line are
bench_stop_latency.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import docker

from cowork_adapter.campaign.observe import POLL_SEC
from cowork_adapter.custody.docker_ops import list_labelled
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.demo.env import DemoEnv, read_json
from cowork_adapter.gateway.policy import pinned_model
from cowork_adapter.gateway.server import mint_token
from cowork_adapter.runroot.events import parse_ts
from cowork_adapter.schemas.gateway import read_requests
from cowork_adapter.vocab import StopPath

TASKS = ["demo-hang", "demo-deck-stateful", "demo-crm-postgres", "demo-round-limit"]
CEILING, RESERVE = 50.0, 5.0
POLL_S = 0.05  # the label is listed this often: the figures' resolution
FAST, RUNNER_TRAP = StopPath.FAST.value, StopPath.RUNNER_TRAP.value
PATHS = (FAST, RUNNER_TRAP)
PHASES = (0.1, 0.3, 0.5, 0.7, 0.9)
MARGIN_S = 1.0  # the jump must come at least this long before the crossing
CROSSING_COST = 100.0  # the provider's cost figure for the crossing request: past any allowance here
RETRY_S = 0.02  # after the crossing, a request this often until one is refused
COST_LEAD_S = 0.01  # the stand-in charges the crossing price from this long before the crossing request


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


def reading_times(run_root: Path) -> list[float]:
    return sorted(parse_ts(e.get("ts")) or 0.0 for e in read_events(run_root) if e.get("kind") == "meter_reading")


def decision_time(run_root: Path) -> float | None:
    """When the stop was decided: the first accepted reading at or past the boundary. The supervisor
    writes it (events.jsonl ts) after saving the campaign and requests the stop on the same pass;
    its own stop_requested event is written only after the runner has exited."""
    for event in read_events(run_root):
        remaining = event.get("campaign_remaining_usd")
        if event.get("kind") == "meter_reading" and remaining is not None and remaining <= RESERVE + 1e-9:
            return parse_ts(event.get("ts"))
    return None


def no_container(docker_host: str, label: str) -> bool:
    """No container (in any state) carries the run's label: what the figures time. Its networks go
    a moment later, in the same removal, and the launcher's final cleanup proves them gone too."""
    return not list_labelled(docker_host, label, timeout=10).containers


def stop_cleared(run_root: Path) -> tuple[float, float]:
    """(wall time the stop's own removal started, its duration) from the stop_cleared event; NaNs
    on the runner_trap path, which has none."""
    for event in read_events(run_root):
        if event.get("kind") == "stop_cleared" and event.get("seconds") is not None:
            return (parse_ts(event.get("ts")) or float("nan")) - event["seconds"], float(event["seconds"])
    return float("nan"), float("nan")


def wait_in_flight(run_root: Path, proc, deadline: float, want: int) -> int:
    """Wait for `want` agents in flight (or 120 s after the first one started); return how many are."""
    first_agent = None
    while in_flight(run_root) < want and proc.poll() is None and time.monotonic() < deadline:
        if first_agent is None and in_flight(run_root) > 0:
            first_agent = time.monotonic()
        if first_agent is not None and time.monotonic() - first_agent > 120:
            break
        time.sleep(POLL_S)
    return in_flight(run_root)


def path_args(path: str) -> list[str]:
    """The run flag that selects the stop path (the hidden --stop-path; the default is fast)."""
    return ["--stop-path", path]


def one_run(
    env: DemoEnv, index: int, phase: float, rate: float, docker_host: str, tasks: list[str], path: str = FAST
) -> dict:
    name, campaign = f"stop-{path}-{index}", f"campaign-stop-{path}-{index}.json"
    run_root = env.run_root(name)
    boundary = CEILING - RESERVE
    proc = env.launch(
        env.run_args(
            name, tasks, campaign=campaign, budget_usd=1000, extra=["--concurrency", str(len(tasks)), *path_args(path)]
        ),
        name,
    )
    deadline = time.monotonic() + 900
    try:
        flight_at_jump = wait_in_flight(run_root, proc, deadline, len(tasks))
        label = run_label(run_root)  # drawn at the run's start: its manifest has it by now
        # The crossing goes at `phase` of the interval after a poll: the next poll grid point
        # (from the last reading) that leaves at least MARGIN_S to set the meter up.
        last = (reading_times(run_root) or [time.time()])[-1]
        cross_wall = last + phase * POLL_SEC
        while cross_wall - time.time() < MARGIN_S:
            cross_wall += POLL_SEC
        record = read_json(env.root / campaign)
        baseline, prior = record["usage_baseline"], record.get("prior_spend_usd", 0.0)
        usage_now = env.meter.state()["usage"]
        spent_now = usage_now - baseline + prior
        env.meter.add_usage(boundary - spent_now - rate * (cross_wall - time.time()))
        env.meter.set_rate(rate)
        # Recompute the crossing from the stand-in's own state after the jump (what it will report).
        t0_wall, t0_mono = time.time(), time.monotonic()
        spent_t0 = env.meter.state()["usage"] - baseline + prior
        cross_wall = t0_wall + (boundary - spent_t0) / rate
        cross_mono = t0_mono + (cross_wall - t0_wall)

        empty_mono = None
        stop_wall = None
        while time.monotonic() < deadline:
            if stop_wall is None:
                stop_wall = decision_time(run_root)
            if stop_wall is not None and no_container(docker_host, label):
                empty_mono = time.monotonic()
                break
            time.sleep(POLL_S)
        code = proc.wait(timeout=600)
    finally:
        env.meter.set_rate(0.0005)
        if proc.poll() is None:
            proc.terminate()
    manifest = read_json(run_root / "run_manifest.json")
    if stop_wall is None or empty_mono is None:
        raise RuntimeError(
            f"run {name}: no crossing reading or no empty label before the deadline (exit {code}); see {run_root}"
        )
    before = [t for t in reading_times(run_root) if t <= cross_wall]
    empty_wall = time.time() - (time.monotonic() - empty_mono)
    fence_path = run_root / "custody" / "stop"
    fence_wall = os.stat(fence_path).st_ctime if fence_path.exists() else float("nan")
    removal_start, removal = stop_cleared(run_root)
    return {
        "to_removal": removal_start - stop_wall,
        "removal": removal,
        "name": name,
        "path": path,
        "target_phase": phase,
        "exit": code,
        "stop_reason": manifest.get("stop_reason"),
        "flight_at_jump": flight_at_jump,
        "phase_s": (cross_wall - before[-1]) if before else float("nan"),
        "detection": stop_wall - cross_wall,
        "fence": fence_wall - stop_wall,
        "stop": empty_wall - stop_wall,
        "total": empty_mono - cross_mono,
    }


def task_ident(run_root: Path, task: str) -> str | None:
    """The runner's id of `task` (its agent container is agent-<id>), from the shim's .task evidence."""
    evidence = run_root / "custody" / "evidence"
    for path in evidence.glob("*.task") if evidence.is_dir() else ():
        if task in path.read_text():
            return path.name[: -len(".task")]
    return None


# Run inside the task's agent container (the gateway serves only the run's containers): at wall time
# BENCH_AT (the host's clock: a container shares its kernel's) one chat completion, then one every
# BENCH_EVERY s until one is refused; a JSON line, flushed, at each of those two moments.
IN_AGENT = r"""
import json, os, time, urllib.error, urllib.request
url = os.environ["BENCH_URL"].rstrip("/") + "/chat/completions"
body = json.dumps({"model": os.environ["BENCH_MODEL"], "messages": [{"role": "user", "content": "bench crossing"}]}).encode()
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def chat():
    request = urllib.request.Request(url, data=body, headers={"Authorization": "Bearer " + os.environ["BENCH_TOKEN"],
                                                              "Content-Type": "application/json"})
    try:
        with opener.open(request, timeout=30) as answer:
            answer.read()
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0  # the gateway closed: refused too
time.sleep(max(0.0, float(os.environ["BENCH_AT"]) - time.time()))
status = chat()
print(json.dumps({"crossing": status, "at": time.time()}), flush=True)
while status == 200:
    time.sleep(float(os.environ["BENCH_EVERY"]))
    status = chat()
    if status != 200:
        print(json.dumps({"refused": status, "at": time.time()}), flush=True)
"""
AGENT_PYTHON = "/opt/venv/bin/python3"  # the demo pack image's, the one its agent runs


def in_agent_lines(docker_host: str, container: str, env: dict[str, str], into: list[dict]) -> threading.Thread:
    """Start IN_AGENT in `container` (an exec of the run's own agent container, through the daemon)
    and collect its JSON lines into `into` from a thread, as they come."""
    dc = docker.DockerClient(base_url=docker_host, timeout=60)
    exec_id = dc.api.exec_create(container, [AGENT_PYTHON, "-c", IN_AGENT], environment=env)["Id"]
    stream = dc.api.exec_start(exec_id, stream=True)

    def read() -> None:
        buffer = b""
        try:
            for chunk in stream:
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip().startswith(b"{"):
                        into.append(json.loads(line))
        except Exception:  # noqa: BLE001 - the container removed under the exec ends its stream
            pass
        finally:
            dc.close()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def gateway_refusal(run_root: Path, after: float) -> dict | None:
    """The first request the gateway refused after the crossing, from its own log: the script's line
    is lost when the stop removes the agent container before its output is read (the exec's stream
    ends with the container). Fenced, or cut short by the container's removal mid-request (its body
    never arrived: refused "body"). Its arrival time stands for the refusal (latency_ms added).
    None when no later request reached the gateway: the container was gone first."""
    for row in read_requests(run_root):
        if row.refused is not None and row.at >= after:
            return {"refused": row.status, "reason": row.refused, "at": row.at + (row.latency_ms or 0.0) / 1000}
    return None


def gateway_crossing(run_root: Path) -> float | None:
    """When the first request priced at the crossing cost was answered (arrival + latency), from the
    gateway's log; None when there is none."""
    for row in read_requests(run_root):
        if row.refused is None and row.cost_usd is not None and row.cost_usd >= CROSSING_COST:
            return row.at + (row.latency_ms or 0.0) / 1000
    return None


def one_gateway_run(
    env: DemoEnv, index: int, phase: float, docker_host: str, tasks: list[str], provider: ChatStandin, path: str = FAST
) -> dict:
    """A run with --llm-gateway: the crossing is one request, from inside the first task's agent
    container, whose provider cost passes the allowance."""
    name, campaign = f"gw-stop-{path}-{index}", f"campaign-gw-stop-{path}-{index}.json"
    run_root = env.run_root(name)
    provider.cost_per_request = 0.0001
    extra = [
        "--concurrency",
        str(len(tasks)),
        "--llm-gateway",
        "--openai-compatible-base-url",
        provider.base_url,
        "--credential-setting",
        "OPENAI_COMPATIBLE_API_KEY",
        *path_args(path),
    ]
    proc = env.launch(env.run_args(name, tasks, campaign=campaign, budget_usd=1000, extra=extra), name)
    deadline = time.monotonic() + 900
    lines: list[dict] = []
    try:
        flight_at_jump = wait_in_flight(run_root, proc, deadline, len(tasks))
        label = run_label(run_root)  # drawn at the run's start: its manifest has it by now
        ident = task_ident(run_root, tasks[0])
        gateway = read_json(run_root / "run_manifest.json")["llm_gateway"]
        secret = bytes.fromhex((run_root / "private" / "gateway.secret").read_text())
        last = (reading_times(run_root) or [time.time()])[-1]
        cross_wall = last + phase * POLL_SEC
        while cross_wall - time.time() < MARGIN_S:
            cross_wall += POLL_SEC
        reader = in_agent_lines(
            docker_host,
            f"agent-{ident}",
            {
                "BENCH_URL": gateway["container_url"],
                "BENCH_TOKEN": mint_token(secret, label, ident),
                "BENCH_MODEL": pinned_model(gateway["routed_model"]),
                "BENCH_AT": repr(cross_wall),
                "BENCH_EVERY": repr(RETRY_S),
            },
            lines,
        )
        # The crossing price from just before the request leaves the container to its answer.
        time.sleep(max(0.0, cross_wall - COST_LEAD_S - time.time()))
        provider.cost_per_request = CROSSING_COST
        while not lines and reader.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        provider.cost_per_request = 0.0001
        crossing = next((line for line in lines if "crossing" in line), None)
        # A demo agent's own request in the crossing price's window may cross first (this one is then
        # fenced): the crossing is then that request's answer, from the gateway's log.
        answered_wall = crossing["at"] if crossing and crossing["crossing"] == 200 else gateway_crossing(run_root)
        if answered_wall is None:
            raise RuntimeError(
                f"run {name}: no request crossed (the script's was answered "
                f"{crossing and crossing['crossing']}); see {run_root}"
            )
        empty_wall = None
        while time.monotonic() < deadline:
            if no_container(docker_host, label):
                empty_wall = time.time()
                break
            time.sleep(POLL_S)
        reader.join(30)
        code = proc.wait(timeout=600)
    finally:
        provider.cost_per_request = 0.0001
        if proc.poll() is None:
            proc.terminate()
    manifest = read_json(run_root / "run_manifest.json")
    refused = next((line for line in lines if "refused" in line), None) or gateway_refusal(run_root, answered_wall)
    if empty_wall is None:
        raise RuntimeError(f"run {name}: no empty label before the deadline (exit {code}); see {run_root}")
    before = [t for t in reading_times(run_root) if t <= answered_wall]
    fence_path = run_root / "custody" / "stop"
    fence_wall = os.stat(fence_path).st_ctime if fence_path.exists() else float("nan")
    return {
        "name": name,
        "path": path,
        "target_phase": phase,
        "exit": code,
        "stop_reason": manifest.get("stop_reason"),
        "flight_at_jump": flight_at_jump,
        "phase_s": (answered_wall - before[-1]) if before else float("nan"),
        "refused": refused["at"] - answered_wall if refused else float("nan"),
        "refused_how": (refused.get("reason") or f"answered {refused['refused']}")
        if refused
        else "no later request: the container was gone",
        "fence": fence_wall - answered_wall,
        "total": empty_wall - answered_wall,
    }


def one_stop_command_run(env: DemoEnv, index: int, docker_host: str, tasks: list[str], path: str) -> dict:
    """`cowork-adapter stop RUN_ROOT` once the agents are in flight: command start → no labelled container."""
    name, campaign = f"cmd-stop-{path}-{index}", f"campaign-cmd-stop-{path}-{index}.json"
    run_root = env.run_root(name)
    proc = env.launch(
        env.run_args(
            name, tasks, campaign=campaign, budget_usd=1000, extra=["--concurrency", str(len(tasks)), *path_args(path)]
        ),
        name,
    )
    deadline = time.monotonic() + 900
    stop = None
    try:
        flight = wait_in_flight(run_root, proc, deadline, len(tasks))
        label = run_label(run_root)  # drawn at the run's start: its manifest has it by now
        started = time.monotonic()
        stop = subprocess.Popen(
            [sys.executable, "-m", "cowork_adapter", "stop", str(run_root), "--timeout", "120"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        empty = returned = None
        while time.monotonic() < deadline and (empty is None or returned is None):
            now = time.monotonic()
            if returned is None and stop.poll() is not None:
                returned = now
            if empty is None and no_container(docker_host, label):
                empty = now
            time.sleep(POLL_S)
        code = proc.wait(timeout=600)
    finally:
        if stop is not None and stop.poll() is None:
            stop.terminate()
        if proc.poll() is None:
            proc.terminate()
    manifest = read_json(run_root / "run_manifest.json")
    if empty is None or returned is None:
        raise RuntimeError(f"run {name}: no empty label or no end of `stop` before the deadline; see {run_root}")
    return {
        "name": name,
        "path": path,
        "exit": code,
        "stop_exit": stop.returncode,
        "flight": flight,
        "stop_reason": manifest.get("stop_reason"),
        "empty": empty - started,
        "command": returned - started,
    }
