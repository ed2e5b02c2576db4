"""`python -m cowork_adapter.docsgen [--check] [REPO]`: write docs/reference.md, or (--check) exit 1 when
the page in REPO (default: the current folder) differs from what the code makes now."""

from __future__ import annotations

import sys
from pathlib import Path

from .reference import PAGE, REGENERATE, render, write


def main(argv: list[str]) -> int:
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    root = Path(rest[0]) if rest else Path.cwd()
    if check:
        path = root / PAGE
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != render():
            print(
                f"{path} differs from the command line and the vocabularies; regenerate it: {REGENERATE}",
                file=sys.stderr,
            )
            return 1
        return 0
    print(write(root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
