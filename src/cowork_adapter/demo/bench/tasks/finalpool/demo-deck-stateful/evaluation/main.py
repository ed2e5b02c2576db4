"""Evaluation of demo-deck-stateful: the saved deck must be complete and built by ONE server process.

The deck server records its process id on every call; several ids mean the client started a
fresh server for some call, which a stateful server cannot survive.
"""

import json

from utils.task_script import evaluation_args, fail, load_answer, read_groundtruth, report


def main():
    args = evaluation_args()
    expected = json.loads(read_groundtruth(args, "expected_deck.json"))
    deck, error = load_answer(args, expected["filename"], json.loads)
    if error is not None:
        fail("%s is a saved deck (%s)" % (expected["filename"], error))
    headings = [slide.get("heading") for slide in deck.get("slides", [])]
    served_by = deck.get("served_by", [])
    report([
        ("title is %r" % expected["title"], deck.get("title") == expected["title"]),
        ("slides are %s (got %s)" % (expected["headings"], headings), headings == expected["headings"]),
        ("every slide has a body", all(slide.get("body") for slide in deck.get("slides", []))),
        ("one server process served all %d calls (pids %s)" % (len(served_by), sorted(set(served_by))),
         len(served_by) == len(expected["headings"]) + 2 and len(set(served_by)) == 1),
    ])


if __name__ == "__main__":
    main()
