"""Evaluation of demo-hang: status.txt must hold `ok`."""

from utils.task_script import evaluation_args, load_answer, report


def main():
    args = evaluation_args()
    text, error = load_answer(args, "status.txt")
    report([("status.txt holds ok", error is None and text.strip() == "ok")])


if __name__ == "__main__":
    main()
