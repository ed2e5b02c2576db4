"""Fuzz and abuse of the model gateway (gateway.py) on loopback, the chat stand-in as the provider.

What an agent holding its token (or anyone reaching the port) can try, and what must hold: the token
is checked before any body is read; bodies, lengths and slow clients are bounded; connections are
bounded; log rows are bounded; requests are shaped (gateway/policy.py) so one request cannot cost more
than the run's own; unknown costs are counted pessimistically; the per-task limit and a removed
container's token are enforced; the fence also cuts a request waiting for the provider's headers.
The peer check against the daemon is proved on the test bed (tests/integration/test_gateway_abuse.py).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_gateway import Bed  # tests/unit is on sys.path under pytest's rootdir-relative imports

from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.gateway import server as gw
from cowork_adapter.gateway.policy import Policy, pinned_model, shape
from cowork_adapter.gateway.server import FENCE_RUN_STOPPING, REVOKED_SUFFIX, Gateway, mint_token, token_task
from cowork_adapter.schemas.gateway import read_requests, spend_by_task

LABEL = "c" * 32
SECRET = b"q" * 32
MODEL = "demo-stub-model"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}


class Rig(Bed):
    """A gateway in front of a chat stand-in, on loopback, with the gateway's knobs given per test
    (test_gateway.Bed's close)."""

    def __init__(self, root: Path, standin: dict | None = None, **knobs) -> None:
        self.root = root
        self.standin = ChatStandin(**(standin or {})).start()
        knobs.setdefault("policy", Policy(model=MODEL, max_tokens=1000))
        self.gateway = Gateway(
            upstream=self.standin.base_url,
            key="sk-abuse-" + "7" * 20,
            run_label=LABEL,
            secret=SECRET,
            run_root=root,
            stop_file=root / "stop",
            bind_host="127.0.0.1",
            revoked_dir=root,
            **knobs,
        ).start()
        self.gateway.set_allowance(100.0)
        self.url = self.gateway.url_for("127.0.0.1")

    def token(self, task: str = "t-1") -> str:
        return mint_token(SECRET, LABEL, task)

    def chat(self, body: dict | None = None, task: str = "t-1", **kw) -> httpx.Response:
        return httpx.post(
            self.url + "/chat/completions",
            json=BODY if body is None else body,
            headers={"Authorization": "Bearer " + self.token(task)},
            timeout=10,
            **kw,
        )

    def raw(self, data: bytes, *, wait: float = 20.0) -> tuple[int | None, bytes, bool]:
        """Send bytes on a fresh connection; (status, whole answer, whether the server closed it).

        `closed` is the event itself (the end of the stream seen); `wait` is only a hang guard, far
        below the gateway's own 30 s request deadline, so a server that waited for a body never sent
        is seen as not having closed rather than as having been slow."""
        closed = False
        with socket.create_connection(("127.0.0.1", self.gateway.port), timeout=wait) as sock:
            sock.sendall(data)
            got = b""
            try:
                while chunk := sock.recv(65536):
                    got += chunk
                closed = True
            except TimeoutError:
                pass
        status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.1 ") else None
        return status, got, closed

    def rows(self):
        return read_requests(self.root)


@pytest.fixture
def rig(tmp_path):
    made = Rig(tmp_path)
    yield made
    made.close()


def post_head(token: str | None, extra: str = "", path: str = "/v1/chat/completions") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token is not None else ""
    return f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}{extra}\r\n".encode("latin-1")


# ---------------------------------------------------------------- tokens, before any body


def test_no_token_is_refused_before_the_body_is_read(rig):
    # A promised 10 MB body that never comes: the answer is immediate and the connection closed.
    status, answer, closed = rig.raw(post_head(None, "Content-Length: 10000000\r\n"))
    assert status == 401 and b"not valid" in answer and closed
    assert rig.standin.total() == 0
    assert [(r.refused, r.task) for r in rig.rows()] == [("auth", None)]


