"""Evaluation of demo-broken-sdk: quote.txt must hold the ground-truth line `ACME 42.17`.

A real agent can learn the price only from the quotes server.
"""

from utils.task_script import evaluation_args, load_answer, read_groundtruth, report_with_summary


def main():
    args = evaluation_args()
    expected = read_groundtruth(args, "quote.txt").strip()
    answer, error = load_answer(args, "quote.txt")
    if error is None:
        answer = answer.strip()
        check = ("quote.txt is %r (got %r)" % (expected, answer), answer == expected)
    else:
        check = ("quote.txt exists (%s)" % error, False)
    report_with_summary(args.res_log_file, [check])


if __name__ == "__main__":
    main()
