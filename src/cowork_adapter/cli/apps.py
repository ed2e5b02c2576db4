"""The command line's two typer apps, their plain help (panels kept as sections) and what every
command module shares: the program's name, the invocation's argv, the one-line sentence on stderr, the
flags naming a campaign in PostgreSQL.

The command modules beside this one register on `app` and `campaign_app` when `cli/__init__.py`
imports them; nothing here imports a command's implementation.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from ..defaults import DEFAULT_CAMPAIGN_NAME, InvalidFlag
from ..errors import Refusal

PROG = "cowork-adapter"


def _more(page: str) -> str:
    """The help's last paragraph: the page of the repository's docs/ that says more (issue 31)."""
    return f"\n\nMore: {page} in the cowork-adapter repository."


class _WholeSummaryGroup(TyperGroup):
    """Plain help (no rich) whose command list gives each command's whole first paragraph,
    wrapped, where click would cut it at one line."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, (command.help or "").split("\n\n")[0].strip()))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


app = typer.Typer(
    name=PROG,
    cls=_WholeSummaryGroup,
    help="Run an AI agent on Cowork Bench inside the benchmark's own containers, with custody of "
    "money, containers and evidence.\n\nExample: cowork-adapter demo --run-root /tmp/demo-1\n\n"
    "Start with README.md of the cowork-adapter repository; each topic has a page in its docs/ "
    "(docs/paid-campaign.md, docs/operating.md, docs/exit-codes.md, ...).",
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,  # plain click help: rendering through rich cost ~0.2 s of CPU per --help
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)
campaign_app = typer.Typer(
    cls=_WholeSummaryGroup,
    help="Inspect, reconcile or release the campaign's records (never hand-edit its JSON).\n\n"
    "Example: cowork-adapter campaign show --campaign-file /data/campaign.json" + _more("docs/operating.md"),
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(campaign_app, name="campaign")


# Help panels group the many run flags by concern.
class _PanelledCommand(TyperCommand):
    """Plain help (no rich) that still lists the options under their panel headings, in the order
    the panels first appear; options without a panel (--help) go under "Options"."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                panels.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
        for title, records in panels.items():
            with formatter.section(title):
                formatter.write_dl(records)


P_WHERE, P_SELECT, P_AGENT, P_MONEY, P_DISK = "Locations", "Selection", "Agent", "Money", "Disk"
P_PROVIDER, P_IMAGE, P_MODE, P_LIMITS = "Provider", "Image", "Mode", "Container limits"
P_HOSTS = "Hosts"  # one host of a campaign several hosts run together (config.Hosts)


def _one_of(values: Sequence[str]) -> str:
    return "One of: " + ", ".join(values) + "."


# The invocation's argv (program name first), set in place by main() before any command runs.
_ARGV: list[str] = [PROG]


def _current_argv() -> list[str]:
    """The argv of this invocation (program name first), as the launcher records it."""
    return list(_ARGV)


def _say(sentence: str) -> None:
    print(f"{PROG}: {' '.join(sentence.split())}", file=sys.stderr, flush=True)


def _campaign_view_flags(campaign_db: str | None, campaign_name: str) -> tuple[str, str] | None:
    """(URL, name) for a view over a campaign in PostgreSQL, or None without --campaign-db."""
    if campaign_db is None:
        if campaign_name != DEFAULT_CAMPAIGN_NAME:
            raise Refusal("flags", "--campaign-name is only meaningful with --campaign-db.")
        return None
    from ..config import check_campaign_db_url

    try:
        check_campaign_db_url(campaign_db)
    except InvalidFlag as exc:
        raise Refusal(exc.stage, exc.sentence) from None
    return campaign_db, campaign_name