@pytest.mark.parametrize(
    "token",
    [
        "",
        "cwg1",
        "cwg1..",
        "cwg1.t-1.",
        "x" * 5000,
        "cwg1.t-1." + "0" * 64,
        "cwg1.../../etc.00",
        "cwg1.t-1." + "é" * 64,
        "cwg1.té.abc",
        "Bearer",
        "\u00ff\u00fe",
    ],
)
def test_bad_and_non_ascii_tokens_are_refused_with_a_row(rig, token):
    status, _, _ = rig.raw(post_head(token, "Content-Length: 2\r\n") + b"{}")
    assert status == 401
    rows = rig.rows()
    assert len(rows) == 1 and rows[0].refused == "auth" and rows[0].task is None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_token_check_never_raises_and_accepts_only_minted_tokens(token):
    found = token_task(SECRET, LABEL, token)
    assert found is None or token == mint_token(SECRET, LABEL, found)


def test_a_removed_containers_token_is_refused_and_others_still_served(rig):
    assert rig.chat(task="t-1").status_code == 200
    (rig.root / ("t-1" + REVOKED_SUFFIX)).write_text("1\n")  # what the shim leaves on `rm agent-t-1`
    answer = rig.chat(task="t-1")
    assert answer.status_code == 401 and "was removed" in answer.json()["error"]["message"]
    assert rig.chat(task="t-2").status_code == 200
    assert rig.standin.total() == 2
    assert [r.refused for r in rig.rows()] == [None, "revoked", None]


# ---------------------------------------------------------------- lengths and bodies


@pytest.mark.parametrize(
    "extra, status",
    [
        ("", 411),  # no Content-Length
        ("Transfer-Encoding: chunked\r\n", 411),
        ("Content-Length: -1\r\n", 400),
        ("Content-Length: abc\r\n", 400),
        ("Content-Length: 1e3\r\n", 400),
        ("Content-Length: 5\r\nContent-Length: 5\r\n", 400),
        (f"Content-Length: {gw.MAX_BODY_BYTES + 1}\r\n", 413),
        ("Content-Length: 99999999999999999999999\r\n", 413),
    ],
)
def test_bad_content_lengths_are_refused_without_reading(rig, extra, status):
    got, _, closed = rig.raw(post_head(rig.token(), extra))
    assert got == status and closed
    assert rig.standin.total() == 0
    assert rig.rows()[0].refused == "body" and rig.rows()[0].task == "t-1"


def test_an_endless_body_is_cut_at_the_deadline(tmp_path):
    made = Rig(tmp_path, request_deadline_sec=1.0)
    try:
        with socket.create_connection(("127.0.0.1", made.gateway.port), timeout=10) as sock:
            sock.sendall(post_head(made.token(), "Content-Length: 1000000\r\n") + b"{" + b" " * 1000)
            started = time.monotonic()
            sent, closed = 0, False
            # Keep sending slowly, never the whole body: only the gateway's deadline can end this.
            # The 20 s is a hang guard (the 1 MB body is never reached: 100 B per 0.05 s).
            while time.monotonic() - started < 20:
                try:
                    sock.sendall(b" " * 100)
                    sent += 100
                except OSError:
                    closed = True
                    break
                time.sleep(0.05)
        assert closed, sent
        row = made.rows()[0]
        assert row.refused == "body" and "body ended after" in row.error
        assert made.standin.total() == 0
    finally:
        made.close()


def test_a_slowloris_client_cannot_hold_a_worker(tmp_path):
    made = Rig(tmp_path, request_deadline_sec=1.0, max_connections=2)
    try:
        slow = [socket.create_connection(("127.0.0.1", made.gateway.port), timeout=10) for _ in range(2)]
        started = time.monotonic()
        cut = [False, False]
        # One header byte per 0.1 s on each, until both are cut (the 20 s is a hang guard, not a bound)
        while time.monotonic() - started < 20 and not all(cut):
            for i, sock in enumerate(slow):
                if not cut[i]:
                    try:
                        sock.sendall(b"X")
                    except OSError:
                        cut[i] = True
            time.sleep(0.1)
        assert all(cut)
        for sock in slow:
            sock.close()
        assert made.chat().status_code == 200  # the workers are free again
    finally:
        made.close()


