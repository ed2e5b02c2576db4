"""The real-benchmark suite: the adapter on the pinned Cowork Bench (testbed/realbench.sh up).

Run it with `.venv/bin/python -m pytest tests/realbench` after `eval "$(bash testbed/realbench.sh up)"`.
It is not in the README's test command yet: it is not green (see README, "The real-benchmark test
bed"), and a failing suite in that command would stop every submission. Its helpers live beside
the integration tests (tests/integration/realbench_env.py), which the real Ouroboros test shares.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))
