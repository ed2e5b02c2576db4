"""Every model request is exactly one usage record (issue 16 f).

Ouroboros 6.97 writes one `kind: attempt` entry per provider request to its physical-attempt
ledger (state/usage_attempts.jsonl: reserved -> dispatched -> settled|unresolved, or released
when never sent); its llm_usage rows in events.jsonl are a projection that misses some request
kinds. The dump carries the ledger beside events.jsonl, and the ledger row and the audit count
usage from it.
"""

from __future__ import annotations

import json
from pathlib import Path

from cowork_adapter.audit.scan import TaskScan, scan_events
from cowork_adapter.container import ouroboros
from cowork_adapter.score.taskread import scan_usage


def _attempt(attempt_id: str, state: str, **fields) -> dict:
    return {
        "kind": "attempt",
        "attempt_id": attempt_id,
        "state": state,
        "model": "openai-compatible::m",
        "provider": "openai-compatible",
        "task_id": "t1",
        **fields,
    }


def _ledger(sent: int, *, tokens: int = 1000) -> list[dict]:
    rows = []
    for n in range(sent):
        rows += [_attempt(f"a{n}", "reserved", reservation_upper_bound_usd=0.5), _attempt(f"a{n}", "dispatched")]
    for n in range(sent):  # settled later, interleaved with other attempts' rows as the server does
        rows.append(
            _attempt(
                f"a{n}",
                "settled",
                prompt_tokens=tokens,
                completion_tokens=10,
                cached_tokens=0,
                cost_usd=0.001,
                cost_final=False,
            )
        )
    return rows


def _usage_rows(count: int, *, tokens: int = 1000) -> list[dict]:
    return [
        {
            "ts": "2026-12-01T00:00:00Z",
            "type": "llm_usage",
            "task_id": "t1",
            "model": "m",
            "provider": "openai-compatible",
            "prompt_tokens": tokens,
            "completion_tokens": 10,
            "cached_tokens": 0,
            "cost": 0.001,
            "cost_known": True,
        }
        for _ in range(count)
    ]


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_attempt_ledger_counts_each_request_once_where_llm_usage_rows_miss_half(tmp_path):
    """The shape measured on the real benchmark: 8 requests, 4 llm_usage rows."""
    events = _write(tmp_path / "ouroboros" / "events.jsonl", _usage_rows(4) + [{"type": "worker_ready"}])
    _write(tmp_path / "ouroboros" / "usage_attempts.jsonl", _ledger(8))
    facts = scan_usage(events)
    assert facts is not None
    assert (facts.records, facts.token_records, facts.prompt_tokens) == (8, 8, 8000)
    assert facts.completion_tokens == 80 and facts.unknown_cost_records == 0
    assert abs(facts.known_cost_usd - 0.008) < 1e-12


def test_attempts_never_sent_are_not_requests_and_unsettled_ones_are_unknown(tmp_path):
    events = _write(tmp_path / "ouroboros" / "events.jsonl", _usage_rows(1))
    rows = _ledger(2)
    rows += [_attempt("r", "reserved"), _attempt("r", "released", reason="not_dispatched")]  # never sent
    rows += [_attempt("u", "reserved"), _attempt("u", "dispatched"), _attempt("u", "unresolved", reason="timeout")]
    rows += [{"kind": "legacy_metadata", "attempt_id": "legacy-1", "state": "unresolved"}]  # not a request here
    _write(tmp_path / "ouroboros" / "usage_attempts.jsonl", rows)
    scan = TaskScan()
    scan_events(events, "ouroboros/events.jsonl", scan)
    assert scan.usage_records == 3 and scan.token_bearing == 2 and scan.prompt_tokens == 2000
    assert scan.cost_unknown == 1  # the unresolved request: sent, cost unknown
    assert {g["file"] for g in scan.gaps} == {"ouroboros/usage_attempts.jsonl"}
    assert scan.models == {"openai-compatible::m": None}


def test_a_malformed_ledger_line_makes_the_usage_incomplete(tmp_path):
    events = _write(tmp_path / "ouroboros" / "events.jsonl", [])
    ledger = _write(tmp_path / "ouroboros" / "usage_attempts.jsonl", _ledger(2))
    with open(ledger, "a") as fh:
        fh.write("{not json\n")
    scan = TaskScan()
    scan_events(events, "ouroboros/events.jsonl", scan)
    assert scan.usage_records == 2 and scan.events_gap is True


def test_without_a_ledger_llm_usage_rows_are_the_records(tmp_path):
    """Older servers (and the stub seed) have no attempt ledger: their llm_usage rows count."""
    events = _write(tmp_path / "ouroboros" / "events.jsonl", _usage_rows(3, tokens=7))
    facts = scan_usage(events)
    assert facts is not None and (facts.records, facts.prompt_tokens) == (3, 21)


def test_the_checkpoint_copies_the_attempt_ledger_into_the_dump_scrubbed(tmp_path):
    data, out = tmp_path / "data", tmp_path / "dump" / "ouroboros"
    _write(data / "logs" / "events.jsonl", _usage_rows(1))
    _write(data / "state" / "usage_attempts.jsonl", _ledger(1) + [_attempt("x", "reserved", note="sk-or-SECRET-1")])
    ouroboros.checkpoint(str(data), None, str(out), ["sk-or-SECRET-1"])
    copied = (out / "usage_attempts.jsonl").read_text()
    assert "sk-or-SECRET-1" not in copied and copied.count('"attempt_id"') == 4
    assert (out / "events.jsonl").exists()


def test_the_audit_counts_the_ledger_and_names_its_source(tmp_path):
    from cowork_adapter.audit.task import audit_task_with_scan

    def audit_task(*args):
        return audit_task_with_scan(*args)[0]

    dump = tmp_path / "bench" / "dumps" / "ouroboros_m" / "SingleUserTurn-t"
    _write(dump / "ouroboros" / "events.jsonl", _usage_rows(4))
    _write(dump / "ouroboros" / "usage_attempts.jsonl", _ledger(8))
    task = audit_task_with_scan({"instance_id": "t", "status": "passed"}, tmp_path, {"t": dump})[0]
    assert (task.activity.usage_records, task.activity.prompt_tokens, task.activity.completion_tokens) == (8, 8000, 80)
    assert task.cost.source == "attempt_ledger" and task.cost.unknown_records == 0
    _write(dump / "ouroboros" / "usage_attempts.jsonl", []).unlink()
    task = audit_task_with_scan({"instance_id": "t", "status": "passed"}, tmp_path, {"t": dump})[0]
    assert task.activity.usage_records == 4 and task.cost.source == "llm_usage_projection"


def test_the_summary_totals_of_the_attempt_ledger(tmp_path):
    rows = _ledger(3) + [_attempt("r", "reserved"), _attempt("r", "released")]
    rows += [_attempt("u", "dispatched"), _attempt("u", "unresolved")]
    _write(tmp_path / "state" / "usage_attempts.jsonl", rows)
    with open(tmp_path / "state" / "usage_attempts.jsonl", "a") as fh:
        fh.write("{torn tail\n")
    assert ouroboros.attempt_usage(str(tmp_path)) == {
        "records": 4,
        "settled": 3,
        "prompt_tokens": 3000,
        "completion_tokens": 30,
    }
    assert ouroboros.attempt_usage(str(tmp_path / "none")) is None
