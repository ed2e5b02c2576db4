"""The gateway's listener in another network namespace (gateway/nsbind.py, gateway/listen.py).

A rootless Docker daemon's networks live in RootlessKit's user and network namespaces. Here the test
makes such a pair itself (`unshare -U -r -n`): a process inside it holds three addresses of its own
and serves a unix socket, as a rootless dockerd serves its API. The listener is found by that
socket's peer credentials, bound inside the namespace by the nsenter helper, served from this
process, and a client inside the namespace is seen by its own address: the gateway's peer check
serves one of two clients and refuses the other. Refusals name their cause. And an unprivileged
user binds port 443 in a namespace of its own, which it cannot do on the host.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.gateway import nsbind
from cowork_adapter.gateway.listen import ListenError, daemon_listener, daemon_namespace, daemon_pid
from cowork_adapter.gateway.policy import Policy
from cowork_adapter.gateway.server import Gateway, mint_token
from cowork_adapter.schemas.gateway import read_requests

ADDRESS, CLIENT, STRANGER = "10.199.0.1", "10.199.0.2", "10.199.0.3"
LABEL = "e" * 32
SECRET = b"n" * 32
SRC = Path(nsbind.__file__).resolve().parents[2]

# Inside the namespace: its own addresses on lo, then a unix socket served (a daemon's API socket).
DAEMON = r"""
import socket, subprocess, sys
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
for address in sys.argv[2:]:
    subprocess.run(["ip", "addr", "add", address + "/32", "dev", "lo"], check=True)
api = socket.socket(socket.AF_UNIX)
api.bind(sys.argv[1])
api.listen(8)
print("ready", flush=True)
while True:
    api.accept()[0].close()
"""
# Inside the namespace: a client from a given address calls the gateway; prints the status, or None.
CLIENT_CALL = r"""
import http.client, json, socket, sys
address, port, source, token = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
try:
    conn = http.client.HTTPConnection(address, port, timeout=20, source_address=(source, 0))
    conn.request("GET", "/v1/models", headers={"Authorization": "Bearer " + token})
    print(json.dumps({"status": conn.getresponse().status}))
except (OSError, http.client.HTTPException) as exc:
    print(json.dumps({"status": None, "error": type(exc).__name__}))
