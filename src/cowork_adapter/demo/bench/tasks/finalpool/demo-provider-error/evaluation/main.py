"""Evaluation of demo-provider-error: summary.txt must exist and mention the project name."""

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
    try:
        with open(os.path.join(args.agent_workspace, "summary.txt")) as fh:
            text = fh.read()
    except OSError:
        print("[FAIL] summary.txt exists")
        sys.exit(1)
    ok = "Lighthouse" in text
    print("[%s] summary names the project" % ("PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
