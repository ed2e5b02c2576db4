"""A stand-in for an OpenAI-compatible chat endpoint, scripted by the demo policy. It is not a model.

It lets the REAL Ouroboros server run a demo task offline: pointed at `<base>/v1`, every model
call the server makes lands here and is answered from `cowork_adapter.demo.policy.PLANS`:

- `GET /v1/models` lists one model id with a context length (`max_model_len`, `context_length`).
- `POST /v1/chat/completions`, plain or streamed (`"stream": true`: server-sent events of
  `chat.completion.chunk` objects, a usage chunk when `stream_options.include_usage` asks for one,
  then `data: [DONE]`, as the OpenAI API streams). When the request's text carries a
  `[demo-policy: <tag>]` marker and offers the plan's tools, the answer is one tool call per turn,
  naming the tool the way the server names MCP tools (`mcp_<server>__<tool>`); after the last step
  the answer is a final text ending in a `FINAL ANSWER:` line. A `response_format: json_object`
  call (safety verdicts) gets a harmless JSON object, a reviewer asked for a JSON array of findings
  gets an empty one with the `NO_FINDINGS` sentinel; any other call gets a short text.
- Every answer carries `usage.prompt_tokens` / `completion_tokens` (rough counts, never zero) so
  the server records model activity; requests are counted by kind.

OpenRouter's own paths are served too (`/api/v1/models`, `/api/v1/chat/completions`, and the
look-ups `/api/v1/generation`, `/api/v1/auth/key`, `/api/v1/key`), and with `tls` the stand-in
answers HTTPS: a test bed can make it reachable as `https://openrouter.ai` (the seed's own route),
and every request, look-ups included, is one row of `requests` (what the engine sent, to compare
two routes request by request).

Pure decisions (`respond`) are apart from the HTTP plumbing (`ChatStandin`).
"""

from __future__ import annotations

import hashlib
import json
import re
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .policy import Ending, Plan, plan_for, render_arguments

DEFAULT_MODEL_ID = "demo-stub-model"
CONTEXT_LENGTH = 131072
# Tool-call ids this stand-in mints carry the step index, so the next turn knows where the plan is.
CALL_ID = re.compile(r"^call_demo_(\d+)_[0-9a-f]+$")
TOOL_PREFIX = "mcp_"
# The server's own limits on the parts of an MCP tool name (longer parts are cut and hashed).
SERVER_SLUG_MAX = 24
TOOL_SLUG_MAX = 32
TOOL_NAME_MAX = 64
HARMLESS_JSON = {"status": "SAFE", "reason": "stand-in: no objection", "verdict": "pass", "issues": []}
# Review prompts ask for a JSON array of findings; an empty one plus this sentinel means "clean".
REVIEW_CONTRACT = "Return ONLY a JSON array"
CLEAN_REVIEW = "[]\nNO_FINDINGS"
HANG_POLL_SEC = 0.5
MAX_BODY_BYTES = 64 * 1024 * 1024
# Headers that say how a request travelled (framing, connection, compression), not what it asked.
TRANSPORT_HEADERS = frozenset({"host", "content-length", "connection", "accept-encoding", "transfer-encoding"})
# Body fields every chat request log row keeps as sent (all but the conversation and the tool list).
CONVERSATION_FIELDS = frozenset({"messages", "tools"})


def request_route(path: str) -> str:
    """`/v1/<route>` for both `/v1/<route>` and OpenRouter's `/api/v1/<route>` (query dropped)."""
    path = path.split("?", 1)[0].rstrip("/")
    path = path[4:] if path.startswith("/api/v1/") else path
    return path if path.startswith("/v1/") else "/v1" + path


# ---------------------------------------------------------------- naming


def slug(value: str, max_len: int) -> str:
    """Lower-case, every non [A-Za-z0-9_] char to `_`, runs of `_` collapsed, ends trimmed; a slug
    longer than max_len keeps a head and a 6-hex sha1 suffix of the original text."""
    text = str(value or "").strip()
    safe = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", text)).strip("_").lower()
    if len(safe) <= max_len:
        return safe
    digest = hashlib.sha1(text.encode("utf-8", errors="replace")).hexdigest()[:6]
    keep = max_len - len(digest) - 1
    return digest if keep <= 0 else f"{safe[:keep]}_{digest}"