"""


@dataclass
class Namespace:
    pid: int
    docker_host: str

    def run(self, code: str, *args: str) -> dict:
        """Python code run inside the namespace; its last line, as JSON."""
        done = subprocess.run(
            ["nsenter", "--target", str(self.pid), "--user", "--preserve-credentials", "--net", "--"]
            + [sys.executable, "-I", "-S", "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def namespace(tmp_path):
    api = tmp_path / "daemon.sock"
    proc = subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--net", sys.executable, "-I", "-S", "-c", DAEMON]
        + [str(api), ADDRESS, CLIENT, STRANGER],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield Namespace(pid=proc.pid, docker_host=f"unix://{api}")
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_the_daemon_is_found_by_its_sockets_peer_credentials(namespace, tmp_path):
    assert daemon_pid(namespace.docker_host) == namespace.pid
    assert daemon_namespace(namespace.docker_host) == namespace.pid  # not our network namespace
    own = socket.socket(socket.AF_UNIX)
    own.bind(str(tmp_path / "own.sock"))
    own.listen(1)
    with own:  # a daemon in our own namespace (rootful): bound here, as before
        assert daemon_pid(f"unix://{tmp_path / 'own.sock'}") == os.getpid()
        assert daemon_namespace(f"unix://{tmp_path / 'own.sock'}") is None
    assert daemon_pid(f"unix://{tmp_path / 'absent.sock'}") is None
    assert daemon_pid("tcp://127.0.0.1:2375") is None and daemon_namespace("tcp://127.0.0.1:2375") is None


def test_a_listener_bound_in_the_namespace_is_served_from_here_and_sees_each_peer(namespace, tmp_path):
    with pytest.raises(OSError) as here:  # the address exists only inside the namespace
        nsbind.listen_here(ADDRESS, 443)
    assert here.value.errno == errno.EADDRNOTAVAIL
    listener, namespaced = daemon_listener(namespace.docker_host, ADDRESS, 443)
    assert namespaced and listener.getsockname() == (ADDRESS, 443)

    class Peers:  # the run's containers by address (gateway/peers.py reads them from the daemon)
        def allowed(self, ip: str) -> bool:
            return ip == CLIENT

    standin = ChatStandin(host="127.0.0.1").start()
    gateway = Gateway(
        upstream=standin.base_url,
        key="sk-ns-test",
        run_label=LABEL,
        secret=SECRET,
        run_root=tmp_path,
        stop_file=tmp_path / "stop",
        bind_host=ADDRESS,
        policy=Policy(model="m"),
        peers=Peers(),
        listener=listener,
    ).start()
    gateway.set_allowance(1.0)
    try:
        assert gateway.port == 443
        token = mint_token(SECRET, LABEL, "t-1")
        assert namespace.run(CLIENT_CALL, ADDRESS, "443", CLIENT, token) == {"status": 200}
        refused = namespace.run(CLIENT_CALL, ADDRESS, "443", STRANGER, token)
        assert refused["status"] is None, refused
    finally:
        gateway.close()
        standin.stop()
    rows = read_requests(tmp_path)
    assert [(r.peer, r.status) for r in rows if r.refused is None] == [(CLIENT, 200)]
    assert [r.peer for r in rows if r.refused == "peer"] == [STRANGER]
    assert standin.total() == 1


def test_refusals_name_the_cause(namespace, tmp_path, monkeypatch):
    with pytest.raises(ListenError) as absent:
        daemon_listener(namespace.docker_host, "10.199.0.9", 443)
    assert "10.199.0.9 is not an address in the rootless daemon's network namespace" in absent.value.strerror
    first, _ = daemon_listener(namespace.docker_host, ADDRESS, 443)
    with first, pytest.raises(ListenError) as taken:
        daemon_listener(namespace.docker_host, ADDRESS, 443)
    assert f"another process already listens on {ADDRESS}:443 in the rootless" in taken.value.strerror
    # An nsenter that cannot enter (a daemon of another user): its own words, in one line.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nsenter").write_text(
        "#!/bin/sh\necho 'nsenter: reassociate to namespace failed: Operation not permitted' >&2\nexit 1\n"
    )
    (fake / "nsenter").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    with pytest.raises(ListenError) as denied:
        daemon_listener(namespace.docker_host, ADDRESS, 443)
    said = "nsenter: reassociate to namespace failed: Operation not permitted"
    assert denied.value.strerror.endswith(f"process {namespace.pid}) could not be entered: {said}")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(nsbind.NamespaceBindError, match="nsenter .util-linux. is not on PATH"):
        nsbind.bind_listener(ADDRESS, 443, pid=namespace.pid)


# As an unprivileged user: port 443 in a namespace of its own is bound; on the host it is refused.
UNPRIVILEGED = r"""
import json, os, subprocess, sys
from cowork_adapter.gateway import nsbind
inside = subprocess.Popen(["unshare", "--user", "--map-root-user", "--net", "sh", "-c",
                           "ip link set lo up && ip addr add 10.199.0.1/32 dev lo && echo ready && exec sleep 120"],
                          stdout=subprocess.PIPE, text=True)
try:
    assert inside.stdout.readline().strip() == "ready"
    sock = nsbind.bind_listener("10.199.0.1", 443, pid=inside.pid)
    bound = list(sock.getsockname())
    try:
        nsbind.listen_here("0.0.0.0", 443)
        here = None
    except OSError as exc:
        here = exc.errno
    print(json.dumps({"uid": os.getuid(), "bound": bound, "here": here}))
finally:
    inside.kill()
"""


def test_an_unprivileged_user_binds_port_443_in_its_own_namespace():
    system_python = "/usr/bin/python3"  # the test's own Python may live where that user cannot read
    if os.geteuid() != 0 or not os.access(system_python, os.X_OK):
        pytest.fail(
            "this test switches to an unprivileged user: it runs as root with Debian's python3 (docs/testing.md)"
        )
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", system_python, "-c", UNPRIVILEGED],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(SRC)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"uid": 65534, "bound": ["10.199.0.1", 443], "here": errno.EACCES}
