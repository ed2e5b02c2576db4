"""Evaluation of demo-nop-passes: a deliberately lenient checker (the demo's nop_passes case).

It only checks that release_notes.txt, WHEN PRESENT, holds no TODO marker, so a workspace the
agent never touched passes too. `cowork-adapter qualify` must find that from the verdicts alone.
"""

import os

from utils.task_script import evaluation_args, report


def main():
    args = evaluation_args()
    path = os.path.join(args.agent_workspace, "release_notes.txt")
    text = ""
    if os.path.isfile(path):
        with open(path) as fh:
            text = fh.read()
    report([("release_notes.txt holds no TODO marker", "TODO" not in text)])


if __name__ == "__main__":
    main()
