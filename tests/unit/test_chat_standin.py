"""The chat stand-in: the scripted answers (pure) and the OpenAI-compatible HTTP surface (real sockets)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from cowork_adapter.demo.chat_standin import (
    CONTEXT_LENGTH,
    DEFAULT_MODEL_ID,
    ChatStandin,
    mcp_tool_name,
    respond,
    slug,
    steps_done,
)
from cowork_adapter.demo.env import wait_for
from cowork_adapter.demo.policy import PLANS

TASK = "Sum the sales.\n[demo-policy: demo-csv-totals]"
CSV_TOOLS = ["mcp_files__list_files", "mcp_files__read_file", "mcp_files__write_file", "run_shell"]


def tools(*names: str) -> list[dict]:
    return [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in names]


def body(messages: list[dict], offered=CSV_TOOLS, **extra) -> dict:
    out = {"model": DEFAULT_MODEL_ID, "messages": messages, "max_tokens": 1000, **extra}
    if offered:
        out["tools"] = tools(*offered)
        out["tool_choice"] = "auto"
    return out


def run_conversation(offered=CSV_TOOLS, task=TASK, limit=20):
    """Drive `respond` like the server would: append each tool call and a tool result, until text."""
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": task}]
    calls = []
    for _ in range(limit):
        reply = respond(body(messages, offered))
        if reply.kind != "tool_call":
            return calls, reply
        call = reply.tool_calls[0]
        calls.append((call["function"]["name"], json.loads(call["function"]["arguments"])))
        messages.append({"role": "assistant", "content": None, "tool_calls": list(reply.tool_calls)})
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
    raise AssertionError("the conversation never ended")


def test_tool_names_follow_the_servers_mcp_naming():
    assert mcp_tool_name("files", "read_file") == "mcp_files__read_file"
    assert mcp_tool_name("my-srv", "readFile") == "mcp_my_srv__readfile"
    assert slug("A--b  c", 24) == "a_b_c"
    long = slug("x" * 40, 24)
    assert len(long) == 24 and long.startswith("x" * 17 + "_")
    assert len(mcp_tool_name("s" * 30, "t" * 50)) <= 64


def test_the_plan_runs_one_step_per_turn_then_a_final_answer():
    calls, final = run_conversation()
    plan = PLANS["demo-csv-totals"]
    assert calls == [(mcp_tool_name(s.server, s.tool), dict(s.arguments)) for s in plan.steps]
    assert final.kind == "final" and final.finish_reason == "stop"
    assert final.content.rstrip().endswith(f"FINAL ANSWER: {plan.final_answer}")


def test_progress_is_read_from_the_minted_call_ids():
    first = respond(body([{"role": "user", "content": TASK}]))
    assert steps_done(body([{"role": "user", "content": TASK}])) == 0
    history = [
        {"role": "user", "content": TASK},
        {"role": "assistant", "tool_calls": list(first.tool_calls)},
        {"role": "tool", "tool_call_id": first.tool_calls[0]["id"], "content": "ok"},
        {"role": "tool", "tool_call_id": "someone_else_7", "content": "ok"},
    ]
    assert steps_done(body(history)) == 1
    second = respond(body(history))
    assert second.tool_calls[0]["function"]["name"] == "mcp_files__read_file"


def test_json_object_calls_get_a_harmless_verdict():
    reply = respond(body([{"role": "user", "content": TASK}], response_format={"type": "json_object"}))
    assert reply.kind == "json" and json.loads(reply.content)["status"] == "SAFE"


def test_calls_without_the_marker_or_without_tools_get_plain_text():
    assert respond(body([{"role": "user", "content": "Summarise the chat."}])).kind == "text"
    # A side call (no tools) that quotes the task before any step ran decides nothing.
    assert respond(body([{"role": "user", "content": TASK}], offered=None)).kind == "text"
    # A side call offering other tools only is not the task's turn either.
    assert respond(body([{"role": "user", "content": TASK}], offered=["run_shell"])).kind == "text"


def test_a_missing_tool_mid_plan_ends_with_a_stated_reason():
    first = respond(body([{"role": "user", "content": TASK}]))
    history = [
        {"role": "user", "content": TASK},
        {"role": "assistant", "tool_calls": list(first.tool_calls)},
        {"role": "tool", "tool_call_id": first.tool_calls[0]["id"], "content": "ok"},
    ]
    reply = respond(body(history, offered=["mcp_files__list_files"]))
    assert reply.kind == "final" and "mcp_files__read_file is not offered" in reply.content


def test_scripted_endings_provider_error_and_hang():
    calls, reply = run_conversation(task="[demo-policy: demo-provider-error]")
    assert len(calls) == 1 and reply.kind == "error" and reply.status == 503
    calls, reply = run_conversation(task="[demo-policy: demo-hang]")
    assert len(calls) == 1 and reply.kind == "hang"


def _post_stream(standin: ChatStandin, payload: dict) -> list[dict]:
    request = urllib.request.Request(
        standin.base_url + "/chat/completions",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        events = [ln[len(b"data: ") :] for ln in response.read().split(b"\n") if ln.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_a_streamed_answer_is_the_same_answer_in_openai_chunks(standin):
    messages = [{"role": "user", "content": TASK}]
    plain = respond(body(messages))
    chunks = _post_stream(standin, body(messages, stream=True, stream_options={"include_usage": True}))
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    calls = [tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert [(tc["index"], tc["function"]["name"]) for tc in calls] == [
        (i, c["function"]["name"]) for i, c in enumerate(plain.tool_calls)
    ]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finishes == ["tool_calls"]
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["prompt_tokens"] > 0
    record = standin.chat_requests()[-1]
    assert (record["prompt_tokens"], record["completion_tokens"]) == (
        usage["usage"]["prompt_tokens"],
        usage["usage"]["completion_tokens"],
    )


def test_a_stream_without_include_usage_reports_and_logs_no_usage(standin):
    chunks = _post_stream(standin, body([{"role": "user", "content": "hello"}], offered=(), stream=True))
    assert all("usage" not in c for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "Noted."
    assert standin.chat_requests()[-1]["prompt_tokens"] == 0


# ---------------------------------------------------------------- HTTP


def _post(url: str, payload: dict, timeout: float = 10) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(payload).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture()
def standin():
    s = ChatStandin().start()
    yield s
    s.stop()


def test_models_lists_the_id_with_a_context_length(standin):
    with urllib.request.urlopen(f"{standin.base_url}/models", timeout=10) as resp:
        data = json.loads(resp.read())["data"]
    assert [m["id"] for m in data] == [DEFAULT_MODEL_ID]
    assert data[0]["max_model_len"] == CONTEXT_LENGTH
    assert standin.counts == {"models": 1}


def test_chat_completions_over_http_has_the_openai_shape_and_counts(standin):
    status, answer = _post(f"{standin.base_url}/chat/completions", body([{"role": "user", "content": TASK}]))
    assert status == 200 and answer["object"] == "chat.completion"
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "mcp_files__list_files"
    assert json.loads(call["function"]["arguments"]) == {"path": "."}
    assert answer["usage"]["prompt_tokens"] > 0 and answer["usage"]["completion_tokens"] > 0
    status, answer = _post(f"{standin.base_url}/chat/completions", body([{"role": "user", "content": "hello"}]))
    assert status == 200 and answer["choices"][0]["message"]["content"] == "Noted."
    assert standin.counts == {"tool_call": 1, "text": 1} and standin.total() == 2
    assert standin.log[0]["tools"] == ["mcp_files__list_files"]


def test_the_request_log_records_every_chat_request_with_the_usage_it_answered(tmp_path):
    path = tmp_path / "requests.jsonl"
    s = ChatStandin(log_path=str(path)).start()
    try:
        answers = [
            _post(f"{s.base_url}/chat/completions", body([{"role": "user", "content": text}]))[1]
            for text in (TASK, "hello", "hello again")
        ]
        with urllib.request.urlopen(f"{s.base_url}/models", timeout=10):
            pass  # not a chat request: not in the log
        log = s.chat_requests()
    finally:
        s.stop()
    assert [r["kind"] for r in log] == ["tool_call", "text", "text"]
    assert [r["prompt_tokens"] for r in log] == [a["usage"]["prompt_tokens"] for a in answers]
    assert [r["completion_tokens"] for r in log] == [a["usage"]["completion_tokens"] for a in answers]
    assert [f"chatcmpl-standin-{r['serial']}" for r in log] == [a["id"] for a in answers]
    assert [json.loads(line) for line in path.read_text().splitlines()] == log


def test_bad_bodies_and_unknown_routes_are_errors(standin):
    req = urllib.request.Request(f"{standin.base_url}/chat/completions", data=b"[1,2]", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{standin.port}/v1/embeddings", timeout=10)
    assert err.value.code == 404
    assert standin.counts == {"bad": 1}


def test_a_hanging_request_is_released_when_the_standin_stops():
    s = ChatStandin().start()
    result = {}

    def call():
        result["answer"] = _post(
            f"{s.base_url}/chat/completions",
            body(
                [
                    {"role": "user", "content": "[demo-policy: demo-hang]"},
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "call_demo_0_abcdef12",
                                "type": "function",
                                "function": {"name": "mcp_files__list_files", "arguments": "{}"},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "call_demo_0_abcdef12", "content": "ok"},
                ]
            ),
            timeout=30,
        )

    worker = threading.Thread(target=call)
    worker.start()
    # Stopped only once the request is in (counted as a hang): stopped earlier, as a loaded machine
    # could have the caller not even connected 1.5 s after its start, it met a closed port instead.
    wait_for(lambda: s.counts.get("hang") == 1 or not worker.is_alive(), 30, 0.02)
    assert s.counts.get("hang") == 1, (s.counts, result)
    worker.join(timeout=1.5)
    assert worker.is_alive(), "a hang must not answer while the stand-in runs"
    s.stop()
    worker.join(timeout=15)
    assert result["answer"][0] == 503 and s.counts == {"hang": 1}


def test_reviewers_asked_for_a_findings_array_get_a_clean_empty_one():
    review = [
        {"role": "system", "content": "Review the task.\nReturn ONLY a JSON array, optionally followed by..."},
        {"role": "user", "content": TASK},
    ]
    reply = respond(body(review, offered=None))
    assert reply.kind == "json" and reply.content == "[]\nNO_FINDINGS"
