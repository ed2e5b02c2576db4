"""`cowork-adapter export --format inspect`: a synthetic run root mapped to an Inspect AI log and read
back with inspect_ai itself (read_eval_log, samples_df): every selected task a sample, the score the
ledger's sealed verdict only, the ledger's usage, the engine's transcript, refusals that write nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import inspect_ai.log as inspect_log  # noqa: E402  (the test extra pins it)
import pytest
from synthetic_run import dump_dir, ledger_run  # tests/synthetic_run.py (tests/ is on sys.path)

from cowork_adapter.audit import audit_run
from cowork_adapter.cli import main
from cowork_adapter.export import log_name
from cowork_adapter.export.transcript import MAX_TURNS, TOOL_OUTPUT_CAP, bounded, read_transcript
from cowork_adapter.report import make_report
from cowork_adapter.report.build import row_cost
from cowork_adapter.schemas.ledger import read_index

SELECTION = ["t-pass", "t-fail", "t-agent", "t-infra", "t-never"]
OUTCOMES = {"t-pass": "pass", "t-fail": "fail", "t-agent": "agent", "t-infra": "infra"}
LONG = "é" * (TOOL_OUTPUT_CAP + 500)


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def write_ouroboros_logs(dump: Path) -> None:
    """One task as Ouroboros logs it: the task given, two model calls, notes, two tool calls (one
    failing, one with an output longer than the cap), and the task's result record."""
    logs = dump / "ouroboros"
    logs.mkdir(exist_ok=True)
    _jsonl(logs / "chat.jsonl", [{"ts": "2026-01-01T00:00:00Z", "direction": "in", "text": "Fill the sheet."}])
    usage = {"type": "llm_usage", "model": "test/model", "cost": 0.01, "cost_known": True}
    _jsonl(
        logs / "events.jsonl",
        [
            {**usage, "ts": "2026-01-01T00:00:01Z", "prompt_tokens": 100, "completion_tokens": 10},
            {"ts": "2026-01-01T00:00:02Z", "type": "task_progress", "note": "not a model call"},
            {**usage, "ts": "2026-01-01T00:00:05Z", "prompt_tokens": 200, "completion_tokens": 20},
        ],
    )
    _jsonl(logs / "progress.jsonl", [{"ts": "2026-01-01T00:00:01.5Z", "text": "Reading the sheet."}])
    _jsonl(
        logs / "tools.jsonl",
        [
            {
                "ts": "2026-01-01T00:00:03Z",
                "type": "tool_call",
                "tool": "mcp_excel__read_sheet",
                "args": {"path": "/workspace/a.xlsx"},
                "result_preview": LONG,
                "is_error": False,
            },
            {
                "ts": "2026-01-01T00:00:04Z",
                "type": "tool_call",
                "tool": "run_command",
                "tool_call_id": "call-x",
                "args": {"command": "false"},
                "result_preview": "exit 1",
                "is_error": True,
            },
        ],
    )
    (logs / "task-1.json").write_text(json.dumps({"result": "FINAL ANSWER: done"}), encoding="utf-8")


