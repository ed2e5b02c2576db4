"""Evaluation of demo-wrong-answer: answer.txt must hold the ground-truth integer."""

import argparse
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
    with open(os.path.join(args.groundtruth_workspace, "answer.txt")) as fh:
        expected = int(fh.read().strip())
    try:
        with open(os.path.join(args.agent_workspace, "answer.txt")) as fh:
            got = fh.read().strip()
    except OSError:
        print("[FAIL] answer.txt exists")
        sys.exit(1)
    print("[PASS] answer.txt exists")
    if got != str(expected):
        print("[FAIL] total quantity is %d (got %r)" % (expected, got))
        sys.exit(1)
    print("[PASS] total quantity is %d" % expected)


if __name__ == "__main__":
    main()
