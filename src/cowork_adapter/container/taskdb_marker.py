"""The agent phase's half of the task database baseline (issue 36; the host's half is
custody/taskdb_probe.py, whose names these mirror: this package cannot import the shim's).

After preprocess and before anything of the agent runs, the agent phase writes MARKER_NAME in the
task dump and waits, bounded, for the host's ACK_NAME: meanwhile the host reads the task's
PostgreSQL as preprocess left it. Only when the exec carries ACK_ENV (the run's docker shim sets
it) does it wait at all; a late or missing acknowledgement never fails the task here (the host
records the baseline as late, and the ledger cannot clear that task's database).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

MARKER_NAME = ".cowork_taskdb_prepared"
ACK_NAME = ".cowork_taskdb_ack"
ACK_ENV = "COWORK_TASKDB_ACK"
ACK_WAIT_SEC = 90.0
POLL_SEC = 0.1


def prepared(task_root: str, when: str, env: Mapping[str, str], wait_sec: float = ACK_WAIT_SEC) -> str:
    """Mark the database prepared (`when`: after_preprocess | before_preprocess) and wait for the
    host's acknowledgement; returns acknowledged | not_asked | timeout | unwritable."""
    if env.get(ACK_ENV) != "1":
        return "not_asked"
    marker = os.path.join(task_root, MARKER_NAME)
    try:
        fd = os.open(marker + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, when.encode("ascii"))
        finally:
            os.close(fd)
        os.replace(marker + ".tmp", marker)  # whole: the host never reads a half-written marker
    except OSError:
        return "unwritable"
    deadline = time.monotonic() + wait_sec
    ack = os.path.join(task_root, ACK_NAME)
    while time.monotonic() < deadline:
        if os.path.lexists(ack):
            return "acknowledged"
        time.sleep(POLL_SEC)  # a poll of the host's answer, bounded by the deadline
    return "timeout"
