"""Evaluation of demo-deck-stateful: the saved deck must be complete and built by ONE server process.

The deck server records its process id on every call; several ids mean the client started a
fresh server for some call, which a stateful server cannot survive.
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
    with open(os.path.join(args.groundtruth_workspace, "expected_deck.json")) as fh:
        expected = json.load(fh)
    path = os.path.join(args.agent_workspace, expected["filename"])
    try:
        with open(path) as fh:
            deck = json.load(fh)
    except (OSError, ValueError) as exc:
        print("[FAIL] %s is a saved deck (%s)" % (expected["filename"], exc))
        sys.exit(1)
    headings = [slide.get("heading") for slide in deck.get("slides", [])]
    served_by = deck.get("served_by", [])
    checks = [
        ("title is %r" % expected["title"], deck.get("title") == expected["title"]),
        ("slides are %s (got %s)" % (expected["headings"], headings), headings == expected["headings"]),
        ("every slide has a body", all(slide.get("body") for slide in deck.get("slides", []))),
        ("one server process served all %d calls (pids %s)" % (len(served_by), sorted(set(served_by))),
         len(served_by) == len(expected["headings"]) + 2 and len(set(served_by)) == 1),
    ]
    for name, ok in checks:
        print("[%s] %s" % ("PASS" if ok else "FAIL", name))
    sys.exit(0 if all(ok for _, ok in checks) else 1)


if __name__ == "__main__":
    main()