def test_a_huge_path_and_thousands_of_refusals_leave_bounded_rows(rig, monkeypatch):
    monkeypatch.setattr(gw, "MAX_ANONYMOUS_ROWS", 50)
    status, _, _ = rig.raw(post_head(rig.token(), "Content-Length: 2\r\n", path="/" + "p" * 60000) + b"{}")
    assert status == 404
    row = rig.rows()[0]
    assert len(row.path) < gw.PATH_CHARS + 40 and row.refused == "route"
    with httpx.Client(timeout=10) as client:
        for i in range(300):
            client.post(
                rig.url + "/chat/completions?" + "q" * 4000,
                json=BODY,
                headers={"Authorization": f"Bearer nope-{i}" + "z" * 1000},
            )
    rig.gateway.close()  # each caller's refusals: one row as it happens, then one count row per interval
    rows = rig.rows()
    assert 2 <= len(rows) <= 1 + 2 * 30 and sum(r.count for r in rows[1:]) == 300
    assert rig.gateway.unlogged_refusals == 0
    assert max(len(r.path) for r in rows) < gw.PATH_CHARS + 40
    assert (rig.root / "gateway" / "requests.jsonl").stat().st_size < 51 * 600


# ---------------------------------------------------------------- connections


def test_thousands_of_connections_are_bounded_and_the_gateway_still_serves(tmp_path):
    made = Rig(tmp_path, max_connections=16, request_deadline_sec=2.0)
    try:
        threads_before = threading.active_count()
        held = []
        for _ in range(300):  # held open, each sending half a request line
            sock = socket.create_connection(("127.0.0.1", made.gateway.port), timeout=5)
            sock.sendall(b"POST /v1/chat")
            held.append(sock)
        deadline = time.monotonic() + 20  # a hang guard for the event below, not a bound
        while made.gateway.overflowed < 300 - 16 and time.monotonic() < deadline:  # accepted, one by one
            assert threading.active_count() - threads_before <= 16 + 1
            time.sleep(0.05)
        assert made.gateway.overflowed >= 300 - 16
        assert threading.active_count() - threads_before <= 16 + 1
        for sock in held:
            sock.close()
        started = time.monotonic()
        opened = 0

        def churning() -> bool:
            # 3 s of connect-and-drop churn, 3000 connections at most, and on until 500 were made
            # (30 s at most): on a loaded machine 3 s alone could make fewer, and the test failed on
            # its own set-up, not on the gateway.
            took = time.monotonic() - started
            return opened < 3000 and took < 30 and (took < 3 or opened < 500)

        while churning():
            socket.create_connection(("127.0.0.1", made.gateway.port), timeout=5).close()
            opened += 1
        assert opened >= 500
        deadline = time.monotonic() + 20  # a hang guard for the event below, not a bound
        while True:  # the churned connections end within the deadline; then a request is served
            try:
                answer = made.chat()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert answer.status_code == 200
        assert threading.active_count() - threads_before <= 16 + 1
    finally:
        made.close()


def test_a_stranger_peer_is_refused_on_accept(tmp_path):
    class NoPeers:
        asked: list[str] = []

        def allowed(self, ip: str) -> bool:
            self.asked.append(ip)
            return False

    peers = NoPeers()
    made = Rig(tmp_path, peers=peers)
    try:
        with pytest.raises(httpx.HTTPError):
            made.chat()
        assert peers.asked == ["127.0.0.1"] and made.standin.total() == 0
        assert [r.refused for r in made.rows()] == ["peer"]
    finally:
        made.close()


# ---------------------------------------------------------------- shaped requests


