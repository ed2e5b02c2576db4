"""The model gateway's append-only request log, <run_root>/gateway/requests.jsonl (one row a request).

msgspec Structs: the gateway appends one row per request on its hot path, and the ledger and the
report read the file back whole.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from ..runroot.layout import RunRoot

GATEWAY_SCHEMA = "cowork_adapter.gateway_request.v1"


class GatewayRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One request the gateway answered, forwarded or refused.

    `task` is the runner's task id the token was minted for (None when the token was not valid);
    tokens and cost are the provider's own figures from the response's `usage` (None when it gave
    none, e.g. a stream that did not ask for usage); `refused` names why the gateway answered
    itself instead of forwarding (auth, fenced...), `cut` that the fence ended the exchange (a stream
    in flight, or a request waiting for the provider's headers). `assumed_cost_usd`: a request the
    provider may bill whose answer carried no cost figure (or never came whole) is counted at the
    run's pessimistic price (--llm-gateway-unknown-cost-usd); it is that figure, else None. A request
    the provider's own face forwards without a credential (OpenRouter's free /models, which the
    seed calls without one) has task None and refused None."""

    schema: str = GATEWAY_SCHEMA
    at: float  # unix time the request arrived
    task: str | None
    path: str
    model: str | None = None
    stream: bool = False
    status: int
    latency_ms: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    assumed_cost_usd: float | None = None
    refused: str | None = None
    cut: bool = False
    error: str | None = None
    # A chat body the gateway's policy changed before forwarding it (gateway/policy.py); an unchanged
    # one went upstream byte for byte.
    changed: bool = False
    # How many requests this row stands for: refusals are logged as one row per caller and cause per
    # interval with their count (gateway/refusals.py); a forwarded request is always 1. `peer`: the
    # caller's address, on refusals (the caller a refusal without a valid token is counted under).
    count: int = 1
    peer: str | None = None


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(GatewayRequest)


def encode_row(row: GatewayRequest) -> bytes:
    return _ENCODER.encode(row) + b"\n"


def read_requests(run_root: Path) -> list[GatewayRequest]:
    """Every complete row of the run's gateway log (a torn last line, from a killed launcher, is skipped)."""
    path = RunRoot(run_root).gateway_requests
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    rows = []
    for line in lines:
        if not line.strip():
            continue
        try:
            rows.append(_DECODER.decode(line))
        except msgspec.DecodeError:
            continue
    return rows


def is_billed(row: GatewayRequest) -> bool:
    """A forwarded request the provider may charge for: a chat completion (listing models costs nothing)."""
    return row.refused is None and row.path.rstrip("/").endswith("/chat/completions")


class TaskSpend(msgspec.Struct, kw_only=True):
    requests: int = 0
    forwarded: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unknown_cost: int = 0  # forwarded chat completions whose response carried no cost figure
    assumed_cost_usd: float = 0.0  # what those were counted at by the gateway's fences (pessimistic)
    refused: dict[str, int] = msgspec.field(default_factory=dict)  # refusals of the task's token, by cause


def spend_by_task(rows: list[GatewayRequest]) -> dict[str, TaskSpend]:
    """Per task: requests, tokens and the provider's cost, summed from the gateway log."""
    out: dict[str, TaskSpend] = {}
    for row in rows:
        if row.task is None:
            continue
        spend = out.setdefault(row.task, TaskSpend())
        spend.requests += row.count
        if row.refused is not None:
            spend.refused[row.refused] = spend.refused.get(row.refused, 0) + row.count
            continue
        spend.forwarded += 1
        spend.prompt_tokens += row.prompt_tokens or 0
        spend.completion_tokens += row.completion_tokens or 0
        if row.cost_usd is None:
            spend.unknown_cost += is_billed(row)
            spend.assumed_cost_usd += row.assumed_cost_usd or 0.0
        else:
            spend.cost_usd += row.cost_usd
    return out
