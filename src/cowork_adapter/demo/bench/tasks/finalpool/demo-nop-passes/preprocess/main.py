"""Preprocess of demo-nop-passes: make sure the workspace exists and holds no stale answer."""

from utils.task_script import preprocess_answer_task

if __name__ == "__main__":
    preprocess_answer_task("release_notes.txt")