@pytest.mark.parametrize(
    "change, words",
    [
        ({"model": "openai/gpt-4o"}, "pinned"),
        ({"model": MODEL + ":online"}, "pinned"),
        ({"model": None}, "no model"),
        ({"n": 2}, "n must be 1"),
        ({"n": True}, "n must be 1"),
        ({"models": [MODEL, "openai/o1-pro"]}, "'models' is refused"),
        ({"route": "fallback"}, "'route' is refused"),
        ({"provider": {"order": ["x"]}}, "'provider' is refused"),
        ({"plugins": [{"id": "web"}]}, "'plugins' is refused"),
        ({"web_search_options": {}}, "'web_search_options' is refused"),
        ({"max_tokens": -5}, "positive whole number"),
        ({"max_completion_tokens": "many"}, "positive whole number"),
        ({"stream": "yes"}, "stream must be"),
    ],
)
def test_shaped_requests_are_refused_before_the_provider(rig, change, words):
    answer = rig.chat({**BODY, **change})
    assert answer.status_code == 400 and words in answer.json()["error"]["message"], answer.text
    assert rig.standin.total() == 0 and rig.rows()[0].refused == "shape"


def test_output_tokens_are_clamped_and_set_n_one_passes(rig):
    assert rig.chat({**BODY, "max_tokens": 10**9, "n": 1}).status_code == 200
    assert rig.chat({**BODY, "max_completion_tokens": 50}).status_code == 200
    assert rig.chat(BODY).status_code == 200
    seen = [(r["max_tokens"], r["max_completion_tokens"], r["n"]) for r in rig.standin.chat_requests()]
    assert seen == [(1000, None, 1), (None, 50, None), (1000, None, None)]


def test_a_stream_without_usage_is_made_to_report_it(tmp_path):
    made = Rig(tmp_path, standin={"cost_per_request": 0.02})
    try:
        answer = made.chat({**BODY, "stream": True})
        assert answer.status_code == 200 and '"usage"' in answer.text
        assert made.standin.chat_requests()[0]["include_usage"] is True
        row = made.rows()[0]
        assert row.cost_usd == 0.02 and row.assumed_cost_usd is None and row.completion_tokens
    finally:
        made.close()


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "model",
                "n",
                "max_tokens",
                "max_completion_tokens",
                "stream",
                "stream_options",
                "models",
                "temperature",
                "provider",
            ]
        ),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-5, 10**7),
            st.text(max_size=20),
            st.just(MODEL),
            st.dictionaries(st.text(max_size=5), st.booleans(), max_size=2),
        ),
    )
)
@example(body={"model": MODEL, "n": None})  # found by this test: a null n was forwarded as null
def test_shape_never_lets_a_dearer_request_through(body):
    policy = Policy(model=MODEL, max_tokens=1000)
    out = shape(body, policy)
    if isinstance(out, str):
        return
    assert out["model"] == MODEL and out.get("n", 1) == 1
    assert not set(out) & {"models", "provider", "route", "plugins", "web_search_options"}
    caps = [out.get(k) for k in ("max_tokens", "max_completion_tokens") if out.get(k) is not None]
    assert caps and all(1 <= c <= 1000 for c in caps)
    if out.get("stream") is True:
        assert out["stream_options"]["include_usage"] is True


def test_pinned_model_drops_a_route_prefix():
    assert pinned_model("openai-compatible::vendor/m") == "vendor/m" and pinned_model("vendor/m") == "vendor/m"


# ---------------------------------------------------------------- money


def test_answers_without_cost_are_counted_at_the_pessimistic_price_and_the_task_limit_holds(tmp_path):
    made = Rig(tmp_path, per_task_usd=1.0, unknown_cost_usd=0.4)  # the stand-in reports no cost
    try:
        assert [made.chat(task="t-1").status_code for _ in range(3)] == [200, 200, 200]  # 1.2 >= 1.0
        answer = made.chat(task="t-1")
        assert answer.status_code == 403 and "per-task limit" in answer.json()["error"]["message"]
        assert made.chat(task="t-2").status_code == 200  # another task, and the run, go on
        assert made.standin.total() == 4 and not made.gateway.fenced
        rows = made.rows()
        assert [r.assumed_cost_usd for r in rows] == [0.4, 0.4, 0.4, None, 0.4]
        assert [r.refused for r in rows] == [None, None, None, "task_budget", None]
        spend = spend_by_task(rows)["t-1"]
        assert (spend.unknown_cost, round(spend.assumed_cost_usd, 6), spend.cost_usd) == (3, 1.2, 0.0)
        # Assumed figures count against their task only: the run-wide sum holds the provider's figures.
        assert made.gateway.spent_usd == 0.0 and round(made.gateway.assumed_usd, 6) == 1.6
    finally:
        made.close()


