"""Evaluation of demo-broken-sdk: quote.txt must hold the ground-truth line `ACME 42.17`.

A real agent can learn the price only from the quotes server.
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


def _line(path):
    with open(path) as fh:
        return fh.read().strip()


def main():
    args = parse_args()
    expected = _line(os.path.join(args.groundtruth_workspace, "quote.txt"))
    try:
        answer = _line(os.path.join(args.agent_workspace, "quote.txt"))
        checks = [("quote.txt is %r (got %r)" % (expected, answer), answer == expected)]
    except OSError as exc:
        checks = [("quote.txt exists (%s)" % exc, False)]
    for name, passed in checks:
        print("[PASS] %s" % name if passed else "[FAIL] %s" % name)
    passed = sum(1 for _, ok in checks if ok)
    critical_failed = [name for name, ok in checks if not ok]
    with open(args.res_log_file, "w") as fh:
        json.dump({"total_passed": passed, "total_checks": len(checks), "accuracy": 100.0 * passed / len(checks),
                   "critical_failed": critical_failed}, fh, indent=2)
    success = not critical_failed
    print("result: %s (%d/%d checks)" % ("success" if success else "failure", passed, len(checks)))
    sys.exit(0 if success else 1)


if __name__ == "__main__":
    main()
