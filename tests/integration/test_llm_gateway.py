"""--llm-gateway on the real Docker test bed: the stub engine's model traffic goes through the
launcher's gateway to the chat stand-in (the provider, on the host's loopback only, so a container
could not reach it directly), and the provider key is in no container.

The stub engine makes one real chat-completions request per round when it is given an
OpenAI-compatible base URL (the gateway's); the test also calls the gateway from inside a running
agent container, with the token that container holds, for streaming, a wrong token and the
budget crossing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from urllib.parse import urlparse

import docker
import pytest
from provider_calls import in_container, running, task_ident  # tests/provider_calls.py (tests/ is on sys.path)

from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import RUN_LABEL_KEY, run_label
from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.demo.env import key_leaks, prepare, read_json, read_rows, wait_for
from cowork_adapter.gateway.server import mint_token
from cowork_adapter.schemas.gateway import read_requests, spend_by_task
from cowork_adapter.vocab import ExitCode

pytestmark = pytest.mark.docker

# In the container: scan every other process's environ and cmdline, and every file outside
# /proc, /sys, /dev and /usr (the image's own OS files, built before the run), for the needle,
# which arrives in two halves so this process's own argv never holds it whole.
SCAN_PROCS = r"""
import json, os, sys
needle = (sys.argv[1] + sys.argv[2]).encode()
me = str(os.getpid())
hits, scanned = [], 0
def look(path):
    global scanned
    try:
        if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > 50 << 20:
            return
        data = open(path, "rb").read()
    except OSError:
        return
    scanned += 1
    if needle in data:
        hits.append(path)
for pid in os.listdir("/proc"):
    if pid.isdigit() and pid != me:
        look(f"/proc/{pid}/environ")
        look(f"/proc/{pid}/cmdline")
"""
SCAN = (
    SCAN_PROCS
    + r"""
for top, dirs, files in os.walk("/"):
    if top == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev", "usr")]
    for name in files:
        look(os.path.join(top, name))
print(json.dumps({"hits": hits, "scanned": scanned}))
"""
)

# In the agent container: requests to the gateway with the token the container holds.
CALLS = r"""
import json, os, sys, time, urllib.request, urllib.error
base, mode = sys.argv[1], sys.argv[2]
token = sys.argv[3] if len(sys.argv) > 3 else os.environ["COWORK_PROVIDER_KEY"]
def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method="GET" if body is None else "POST",
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()
chat = {"model": "demo/stub-model", "messages": [{"role": "user", "content": "from the agent container"}]}  # the run's (pinned)
out = {}
if mode == "basic":
    out["models"] = call("/models")[0]
    out["plain"] = call("/chat/completions", chat)
    out["stream"] = call("/chat/completions", {**chat, "stream": True, "stream_options": {"include_usage": True}})
elif mode == "one":
    out["plain"] = call("/chat/completions", chat)
elif mode == "cross":
    out["crossing"] = call("/chat/completions", chat)
    crossed = time.monotonic()
    out["after"] = call("/chat/completions", chat)
    out["after_sec"] = time.monotonic() - crossed