def test_provider_costs_count_toward_the_task_limit_too(tmp_path):
    made = Rig(tmp_path, standin={"cost_per_request": 0.6}, per_task_usd=1.0)
    try:
        assert [made.chat().status_code for _ in range(3)] == [200, 200, 403]
        assert made.rows()[0].assumed_cost_usd is None
    finally:
        made.close()


def test_the_fence_cuts_a_request_waiting_for_headers_and_counts_it(tmp_path):
    made = Rig(tmp_path, standin={"answer_delay_sec": 30.0}, unknown_cost_usd=0.7)
    answers: list[httpx.Response] = []
    caller = threading.Thread(target=lambda: answers.append(made.chat()))
    try:
        caller.start()
        deadline = time.monotonic() + 20  # a hang guard for the event below, not a bound
        while made.standin.total() == 0 and time.monotonic() < deadline:  # the provider holds it
            time.sleep(0.01)
        assert made.standin.total() == 1
        made.gateway.fence(FENCE_RUN_STOPPING)
        caller.join(timeout=20)  # a hang guard, below the provider's 30 s: only the fence can answer first
        assert answers and not caller.is_alive()
        assert answers[0].status_code == 403 and "stopping" in answers[0].json()["error"]["message"]
        row = made.rows()[0]
        assert row.cut and row.refused is None and row.assumed_cost_usd == 0.7
        assert made.gateway.spent_usd == 0.0 and round(made.gateway.task_spent["t-1"], 6) == 0.7
        assert spend_by_task(made.rows())["t-1"].unknown_cost == 1
    finally:
        made.close()


def test_every_row_decodes_and_no_key_is_logged(rig):
    rig.chat()
    rig.raw(post_head("\u00e9", "Content-Length: 0\r\n"))
    data = (rig.root / "gateway" / "requests.jsonl").read_bytes()
    assert b"sk-abuse" not in data
    assert all(json.loads(line)["schema"] for line in data.splitlines())


def test_a_flood_of_strangers_asks_the_daemon_at_most_once_per_refresh_interval(monkeypatch):
    from cowork_adapter.gateway import peers as gateway_peers

    class Counted(gateway_peers.RunPeers):
        reads = 0

        def _read(self) -> set[str]:
            Counted.reads += 1
            return {"10.0.0.2"}

    peers = Counted("unix:///nowhere", LABEL)
    clock = [100.0]
    monkeypatch.setattr(gateway_peers.time, "monotonic", lambda: clock[0])
    assert peers.allowed("10.0.0.2") and Counted.reads == 1
    assert not any(peers.allowed(f"10.9.{i // 250}.{i % 250}") for i in range(2000))  # strangers, at once
    assert Counted.reads == 1
    clock[0] += gateway_peers.REFRESH_MIN_SEC + 0.01
    assert not peers.allowed("10.9.9.9") and Counted.reads == 2
    clock[0] += gateway_peers.MAX_AGE_SEC + 0.01  # a known address is read again once the list is old
    assert peers.allowed("10.0.0.2") and Counted.reads == 3


def test_peer_addresses_come_from_every_network_of_the_listed_containers():
    from cowork_adapter.gateway.peers import addresses_of

    listed = {
        "NetworkSettings": {
            "Networks": {
                "bridge": {"IPAddress": "172.17.0.5", "GlobalIPv6Address": ""},
                "task-net": {"IPAddress": "172.20.0.3", "GlobalIPv6Address": "fd00::3"},
            }
        }
    }
    assert addresses_of(listed) == {"172.17.0.5", "172.20.0.3", "fd00::3"} and addresses_of({}) == set()
