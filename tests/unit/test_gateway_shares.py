"""Issue 37: one agent cannot starve its siblings at the model gateway (gateway/shares.py,
gateway/reserve.py, gateway/refusals.py), on loopback with the chat stand-in as the provider.

Peers are told apart by their source address: Linux routes all of 127.0.0.0/8 to loopback, so a
client bound to 127.0.0.N is peer 127.0.0.N to the gateway, as each container is on the bridge.
"""

from __future__ import annotations

import socket
import threading

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_gateway_abuse import BODY, Rig  # tests/unit is on sys.path

from cowork_adapter.demo.env import wait_for
from cowork_adapter.gateway import shares as sh
from cowork_adapter.gateway.reserve import (
    Price,
    TaskLimits,
    price_from_models,
    worst_cost,
)
from cowork_adapter.gateway.routes import (
    COMPATIBLE_ROUTES,
    OPENROUTER_PREFIX,
    OPENROUTER_ROUTES,
)
from cowork_adapter.schemas.gateway import read_requests, spend_by_task

SIBLING = "127.0.0.2"


def client_from(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=20)


def hold(port: int, address: str, count: int) -> list[socket.socket]:
    """`count` connections from `address`, each having sent half a request line (then idle)."""
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind((address, 0))
        sock.settimeout(5)
        sock.connect(("127.0.0.1", port))
        try:
            sock.sendall(b"POST /v1/chat")
        except OSError:  # closed on accept already
            pass
        held.append(sock)
    return held


def chat_from(rig: Rig, client: httpx.Client, task: str = "t-honest", body: dict | None = None) -> httpx.Response:
    return client.post(
        rig.url + "/chat/completions", json=body or BODY, headers={"Authorization": "Bearer " + rig.token(task)}
    )


# ---------------------------------------------------------------- connections


def test_one_peer_holding_hundreds_of_idle_connections_leaves_a_sibling_answered(tmp_path):
    rig = Rig(tmp_path)  # the default shares: 512 in all, 32 per peer
    held: list[socket.socket] = []
    try:
        held = hold(rig.gateway.port, "127.0.0.9", 300)
        assert wait_for(lambda: rig.gateway.overflowed >= 300 - sh.PER_PEER_CONNECTIONS, 20)
        assert rig.gateway.shares.peers["127.0.0.9"] == sh.PER_PEER_CONNECTIONS
        with client_from(SIBLING) as client:
            answers = [chat_from(rig, client).status_code for _ in range(10)]
        assert answers == [200] * 10 and rig.standin.total() == 10
    finally:
        for sock in held:
            sock.close()
        rig.close()
    rows = read_requests(tmp_path)
    share_rows = [r for r in rows if r.refused == sh.PEER_SHARE]
    assert sum(r.count for r in share_rows) == 300 - sh.PER_PEER_CONNECTIONS and len(share_rows) <= 20


def test_many_greedy_peers_leave_headroom_for_a_sibling(tmp_path):
    limits = sh.Limits(max_connections=48, per_peer=8, headroom=12, guaranteed=2, per_task=48, per_task_in_flight=4)
    rig = Rig(tmp_path, shares=limits, request_deadline_sec=60.0)
    held: list[socket.socket] = []
    try:
        for n in range(10, 18):  # eight greedy peers, twenty connections each
            held += hold(rig.gateway.port, f"127.0.0.{n}", 20)
        assert wait_for(lambda: rig.gateway.overflowed + rig.gateway.shares.total >= 160, 20)
        # 36 slots to the greedy (their 8 each), then 2 each for the rest: the last slots stay free.
        assert rig.gateway.shares.total == 36 + 3 * 2
        assert max(rig.gateway.shares.peers.values()) <= limits.per_peer
        with client_from(SIBLING) as client:
            assert chat_from(rig, client).status_code == 200
    finally:
        for sock in held:
            sock.close()
        rig.close()


