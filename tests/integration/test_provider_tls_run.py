"""The default route on the real Docker test bed: a paid run with no route flag serves openrouter.ai
itself over TLS (gateway/tls.py), and the provider key is in no container.

One demo run (stub engine, `demo-hang` keeps its agent container up) with no --key-in-agent and no
--llm-gateway. Its gateway listens on port 443 of the gateway address of a network this test makes
(--llm-gateway-host: an address of this host every container reaches; without the flag a run makes such
a network itself, tests/integration/test_default_route_runs.py) and forwards to the chat stand-in on loopback
(--provider-upstream-url: a test bed cannot reach OpenRouter). While the task runs, from inside the
agent container, with the token it holds and its own Python's default TLS trust, the test calls
`https://openrouter.ai/api/v1` exactly as the seed's code does (chat with the token, the model list
without a credential, which the gateway refuses like every token-less path, then with the token): the
name resolves to the gateway, the run CA verifies, and the stand-in receives the key. Every container
of the run is checked for the key (its configuration as `docker inspect` shows it, every process's
environ, every file). Then the run is stopped.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import signal

import docker
import pytest
from provider_calls import SEED_CALLS, in_container, running, task_ident
from test_llm_gateway import SCAN

from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import RUN_LABEL_KEY, run_label
from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.demo.env import key_leaks, prepare, read_json, wait_for
from cowork_adapter.schemas.gateway import read_requests
from cowork_adapter.vocab import ExitCode

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def demo(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("provider-tls") / "root", docker_host)
    yield env
    env.meter.stop()


@pytest.fixture(scope="module")
def own_address(docker_host):
    """The gateway address of a network of this test's own (an address of this host, reachable from
    every container of the daemon), removed afterwards."""
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    network = client.networks.create(f"tlskey-test-{secrets.token_hex(4)}", labels={"org.cowork-tests.tlskey": "1"})
    try:
        network.reload()
        yield network.attrs["IPAM"]["Config"][0]["Gateway"]
    finally:
        network.remove()
        client.close()


def test_the_default_route_serves_openrouter_and_no_container_holds_the_key(demo, docker_host, own_address):
    env = demo
    provider = ChatStandin(host="127.0.0.1", cost_per_request=0.01).start()
    client = docker.DockerClient(base_url=docker_host, timeout=120)
    name = "default-route"
    run_root = env.run_root(name)
    log = env.root / f"{name}.log"
    extra = [
        "--llm-gateway-host",
        own_address,
        "--provider-upstream-url",
        f"http://127.0.0.1:{provider.port}/api/v1",
        "--task-timeout",
        "120",
    ]
    proc = None
    try:
        args = env.run_args(name, ["demo-hang"], campaign="campaign-tls.json", extra=extra)
        assert "--key-in-agent" not in args
        proc = env.launch(args, name)
        assert wait_for(lambda: task_ident(run_root, "demo-hang") is not None or proc.poll() is not None, 600), (
            log.read_text()[-3000:]
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        agent = f"agent-{task_ident(run_root, 'demo-hang')}"
        assert wait_for(lambda: running(client, agent), 120)
        record = read_json(run_root / "run_manifest.json")["llm_gateway"]
        assert record["route"] == "provider_tls" and record["listen_address"] == f"{own_address}:443"
        assert (run_root / "private" / "provider-leaf.key").stat().st_mode & 0o777 == 0o600

        # The seed's calls, from inside the agent container: openrouter.ai is the run's gateway.
        seen = json.loads(in_container(client, agent, SEED_CALLS))
        assert seen["resolved"] == own_address
        assert seen["ssl_cert_file"] == "/etc/cowork-adapter/provider-ca-bundle.pem"
        assert seen["chat"][0] == 200 and json.loads(seen["chat"][1])["usage"]["cost"] == 0.01, seen
        assert seen["models_no_token"][0] == 401 and seen["models"][0] == 200 and seen["key"][0] == 200, seen
        # The gateway's own look-up of the model's price when it opened, then the calls; the token-less
        # call never reached the provider.
        upstream = provider.all_requests()
        assert [(r["method"], r["path"]) for r in upstream] == [
            ("GET", "/api/v1/models"),
            ("POST", "/api/v1/chat/completions"),
            ("GET", "/api/v1/models"),
            ("GET", "/api/v1/auth/key"),
        ]
        with_key = hashlib.sha256(f"Bearer {env.key}".encode()).hexdigest()
        assert [r["auth_sha256"] for r in upstream] == [with_key] * 4
        rows = [r for r in read_requests(run_root) if r.refused is None]
        assert [(r.task, r.changed) for r in rows][:1] == [(agent[6:], False)]  # unchanged: byte for byte

        # The key is in no container: configuration (docker inspect), processes, files.
        half = len(env.key) // 2
        scanned = []
        for container in client.containers.list(
            all=True, sparse=True, filters={"label": f"{RUN_LABEL_KEY}={run_label(run_root)}"}
        ):
            try:
                container.reload()
                assert env.key not in json.dumps(container.attrs), f"the key is in docker inspect of {container.name}"
                if container.status != "running":
                    continue
                result = json.loads(in_container(client, container.name, SCAN, env.key[:half], env.key[half:]))
            except docker.errors.NotFound:
                continue
            assert result["scanned"] > 0 and result["hits"] == [], f"{container.name}: {result}"
            scanned.append(container.name)
        assert agent in scanned, scanned

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == ExitCode.STOPPED, log.read_text()[-3000:]
        text = log.read_text()
        assert "the agent under test can read it" not in text  # no key-in-agent note on this route
        assert label_is_empty(docker_host, run_label(run_root))
        assert not (run_root / "private" / "provider-leaf.key").exists()
        assert not (run_root / "private" / "gateway.secret").exists()
        assert key_leaks(run_root, env.key) == []
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        provider.stop()
        client.close()