print(json.dumps(out))
"""


def _gateway_args(provider: ChatStandin) -> list[str]:
    return [
        "--llm-gateway",
        "--openai-compatible-base-url",
        provider.base_url,
        "--credential-setting",
        "OPENAI_COMPATIBLE_API_KEY",
    ]


@pytest.fixture(scope="module")
def demo(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("llm-gateway") / "root", docker_host)
    yield env
    env.meter.stop()


def test_tasks_through_the_gateway_key_in_no_container_and_a_crossing_fenced(demo, docker_host):
    env = demo
    provider = ChatStandin(host="127.0.0.1", cost_per_request=0.01).start()
    client = docker.DockerClient(base_url=docker_host, timeout=120)
    name = "through"
    run_root = env.run_root(name)
    try:
        # demo-hang's agent must outlive every step below: the demo's 240 s task timeout does not on a
        # loaded CI machine (its container was removed before the crossing once), so a longer one (the
        # last --task-timeout given wins).
        proc = env.launch(
            env.run_args(
                name,
                ["demo-hang", "demo-csv-totals"],
                campaign="campaign-gw.json",
                budget_usd=20,
                extra=[*_gateway_args(provider), "--task-timeout", "1200"],
            ),
            name,
        )
        log = env.root / f"{name}.log"
        assert wait_for(lambda: (task_ident(run_root, "demo-hang") is not None) or proc.poll() is not None, 600), (
            log.read_text()[-3000:]
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        agent = f"agent-{task_ident(run_root, 'demo-hang')}"
        assert wait_for(lambda: running(client, agent), 120)
        # The other task finishes through the gateway while the hang task keeps its container up.
        assert wait_for(lambda: read_rows(run_root).get("demo-csv-totals", {}).get("status") == "passed", 300), (
            f"{read_rows(run_root)}\n{log.read_text()[-3000:]}"
        )
        manifest = read_json(run_root / "run_manifest.json")
        record = manifest["llm_gateway"]
        url = record["container_url"]
        assert record["upstream_url"] == provider.base_url and "127.0.0.1" not in url

        # The key is in no container: not in any container's configuration, not in any process, not in any file.
        # sparse: no inspect at listing time (a finished task's container may be removed meanwhile)
        labelled = client.containers.list(
            all=True, sparse=True, filters={"label": f"{RUN_LABEL_KEY}={run_label(run_root)}"}
        )
        half = len(env.key) // 2
        scanned = []
        for container in labelled:
            try:
                container.reload()
                config = json.dumps(container.attrs.get("Config") or {})
                assert env.key not in config, f"the key is in {container.name}'s configuration"
                if container.status != "running":
                    continue
                found = in_container(client, container.name, SCAN, env.key[:half], env.key[half:])
            except docker.errors.NotFound:
                continue  # a finished task's container the runner removed meanwhile
            result = json.loads(found)
            assert result["scanned"] > 0 and result["hits"] == [], f"{container.name}: {result}"
            scanned.append(container.name)
        assert agent in scanned, scanned

        # From inside the agent container, with the token it holds: /models, a plain and a streamed completion.
        basic = json.loads(in_container(client, agent, CALLS, url, "basic"))
        assert basic["models"] == 200
        assert basic["plain"][0] == 200 and json.loads(basic["plain"][2])["choices"][0]["message"]["content"]
        status, kind, text = basic["stream"]
        assert status == 200 and kind.startswith("text/event-stream") and text.rstrip().endswith("data: [DONE]")
        # Refused: this task's token re-labelled as another task's, a token of another run (its label,
        # or its secret), and the token's MAC alone.
        secret = bytes.fromhex((run_root / "private" / "gateway.secret").read_text())
        label = run_label(run_root)
        own = mint_token(secret, label, agent[6:])
        for token in (
            own.replace(agent[6:], "x" + agent[6:]),
            mint_token(secret, "0" * 32, agent[6:]),
            mint_token(b"o" * 32, label, agent[6:]),
            own.rsplit(".", 1)[1],
        ):
            refused = json.loads(in_container(client, agent, CALLS, url, "one", token))
            assert refused["plain"][0] == 401, refused
        # Shaped by the agent: another model is refused; the csv task's token died with its container
        # (the runner's `rm agent-<id>` through the shim), though it is still a well-formed token of the run.
        csv_ident = task_ident(run_root, "demo-csv-totals")
        assert wait_for(lambda: (run_root / "custody" / "evidence" / f"{csv_ident}.agent_removed").exists(), 120)
        dead = json.loads(in_container(client, agent, CALLS, url, "one", mint_token(secret, label, csv_ident)))
        assert dead["plain"][0] == 401 and "was removed" in dead["plain"][2], dead
        before = provider.total()

        # The crossing: the next request's provider cost takes the gateway's sum past the run's allowance.
        provider.cost_per_request = 25.0
        try:
            cross = json.loads(in_container(client, agent, CALLS, url, "cross"))
        except docker.errors.NotFound:
            cross = None  # the stop removed the container before the exec returned its output
        if cross is not None:
            assert cross["crossing"][0] == 200
            assert cross["after"][0] == 403 and "budget is spent" in cross["after"][2], cross
            assert cross["after_sec"] < 1.0, cross
        else:
            # The same facts from the gateway's own log: the crossing forwarded, and anything the task sent
            # after it refused by the fence within a second.
            own = [r for r in read_requests(run_root) if r.task == agent[6:] and r.path.endswith("/chat/completions")]
            crossing = [r for r in own if r.cost_usd == 25.0]
            assert len(crossing) == 1 and crossing[0].status == 200, own
            after = [r for r in own if r.at > crossing[0].at]
            assert all(r.status == 403 and r.refused == "fenced" and r.at - crossing[0].at < 1.0 for r in after), after
        assert provider.total() == before + 1  # the refused request never reached the provider
        code = proc.wait(timeout=600)
        text = log.read_text()
        assert code == ExitCode.STOPPED, text[-3000:]

        manifest = read_json(run_root / "run_manifest.json")
        assert manifest["stop_reason"] == "gateway_budget", manifest.get("stop_causes")
        record = manifest["llm_gateway"]
        assert record["fence_reason"] == "gateway_budget" and record["spent_usd"] >= 25.0
        rows = read_requests(run_root)
        spend = spend_by_task(rows)
        hang = spend[agent[6:]]
        assert hang.forwarded >= 4 and hang.cost_usd >= 25.0
        # The stub's own rounds of both tasks came through the gateway, each under its own task's token.
        assert spend[csv_ident].forwarded >= 1 and spend[csv_ident].unknown_cost == 0
        forwarded_chats = [r for r in rows if r.refused is None and r.path.endswith("/chat/completions")]
        assert len(forwarded_chats) == len(provider.chat_requests())  # every provider request is one log row
        assert read_rows(run_root)["demo-csv-totals"]["status"] == "passed"
        assert label_is_empty(docker_host, label)
        assert key_leaks(run_root, env.key) == []
        assert not (run_root / "private" / "gateway.secret").exists()
        assert not list((run_root / "private").glob("agent-*.env"))
        assert read_json(env.root / "campaign-gw.json").get("active_run") is None
    finally:
        provider.stop()
        client.close()


def test_launcher_sigkilled_the_gateway_port_refuses(demo, docker_host):
    env = demo
    provider = ChatStandin(host="127.0.0.1", cost_per_request=0.01).start()
    name = "killed"
    run_root = env.run_root(name)
    try:
        proc = env.launch(
            env.run_args(name, ["demo-hang"], campaign="campaign-kill.json", extra=_gateway_args(provider)), name
        )
        assert wait_for(lambda: task_ident(run_root, "demo-hang") is not None or proc.poll() is not None, 600)
        assert proc.poll() is None, (env.root / f"{name}.log").read_text()[-3000:]
        url = urlparse(read_json(run_root / "run_manifest.json")["llm_gateway"]["container_url"])
        socket.create_connection((url.hostname, url.port), timeout=5).close()  # it listens while the launcher lives
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        served = provider.total()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((url.hostname, url.port), timeout=5).close()
        # The watchdog cleans up the run; nothing reached the provider after the launcher died.
        assert wait_for(lambda: label_is_empty(docker_host, run_label(run_root)), 180)
        assert provider.total() == served
        # The watchdog deleted the gateway's secret and every token file with the key file.
        assert wait_for(lambda: not (run_root / "private" / "gateway.secret").exists(), 30)
        assert not list((run_root / "private").glob("agent-*.env"))
    finally:
        provider.stop()
