"""Calls made from inside a living container of a run, shared by the tests of the default route on either
daemon (tests/integration/test_provider_tls_run.py as root, tests/rootless/test_rootless_daemon.py as the
rootless daemon's user); tests/ is on sys.path (its conftest)."""

from __future__ import annotations

import time
from pathlib import Path

import docker

# In the agent container: the seed's calls to OpenRouter, with the container's own settings (its
# token in COWORK_PROVIDER_KEY, the CA variables the shim set); urllib's default context is
# OpenSSL's, which reads SSL_CERT_FILE. Also what the name resolves to.
SEED_CALLS = r"""
import json, os, socket, urllib.request, urllib.error
token = os.environ["COWORK_PROVIDER_KEY"]
def call(path, body=None, auth=True):
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = "Bearer " + token
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request("https://openrouter.ai/api/v1" + path, data=data, headers=headers,
                                 method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
chat = {"model": "demo/stub-model", "messages": [{"role": "user", "content": "from the agent container"}],
        "max_tokens": 100}
print(json.dumps({"resolved": socket.gethostbyname("openrouter.ai"), "ssl_cert_file": os.environ.get("SSL_CERT_FILE"),
                  "chat": call("/chat/completions", chat), "models_no_token": call("/models", auth=False),
                  "models": call("/models"), "key": call("/auth/key")}))
"""


def in_container(client, name: str, script: str, *args: str) -> str:
    """`script`'s last line of output, run by the container's own python3; NotFound if the container stopped."""
    container = client.containers.get(name)
    if container.status != "running":
        raise docker.errors.NotFound(f"{name} is not running")
    try:
        code, output = container.exec_run(["python3", "-c", script, *args], demux=False)
    except docker.errors.APIError as exc:  # it stopped (409) or is being removed (500) meanwhile?
        if isinstance(exc, docker.errors.NotFound) or "is not running" in str(exc):
            raise docker.errors.NotFound(f"{name} stopped before the exec: {exc}") from exc
        raise
    text = output.decode(errors="replace")
    if code != 0:  # killed with its container? (the runner stops a finished task's containers)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            container.reload()  # raises NotFound once the runner removed it
            if container.status != "running":
                raise docker.errors.NotFound(f"{name} stopped during the exec")
            time.sleep(0.5)
    assert code == 0, f"exec in {name} failed ({code}): {text[-2000:]}"
    return text.strip().splitlines()[-1]


def task_ident(run_root: Path, task: str) -> str | None:
    """The runner's id of `task` (its agent container is agent-<id>), from the shim's .task evidence."""
    evidence = run_root / "custody" / "evidence"
    for path in evidence.glob("*.task") if evidence.is_dir() else ():
        if task in path.read_text():
            return path.name[: -len(".task")]
    return None


def running(client, name: str) -> bool:
    try:
        return client.containers.get(name).status == "running"
    except docker.errors.NotFound:
        return False


def addresses(client: docker.DockerClient, name: str) -> set[str]:
    """The container's own addresses on its networks, as the daemon gives them."""
    attrs = client.api.inspect_container(name)
    return {n["IPAddress"] for n in (attrs["NetworkSettings"]["Networks"] or {}).values() if n.get("IPAddress")}