def mcp_tool_name(server: str, tool: str) -> str:
    """The name the Ouroboros server gives MCP tool `tool` of server `server`: mcp_<server>__<tool>."""
    name = f"{TOOL_PREFIX}{slug(server, SERVER_SLUG_MAX)}__{slug(tool, TOOL_SLUG_MAX)}"
    if len(name) > TOOL_NAME_MAX:
        name = f"{TOOL_PREFIX}{slug(server, SERVER_SLUG_MAX)}__{hashlib.sha1(name.encode()).hexdigest()[:6]}"
    return name


# ---------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Reply:
    """One decided answer: a message (content and/or tool calls), or an HTTP error."""

    kind: str  # tool_call | final | json | text | error | hang
    content: str | None = None
    tool_calls: tuple = ()
    finish_reason: str = "stop"
    status: int = 200


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks: keep the text parts
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def request_text(body: dict) -> str:
    """All system and user text of the request (where the task description travels)."""
    messages = found if isinstance(found := body.get("messages"), list) else []
    return "\n".join(
        _text_of(m.get("content"))
        for m in messages
        if isinstance(m, dict) and m.get("role") in ("system", "user", "developer")
    )


def offered_tools(body: dict) -> set[str]:
    names = set()
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


def steps_done(body: dict) -> int:
    """How many plan steps the conversation already holds: the highest step index among the tool
    calls this stand-in minted, plus one (0 when none)."""
    done = 0
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        ids = [message.get("tool_call_id")] if message.get("role") == "tool" else []
        ids += [c.get("id") for c in message.get("tool_calls") or [] if isinstance(c, dict)]
        for call_id in ids:
            match = CALL_ID.match(str(call_id or ""))
            if match:
                done = max(done, int(match.group(1)) + 1)
    return done


def final_text(plan: Plan) -> str:
    return f"{plan.final_answer}\n\nFINAL ANSWER: {plan.final_answer}"


