"""Evaluation of demo-wrong-answer: answer.txt must hold the ground-truth integer."""

from utils.task_script import evaluation_args, read_answer, read_groundtruth, report, verdict


def main():
    args = evaluation_args()
    expected = int(read_groundtruth(args, "answer.txt").strip())
    got = read_answer(args, "answer.txt").strip()
    verdict("answer.txt exists", True)
    ok = got == str(expected)
    report([("total quantity is %d" % expected if ok else "total quantity is %d (got %r)" % (expected, got), ok)])


if __name__ == "__main__":
    main()
