"""Two default-route runs at once on one daemon (gateway/listen.py): each serves only its own containers.

Two demo runs (stub engine, `demo-hang` keeps each agent container up) with no route flag at all:
each makes a network of its own and serves openrouter.ai on port 443 of that network's gateway
address, forwarding to a chat stand-in of its own on loopback (--provider-upstream-url). While both
run, from inside each agent container, with the token it holds: openrouter.ai resolves to its own
run's address and its chat call is answered by its own stand-in; a connection to the OTHER run's
address is closed on accept, and the other run's gateway logs it as a `peer` refusal naming this
container's address. Then both runs are stopped, and each run's label (its gateway network
included) is empty.
"""

from __future__ import annotations

import json
import signal

import docker
import pytest
from provider_calls import in_container, running, task_ident

from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.demo.env import prepare, read_json, wait_for
from cowork_adapter.gateway.listen import run_network_name
from cowork_adapter.gateway.run import bridge_address
from cowork_adapter.schemas.gateway import read_requests
from cowork_adapter.vocab import ExitCode

pytestmark = pytest.mark.docker

# In an agent container: its own route (chat with its token, as the seed calls OpenRouter), then a
# connection to the other run's gateway address, port 443.
CROSS = r"""
import json, os, socket, sys, urllib.error, urllib.request
other = sys.argv[1]
body = json.dumps({"model": "demo/stub-model", "messages": [{"role": "user", "content": "two runs"}],
                   "max_tokens": 50}).encode()
req = urllib.request.Request("https://openrouter.ai/api/v1/chat/completions", data=body, method="POST",
                             headers={"Authorization": "Bearer " + os.environ["COWORK_PROVIDER_KEY"],
                                      "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        own = [r.status, json.loads(r.read())["usage"]["cost"]]
except urllib.error.HTTPError as e:
    own = [e.code, None]
try:
    conn = socket.create_connection((other, 443), timeout=20)
    conn.settimeout(20)
    crossed = "closed" if conn.recv(1) == b"" else "answered"
except ConnectionResetError:
    crossed = "closed"
except OSError as e:
    crossed = type(e).__name__
print(json.dumps({"resolved": socket.gethostbyname("openrouter.ai"), "own": own, "other": crossed}))
"""


@pytest.fixture(scope="module")
def demo(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("default-route-runs") / "root", docker_host)
    yield env
    env.meter.stop()


def test_two_default_route_runs_share_a_daemon_each_serving_its_own(demo, docker_host):
    env = demo
    client = docker.DockerClient(base_url=docker_host, timeout=120)
    names = ("route-a", "route-b")
    costs = {"route-a": 0.01, "route-b": 0.02}  # each run's stand-in answers with its own figure
    providers = {name: ChatStandin(host="127.0.0.1", cost_per_request=costs[name]).start() for name in names}
    procs = {}
    try:
        for name in names:
            extra = ["--provider-upstream-url", f"http://127.0.0.1:{providers[name].port}/api/v1"]
            args = env.run_args(
                name, ["demo-hang"], campaign=f"campaign-{name}.json", extra=extra + ["--task-timeout", "180"]
            )
            assert "--key-in-agent" not in args and "--llm-gateway-host" not in args
            procs[name] = env.launch(args, name)
        roots = {name: env.run_root(name) for name in names}

        def agents_up() -> bool:
            idents = {name: task_ident(roots[name], "demo-hang") for name in names}
            return all(i is not None and running(client, f"agent-{i}") for i in idents.values())

        logs = {name: env.root / f"{name}.log" for name in names}
        assert wait_for(lambda: agents_up() or any(p.poll() is not None for p in procs.values()), 900), {
            name: logs[name].read_text()[-2000:] for name in names
        }
        assert all(p.poll() is None for p in procs.values()), {n: logs[n].read_text()[-2000:] for n in names}
        agents = {name: f"agent-{task_ident(roots[name], 'demo-hang')}" for name in names}
        records = {name: read_json(roots[name] / "run_manifest.json")["llm_gateway"] for name in names}
        listen = {name: records[name]["listen_address"].rsplit(":", 1) for name in names}
        address = {name: listen[name][0] for name in names}
        assert [listen[n][1] for n in names] == ["443", "443"] and address["route-a"] != address["route-b"]
        assert bridge_address(docker_host) not in address.values()  # the daemon's bridge is no run's

        for name, other in (("route-a", "route-b"), ("route-b", "route-a")):
            seen = json.loads(in_container(client, agents[name], CROSS, address[other]))
            assert seen == {"resolved": address[name], "own": [200, costs[name]], "other": "closed"}, (name, seen)
        for name, other in (("route-a", "route-b"), ("route-b", "route-a")):
            networks = client.containers.get(agents[other]).attrs["NetworkSettings"]["Networks"]
            stranger = {net["IPAddress"] for net in networks.values()}
            refused = [r for r in read_requests(roots[name]) if r.refused == "peer"]
            assert any(r.peer in stranger for r in refused), (name, refused)
            assert [r.status for r in read_requests(roots[name]) if r.refused is None] == [200]
            assert len(providers[name].all_requests()) == 2  # its price look-up at the start, then its own chat

        for name in names:
            procs[name].send_signal(signal.SIGTERM)
        for name in names:
            assert procs[name].wait(timeout=300) == ExitCode.STOPPED, logs[name].read_text()[-3000:]
            label = run_label(roots[name])
            assert label_is_empty(docker_host, label)
            assert client.networks.list(names=[run_network_name(label)]) == []
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=60)
        for provider in providers.values():
            provider.stop()
        client.close()
