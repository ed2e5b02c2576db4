"""The container entrypoint: flags, then the agent / eval / all / inventory / stateful phase.

Runs under the benchmark's interpreter with cwd /workspace. Unknown flags never stop it (an
argparse exit would be an AGENT_FAIL for the runner); they are recorded in the summary.
"""

from __future__ import annotations

import argparse

from .vocab import Phase

DEFAULT_PROBE_OUTPUT = "/opt/cowork-runtime/probes"


def parse_args(argv: list | None = None) -> tuple[argparse.Namespace, list]:
    parser = argparse.ArgumentParser(prog="cowork_entry.py", add_help=False)
    parser.add_argument("--task_dir", default="")
    parser.add_argument("--max_steps", default="100")
    parser.add_argument("--phase", default=Phase.ALL.value)
    parser.add_argument("--probe-output", dest="probe_output", default=DEFAULT_PROBE_OUTPUT)
    # Accepted for compatibility with the benchmark's runners, and ignored.
    parser.add_argument("--eval_config")
    parser.add_argument("--model_name")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--cn_mode", action="store_true")
    return parser.parse_known_args(argv)


def main(argv: list | None = None) -> int:
    args, unknown = parse_args(argv)
    try:
        max_steps = int(args.max_steps)
    except ValueError:
        max_steps = 100
        unknown.append(f"--max_steps={args.max_steps}")
    phase = args.phase
    if phase not in Phase.values():
        print(f"[cowork] unknown phase {phase!r}; expected one of {', '.join(Phase.values())}", flush=True)
        return 2
    if phase == Phase.AGENT.value:
        from .agent import run_agent

        return run_agent(args.task_dir, max_steps, unknown)
    if phase == Phase.EVAL.value:
        from .evalphase import run_eval

        return run_eval(args.task_dir)
    if phase == Phase.ALL.value:
        from .agent import run_agent
        from .evalphase import run_eval

        run_agent(args.task_dir, max_steps, unknown)
        return run_eval(args.task_dir)
    from .probes import run_inventory, run_stateful

    if phase == Phase.INVENTORY.value:
        return run_inventory(args.task_dir, args.probe_output)
    return run_stateful(args.task_dir, args.probe_output)
