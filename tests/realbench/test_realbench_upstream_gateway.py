"""An upstream engine of the benchmark (main.py, CAMEL) through the model gateway on the real Cowork Bench.

One task, `--engine upstream:main.py --llm-gateway`, the chat stand-in as the provider. The engine
reads the gateway's URL from MODEL_API_URL and its task's token as MODEL_API_KEY; the gateway swaps
the token for the key. While the task runs, every running container of the run is scanned for the
key: its configuration, and with the scanner of tests/integration/test_llm_gateway.py every
process's environ and cmdline and every file the container wrote (its writable layer, `docker
diff`: the real images hold ~5 GB outside /usr, too much to read within a task's life on two
shared cores; what the image holds was built before the key existed, and the derived image's
build inputs are in the run root, which is scanned too). Afterwards every request the provider answered must be one
gateway row of that task with the provider's tokens, and the task's ledger row must carry that spend.

Needs the real-benchmark test bed (`bash testbed/realbench.sh up`); under CI=true its absence fails.
"""

from __future__ import annotations

import hashlib
import json
import time

import docker
import pytest
from provider_calls import in_container
from realbench_env import RealRun, key_leaks, labelled_left, read_rows, real_testbed
from test_llm_gateway import SCAN_PROCS

from cowork_adapter.custody.labels import RUN_LABEL_KEY, run_label
from cowork_adapter.schemas.gateway import read_requests
from cowork_adapter.vocab import ExitCode

SETTLED = {"passed", "failed", "agent_failed"}
ENGINE = "upstream:main.py"
COST = 0.002  # the stand-in's usage.cost per answered request (OpenRouter's usage accounting)
# The scanner's process part as it is; its file part over the paths given after the needle's two
# halves ("A:" a path the container added, walked whole; "C:" one it changed, a file read alone).
SCAN_WRITTEN = (
    SCAN_PROCS
    + r"""
for entry in sys.argv[3:]:
    kind, path = entry[0], entry[2:]
    if kind == "A" and os.path.isdir(path) and not os.path.islink(path):
        for top, dirs, files in os.walk(path):
            for name in files:
                look(os.path.join(top, name))
    else:
        look(path)
print(json.dumps({"hits": hits, "scanned": scanned}))
"""
)


def written_paths(container) -> list[str]:
    """The container's writable layer as scanner arguments: added paths not under another added one."""
    changes = sorted((c["Path"], c["Kind"]) for c in container.diff() or [] if c["Kind"] != 2)
    added_dirs: list[str] = []
    out = []
    for path, kind in changes:
        if any(path.startswith(d + "/") for d in added_dirs):
            continue
        if path.startswith(("/proc", "/sys", "/dev")):
            continue
        if kind == 1:
            added_dirs.append(path)
        out.append(("A:" if kind == 1 else "C:") + path)
    return out


def _still_running(client, ident: str) -> bool:
    try:
        return client.api.inspect_container(ident)["State"].get("Status") == "running"
    except docker.errors.NotFound:
        return False


def _scan_running(client, label: str, key: str, scanned: dict) -> None:
    """Scan every running container of the run not scanned yet; record what each held."""
    for container in client.containers.list(sparse=True, filters={"label": f"{RUN_LABEL_KEY}={label}"}):
        try:
            container.reload()
            if container.name in scanned or container.status != "running":
                continue
            config_hit = key in json.dumps(container.attrs.get("Config") or {})
            half = len(key) // 2
            paths = written_paths(container)
            result = json.loads(in_container(client, container.name, SCAN_WRITTEN, key[:half], key[half:], *paths))
        except docker.errors.NotFound:
            continue  # gone meanwhile (the runner removes a finished task's containers)
        except docker.errors.APIError:
            # A removal under way: the daemon answers a read of the container's changes with a 500
            # (its layer is gone). Skipped only when the container is indeed gone or going.
            if _still_running(client, container.id):
                raise
            continue
        scanned[container.name] = {"config": config_hit, "written": len(paths), **result}


