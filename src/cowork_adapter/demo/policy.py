"""The scripted "model" of the demo: what a competent (or broken) agent does on each demo task.

Standard library only. The same file is copied into the demo benchmark image (for the demo's own
bare engine) and into the stub Ouroboros seed (the stand-in agent), so both act identically.
A demo task opts into a plan with a marker line in its task text: `[demo-policy: <tag>]`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MARKER = re.compile(r"\[demo-policy:\s*([a-z0-9_-]+)\s*\]")


class Ending:
    """How the scripted agent ends, after running its steps (one step = one round)."""

    FINISH = "finish"  # completed voluntarily: reason final_message
    ROUND_LIMIT = "round_limit"  # runs out of rounds: a truncation
    PROVIDER_ERROR = "provider_error"  # the model provider fails: infrastructure
    HANG = "hang"  # never finishes: the outer wall clock must end it


@dataclass(frozen=True)
class Step:
    server: str  # MCP server name as in configs/mcp_servers/*.yaml `name`
    tool: str
    arguments: dict = field(default_factory=dict)  # str values may contain "{workspace}"


@dataclass(frozen=True)
class Plan:
    tag: str
    steps: tuple[Step, ...] = ()
    ending: str = Ending.FINISH
    final_answer: str = "done"


# One plan per demo task (demo/bench/tasks/finalpool/<tag>/). The designed outcome of each task in
# the demo's bare runner is in the comment and in the task's task_config.json `meta`.
_CSV_TOTALS = '{"by_region": {"east": 15.75, "north": 160.5, "south": 100.0, "west": 60.0}, "grand_total": 336.25}'

# More rounds than the runner's default --max_steps (100): the engine must cut the plan short.
ROUND_LIMIT_STEPS = 110

PLANS: dict[str, Plan] = {
    # success / pass: reads the CSV, writes the correct totals.
    "demo-csv-totals": Plan(
        tag="demo-csv-totals",
        steps=(
            Step("files", "list_files", {"path": "."}),
            Step("files", "read_file", {"path": "sales.csv"}),
            Step("files", "write_file", {"path": "totals.json", "content": _CSV_TOTALS}),
        ),
        final_answer="Wrote totals.json: grand total 336.25.",
    ),
    # success / eval fail: miscounts (237 is right).
    "demo-wrong-answer": Plan(
        tag="demo-wrong-answer",
        steps=(
            Step("files", "read_file", {"path": "inventory.csv"}),
            Step("files", "write_file", {"path": "answer.txt", "content": "227\n"}),
        ),
        final_answer="The total quantity is 227.",
    ),
    # success / pass: changes rows through the PostgreSQL-backed crm server.
    "demo-crm-postgres": Plan(
        tag="demo-crm-postgres",
        steps=(
            Step("crm", "list_customers", {"status": "lead"}),
            Step("crm", "update_customer_status", {"customer_id": 2, "status": "active"}),
            Step("crm", "update_customer_status", {"customer_id": 5, "status": "active"}),
            Step("crm", "add_note", {"customer_id": 2, "body": "contract signed"}),
            Step("crm", "add_note", {"customer_id": 5, "body": "contract signed"}),
        ),
        final_answer="Borealis Ltd and Elm & Co are active, each with a 'contract signed' note.",
    ),
    # success / pass only when one deck server process serves every call (persistent session).
    "demo-deck-stateful": Plan(
        tag="demo-deck-stateful",
        steps=(
            Step("deck", "create_deck", {"deck_id": "q3", "title": "Q3 review"}),
            Step("deck", "add_slide", {"deck_id": "q3", "heading": "Revenue", "body": "Revenue grew 8%."}),
            Step("deck", "add_slide", {"deck_id": "q3", "heading": "Costs", "body": "Costs stayed flat."}),
            Step("deck", "add_slide", {"deck_id": "q3", "heading": "Outlook", "body": "Q4 looks steady."}),
            Step("deck", "save_deck", {"deck_id": "q3", "filename": "q3_review.deck.json"}),
            Step("files", "list_files", {"path": "."}),
        ),
        final_answer="Saved q3_review.deck.json with three slides.",
    ),
    # max_turns_reached / not graded, but the state is correct: writes the right answer first, then
    # keeps thinking until the round limit. Only the opt-in residual-state diagnostic checks it.
    "demo-truncated-correct": Plan(
        tag="demo-truncated-correct",
        steps=(
            Step("files", "list_files", {"path": "."}),
            Step("files", "read_file", {"path": "readings.csv"}),
            Step(
                "files", "write_file", {"path": "summary.json", "content": '{"count": 5, "total": 25.0, "max": 10.0}'}
            ),
        ),
        ending=Ending.ROUND_LIMIT,
    ),
    # max_turns_reached / not graded: keeps browsing past the round limit.
    "demo-round-limit": Plan(
        tag="demo-round-limit",
        steps=tuple(
            Step("files", "list_files", {"path": ("archive", "archive/2023", "archive/2024")[i % 3]})
            for i in range(ROUND_LIMIT_STEPS)
        ),
        ending=Ending.ROUND_LIMIT,
    ),
    # failed / not graded: the provider fails after the first round.
    "demo-provider-error": Plan(
        tag="demo-provider-error",
        steps=(Step("files", "read_file", {"path": "brief.txt"}),),
        ending=Ending.PROVIDER_ERROR,
    ),
    # no status line (killed by the wall clock) / no traj_log.json: never finishes.
    "demo-hang": Plan(
        tag="demo-hang",
        steps=(Step("files", "list_files", {"path": "."}),),
        ending=Ending.HANG,
    ),
    # success / pass, with three planted traces for the offline audit (each call fails, the
    # answer does not depend on them): a ground-truth path, a psql command through the terminal
    # server (which refuses every command), and a path naming the evaluator's eval_res.json.
    "demo-audit-planted": Plan(
        tag="demo-audit-planted",
        steps=(
            Step("files", "read_file", {"path": "tickets.txt"}),
            Step(
                "files",
                "read_file",
                {"path": "../../../tasks/finalpool/demo-audit-planted/groundtruth_workspace/open_count.txt"},
            ),
            Step("terminal", "run_command", {"command": "psql -h pg -U eigent -c 'select 1'"}),
            Step("files", "read_file", {"path": "../eval_res.json"}),
            Step("files", "write_file", {"path": "open_count.txt", "content": "5\n"}),
        ),
        final_answer="There are 5 open tickets; wrote open_count.txt.",
    ),
    # success / pass: writes correct notes; its lenient evaluator would pass an untouched workspace too.
    "demo-nop-passes": Plan(
        tag="demo-nop-passes",
        steps=(
            Step("files", "read_file", {"path": "changes.txt"}),
            Step(
                "files",
                "write_file",
                {
                    "path": "release_notes.txt",
                    "content": "Release notes\n- fix: login timeout\n- feat: export to CSV\n",
                },
            ),
        ),
        final_answer="Wrote release_notes.txt with both changes.",
    ),
    # success / pass once repaired: the quotes server's own environment resolves the mcp 2.x SDK
    # and crashes at start until the derived image repins it below 2.x; environment-blocked before.
    "demo-broken-sdk": Plan(
        tag="demo-broken-sdk",
        steps=(
            Step("quotes", "get_quote", {"symbol": "ACME"}),
            Step("files", "write_file", {"path": "quote.txt", "content": "ACME 42.17\n"}),
        ),
        final_answer="ACME closed at 42.17; wrote quote.txt.",
    ),
}


def plan_for(task_text: str) -> Plan:
    """The plan named by the task's marker; a task without a known marker gets an empty finish."""
    match = MARKER.search(task_text)
    if match is None:
        return Plan(tag="none")
    return PLANS.get(match.group(1), Plan(tag=match.group(1)))


def render_arguments(step: Step, workspace: str) -> dict:
    """The step's arguments with `{workspace}` replaced in every string value."""

    def render(value):
        if isinstance(value, str):
            return value.replace("{workspace}", workspace)
        if isinstance(value, list):
            return [render(v) for v in value]
        if isinstance(value, dict):
            return {k: render(v) for k, v in value.items()}
        return value

    return render(dict(step.arguments))