@pytest.fixture()
def run_root(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    ledger_run(root, SELECTION, OUTCOMES)
    write_ouroboros_logs(dump_dir(root, "t-pass"))
    audit_run(root, workers=1)  # the launcher's audit, as a finished run has it
    return root


def sample_of(log, task: str):
    return next(s for s in log.samples if s.id == task)


def export(root: Path, out: Path) -> Path:
    with pytest.raises(SystemExit) as done:
        main(["export", str(root), "--format", "inspect", "--output-dir", str(out)])
    assert done.value.code == 0
    return out / log_name(root)


def test_every_selected_task_is_a_sample_scored_as_the_ledger_says(run_root: Path, tmp_path: Path) -> None:
    log = inspect_log.read_eval_log(str(export(run_root, tmp_path / "out")))
    rows = {r.instance_id: r for r in read_index(run_root / "result_index.jsonl")}
    # The whole denominator, never-attempted included (the reader orders samples its own way).
    assert sorted(s.id for s in log.samples) == sorted(SELECTION)
    assert log.eval.task == "cowork_bench" and log.eval.dataset.sample_ids == SELECTION
    for sample in log.samples:
        row = rows[sample.id]
        score = sample.scores["official"]
        assert score.value == ("C" if row.status.value == "passed" else "I"), sample.id
        assert score.metadata["status"] == row.status.value and score.metadata["reason_code"] == row.reason_code
        usage = sample.model_usage["test/model"]
        prompt = row.usage.prompt_tokens if row.usage else 0
        completion = row.usage.completion_tokens if row.usage else 0
        assert (usage.input_tokens, usage.output_tokens) == (prompt, completion), sample.id
        cost = row_cost(row)  # an unknown cost stays unknown (None), never 0
        assert usage.total_cost == (pytest.approx(cost) if cost is not None else None), sample.id
    assert sample_of(log, "t-never").scores["official"].answer == "not_attempted"


def test_samples_df_gives_the_reports_pass_at_1(run_root: Path, tmp_path: Path) -> None:
    from inspect_ai.analysis import samples_df

    path = export(run_root, tmp_path / "out")
    frame = samples_df(str(path))
    report = make_report([run_root], 1)
    assert len(frame) == report["denominator"] == len(SELECTION)
    assert (frame["score_official"] == "C").mean() == pytest.approx(report["pass_at_1"])
    log = inspect_log.read_eval_log(str(path), header_only=True)
    assert log.results.scores[0].metrics["accuracy"].value == pytest.approx(report["pass_at_1"])
    assert log.eval.metadata["disclosures"] == report["disclosures"]


def test_the_transcript_is_the_engines_messages_and_tool_calls_in_order(run_root: Path, tmp_path: Path) -> None:
    log = inspect_log.read_eval_log(str(export(run_root, tmp_path / "out")))
    sample = sample_of(log, "t-pass")
    roles = [m.role for m in sample.messages]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"], roles
    assert sample.input == "Fill the sheet."
    first = sample.messages[1]
    assert first.text == "Reading the sheet."
    assert [c.function for c in first.tool_calls] == ["mcp_excel__read_sheet", "run_command"]
    assert first.tool_calls[0].arguments == {"path": "/workspace/a.xlsx"}
    cut, failed = sample.messages[2], sample.messages[3]
    assert cut.text == LONG[:TOOL_OUTPUT_CAP] and cut.error is None
    assert failed.tool_call_id == "call-x" and failed.error is not None and failed.error.message == "exit 1"
    assert sample.output.completion == "FINAL ANSWER: done"
    kinds = [e.event for e in sample.events]
    assert kinds == ["model", "tool", "tool", "model"], kinds
    assert sample.events[0].output.usage.input_tokens == 100
    assert sample.metadata["transcript_outputs_cut"] == 1
    assert sample.metadata["audit"]["tool_calls"] == 2 and sample.metadata["audit"]["findings"] == []
    assert sample.metadata["transcript_tool_output_cap_chars"] == TOOL_OUTPUT_CAP
    # A task whose engine logged nothing has no messages, and says so.
    never = sample_of(log, "t-never")
    assert never.messages == [] and never.metadata["transcript_source"] == "none"


def test_a_link_or_fifo_in_the_dump_is_never_followed_or_read(run_root: Path, tmp_path: Path) -> None:
    logs = dump_dir(run_root, "t-fail") / "ouroboros"
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"ts": "x", "direction": "in", "text": "SECRET"}) + "\n")
    (logs / "chat.jsonl").symlink_to(secret)
    os.mkfifo(logs / "tools.jsonl")
    log = inspect_log.read_eval_log(str(export(run_root, tmp_path / "out")))
    sample = sample_of(log, "t-fail")
    assert "SECRET" not in json.dumps([m.model_dump() for m in sample.messages])
    notes = sample.metadata["transcript_notes"]
    assert any("chat.jsonl: not read (symlink)" in n for n in notes), notes
    assert any("tools.jsonl: not read" in n for n in notes), notes


def test_an_upstream_engines_traj_json_in_either_shape(tmp_path: Path) -> None:
    below = tmp_path / "dumps"
    camel = below / "s" / "SingleUserTurn-a"
    strands = below / "s" / "SingleUserTurn-b"
    for d in (camel, strands):
        d.mkdir(parents=True)
    (camel / "traj.json").write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "do it"},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "/"}'}}
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "a b"},
                    {"role": "assistant", "content": "done"},
                ]
            }
        )
    )
    (strands / "traj.json").write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": [{"text": "do it"}]},
                    {
                        "role": "assistant",
                        "content": [
                            {"text": "looking"},
                            {"toolUse": {"toolUseId": "u1", "name": "ls", "input": {"path": "/"}}},
                        ],
                    },
                    {
                        "role": "user",
                        "content": [
                            {"toolResult": {"toolUseId": "u1", "status": "error", "content": [{"text": "denied"}]}}
                        ],
                    },
                    {"role": "assistant", "content": [{"text": "done"}]},
                ]
            }
        )
    )
    a = read_transcript(str(camel), str(below))
    assert a.source == "traj.json" and a.system == "be brief" and a.final == "done"
    call = a.items[1].calls[0]
    assert (call.function, call.arguments, call.result, call.error) == ("ls", {"path": "/"}, "a b", None)
    b = read_transcript(str(strands), str(below))
    call = b.items[1].calls[0]
    assert (call.function, call.arguments, call.result, call.error) == ("ls", {"path": "/"}, "denied", "denied")
    assert b.items[1].text == ["looking"] and b.final == "done"


