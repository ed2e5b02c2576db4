"""Evaluation of demo-truncated-correct: summary.json must match the ground truth.

The agent writes the right answer early and then runs out of rounds, so the official status gate
declines to grade it; only the opt-in residual-state diagnostic runs this checker. Like many
benchmark checkers, it writes its own summary over the --res_log_file path.
"""

import argparse
import json
import os
import sys


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--res_log_file", required=True)
    parser.add_argument("--agent_workspace", required=True)
    parser.add_argument("--groundtruth_workspace", required=True)
    parser.add_argument("--launch_time", required=False, default="")
    return parser.parse_args()


def main():
    args = parse_args()
    with open(os.path.join(args.groundtruth_workspace, "summary.json")) as fh:
        expected = json.load(fh)
    try:
        with open(os.path.join(args.agent_workspace, "summary.json")) as fh:
            answer = json.load(fh)
    except (OSError, ValueError) as exc:
        answer = None
        print("[FAIL] summary.json is valid JSON (%s)" % exc)
    checks = []
    for key in sorted(expected):
        got = answer.get(key) if isinstance(answer, dict) else None
        ok = isinstance(got, (int, float)) and abs(got - expected[key]) < 0.005
        checks.append(ok)
        print("[%s] %s = %r (got %r)" % ("PASS" if ok else "FAIL", key, expected[key], got))
    with open(args.res_log_file, "w") as fh:
        json.dump({"total_passed": sum(checks), "total_checks": len(checks)}, fh, indent=2)
    sys.exit(0 if answer is not None and all(checks) else 1)


if __name__ == "__main__":
    main()