def test_a_task_has_a_bounded_number_of_requests_in_flight(tmp_path):
    limits = sh.Limits(per_task_in_flight=3)
    rig = Rig(tmp_path, shares=limits, standin={"answer_delay_sec": 1.0})
    statuses: list[int] = []
    try:

        def call(task: str) -> None:
            with client_from("127.0.0.3") as client:
                statuses.append(chat_from(rig, client, task=task).status_code)

        callers = [threading.Thread(target=call, args=("t-greedy",)) for _ in range(8)]
        for t in callers:
            t.start()
        assert wait_for(lambda: len(statuses) >= 5, 20)  # the five over the share are refused at once
        with client_from(SIBLING) as client:  # the sibling is not in the greedy task's share
            assert chat_from(rig, client).status_code == 200
        for t in callers:
            t.join(20)
        assert sorted(statuses) == [200] * 3 + [429] * 5
    finally:
        rig.close()
    refused = [r for r in read_requests(tmp_path) if r.refused == sh.TASK_BUSY]
    assert refused and all(r.task == "t-greedy" for r in refused) and sum(r.count for r in refused) == 5


# ---------------------------------------------------------------- no path without a token

ALL_PATHS = (
    [(False, "/v1" + p, r.method) for p, r in COMPATIBLE_ROUTES.items()]
    + [(False, p, r.method) for p, r in COMPATIBLE_ROUTES.items()]
    + [(True, OPENROUTER_PREFIX + p, r.method) for p, r in OPENROUTER_ROUTES.items()]
    + [(False, "/nowhere", "GET"), (True, "/api/v1/credits", "GET"), (True, "/", "GET")]
)


@pytest.mark.parametrize("openrouter,path,method", ALL_PATHS)
def test_no_path_of_either_face_answers_without_a_token(tmp_path, openrouter, path, method):
    rig = Rig(tmp_path, openrouter=openrouter)
    try:
        for headers in ({}, {"Authorization": "Bearer x"}, {"Authorization": "Basic x"}):
            answer = httpx.request(
                method,
                rig.url.removesuffix("/v1") + path,
                headers=headers,
                timeout=10,
                content=b"{}" if method == "POST" else None,
            )
            assert answer.status_code == 401, (path, headers, answer.status_code)
        assert rig.standin.total() == 0 and rig.standin.all_requests() == []
    finally:
        rig.close()


# ---------------------------------------------------------------- money


def test_concurrent_requests_at_the_task_limit_never_overshoot(tmp_path):
    # Worst answer: 1000 output tokens at $0.0002 = $0.20; the stand-in bills exactly that; limit $1.
    rig = Rig(
        tmp_path,
        per_task_usd=1.0,
        price=Price(prompt=0.0, completion=0.0002),
        standin={"cost_per_request": 0.2, "answer_delay_sec": 1.0},
    )
    statuses: list[int] = []
    try:

        def call() -> None:
            with client_from("127.0.0.4") as client:
                statuses.append(chat_from(rig, client, task="t-1").status_code)

        callers = [threading.Thread(target=call) for _ in range(8)]
        for t in callers:
            t.start()
        for t in callers:
            t.join(30)
        assert len(statuses) == 8 and statuses.count(200) == 5 and statuses.count(403) == 3
        assert rig.standin.total() == 5
        assert round(rig.gateway.task_spent["t-1"], 9) <= 1.0
        assert chat_from(rig, httpx.Client(timeout=10), task="t-1").status_code == 403  # at the limit
    finally:
        rig.close()
    assert round(spend_by_task(read_requests(tmp_path))["t-1"].cost_usd, 9) == 1.0


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    limit=st.floats(0.5, 50),
    ops=st.lists(st.tuples(st.booleans(), st.floats(0.01, 5), st.floats(0, 1)), min_size=1, max_size=60),
)
def test_reservations_never_overshoot_in_any_arrival_order(limit, ops):
    """Arrivals (True: reserve a worst cost) and completions (False: the oldest open request settles
    at a fraction of its worst) in any order: while two or more are open the task's settled plus held
    stays within its limit, and its settled sum overshoots by at most one lone request's worst."""
    limits = TaskLimits(limit)
    open_: list[float] = []
    lone_excess = 0.0
    for arrive, worst, fraction in ops:
        if arrive:
            before = limits.settled("t")
            if limits.reserve("t", worst):
                if not open_:
                    lone_excess = max(lone_excess, before + worst - limit)
                open_.append(worst)
        elif open_:
            w = open_.pop(0)
            limits.settle("t", w, w * fraction)
        if len(open_) >= 2:
            assert limits.settled("t") + limits.held.get("t", 0.0) <= limit + 1e-9
        assert limits.settled("t") <= limit + max(lone_excess, 0.0) + 1e-9
    while open_:
        w = open_.pop()
        limits.settle("t", w, w)
    assert limits.settled("t") <= limit + max(lone_excess, 0.0) + 1e-9
    assert limits.held.get("t", 0.0) == 0.0


