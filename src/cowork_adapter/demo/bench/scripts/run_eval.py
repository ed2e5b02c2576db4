"""Engine-independent grader: grade one dump's traj_log.json with the benchmark evaluator.

    PYTHONPATH=/workspace python3 scripts/run_eval.py [--dumps_dir /workspace/dumps] [--log_file F]
Without --log_file it takes the first traj_log.json (sorted) under dumps_dir and warns when there
are several; with none it exits 2. Prints `Pass:` and `Details:`; exit 0 on pass, else 1.
Run from the benchmark root (the evaluator resolves tasks/ relative to it).
"""

import argparse
import asyncio
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from utils.evaluation.evaluator import TaskEvaluator  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dumps_dir", default="/workspace/dumps")
    parser.add_argument("--log_file", default=None)
    args = parser.parse_args()
    log_file = args.log_file
    if log_file is None:
        found = sorted(glob.glob(os.path.join(args.dumps_dir, "**", "traj_log.json"), recursive=True))
        if not found:
            print("no traj_log.json under %s" % args.dumps_dir)
            return 2
        if len(found) > 1:
            print("warning: %d traj_log.json files found; grading %s" % (len(found), found[0]))
        log_file = found[0]
    result = asyncio.run(TaskEvaluator.evaluate_from_log_file(log_file))
    print("Pass:    %s" % result.get("pass"))
    print("Details: %s" % (result.get("details") or result.get("failure")))
    return 0 if result.get("pass") is True else 1


if __name__ == "__main__":
    sys.exit(main())
