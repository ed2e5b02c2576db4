"""The model gateway on the test bed's bridge serves only the run's containers (gateway_peers.RunPeers).

A gateway listens on the daemon's bridge address, as a run's does, with the chat stand-in (on the
host's loopback) as the provider. Two containers on the same daemon call it with a valid token: one
carrying the run's label is served, one without it is refused on accept, and so is this host
process. The rest of the abuse suite runs on loopback: tests/unit/test_gateway_abuse.py.
"""

from __future__ import annotations

import json
import secrets

import docker
import httpx
import pytest

from cowork_adapter.custody.labels import RUN_LABEL_KEY
from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.demo.env import BYSTANDER_IMAGE
from cowork_adapter.gateway.peers import RunPeers
from cowork_adapter.gateway.policy import Policy
from cowork_adapter.gateway.run import bridge_address
from cowork_adapter.gateway.server import Gateway, mint_token
from cowork_adapter.schemas.gateway import read_requests

pytestmark = pytest.mark.docker

CALL = r"""
import json, sys, urllib.request
url, token = sys.argv[1], sys.argv[2]
body = json.dumps({"model": "demo-stub-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
req = urllib.request.Request(url + "/chat/completions", data=body, method="POST",
                             headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        print(json.dumps({"status": r.status}))
except urllib.error.HTTPError as e:
    print(json.dumps({"status": e.code}))
except Exception as e:
    print(json.dumps({"status": None, "error": type(e).__name__}))
"""


def _call_from(container, url: str, token: str) -> dict:
    code, out = container.exec_run(["python3", "-c", CALL, url, token])
    assert code == 0, out.decode(errors="replace")[-2000:]
    return json.loads(out.decode().strip().splitlines()[-1])


def test_only_containers_of_the_run_are_served(docker_host, tmp_path):
    label, other_label = secrets.token_hex(16), secrets.token_hex(16)
    secret = secrets.token_bytes(32)
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    standin = ChatStandin(host="127.0.0.1").start()
    peers = RunPeers(docker_host, label)
    gateway = Gateway(
        upstream=standin.base_url,
        key="sk-peer-test",
        run_label=label,
        secret=secret,
        run_root=tmp_path,
        stop_file=tmp_path / "stop",
        bind_host=bridge_address(docker_host),
        policy=Policy(model="demo-stub-model"),
        peers=peers,
    ).start()
    gateway.set_allowance(100.0)
    url = gateway.url_for(bridge_address(docker_host))
    made = []
    try:
        for name, labels in (
            (f"gw-peer-in-{label[:8]}", {RUN_LABEL_KEY: label}),
            (f"gw-peer-other-{label[:8]}", {RUN_LABEL_KEY: other_label}),
            (f"gw-peer-none-{label[:8]}", {}),
        ):
            made.append(client.containers.run(BYSTANDER_IMAGE, ["sleep", "300"], detach=True, name=name, labels=labels))
        inside, other_run, unlabelled = made
        token = mint_token(secret, label, "t-1")
        assert _call_from(inside, url, token) == {"status": 200}
        for stranger in (other_run, unlabelled):  # same daemon, same bridge, a valid token: refused
            answer = _call_from(stranger, url, token)
            assert answer["status"] is None, answer
        with pytest.raises(httpx.HTTPError):  # this host, on the bridge address
            httpx.post(
                url + "/chat/completions",
                json={"model": "demo-stub-model", "messages": []},
                headers={"Authorization": "Bearer " + token},
                timeout=10,
            )
        assert standin.total() == 1
        rows = read_requests(tmp_path)
        refused = sorted(r.error for r in rows if r.refused == "peer")
        addresses = [
            c.attrs["NetworkSettings"]["Networks"]["bridge"]["IPAddress"]
            for c in (client.containers.get(m.id) for m in (other_run, unlabelled))
        ]
        assert len(refused) == 3 and all(any(ip in e for e in refused) for ip in addresses), refused
        assert [r.status for r in rows if r.refused is None] == [200]
        # The daemon was asked a bounded number of times (at most one lookup per refresh interval).
        assert peers.lookups <= 6
    finally:
        gateway.close()
        standin.stop()
        for container in made:
            container.remove(force=True)
        client.close()