def test_worst_cost_and_the_price_list():
    assert worst_cost(1000, 500, Price(prompt=1e-6, completion=1e-5), 5.0) == pytest.approx(0.006)
    assert worst_cost(1000, 500, None, 5.0) == 5.0
    listing = {
        "data": [
            {"id": "m", "pricing": {"prompt": "0.000003", "completion": "0.000015"}},
            {"id": "x", "pricing": {"prompt": "free"}},
        ]
    }
    assert price_from_models(listing, "m") == Price(prompt=3e-6, completion=1.5e-5)
    assert price_from_models(listing, "x") is None and price_from_models([], "m") is None


def _drop_streams(rig: Rig, task: str, count: int) -> None:
    """Start `count` streams of `task` one after the other, each hung up after its first chunk (before
    the usage chunk), and wait until the gateway has settled each (while one is in flight its worst
    cost is reserved, and the next might not fit)."""
    for n in range(count):
        with client_from("127.0.0.5") as client:
            with client.stream(
                "POST",
                rig.url + "/chat/completions",
                json={**BODY, "stream": True},
                headers={"Authorization": "Bearer " + rig.token(task)},
            ) as answer:
                assert answer.status_code == 200
                next(answer.iter_raw())
        assert wait_for(lambda n=n: sum(1 for r in read_requests(rig.root) if r.stream and r.refused is None) > n, 20)


def test_dropped_streams_only_refuse_their_own_task_and_never_fence_the_run(tmp_path):
    fences: list[str] = []
    rig = Rig(
        tmp_path, per_task_usd=6.0, unknown_cost_usd=5.0, on_fence=fences.append, standin={"chunk_delay_sec": 0.3}
    )
    rig.gateway.set_allowance(8.0)  # less than the two dropped streams' assumed figures
    try:
        _drop_streams(rig, "t-dropper", 2)
        assert round(rig.gateway.task_spent["t-dropper"], 6) == 10.0
        refused = rig.chat(task="t-dropper")
        assert refused.status_code == 403 and "per-task limit" in refused.json()["error"]["message"]
        assert rig.chat(task="t-sibling").status_code == 200
        assert not rig.gateway.fenced and fences == [] and rig.gateway.spent_usd == 0.0
    finally:
        rig.close()


def test_a_dropped_stream_is_counted_at_the_providers_generation_figure(tmp_path):
    rig = Rig(
        tmp_path,
        per_task_usd=1.0,
        unknown_cost_usd=5.0,
        generation_stats=True,
        standin={"chunk_delay_sec": 0.3, "cost_per_request": 0.03},
    )
    try:
        _drop_streams(rig, "t-1", 1)
        (row,) = [r for r in read_requests(tmp_path) if r.stream]
        assert row.cost_usd == 0.03 and row.assumed_cost_usd is None and "generation" in (row.error or "")
        assert rig.chat(task="t-1").status_code == 200  # $0.03 of $1: the task goes on
    finally:
        rig.close()


