"""The real-benchmark suite: the adapter on the pinned Cowork Bench (testbed/realbench.sh up).

Run it with `.venv/bin/python -m pytest tests/realbench` after `eval "$(bash testbed/realbench.sh up)"`;
`.ci/run` runs it beside the main suite. It is outside `testpaths` because it needs that test bed
(about 20 minutes to build from cold), not to hide it: under CI=true its absence fails. Its helpers
live beside the integration tests (tests/integration/realbench_env.py), which the real Ouroboros
test shares.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))
