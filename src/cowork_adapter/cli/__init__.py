"""The `cowork-adapter` command line (also `python -m cowork_adapter`).

Thin on purpose: parse, validate into typed values, call the function that does the work. Each
command imports its implementation lazily, so `--help` and refusals stay fast and independent.
Every usage error and every Refusal prints exactly one line on stderr,
`cowork-adapter: <sentence>`, writes nothing, and exits 2.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.models import TyperInfo

from .. import __version__
from ..defaults import DEFAULT_API_KEY_ENV, flag_value, refuse_key_on_command_line
from ..errors import Refusal
from ..vocab import ExitCode
from .apps import _ARGV, PROG, _more, _say, app, campaign_app

# isort: off
# The command modules register on `app` as they are imported, in this order: the order of `--help`'s
# command list and of docs/reference.md.
from . import runs, readers, ops, campaign  # noqa: F401
# isort: on

__all__ = ["PROG", "app", "campaign_app", "main"]


@app.command(help=f"Print the adapter's version.\n\nExample: {PROG} version" + _more("README.md"))
def version() -> None:
    typer.echo(f"{PROG} {__version__}")


# ---------------------------------------------------------------------------------------------
# Entry point: one line on stderr for every refusal or usage error.
# ---------------------------------------------------------------------------------------------

# Typer >= 0.20 carries its own copy of click whose errors derive from TyperException; older
# releases raise click's own. Either way this is the base of every usage error, and has format_message.
_CLI_ERROR: type[typer.TyperException] = (
    getattr(typer, "TyperException", None) or importlib.import_module("click").ClickException
)


def _api_key_env_in(args: Sequence[str]) -> str:
    """The --api-key-env value on the command line, read before parsing (so that a usage error
    never echoes the key)."""
    given = flag_value(args, "--api-key-env")
    return DEFAULT_API_KEY_ENV if given is None else given


def _quiet_flag_types(command: Any) -> None:
    """On/off flags take no value: show no `<bool>` type for them, which also leaves their long
    names room in the help's table at 80 columns (rich would otherwise cut them)."""
    for sub in getattr(command, "commands", {}).values():
        _quiet_flag_types(sub)
    for param in getattr(command, "params", ()):
        if getattr(param, "is_flag", False) and getattr(param, "metavar", None) is None:
            param.metavar = ""


def _nothing() -> None:
    """The slimmed app's group callback: it keeps the app a group when it holds one command."""


def _app_for(args: Sequence[str]) -> typer.Typer:
    """The app holding only the command (or group) `args` starts with, when it names one.

    Turning a typer app into click commands reads every command's signature and annotations; the
    run flags alone are some sixty. Converting only the command invoked keeps start-up to what that
    command uses; its help, parsing and errors are the same, since a subcommand's help never lists
    its siblings. Anything else (no command, an option first, an unknown word) gets the whole app.
    """
    first = args[0] if args else ""
    commands = [
        info
        for info in app.registered_commands
        # a command has a callback
        if (info.name or typer.main.get_command_name(info.callback.__name__)) == first  # type: ignore[union-attr]
    ]
    groups = [info for info in app.registered_groups if info.name == first]
    if not commands and not groups:
        return app
    slim = copy.copy(app)
    slim.registered_commands, slim.registered_groups = commands, groups
    slim.registered_callback = TyperInfo(callback=_nothing)
    return slim


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry: run the command line and exit with an ExitCode (never a click traceback box)."""
    args = list(sys.argv[1:] if argv is None else argv)
    _ARGV[:] = [sys.argv[0] if argv is None else PROG, *args]  # in place: apps.py's _current_argv reads it
    command = typer.main.get_command(_app_for(args))
    _quiet_flag_types(command)
    try:
        refuse_key_on_command_line(args, os.environ, _api_key_env_in(args))
        result = command.main(args=args, prog_name=PROG, standalone_mode=False)
    except Refusal as refusal:
        _say(refusal.sentence)
        sys.exit(int(refusal.exit_code))
    except _CLI_ERROR as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            # Bare `cowork-adapter` (or `campaign`): help, not an error. Rich help is printed
            # while the exception is built; plain help is its message.
            help_text = exc.format_message()
            if help_text.strip():
                typer.echo(help_text)
            sys.exit(int(ExitCode.OK))
        _say(exc.format_message().replace("Value error, ", ""))
        sys.exit(int(ExitCode.REFUSED))
    except typer.Abort:
        _say("aborted.")
        sys.exit(130)
    sys.exit(result if isinstance(result, int) else int(ExitCode.OK))
