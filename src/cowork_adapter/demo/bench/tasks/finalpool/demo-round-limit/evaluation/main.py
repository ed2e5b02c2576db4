"""Evaluation of demo-round-limit: index.txt must list every report under archive/."""

from utils.task_script import evaluation_args, read_answer, read_groundtruth, report


def _entries(text):
    # Split on "\n" like iterating the file (text mode has already folded \r\n and \r into \n).
    return sorted(line.strip() for line in text.split("\n") if line.strip())


def main():
    args = evaluation_args()
    expected = _entries(read_groundtruth(args, "index.txt"))
    got = _entries(read_answer(args, "index.txt"))
    report([("index lists %d reports (got %d)" % (len(expected), len(got)), got == expected)])


if __name__ == "__main__":
    main()