# ---------------------------------------------------------------- the refusal log


def test_the_refusal_log_stays_bounded_under_a_flood(tmp_path):
    rig = Rig(tmp_path, per_task_usd=0.001, standin={"cost_per_request": 0.01})
    try:
        assert rig.chat(task="t-flood").status_code == 200  # now over its limit
        size_before = (tmp_path / "gateway" / "requests.jsonl").stat().st_size
        with client_from("127.0.0.6") as client:
            for _ in range(1500):  # one keep-alive connection: over the limit, and a bad shape
                assert chat_from(rig, client, task="t-flood").status_code == 403
            for _ in range(1500):
                assert chat_from(rig, client, task="t-flood", body={"model": "other"}).status_code == 400
        grown = (tmp_path / "gateway" / "requests.jsonl").stat().st_size - size_before
        # Two causes, a row as each starts and one count row per 2 s interval: far fewer than 3000.
        assert grown < 60 * 600
    finally:
        rig.close()
    rows = [r for r in read_requests(tmp_path) if r.refused is not None]
    assert sum(r.count for r in rows) == 3000 and len(rows) <= 60
    assert {r.refused for r in rows} == {"task_budget", "shape"}
    assert spend_by_task(read_requests(tmp_path))["t-flood"].requests == 3001


def test_the_refusal_log_folds_each_caller_and_cause_per_interval():
    from cowork_adapter.gateway.refusals import RefusalLog
    from cowork_adapter.schemas.gateway import GatewayRequest

    log = RefusalLog(interval_sec=2.0, max_keys=3)

    def refusal(who: str, why: str) -> GatewayRequest:
        return GatewayRequest(at=0.0, task=who, path="/v1/chat/completions", status=429, latency_ms=1.0, refused=why)

    written = [log.note(refusal("a", "task_busy"), now=10.0) for _ in range(500)]
    assert written[0] is not None and written[1:] == [None] * 499
    assert log.note(refusal("b", "shape"), now=10.5) is not None
    assert log.note(refusal("c", "shape"), now=10.6) is not None
    assert log.note(refusal("d", "shape"), now=10.7) is None and log.unlogged == 1  # past max_keys: counted
    assert log.due(11.9) == []  # the interval has not ended
    (folded,) = log.due(12.0)
    assert (folded.task, folded.refused, folded.count) == ("a", "task_busy", 499)
    assert log.note(refusal("a", "task_busy"), now=12.1) is not None  # a new interval starts afresh
    assert log.due(12.2, final=True) == []


@settings(max_examples=300, deadline=None, derandomize=True)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 15)), max_size=400))
def test_no_peer_ever_takes_more_than_its_share_in_any_order(ops):
    """Connections and hang-ups of sixteen peers in any order: no peer holds more than its share, the
    total never passes the bound, and a peer holding fewer than the guaranteed few is refused only
    when the whole bound is taken."""
    limits = sh.Limits(max_connections=40, per_peer=8, headroom=10, guaranteed=2, per_task=40, per_task_in_flight=4)
    shares = sh.Shares(limits)
    held: dict[str, int] = {}
    for connect, n in ops:
        peer = f"10.0.0.{n}"
        if connect:
            before, total = held.get(peer, 0), shares.total
            why = shares.connect(peer)
            if why is None:
                held[peer] = before + 1
            elif before < limits.guaranteed:
                assert total >= limits.max_connections and why == sh.FULL
        elif held.get(peer):
            shares.disconnect(peer, None)
            held[peer] -= 1
        assert max(held.values(), default=0) <= limits.per_peer
        assert shares.total == sum(held.values()) <= limits.max_connections
        assert dict(shares.peers) == {p: c for p, c in held.items() if c}
