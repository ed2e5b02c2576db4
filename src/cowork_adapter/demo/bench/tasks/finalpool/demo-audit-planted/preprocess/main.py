"""Preprocess of demo-audit-planted: make sure the workspace exists and holds no stale answer."""

import argparse
import os


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent_workspace", required=True)
    parser.add_argument("--launch_time", required=False, default="")
    return parser.parse_args()


def main():
    args = parse_args()
    os.makedirs(args.agent_workspace, exist_ok=True)
    path = os.path.join(args.agent_workspace, "open_count.txt")
    if os.path.exists(path):
        os.remove(path)
    print("preprocess: workspace ready at %s (launch %s)" % (args.agent_workspace, args.launch_time))


if __name__ == "__main__":
    main()
