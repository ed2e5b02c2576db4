"""The model gateway (gateway.py) in front of the chat stand-in, both on loopback.

The stand-in speaks the OpenAI chat-completions protocol (plain and streamed) and, like OpenRouter,
can put the provider's cost in `usage.cost`; it plays the provider. What is checked: answers pass
through unchanged apart from the credential, tokens bind a run and a task, every request is one log
row with the provider's usage, and the fence (budget sum, stop file, close) refuses within 1 s and
cuts streams in flight.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from cowork_adapter.campaign.budget import Spending
from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.gateway.policy import DEFAULT_UNKNOWN_COST_USD
from cowork_adapter.gateway.server import FENCE_BUDGET, FENCE_RUN_STOPPING, Gateway, mint_token, token_task
from cowork_adapter.run.spending import gateway_allowance
from cowork_adapter.schemas.gateway import read_requests, spend_by_task

LABEL = "a" * 32
SECRET = b"k" * 32
KEY = "sk-provider-" + "9" * 24
BODY = {"model": "demo-stub-model", "messages": [{"role": "user", "content": "hello there"}]}


class Bed:
    def __init__(self, root: Path, **standin) -> None:
        self.root = root
        self.standin = ChatStandin(**standin).start()
        self.fences: list[str] = []
        self.gateway = Gateway(
            upstream=self.standin.base_url,
            key=KEY,
            run_label=LABEL,
            secret=SECRET,
            run_root=root,
            stop_file=root / "stop",
            bind_host="127.0.0.1",
            on_fence=self.fences.append,
        ).start()
        self.url = self.gateway.url_for("127.0.0.1")

    def headers(self, task: str = "task-1") -> dict[str, str]:
        return {"Authorization": f"Bearer {mint_token(SECRET, LABEL, task)}"}

    def chat(self, task: str = "task-1", body: dict | None = None, **kw) -> httpx.Response:
        return httpx.post(
            self.url + "/chat/completions", json=body or BODY, headers=self.headers(task), timeout=10, **kw
        )

    def close(self) -> None:
        self.gateway.close()
        self.standin.stop()


@pytest.fixture
def bed(tmp_path):
    made = Bed(tmp_path)
    made.gateway.set_allowance(100.0)
    yield made
    made.close()


def _without_ids(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("id", "created")}


def test_tokens_bind_the_run_and_the_task():
    token = mint_token(SECRET, LABEL, "t-1.x")
    assert token_task(SECRET, LABEL, token) == "t-1.x"
    assert token_task(SECRET, "b" * 32, token) is None  # another run
    assert token_task(b"z" * 32, LABEL, token) is None  # another run's secret
    forged = token.replace("t-1.x", "t-2.x")  # another task's name on this task's MAC
    assert token_task(SECRET, LABEL, forged) is None
    assert token_task(SECRET, LABEL, KEY) is None and token_task(SECRET, LABEL, "") is None


def test_plain_completion_passes_through_with_the_key_only_upstream(bed):
    direct = httpx.post(bed.standin.base_url + "/chat/completions", json=BODY, timeout=10).json()
    through = bed.chat()
    assert through.status_code == 200
    assert _without_ids(through.json()) == _without_ids(direct)
    rows = read_requests(bed.root)
    assert len(rows) == 1
    row = rows[0]
    assert (row.task, row.model, row.status, row.stream, row.refused) == ("task-1", "demo-stub-model", 200, False, None)
    assert (row.prompt_tokens, row.completion_tokens) == (
        direct["usage"]["prompt_tokens"],
        direct["usage"]["completion_tokens"],
    )
    assert row.latency_ms > 0
    # Upstream the provider saw the real key in place of the token, and the client's own headers.
    seen = bed.standin.chat_requests()[-1]
    assert seen["auth_sha256"] == hashlib.sha256(f"Bearer {KEY}".encode()).hexdigest()
    assert seen["user_agent"] == f"python-httpx/{httpx.__version__}"
    assert KEY.encode() not in (bed.root / "gateway" / "requests.jsonl").read_bytes()


def test_models_list_is_forwarded(bed):
    answer = httpx.get(bed.url + "/models", headers=bed.headers(), timeout=10)
    assert answer.status_code == 200 and answer.json()["data"][0]["id"] == "demo-stub-model"
    assert bed.standin.counts.get("models") == 1


def test_stream_passes_through_chunk_for_chunk_with_usage_recorded(bed):
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}

    def events(text: str) -> list:
        out = []
        for line in text.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(_without_ids(json.loads(line[6:])))
            elif line == "data: [DONE]":
                out.append("[DONE]")
        return out

    direct = httpx.post(bed.standin.base_url + "/chat/completions", json=body, timeout=10)
    through = bed.chat(body=body)
    assert through.headers["content-type"].startswith("text/event-stream")
    assert events(through.text) == events(direct.text) and events(through.text)[-1] == "[DONE]"
    row = read_requests(bed.root)[0]
    usage = [e for e in events(direct.text) if isinstance(e, dict) and e.get("usage")][0]["usage"]
    assert row.stream and (row.prompt_tokens, row.completion_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )


def test_bad_tokens_are_refused_and_nothing_is_forwarded(bed):
    other_run = {"Authorization": f"Bearer {mint_token(SECRET, 'b' * 32, 'task-1')}"}
    for headers in (
        {},
        {"Authorization": f"Bearer {KEY}"},
        other_run,
        {"Authorization": "Bearer " + mint_token(SECRET, LABEL, "task-1").replace("task-1", "task-2")},
    ):
        answer = httpx.post(bed.url + "/chat/completions", json=BODY, headers=headers, timeout=10)
        assert answer.status_code == 401 and "not valid" in answer.json()["error"]["message"]
    assert bed.standin.total() == 0
    bed.gateway.close()  # refusals are logged as one row, then one count row, per caller and cause
    rows = read_requests(bed.root)
    assert [r.refused for r in rows] == ["auth"] * 2 and [r.count for r in rows] == [1, 3]


def test_provider_errors_pass_through(tmp_path):
    made = Bed(tmp_path)
    made.gateway.upstream = made.standin.base_url + "/missing"  # the provider answers 404 with its own body
    made.gateway.set_allowance(1.0)
    try:
        answer = made.chat()
        assert answer.status_code == 404 and "no route" in answer.json()["error"]["message"]
        assert read_requests(tmp_path)[0].status == 404
    finally:
        made.close()


def test_cost_sum_crossing_the_allowance_fences_the_very_next_request(tmp_path):
    # The event, not a time: the request right after the crossing is refused and not forwarded.
    made = Bed(tmp_path, cost_per_request=0.1)
    made.gateway.set_allowance(0.25)
    try:
        assert [made.chat().status_code for _ in range(3)] == [200, 200, 200]  # the third crosses 0.25
        answer = made.chat()
        assert answer.status_code == 403 and "budget is spent" in answer.json()["error"]["message"]
        assert made.fences == [FENCE_BUDGET]
        assert made.standin.total() == 3  # nothing forwarded after the crossing
        spend = spend_by_task(read_requests(tmp_path))["task-1"]
        assert (spend.requests, spend.forwarded, round(spend.cost_usd, 6), spend.unknown_cost) == (4, 3, 0.3, 0)
    finally:
        made.close()


def test_nothing_is_forwarded_before_the_run_is_admitted(tmp_path):
    made = Bed(tmp_path)
    try:
        answer = made.chat()
        assert answer.status_code == 403 and "not admitted" in answer.json()["error"]["message"]
        assert made.standin.total() == 0
    finally:
        made.close()


def test_a_stop_file_fences_within_a_second(bed):
    assert bed.chat().status_code == 200
    (bed.root / "stop").write_text("stop_requested\n")
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and not bed.gateway.fenced:
        time.sleep(0.02)
    answer = bed.chat()
    assert answer.status_code == 403 and "stopping" in answer.json()["error"]["message"]
    assert bed.fences == [FENCE_RUN_STOPPING]


def test_a_stream_in_flight_is_cut_by_the_fence(tmp_path):
    made = Bed(tmp_path, chunk_delay_sec=0.5)
    made.gateway.set_allowance(1.0)
    body = {**BODY, "stream": True}
    got: list[bytes] = []
    ended: list[float] = []

    def read() -> None:
        with httpx.stream(
            "POST", made.url + "/chat/completions", json=body, headers=made.headers(), timeout=10
        ) as answer:
            for chunk in answer.iter_raw():
                got.append(chunk)
        ended.append(time.monotonic())

    reader = threading.Thread(target=read)
    try:
        reader.start()
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got, "no first chunk"
        fenced_at = time.monotonic()
        made.gateway.fence(FENCE_RUN_STOPPING)
        reader.join(timeout=5)
        assert ended and ended[0] - fenced_at < 1.0
        assert b"[DONE]" not in b"".join(got)
        row = read_requests(tmp_path)[0]
        assert row.cut and row.stream
        # Cut before its usage chunk: no cost figure, so the fences counted the pessimistic price.
        assert row.cost_usd is None and row.assumed_cost_usd == DEFAULT_UNKNOWN_COST_USD
    finally:
        made.close()


def test_a_closed_gateway_refuses_connections(tmp_path):
    made = Bed(tmp_path)
    port = made.gateway.port
    made.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_allowance_is_the_smallest_bound_left():
    spending = Spending(ceiling_usd=50, prior_spend_usd=0, usage_baseline=0, usage=40, usage_at_run_start=38)
    assert gateway_allowance(spending, reserve_usd=5, run_budget_usd=None, limit_remaining=None) == 5.0
    assert gateway_allowance(spending, reserve_usd=5, run_budget_usd=3, limit_remaining=None) == 1.0
    assert gateway_allowance(spending, reserve_usd=5, run_budget_usd=None, limit_remaining=0.5) == 0.5
    assert gateway_allowance(spending, reserve_usd=20, run_budget_usd=None, limit_remaining=None) == 0.0
