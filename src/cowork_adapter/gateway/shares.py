"""Fair shares of the model gateway: connections per peer address, connections and requests in
flight per task (token), so that no one agent can take the gateway from its siblings. Pure logic
under one lock; the server asks and releases.

Why per peer and per task: every run peer (an agent container, and the task's own PostgreSQL
container, which an agent can drive) may connect, and the token is known only once a request's
headers are read. So a connection is first counted against its peer address on accept, then, once
it shows a token, against that task:

- the global bound (`max_connections`) is never reachable by one peer: a peer holds at most
  `per_peer` connections, and once fewer than `headroom` slots are free only a peer holding fewer
  than `guaranteed` connections gets one. So with the defaults (512 / 32 / 128 / 4) one peer holds
  at most 32, twelve greedy peers at most 384, and 32 more peers still get 4 connections each;
- a task holds at most `per_task` connections (from any of its peers) and has at most
  `per_task_in_flight` requests being answered at once (a request over it is refused with 429
  `task_busy`, its connection closed); its siblings' shares do not move.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

MAX_CONNECTIONS = 512
PER_PEER_CONNECTIONS = 32
HEADROOM_CONNECTIONS = 128
GUARANTEED_CONNECTIONS = 4
PER_TASK_CONNECTIONS = 48
PER_TASK_IN_FLIGHT = 8

# Why a connection or request was not given a share (the refusal log's causes, vocab-like).
FULL = "full"  # the global bound (reached only when many peers each hold their share)
PEER_SHARE = "peer_share"
TASK_CONNECTIONS = "task_connections"
TASK_BUSY = "task_busy"


@dataclass(frozen=True)
class Limits:
    max_connections: int = MAX_CONNECTIONS
    per_peer: int = PER_PEER_CONNECTIONS
    headroom: int = HEADROOM_CONNECTIONS
    guaranteed: int = GUARANTEED_CONNECTIONS
    per_task: int = PER_TASK_CONNECTIONS
    per_task_in_flight: int = PER_TASK_IN_FLIGHT

    def __post_init__(self) -> None:
        if not 0 < self.guaranteed <= self.per_peer < self.max_connections:
            raise ValueError("shares need 0 < guaranteed <= per_peer < max_connections")
        if not 0 <= self.headroom < self.max_connections:
            raise ValueError("headroom must be below max_connections")


class Shares:
    """Counts of connections per peer and per task, and requests in flight per task."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._lock = threading.Lock()
        self.total = 0
        self.peers: Counter[str] = Counter()
        self.tasks: Counter[str] = Counter()
        self.in_flight: Counter[str] = Counter()

    def connect(self, peer: str) -> str | None:
        """Take a connection slot for `peer`; None when taken, else why it is refused."""
        limits = self.limits
        with self._lock:
            held = self.peers[peer]
            if self.total >= limits.max_connections:
                return FULL
            if held >= limits.per_peer:
                return PEER_SHARE
            if held >= limits.guaranteed and limits.max_connections - self.total <= limits.headroom:
                return PEER_SHARE  # the last slots are kept for peers holding few
            self.total += 1
            self.peers[peer] = held + 1
            return None

    def disconnect(self, peer: str, task: str | None) -> None:
        with self._lock:
            self.total -= 1
            _drop(self.peers, peer)
            if task is not None:
                _drop(self.tasks, task)

    def bind(self, task: str) -> bool:
        """Count a connection (its first request with `task`'s token) against the task; False: over."""
        with self._lock:
            if self.tasks[task] >= self.limits.per_task:
                return False
            self.tasks[task] += 1
            return True

    def begin(self, task: str) -> bool:
        """One more request of `task` being answered; False (nothing taken) when it has its share."""
        with self._lock:
            if self.in_flight[task] >= self.limits.per_task_in_flight:
                return False
            self.in_flight[task] += 1
            return True

    def end(self, task: str) -> None:
        with self._lock:
            _drop(self.in_flight, task)


def _drop(counts: Counter[str], key: str) -> None:
    if counts[key] <= 1:
        counts.pop(key, None)
    else:
        counts[key] -= 1
