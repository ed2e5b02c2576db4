"""Evaluation of demo-provider-error: summary.txt must exist and mention the project name."""

from utils.task_script import evaluation_args, read_answer, report


def main():
    args = evaluation_args()
    text = read_answer(args, "summary.txt")
    report([("summary names the project", "Lighthouse" in text)])


if __name__ == "__main__":
    main()
