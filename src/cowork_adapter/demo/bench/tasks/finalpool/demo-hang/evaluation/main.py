"""Evaluation of demo-hang: status.txt must hold `ok`."""

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
        with open(os.path.join(args.agent_workspace, "status.txt")) as fh:
            ok = fh.read().strip() == "ok"
    except OSError:
        ok = False
    print("[%s] status.txt holds ok" % ("PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
