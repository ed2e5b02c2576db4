"""The default route's TLS identity (gateway/tls.py) and the gateway's provider face, on loopback.

The run CA and the leaf are real certificates made by `cryptography`; they are checked by the
Python `ssl` module as an agent container's client would (the bundle, the host name), and the
gateway serving TLS as openrouter.ai is called the way Ouroboros 6.97.2 calls OpenRouter: chat
with its token, the model list without a credential, the generation and key look-ups. The chat
stand-in plays OpenRouter behind it and records what it received.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import ssl
import threading

import pytest
from cryptography import x509

from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.gateway.policy import SEED_PROVIDER_KEYS, Policy
from cowork_adapter.gateway.server import Gateway, mint_token
from cowork_adapter.gateway.tls import PROVIDER_HOST, make_run_tls, public_roots, remove_private
from cowork_adapter.schemas.gateway import read_requests

LABEL = "b" * 32
SECRET = b"s" * 32
KEY = "sk-or-v1-" + "7" * 40
MODEL = "vendor/model-x"


def test_the_run_ca_signs_a_leaf_for_the_provider_host_only(tmp_path):
    tls = make_run_tls(tmp_path, LABEL)
    assert tls.leaf_key.stat().st_mode & 0o777 == 0o600 and tls.leaf_key.parent == tmp_path / "private"
    assert tls.bundle.stat().st_mode & 0o777 == 0o644
    for path in (tls.bundle, tls.ca_cert, tls.leaf_cert):  # nothing public holds a private key
        assert b"PRIVATE KEY" not in path.read_bytes()
    ca = x509.load_pem_x509_certificate(tls.ca_cert.read_bytes())
    leaf = x509.load_pem_x509_certificate(tls.leaf_cert.read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    permitted = ca.extensions.get_extension_for_class(x509.NameConstraints).value.permitted_subtrees
    assert [n.value for n in permitted] == [PROVIDER_HOST]
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [PROVIDER_HOST]
    leaf.verify_directly_issued_by(ca)
    # The bundle: the host's public roots first (other HTTPS still verifies), then the run CA.
    bundle = tls.bundle.read_bytes()
    assert bundle.startswith(public_roots().rstrip(b"\n")) and bundle.endswith(tls.ca_cert.read_bytes())
    assert bundle.count(b"BEGIN CERTIFICATE") > 10
    remove_private(tmp_path)
    assert not tls.leaf_key.exists() and tls.bundle.exists()


def test_a_second_run_ca_is_a_new_one(tmp_path):
    first, second = make_run_tls(tmp_path / "a", LABEL), make_run_tls(tmp_path / "b", LABEL)
    assert first.ca_cert.read_bytes() != second.ca_cert.read_bytes()
    with pytest.raises(FileExistsError):  # a run root's TLS files are never replaced
        make_run_tls(tmp_path / "a", LABEL)


def _serve_once(context: ssl.SSLContext) -> tuple[int, threading.Thread, list]:
    listener = socket.create_server(("127.0.0.1", 0))
    errors: list = []

    def serve():
        conn, _ = listener.accept()
        try:
            with context.wrap_socket(conn, server_side=True) as tls_conn:
                tls_conn.recv(1)
        except (ssl.SSLError, OSError) as exc:
            errors.append(exc)
        finally:
            listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread, errors


def _handshake(port: int, bundle, host: str) -> None:
    client = ssl.create_default_context(cafile=str(bundle))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with client.wrap_socket(raw, server_hostname=host) as conn:
            conn.sendall(b"x")


def test_a_client_trusting_the_bundle_verifies_the_provider_host_and_nothing_else(tmp_path):
    tls = make_run_tls(tmp_path, LABEL)
    port, thread, _ = _serve_once(tls.server_context())
    _handshake(port, tls.bundle, PROVIDER_HOST)
    thread.join(10)
    port, thread, _ = _serve_once(tls.server_context())
    with pytest.raises(ssl.SSLCertVerificationError):  # the certificate names openrouter.ai alone
        _handshake(port, tls.bundle, "api.openai.com")
    thread.join(10)
    other = make_run_tls(tmp_path / "other", LABEL)
    port, thread, _ = _serve_once(tls.server_context())
    with pytest.raises(ssl.SSLCertVerificationError):  # another run's CA does not vouch for this run
        _handshake(port, other.ca_cert, PROVIDER_HOST)
    thread.join(10)


class ProviderFace:
    """The gateway serving TLS as openrouter.ai on loopback, the stand-in as OpenRouter behind it."""

    def __init__(self, root, policy: Policy | None = None) -> None:
        self.root = root
        self.tls = make_run_tls(root, LABEL)
        self.standin = ChatStandin(cost_per_request=0.001).start()
        upstream = f"http://127.0.0.1:{self.standin.port}/api/v1"
        self.gateway = Gateway(
            upstream=upstream,
            key=KEY,
            run_label=LABEL,
            secret=SECRET,
            run_root=root,
            stop_file=root / "stop",
            bind_host="127.0.0.1",
            policy=policy or Policy(model=MODEL, provider_keys=SEED_PROVIDER_KEYS, function_tools_only=True),
            tls=self.tls.server_context(),
            openrouter=True,
        ).start()
        self.gateway.set_allowance(100.0)
        self.client = ssl.create_default_context(cafile=str(self.tls.bundle))

    def call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        token: str | None = "task-1",
        headers: dict | None = None,
    ) -> tuple[int, dict]:
        conn = http.client.HTTPSConnection(PROVIDER_HOST, self.gateway.port, context=self.client, timeout=10)
        raw = socket.create_connection(("127.0.0.1", self.gateway.port), timeout=10)
        conn.sock = self.client.wrap_socket(raw, server_hostname=PROVIDER_HOST)  # openrouter.ai -> the gateway
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {mint_token(SECRET, LABEL, token)}"
        if body is not None:
            sent["Content-Type"] = "application/json"
        conn.request(method, path, body=body, headers=sent)
        answer = conn.getresponse()
        data = answer.read()
        conn.close()
        return answer.status, json.loads(data or b"{}")

    def close(self) -> None:
        self.gateway.close()
        self.standin.stop()


@pytest.fixture
def face(tmp_path):
    made = ProviderFace(tmp_path)
    yield made
    made.close()


def chat_body(**extra) -> bytes:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 1000,
        "extra_field_order": 1,
        **extra,
    }
    return json.dumps(body, separators=(",", ":")).encode()  # compact: not how the gateway would re-encode it


def test_the_seeds_chat_call_goes_upstream_unchanged_with_the_key(face):
    body = chat_body(
        reasoning={"effort": "medium", "exclude": False},
        session_id="s-1",
        provider={"require_parameters": True, "allow_fallbacks": False},
    )
    status, answer = face.call(
        "POST",
        "/api/v1/chat/completions",
        body,
        headers={"HTTP-Referer": "https://ouroboros.local/", "X-Title": "Ouroboros"},
    )
    assert status == 200 and answer["usage"]["cost"] == 0.001
    (seen,) = face.standin.all_requests()
    assert seen["path"] == "/api/v1/chat/completions"
    assert seen["auth_sha256"] == hashlib.sha256(f"Bearer {KEY}".encode()).hexdigest()
    assert seen["fields"] == {k: v for k, v in json.loads(body).items() if k != "messages"}
    assert {"http-referer", "x-title"} <= set(seen["headers"])
    (row,) = read_requests(face.root)
    assert (row.task, row.refused, row.changed, row.cost_usd) == ("task-1", None, False, 0.001)
    assert KEY.encode() not in (face.root / "gateway" / "requests.jsonl").read_bytes()


def test_the_model_list_needs_a_token_like_every_path(face):
    # The seed asks for it without a credential; no path of the gateway answers without a token
    # (a token-less path let any run peer hold connections no task was counted for).
    status, answer = face.call("GET", "/api/v1/models", token=None)
    assert status == 401 and "not valid" in answer["error"]["message"]
    status, answer = face.call("GET", "/api/v1/models")  # with a token: the key in its place
    assert status == 200 and answer["data"]
    (only,) = face.standin.all_requests()
    assert only["auth_sha256"] == hashlib.sha256(f"Bearer {KEY}".encode()).hexdigest()
    rows = read_requests(face.root)
    assert [(r.task, r.refused) for r in rows] == [(None, "auth"), ("task-1", None)]


def test_the_look_ups_go_with_the_key_and_their_query(face):
    status, answer = face.call("GET", "/api/v1/generation?id=gen-42")
    assert status == 200 and answer["data"]["id"] == "gen-42"
    assert face.call("GET", "/api/v1/auth/key")[0] == 200 and face.call("GET", "/api/v1/key")[0] == 200
    assert [r["path"] for r in face.standin.all_requests()] == [
        "/api/v1/generation?id=gen-42",
        "/api/v1/auth/key",
        "/api/v1/key",
    ]
    # They need the token: without one nothing goes upstream.
    assert face.call("GET", "/api/v1/auth/key", token=None)[0] == 401
    assert len(face.standin.all_requests()) == 3


@pytest.mark.parametrize(
    "path,method,token,status",
    [
        ("/api/v1/credits", "GET", "task-1", 404),  # a path the seed's route does not use
        ("/api/v1/keys", "GET", "task-1", 404),  # the key-management API
        ("/v1/chat/completions", "POST", "task-1", 404),  # the OpenAI-compatible face's path
        ("/api/v1/chat/completions", "GET", "task-1", 404),
        ("/api/v1/credits", "GET", None, 401),  # no token: refused before anything else
    ],
)
def test_nothing_else_is_forwarded(face, path, method, token, status):
    body = chat_body() if method == "POST" else None
    assert face.call(method, path, body, token=token)[0] == status
    assert face.standin.all_requests() == []


@pytest.mark.parametrize(
    "extra,words",
    [
        ({"provider": {"order": ["cheap-provider"]}}, "'provider' is refused"),
        ({"provider": {"require_parameters": "yes"}}, "'provider' is refused"),
        ({"plugins": [{"id": "web"}]}, "'plugins' is refused"),
        ({"tools": [{"type": "openrouter:web_search"}]}, "only function tools"),
        ({"model": "vendor/dearer-model"}, "pinned"),
        ({"n": 3}, "n must be 1"),
    ],
)
def test_what_could_raise_a_price_is_refused(face, extra, words):
    status, answer = face.call("POST", "/api/v1/chat/completions", chat_body(**extra))
    assert status == 400 and words in answer["error"]["message"]
    assert face.standin.all_requests() == []


def test_a_body_the_policy_changes_is_marked_changed(face):
    status, _ = face.call("POST", "/api/v1/chat/completions", chat_body(max_tokens=10**6))
    assert status == 200
    assert face.standin.all_requests()[0]["fields"]["max_tokens"] == face.gateway.policy.max_tokens
    assert read_requests(face.root)[0].changed is True


def test_a_plain_http_client_gets_no_answer(face):
    with socket.create_connection(("127.0.0.1", face.gateway.port), timeout=10) as raw:
        raw.sendall(b"GET /api/v1/models HTTP/1.1\r\nHost: openrouter.ai\r\n\r\n")
        raw.settimeout(10)
        try:
            data = raw.recv(1024)
        except (ConnectionResetError, TimeoutError):
            data = b""
    assert not data.startswith(b"HTTP/1.1 200")
    assert face.standin.all_requests() == []
    assert os.path.exists(face.root / "gateway" / "requests.jsonl")