def test_a_sample_keeps_its_first_turns_and_says_how_many_were_left_out(tmp_path: Path) -> None:
    from cowork_adapter.export.transcript import Transcript, Turn

    t = bounded(Transcript(source="ouroboros_logs", items=[Turn() for _ in range(MAX_TURNS + 7)]))
    assert len(t.items) == MAX_TURNS and t.notes == [
        f"7 later model turn(s) are left out: a sample keeps the first {MAX_TURNS}"
    ]


def test_an_existing_log_is_refused_and_left_as_it_was(run_root: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    existing = out / log_name(run_root)
    existing.write_bytes(b"keep me")
    with pytest.raises(SystemExit) as done:
        main(["export", str(run_root), "--format", "inspect", "--output-dir", str(out)])
    assert done.value.code == 2
    assert existing.read_bytes() == b"keep me" and sorted(os.listdir(out)) == [existing.name]
    assert "ever overwrites" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, words",
    [
        (["--format", "json"], "--format must be one of inspect"),
        (["--workers", "0"], "--workers must be at least 1"),
    ],
)
def test_bad_flags_are_one_sentence_and_exit_2(run_root: Path, tmp_path: Path, capsys, args, words) -> None:
    with pytest.raises(SystemExit) as done:
        main(["export", str(run_root), "--output-dir", str(tmp_path / "out"), *args])
    assert done.value.code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "out" / log_name(run_root)).exists()


def test_report_inspect_writes_the_log_beside_the_html(run_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    with pytest.raises(SystemExit) as done:
        main(["report", str(run_root), "--output-dir", str(out), "--inspect"])
    assert done.value.code == 0
    assert {"report.html", "report.json", "report.md", log_name(run_root)} <= set(os.listdir(out))
    log = inspect_log.read_eval_log(str(out / log_name(run_root)), header_only=True)
    report = json.loads((out / "report.json").read_text())
    assert log.results.scores[0].metrics["accuracy"].value == pytest.approx(report["pass_at_1"])


def test_report_inspect_without_an_output_dir_is_refused(run_root: Path, capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["report", str(run_root), "--inspect"])
    assert done.value.code == 2 and "name --output-dir" in capsys.readouterr().err


def test_a_tool_call_joins_the_model_call_it_names_even_when_its_usage_row_comes_later(tmp_path: Path) -> None:
    """Ouroboros 6.97 names each tool call's model call (llm_call_id); the supervisor may log that
    call's usage row after the tools ran. The call still opens one turn, counted once."""
    below = tmp_path / "dumps"
    logs = below / "s" / "SingleUserTurn-a" / "ouroboros"
    logs.mkdir(parents=True)
    usage = {"type": "llm_usage", "model": "m", "prompt_tokens": 5, "completion_tokens": 1, "cost": 0.1}
    _jsonl(
        logs / "events.jsonl",
        [
            {**usage, "ts": "2026-01-01T00:00:01Z", "llm_call_id": "A"},
            {**usage, "ts": "2026-01-01T00:00:09Z", "llm_call_id": "B"},
        ],
    )
    _jsonl(
        logs / "tools.jsonl",
        [
            {
                "ts": "2026-01-01T00:00:02Z",
                "type": "tool_call",
                "tool": "one",
                "llm_call_id": "A",
                "result_preview": "1",
            },
            {
                "ts": "2026-01-01T00:00:03Z",
                "type": "tool_call",
                "tool": "two",
                "llm_call_id": "B",
                "result_preview": "2",
            },
            {
                "ts": "2026-01-01T00:00:04Z",
                "type": "tool_call",
                "tool": "three",
                "llm_call_id": "A",
                "result_preview": "3",
            },
        ],
    )
    t = read_transcript(str(logs.parent), str(below))
    turns = [[c.function for c in item.calls] for item in t.items]
    assert turns == [["one", "three"], ["two"]], turns
    assert [item.prompt_tokens for item in t.items] == [5, 5]


def test_the_task_text_comes_from_the_task_record_when_no_chat_row_gave_it(tmp_path: Path) -> None:
    """The real server logs the agent's `out` chat rows only; the task it was given is the record's
    `description` (and its final answer the record's `result`)."""
    below = tmp_path / "dumps"
    logs = below / "s" / "SingleUserTurn-a" / "ouroboros"
    logs.mkdir(parents=True)
    _jsonl(logs / "chat.jsonl", [{"ts": "2026-01-01T00:00:02Z", "direction": "out", "text": "Noted."}])
    _jsonl(
        logs / "events.jsonl",
        [{"ts": "2026-01-01T00:00:01Z", "type": "llm_usage", "prompt_tokens": 9, "completion_tokens": 2}],
    )
    (logs / "eb7c.json").write_text(json.dumps({"description": "Make the menu deck.", "result": "Noted."}))
    t = read_transcript(str(logs.parent), str(below))
    assert [type(i).__name__ for i in t.items] == ["UserText", "Turn"]
    assert t.items[0].text == "Make the menu deck." and t.items[1].text == ["Noted."] and t.final == "Noted."
