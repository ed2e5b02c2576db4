"""What the supervisor and a task's worker thread share: the server's log line, the fault exits of
the test hooks, and one task's live state."""

from __future__ import annotations

import os
import sys
import threading
from typing import Protocol

from .logs import JsonlLogs
from .store import ResultStore

FAULT_EXIT_CODE = 86  # exit status of the STUB_EXIT_* faults, distinct from a crash


def say(message: str) -> None:
    """Server log line on stdout (the client captures it as ouroboros_server.log)."""
    print(f"[stub-ouroboros] {message}", flush=True)


def fault_exit(message: str) -> None:
    say(f"FAULT: {message}; exiting with {FAULT_EXIT_CODE}")
    sys.stderr.flush()
    os._exit(FAULT_EXIT_CODE)


class TaskControl:
    """Per-task live state shared by the worker thread, cancel requests and the settler."""

    def __init__(self, workspace_before):
        self.stop = threading.Event()  # wakes the worker: cancel or finalize_then_cancel
        self.stop_policy = "cancel"
        self.workspace_before = workspace_before
        self.spent_usd = 0.0
        self.usage_rows = 0


class WorkerHost(Protocol):
    """What a task's worker uses of the supervisor that started it (supervisor.Supervisor)."""

    logs: JsonlLogs
    store: ResultStore
    slots: threading.Semaphore

    def spent_usd(self) -> float: ...

    def cost_now(self, control: TaskControl, final: bool) -> dict: ...

    def finish(self, task_id: str, reason_code: str, *, result: str = "", final_answer: str = "") -> bool: ...

    def chat_row(self, record: dict, direction: str, text: str) -> dict: ...
