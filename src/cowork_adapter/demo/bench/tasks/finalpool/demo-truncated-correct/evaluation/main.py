"""Evaluation of demo-truncated-correct: summary.json must match the ground truth.

The agent writes the right answer early and then runs out of rounds, so the official status gate
declines to grade it; only the opt-in residual-state diagnostic runs this checker. Like many
benchmark checkers, it writes its own summary over the --res_log_file path.
"""

import json

from utils.task_script import evaluation_args, exit_with, load_answer, read_groundtruth, verdict, write_summary


def main():
    args = evaluation_args()
    expected = json.loads(read_groundtruth(args, "summary.json"))
    answer, error = load_answer(args, "summary.json", json.loads)
    if error is not None:
        verdict("summary.json is valid JSON (%s)" % error, False)
    checks = []
    for key in sorted(expected):
        got = answer.get(key) if isinstance(answer, dict) else None
        ok = isinstance(got, (int, float)) and abs(got - expected[key]) < 0.005
        checks.append(verdict("%s = %r (got %r)" % (key, expected[key], got), ok))
    write_summary(args.res_log_file, sum(checks), len(checks))
    exit_with(answer is not None and all(checks))


if __name__ == "__main__":
    main()