def respond(body: dict) -> Reply:
    """Decide the answer to one chat-completions request body (pure)."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema"):
        return Reply("json", content=json.dumps(HARMLESS_JSON))
    text = request_text(body)
    if REVIEW_CONTRACT in text and not body.get("tools"):  # a reviewer: "nothing to report" in the contract's form
        return Reply("json", content=CLEAN_REVIEW)
    plan = plan_for(text)
    if plan.tag == "none":  # not a demo task's conversation (or a side call without the task text)
        return Reply("text", content="Noted.")
    tools = offered_tools(body)
    done = steps_done(body)
    if tools and done < len(plan.steps):
        step = plan.steps[done]
        name = mcp_tool_name(step.server, step.tool)
        if name in tools:
            call_id = f"call_demo_{done}_{hashlib.sha1(f'{plan.tag}/{done}'.encode()).hexdigest()[:8]}"
            # The stand-in never learns the workspace path: plans for it use relative paths.
            arguments = json.dumps(render_arguments(step, ""), ensure_ascii=False)
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            return Reply("tool_call", content=None, tool_calls=(call,), finish_reason="tool_calls")
        if done == 0:  # the plan's tools are not offered here: a side call (summary, review...), not the task turn
            return Reply("text", content="Noted.")
        return Reply(
            "final", content=f"stand-in: the tool {name} is not offered; stopping.\n\nFINAL ANSWER: unavailable"
        )
    if done < len(plan.steps):
        return Reply("text", content="Noted.")  # a call without tools before the plan ran: nothing to decide
    if plan.ending == Ending.PROVIDER_ERROR:
        return Reply("error", content="stand-in: scripted provider failure", status=503)
    if plan.ending == Ending.HANG:
        return Reply("hang")
    return Reply("final", content=final_text(plan))


def completion(reply: Reply, body: dict, serial: int) -> dict:
    """The OpenAI chat.completion object for a decided reply."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [dict(c) for c in reply.tool_calls]
    prompt_chars = len(json.dumps(body.get("messages") or [], ensure_ascii=False))
    out_chars = len(reply.content or "") + sum(len(json.dumps(c)) for c in reply.tool_calls)
    prompt_tokens, completion_tokens = max(1, prompt_chars // 4), max(1, out_chars // 4)
    return {
        "id": f"chatcmpl-standin-{serial}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model") or DEFAULT_MODEL_ID),
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_chunks(reply: Reply, body: dict, serial: int) -> list[dict]:
    """The same answer as `completion`, as the chat.completion.chunk objects of a streamed reply:
    the role, the text, each tool call (by index), the finish reason, and the usage chunk (empty
    choices) only when the request's stream_options.include_usage asks for it."""
    whole = completion(reply, body, serial)
    head = {k: whole[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if reply.content:
        out.append(chunk({"content": reply.content}))
    for index, call in enumerate(reply.tool_calls):
        out.append(chunk({"tool_calls": [{"index": index, **call}]}))
    out.append(chunk({}, reply.finish_reason))
    if wants_stream_usage(body):
        out.append({**head, "choices": [], "usage": whole["usage"]})
    return out


def wants_stream_usage(body: dict) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


# ---------------------------------------------------------------- HTTP


class ChatStandin:
    """The stand-in on `host:port` (port 0 = any free port). `start()` returns self; `stop()` ends it.

    `counts` holds requests per kind (models, tool_call, final, json, text, error, hang, bad);
    `log` holds one record per chat request, in arrival order: its serial, kind, tool names, model
    and the usage it answered with (prompt/completion tokens; 0 for an answer without usage). It
    is the endpoint's own request log, what usage accounting is checked against. With `log_path`
    each record is also appended there as one JSON line.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        model_id: str = DEFAULT_MODEL_ID,
        log_path: str | None = None,
        cost_per_request: float | None = None,
        chunk_delay_sec: float = 0.0,
        answer_delay_sec: float = 0.0,
        tls: ssl.SSLContext | None = None,
    ):
        self.model_id = model_id
        self.log_path = log_path
        # OpenRouter's usage accounting: `usage.cost` in USD on every answer that carries usage.
        self.cost_per_request = cost_per_request
        # Pause before each streamed chunk, so a stream can be caught in flight.
        self.chunk_delay_sec = chunk_delay_sec
        # Pause before a plain answer's headers, so a request can be caught waiting for them.
        self.answer_delay_sec = answer_delay_sec
        self.counts: dict[str, int] = {}
        self.log: list[dict] = []
        # Every request in arrival order: method, path, the credential's digest (None: none sent),
        # the header names it carried, and for a chat call its fields other than the conversation.
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        """The loopback base URL including /v1 (what an OpenAI SDK client is given)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ChatStandin:
        self._thread = threading.Thread(target=self._server.serve_forever, name="chat-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread:
            self._thread.join(timeout=10)

    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def chat_requests(self) -> list[dict]:
        """A copy of the chat request log."""
        with self._lock:
            return [dict(r) for r in self.log]

    def all_requests(self) -> list[dict]:
        """A copy of the log of every request (look-ups included)."""
        with self._lock:
            return [dict(r) for r in self.requests]

    def _note(self, handler: BaseHTTPRequestHandler, body: dict | None) -> None:
        auth = handler.headers.get("Authorization")
        row: dict[str, Any] = {
            "method": handler.command,
            "path": handler.path,
            "auth_sha256": hashlib.sha256(auth.encode()).hexdigest() if auth is not None else None,
            "headers": sorted({k.lower() for k in handler.headers} - TRANSPORT_HEADERS),
        }
        if body is not None:
            row["fields"] = {k: v for k, v in body.items() if k not in CONVERSATION_FIELDS}
            row["messages"] = len(body.get("messages") or [])
            row["tools"] = sorted(offered_tools(body))
        with self._lock:
            self.requests.append(row)

    def _count(self, kind: str, record: dict | None = None) -> int:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            serial = sum(self.counts.values())
            if record is not None:
                record = {"serial": serial, **record}
                self.log.append(record)
                if self.log_path:
                    with open(self.log_path, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(record, sort_keys=True) + "\n")
            return serial

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no ~40 ms delayed-ACK stall

            def log_message(self, format, *args):  # quiet: the counts and log are the record
                return

            def _send(self, status: int, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                route = request_route(self.path)
                standin._note(self, None)
                if route == "/v1/generation":
                    self._send(
                        200, {"data": {"id": self.path.partition("id=")[2], "total_cost": standin.cost_per_request}}
                    )
                    return
                if route in ("/v1/auth/key", "/v1/key"):
                    self._send(200, {"data": {"label": "stand-in", "usage": 0.0, "usage_daily": 0.0, "limit": None}})
                    return
                if route == "/v1/models":
                    standin._count("models")
                    self._send(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": standin.model_id,
                                    "object": "model",
                                    "owned_by": "cowork-adapter-standin",
                                    "max_model_len": CONTEXT_LENGTH,
                                    "context_length": CONTEXT_LENGTH,
                                }
                            ],
                        },
                    )
                    return
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

            def do_POST(self):
                if request_route(self.path) != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    if length > MAX_BODY_BYTES:
                        raise ValueError("body too large")
                    body = json.loads(self.rfile.read(length) or b"{}")
                    if not isinstance(body, dict):
                        raise ValueError("body is not a JSON object")
                except ValueError as exc:
                    standin._count("bad")
                    self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
                    return
                standin._note(self, body)
                reply = respond(body)
                names = [c["function"]["name"] for c in reply.tool_calls]
                streamed = bool(body.get("stream"))
                answered = reply.kind not in ("hang", "error")
                # The log holds the usage this endpoint reported: none for a stream not asking for it.
                reported = answered and (not streamed or wants_stream_usage(body))
                usage = completion(reply, body, 0)["usage"] if reported else {}
                cost = standin.cost_per_request if reported else None
                serial = standin._count(
                    reply.kind,
                    {
                        "kind": reply.kind,
                        "tools": names,
                        "model": body.get("model"),
                        "offered_tools": len(offered_tools(body)),
                        "prompt_tokens": usage.get("prompt_tokens", 0),
                        "completion_tokens": usage.get("completion_tokens", 0),
                        "cost": cost,
                        # Which credential and client called, without keeping the credential itself.
                        "auth_sha256": hashlib.sha256((self.headers.get("Authorization") or "").encode()).hexdigest(),
                        "user_agent": self.headers.get("User-Agent"),
                        # What bounds the answer's price, as the request asked (the gateway shapes these).
                        "max_tokens": body.get("max_tokens"),
                        "max_completion_tokens": body.get("max_completion_tokens"),
                        "n": body.get("n"),
                        "include_usage": wants_stream_usage(body),
                    },
                )
                if reply.kind == "hang":  # never answers while the stand-in runs: the caller's clock must end it
                    while not standin._stopping.wait(HANG_POLL_SEC):
                        pass
                    self._send(503, {"error": {"message": "stand-in stopped", "type": "server_error"}})
                    return
                if reply.kind == "error":
                    self._send(reply.status, {"error": {"message": reply.content, "type": "server_error"}})
                    return
                if streamed:
                    chunks = stream_chunks(reply, body, serial)
                    if cost is not None and chunks and "usage" in chunks[-1]:
                        chunks[-1]["usage"]["cost"] = cost
                    self._stream(chunks)
                    return
                if standin.answer_delay_sec and standin._stopping.wait(standin.answer_delay_sec):
                    return
                whole = completion(reply, body, serial)
                if cost is not None:
                    whole["usage"]["cost"] = cost
                self._send(200, whole)

            def _stream(self, chunks: list[dict]) -> None:
                # Server-sent events, ended by closing the connection (no length is known up front).
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for obj in chunks:
                    if standin.chunk_delay_sec:
                        time.sleep(standin.chunk_delay_sec)
                    self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        return Handler
