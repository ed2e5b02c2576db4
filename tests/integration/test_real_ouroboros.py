"""The REAL Ouroboros server, in the derived image, completes one demo task offline.

The seed is the Ouroboros 6.97.2 checkout that the real-benchmark test bed extracts from the
fixture (`bash testbed/realbench.sh up`), or any clean checkout of a real Ouroboros release with
`server.py` named by COWORK_REAL_OUROBOROS_SEED. The test runs the real `cowork-adapter run` with
`--build-image` on the demo benchmark's `demo-csv-totals` task; every model call of the server goes
to the chat stand-in (cowork_adapter.demo.chat_standin) on the host, reached from the task
containers through the Docker bridge gateway. Under CI=true a missing seed is a failure; elsewhere
the test is skipped with the command that prepares it: it was not run, it did not pass.

Optional: COWORK_STANDIN_HOST_ADDR overrides the host address containers use to reach the stand-in.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

import docker
import pytest
from realbench_env import host_address_for_containers, real_testbed

from cowork_adapter.demo.chat_standin import DEFAULT_MODEL_ID, ChatStandin
from cowork_adapter.demo.env import prepare, read_rows
from cowork_adapter.schemas.audit import LAUNCHER_AUDIT_NAME

SEED_ENV = "COWORK_REAL_OUROBOROS_SEED"
TASK = "demo-csv-totals"


@pytest.fixture(scope="module")
def real_seed() -> Path:
    value = os.environ.get(SEED_ENV, "").strip()
    seed = Path(value).expanduser().resolve() if value else real_testbed().seed
    assert (seed / "server.py").is_file() and (seed / ".git").exists(), (
        f"{SEED_ENV}={seed} is not an Ouroboros checkout"
    )
    return seed


def reachable_from_a_task_network(docker_host: str, image: str, url: str) -> str:
    """'' when a container on a fresh user-defined network can GET `url`, else the failure text."""
    client = docker.DockerClient(base_url=docker_host, timeout=120)
    name = f"cowork-real-ouroboros-probe-{secrets.token_hex(4)}"
    network = client.networks.create(name)
    try:
        probe = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=10).status)"
        out = client.containers.run(image, ["python3", "-c", probe], network=name, remove=True, name=name)
        return "" if out.decode().strip().endswith("200") else out.decode()
    except docker.errors.DockerException as exc:
        return str(exc)
    finally:
        network.remove()
        client.close()


def with_flag(args: list[str], flag: str, value: str) -> list[str]:
    """`args` with `flag`'s value replaced (or the pair appended)."""
    out = list(args)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


def evidence(run_root: Path, standin: ChatStandin, log: Path) -> str:
    parts = [f"stand-in counts: {standin.counts}", f"stand-in calls (last 15): {standin.log[-15:]}"]
    for summary in sorted(run_root.glob("bench/dumps/*/*/ouroboros_summary.json")):
        parts.append(f"{summary}: {summary.read_text()[:3000]}")
    for server_log in sorted(run_root.glob("bench/dumps/*/*/ouroboros_server.log")):
        parts.append(f"{server_log} (tail): {server_log.read_text(errors='replace')[-3000:]}")
    if log.is_file():
        parts.append(f"launcher log (tail): {log.read_text(errors='replace')[-3000:]}")
    return "\n".join(parts)


def real_server_args(env, name: str, real_seed, extra: list[str]) -> list[str]:
    """The launcher's flags for one demo task on the real server against the chat stand-in."""
    args = env.run_args(
        name,
        [TASK],
        campaign=f"campaign-{name}.json",
        extra=[
            *extra,
            "--credential-setting",
            "OPENAI_COMPATIBLE_API_KEY",
            # With review on the task still passes, but the stand-in does not speak the acceptance
            # reviewers' format, so the review would be recorded as degraded: keep it out of these tests.
            "--task-review-mode",
            "off",
            "--max-workers",
            "2",
        ],
    )
    args = with_flag(args, "--repo-dir", str(real_seed))
    args = with_flag(args, "--model", DEFAULT_MODEL_ID)
    args = with_flag(args, "--task-timeout", "900")
    args = with_flag(args, "--memory", "6g")
    return with_flag(args, "--cpus", "2")


def test_real_server_completes_one_demo_task(real_seed, docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("real-ouroboros") / "root", docker_host)
    standin = ChatStandin(host="0.0.0.0", port=0, model_id=DEFAULT_MODEL_ID).start()
    try:
        address = host_address_for_containers(docker_host)
        base_url = f"http://{address}:{standin.port}/v1"
        problem = reachable_from_a_task_network(docker_host, env.pack_tag, f"{base_url}/models")
        assert not problem, f"task containers cannot reach the chat stand-in at {base_url}: {problem}"
        args = real_server_args(env, "real", real_seed, ["--openai-compatible-base-url", base_url])
        started = time.monotonic()
        proc = env.launch(args, "real")
        code = proc.wait(timeout=3600)
        elapsed = time.monotonic() - started
        run_root = env.run_root("real")
        rows = read_rows(run_root)
        detail = evidence(run_root, standin, env.root / "real.log")
        print(f"real Ouroboros run: exit {code} in {elapsed:.0f}s; rows {json.dumps(rows)[:2000]}")
        print(detail)
        assert rows.get(TASK, {}).get("status") == "passed", f"row {rows.get(TASK)}; exit {code}\n{detail}"
        assert code == 0, f"launcher exit {code}\n{detail}"
        # The task passed because the server called the MCP tools the stand-in asked for.
        assert standin.counts.get("tool_call", 0) >= 3 and standin.counts.get("final", 0) >= 1, detail
        assert_usage_matches_requests(run_root, rows[TASK], standin.chat_requests())
    finally:
        standin.stop()
        env.meter.stop()


def assert_usage_matches_requests(run_root: Path, row: dict, requests: list[dict]) -> None:
    """Every request the chat endpoint served is exactly one usage record, in the ledger row and
    in the audit, with the same prompt and completion tokens (issue 16 f)."""
    served = (len(requests), sum(r["prompt_tokens"] for r in requests), sum(r["completion_tokens"] for r in requests))
    usage = row.get("usage") or {}
    assert (usage.get("records"), usage.get("prompt_tokens"), usage.get("completion_tokens")) == served, (
        f"ledger usage {usage} != chat stand-in requests {served}: {requests}"
    )
    audits = sorted(run_root.rglob(LAUNCHER_AUDIT_NAME))
    assert audits, "the run wrote no audit.launcher.json"
    task = next(t for t in json.loads(audits[-1].read_text())["tasks"] if t["instance_id"] == TASK)
    activity = task["activity"]
    assert (activity["usage_records"], activity["prompt_tokens"], activity["completion_tokens"]) == served, (
        f"audit activity {activity} != chat stand-in requests {served}"
    )
    summary = json.loads(next(run_root.glob(f"bench/dumps/*/SingleUserTurn-{TASK}/ouroboros_summary.json")).read_text())
    ledger = summary.get("attempt_ledger_usage") or {}
    assert (ledger.get("records"), ledger.get("prompt_tokens"), ledger.get("completion_tokens")) == served, (
        f"summary attempt_ledger_usage {ledger} != chat stand-in requests {served}"
    )
