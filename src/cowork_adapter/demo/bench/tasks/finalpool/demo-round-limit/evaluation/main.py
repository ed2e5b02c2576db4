"""Evaluation of demo-round-limit: index.txt must list every report under archive/."""

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
    with open(os.path.join(args.groundtruth_workspace, "index.txt")) as fh:
        expected = sorted(line.strip() for line in fh if line.strip())
    try:
        with open(os.path.join(args.agent_workspace, "index.txt")) as fh:
            got = sorted(line.strip() for line in fh if line.strip())
    except OSError:
        print("[FAIL] index.txt exists")
        sys.exit(1)
    ok = got == expected
    print("[%s] index lists %d reports (got %d)" % ("PASS" if ok else "FAIL", len(expected), len(got)))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
