"""What every demo task's preprocess/main.py and evaluation/main.py share.

The bench runs a task script as a module from the benchmark root (`python3 -m
tasks.finalpool.<task>.preprocess.main --agent_workspace W --launch_time "T"`, and the evaluation
with --res_log_file, --agent_workspace, --groundtruth_workspace, --launch_time), so this package is
importable as `utils.task_script` there. A check prints one line, `[PASS] <name>` or
`[FAIL] <name>`; an evaluation exits 0 only when every check passed.
Files are opened with the platform's default encoding, as the task scripts always did.
Standard library only; Python 3.10.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Iterable, List, NamedTuple, NoReturn, Optional, Sequence, Tuple


class Check(NamedTuple):
    """One check of an evaluation; a failed critical check is named in the summary's critical_failed."""

    name: str
    passed: bool
    critical: bool = True


# ---------------------------------------------------------------- arguments


def preprocess_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """--agent_workspace (required) and --launch_time (default "")."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent_workspace", required=True)
    parser.add_argument("--launch_time", required=False, default="")
    return parser.parse_args(argv)


def evaluation_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """--res_log_file, --agent_workspace, --groundtruth_workspace (required), --launch_time (default "")."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--res_log_file", required=True)
    parser.add_argument("--agent_workspace", required=True)
    parser.add_argument("--groundtruth_workspace", required=True)
    parser.add_argument("--launch_time", required=False, default="")
    return parser.parse_args(argv)


# ---------------------------------------------------------------- preprocess


def fresh_workspace(workspace: str, stale_names: Iterable[str] = ()) -> None:
    """Create workspace if needed and delete each stale answer file named in it that exists."""
    os.makedirs(workspace, exist_ok=True)
    for name in stale_names:
        path = os.path.join(workspace, name)
        if os.path.exists(path):
            os.remove(path)


def preprocess_answer_task(*stale_names: str) -> None:
    """The whole preprocess of a task whose only state is its answer files: parse the arguments,
    make the workspace hold none of stale_names, print the one-line readiness note."""
    args = preprocess_args()
    fresh_workspace(args.agent_workspace, stale_names)
    print("preprocess: workspace ready at %s (launch %s)" % (args.agent_workspace, args.launch_time))


# ---------------------------------------------------------------- reading inputs


def read_groundtruth(args: argparse.Namespace, name: str) -> str:
    """The text of groundtruth_workspace/<name> (a missing file is the task's bug: it raises)."""
    with open(os.path.join(args.groundtruth_workspace, name)) as fh:
        return fh.read()


def load_answer(args: argparse.Namespace, name: str,
                parse: Optional[Callable[[str], Any]] = None) -> Tuple[Any, Optional[Exception]]:
    """(content, None) or (None, error) for the agent's answer file <name>.

    Without parse the content is the file's text and only an OSError counts as unreadable; with
    parse (json.loads for a JSON answer) it is parse(text), and a ValueError (bad JSON, bad
    encoding) counts as unreadable too.
    """
    unreadable = (OSError,) if parse is None else (OSError, ValueError)
    try:
        with open(os.path.join(args.agent_workspace, name)) as fh:
            text = fh.read()
        return (text if parse is None else parse(text)), None
    except unreadable as exc:
        return None, exc


def read_answer(args: argparse.Namespace, name: str) -> str:
    """The text of the agent's <name>; when it cannot be read, `[FAIL] <name> exists` and exit 1."""
    text, error = load_answer(args, name)
    if error is not None:
        fail("%s exists" % name)
    return text


# ---------------------------------------------------------------- verdicts


def verdict(name: str, passed: bool) -> bool:
    """Print `[PASS] name` or `[FAIL] name`; return passed, so a caller can collect results."""
    print("[%s] %s" % ("PASS" if passed else "FAIL", name))
    return passed


def exit_with(success: bool) -> NoReturn:
    """Exit 0 when success, else 1 (the bench reads only the exit code)."""
    sys.exit(0 if success else 1)


def fail(name: str) -> NoReturn:
    """`[FAIL] name` and exit 1: for a missing answer, after which no other check can run."""
    verdict(name, False)
    exit_with(False)


def report(checks: Sequence[Sequence]) -> NoReturn:
    """Print a verdict line per (name, passed, ...) check; exit 0 only when all passed."""
    for check in checks:
        verdict(check[0], check[1])
    exit_with(all(check[1] for check in checks))


def write_summary(res_log_file: str, total_passed: int, total_checks: int,
                  critical_failed: Optional[List[str]] = None) -> None:
    """Overwrite res_log_file (the dump's traj_log.json) with the checker's own summary, as many
    benchmark checkers do: total_passed and total_checks, and when critical_failed is given,
    accuracy (percent) and critical_failed too. A dump is then gradable only once."""
    summary = {"total_passed": total_passed, "total_checks": total_checks}
    if critical_failed is not None:
        summary["accuracy"] = 100.0 * total_passed / total_checks
        summary["critical_failed"] = critical_failed
    with open(res_log_file, "w") as fh:
        json.dump(summary, fh, indent=2)


def report_with_summary(res_log_file: str, checks: Sequence[Sequence]) -> NoReturn:
    """Print a verdict line per check, write the summary over res_log_file, print
    `result: success|failure (p/n checks)`, exit 0 only when every check passed.

    checks are Check or (name, passed[, critical]) tuples; there must be at least one.
    """
    checks = [Check(*check) for check in checks]
    for check in checks:
        verdict(check.name, check.passed)
    passed = sum(1 for check in checks if check.passed)
    critical_failed = [check.name for check in checks if check.critical and not check.passed]
    write_summary(res_log_file, passed, len(checks), critical_failed)
    success = passed == len(checks)
    print("result: %s (%d/%d checks)" % ("success" if success else "failure", passed, len(checks)))
    exit_with(success)
