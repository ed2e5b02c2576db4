"""The default route's gateway on the daemon the tests are given, rootful or rootless (gateway/listen.py).

`open_for_run` opens it as a run does with no route flag: a network of the run's own, port 443 of that
network's gateway address, bound in the daemon's network namespace (by the nsenter helper when the
daemon's is not ours: a rootless daemon). A container carrying the run's label, on a network of its own
like a task's, with what the shim gives an agent container (openrouter.ai resolving to that address, the
run CA's bundle, its task's token), makes the seed's chat call over TLS: the stand-in provider on this
host's loopback answers it and receives the key, and the gateway logs the call from the container's own
address. A container without the label is closed on accept. `check_route` passes on the same daemon,
and the run's network is gone once the gateway is closed.

The CI runs it on the rootful test bed, and as the rootless bed's user against its daemon (DOCKER_HOST).
"""

from __future__ import annotations

import hashlib
import json
import secrets

import docker
import pytest
from run_flags import config_for

from cowork_adapter.custody.labels import RUN_LABEL_KEY
from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.demo.env import BYSTANDER_IMAGE
from cowork_adapter.gateway import run as gateway_run
from cowork_adapter.gateway.listen import daemon_namespace, run_network_name
from cowork_adapter.gateway.route_check import check_route
from cowork_adapter.gateway.server import mint_token
from cowork_adapter.gateway.tls import BUNDLE_IN_CONTAINER, PROVIDER_HOST
from cowork_adapter.runroot.layout import RunRoot
from cowork_adapter.schemas.gateway import read_requests

pytestmark = pytest.mark.docker

KEY = "sk-or-v1-" + "5" * 40
# The seed's chat call to OpenRouter, with the container's token and its default TLS trust (SSL_CERT_FILE).
SEED_CHAT = r"""
import json, os, socket, urllib.error, urllib.request
body = json.dumps({"model": "vendor/model-x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50})
req = urllib.request.Request("https://openrouter.ai/api/v1/chat/completions", data=body.encode(), method="POST",
                             headers={"Authorization": "Bearer " + os.environ["COWORK_PROVIDER_KEY"],
                                      "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        answer = [r.status, json.loads(r.read())["usage"]["cost"]]
except urllib.error.HTTPError as e:
    answer = [e.code, None]
except OSError as e:
    answer = [None, type(e).__name__]
print(json.dumps({"resolved": socket.gethostbyname("openrouter.ai"), "chat": answer}))
"""


def _address(container, network: str) -> str:
    container.reload()
    return container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]


def test_the_default_route_serves_its_containers_by_their_own_address(docker_host, tmp_path):
    label = secrets.token_hex(16)
    run_root = tmp_path / "run"
    run_root.mkdir()
    provider = ChatStandin(host="127.0.0.1", cost_per_request=0.03).start()
    cfg = config_for(
        dry_run=False,
        docker_host=docker_host,
        campaign_file=tmp_path / "campaign.json",
        model="vendor/model-x",
        provider_upstream_url=f"http://127.0.0.1:{provider.port}/api/v1",
    )
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    task_net = client.networks.create(f"gwroute-task-{label[:8]}", labels={RUN_LABEL_KEY: label})
    made = []
    gateway, _, record, route = gateway_run.open_for_run(cfg, KEY, label, run_root)
    try:
        address = route.address
        assert record.route.value == "provider_tls" and record.listen_address == f"{address}:443"
        assert address != gateway_run.bridge_address(docker_host)  # the daemon's bridge is no run's
        namespaced = daemon_namespace(docker_host) is not None
        # A rootless daemon's networks are in a namespace of its own: the helper bound the listener there.
        assert namespaced == any("rootless" in o for o in client.info().get("SecurityOptions") or [])
        assert (gateway_run.NAMESPACE_DISCLOSURE in record.disclosures) == namespaced
        gateway.set_allowance(1.0)
        secret = bytes.fromhex(RunRoot(run_root).gateway_secret.read_text().strip())
        for name, labels in ((f"gwroute-in-{label[:8]}", {RUN_LABEL_KEY: label}), (f"gwroute-out-{label[:8]}", {})):
            made.append(
                client.containers.run(
                    BYSTANDER_IMAGE,
                    ["sleep", "300"],
                    detach=True,
                    name=name,
                    labels=labels,
                    network=task_net.name,
                    extra_hosts={PROVIDER_HOST: address},
                    volumes={str(route.ca_bundle): {"bind": BUNDLE_IN_CONTAINER, "mode": "ro"}},
                    environment={
                        "SSL_CERT_FILE": BUNDLE_IN_CONTAINER,
                        "COWORK_PROVIDER_KEY": mint_token(secret, label, "t-1"),
                    },
                )
            )
        inside, stranger = made
        outputs = []
        for container in made:
            code, out = container.exec_run(["python3", "-c", SEED_CHAT])
            assert code == 0, out.decode(errors="replace")[-2000:]
            outputs.append(json.loads(out.decode().strip().splitlines()[-1]))
        assert outputs[0] == {"resolved": address, "chat": [200, 0.03]}, outputs
        assert outputs[1]["resolved"] == address and outputs[1]["chat"][0] is None, outputs  # closed on accept
        with_key = hashlib.sha256(f"Bearer {KEY}".encode()).hexdigest()
        chats = [r for r in provider.all_requests() if r["path"].endswith("/chat/completions")]
        assert [r["auth_sha256"] for r in chats] == [with_key]
        rows = read_requests(run_root)
        assert [(r.peer, r.status) for r in rows if r.refused is None] == [(_address(inside, task_net.name), 200)]
        assert _address(stranger, task_net.name) in {r.peer for r in rows if r.refused == "peer"}
    finally:
        gateway_run.close_for_run(gateway, record, run_root)
        for container in made:
            container.remove(force=True)
        task_net.remove()
        provider.stop()
    assert client.networks.list(names=[run_network_name(label)]) == []  # removed with the gateway

    checked = check_route(docker_host, label)  # from postgres:15, as doctor and the preflight use it
    assert checked.reached and checked.namespaced == namespaced, checked
    assert client.networks.list(filters={"label": f"{RUN_LABEL_KEY}={label}"}) == []
    assert client.containers.list(all=True, filters={"label": f"{RUN_LABEL_KEY}={label}"}) == []
    client.close()