@pytest.fixture(scope="module")
def gateway_run(docker_host, tmp_path_factory):
    bed = real_testbed()
    tasks = bed.tasks(1)
    real = RealRun(bed, tmp_path_factory.mktemp("realbench-upstream-gw") / "root", docker_host).start()
    real.chat.cost_per_request = COST
    name = "upstream-gw"
    run_root = real.run_root(name)
    client = docker.DockerClient(base_url=docker_host, timeout=120)
    scanned: dict[str, dict] = {}
    started = time.monotonic()
    try:
        proc = real.launch(real.args(name, tasks, engine=ENGINE, extra=["--llm-gateway"]), name)
        # Scan while the task runs: the agent container exists only then.
        while proc.poll() is None and time.monotonic() - started < 3600:
            if (run_root / "run_manifest.json").is_file():
                _scan_running(client, run_label(run_root), real.key, scanned)
            time.sleep(2)
        code = proc.wait(timeout=60)
        out = {
            "real": real,
            "tasks": tasks,
            "exit": code,
            "root": run_root,
            "rows": read_rows(run_root),
            "provider": real.chat.chat_requests(),
            "gateway": read_requests(run_root),
            "scanned": scanned,
            "manifest": json.loads((run_root / "run_manifest.json").read_text()),
            "left": labelled_left(docker_host, run_label(run_root)),
        }
    finally:
        client.close()
        real.stop()
    print(
        f"realbench {ENGINE} --llm-gateway: {time.monotonic() - started:.0f} s, exit {code}, "
        f"provider requests {len(out['provider'])}, gateway rows {len(out['gateway'])}, scanned {sorted(scanned)}"
    )
    return out


def detail(out: dict) -> str:
    return f"exit {out['exit']}, rows {out['rows']}\n{out['real'].log_tail('upstream-gw')}"


def test_the_task_is_graded_through_the_gateway(gateway_run):
    out = gateway_run
    (task,) = out["tasks"]
    row = out["rows"].get(task)
    assert row and row["status"] in SETTLED and row["official_eval_status"] == "completed", detail(out)
    assert out["exit"] == ExitCode.OK, detail(out)
    gw = out["manifest"]["llm_gateway"]
    # The engine was pointed at the gateway, the gateway at the stand-in.
    assert gw["upstream_url"] == out["real"].base_url and gw["container_url"] != gw["upstream_url"]


def test_every_provider_request_is_a_gateway_row_of_the_task_with_its_tokens(gateway_run):
    out = gateway_run
    provider, rows = out["provider"], out["gateway"]
    assert provider, f"the engine never reached the provider\n{detail(out)}"
    # Every request reached the provider with the real key, not a token (the gateway swapped it).
    bearer = hashlib.sha256(f"Bearer {out['real'].key}".encode()).hexdigest()
    assert {r["auth_sha256"] for r in provider} == {bearer}
    forwarded = [r for r in rows if r.refused is None and r.path.rstrip("/").endswith("/chat/completions")]
    assert len(forwarded) == len(provider), (len(forwarded), len(provider))
    tasks = {r.task for r in forwarded}
    assert len(tasks) == 1 and None not in tasks, tasks  # all under the one task's token
    assert [r.prompt_tokens for r in forwarded] == [r["prompt_tokens"] for r in provider]
    assert [r.completion_tokens for r in forwarded] == [r["completion_tokens"] for r in provider]
    assert all(r.cost_usd == COST for r in forwarded)


def test_the_ledger_row_carries_the_gateway_spend(gateway_run):
    out = gateway_run
    (task,) = out["tasks"]
    spend = out["rows"][task].get("gateway")
    provider = out["provider"]
    assert spend, out["rows"][task]
    assert spend["forwarded"] >= len(provider) and spend["unknown_cost_requests"] == 0
    assert spend["prompt_tokens"] == sum(r["prompt_tokens"] for r in provider)
    assert spend["completion_tokens"] == sum(r["completion_tokens"] for r in provider)
    assert spend["cost_usd"] == pytest.approx(COST * len(provider))


def test_the_key_is_in_no_container_and_no_file_and_nothing_is_left(gateway_run):
    out = gateway_run
    scanned = out["scanned"]
    assert any(name.startswith("agent-") for name in scanned), f"no agent container was scanned: {sorted(scanned)}"
    hits = {name: s for name, s in scanned.items() if s["config"] or s["hits"] or not s["scanned"]}
    assert hits == {}, hits
    assert out["left"] == [], out["left"]
    assert not key_leaks(out["real"].root / "runs", out["real"].key)
