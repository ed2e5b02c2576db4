"""One follower of the daemon's create events for the tests that judge what a run created.

Each created container or network is inspected the moment its event arrives, each inspection in a
pool thread of its own: a slow answer from a loaded daemon does not hold back the next one, so even
the runner's short-lived helpers (`docker run --rm IMAGE true`, the FK-fix helper) are seen with
their labels and HostConfig while they live. An object removed before it could be inspected keeps
"inspect": None, for the caller to judge.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import docker

# Inspections at once: more than a runner creates in one burst (network, pg, agent, helpers of two
# tasks), within docker-py's pool of 10 connections per client.
INSPECTORS = 8


class CreationWatcher:
    """`seen`, once closed: {"type", "id", "attrs" (the event's, labels included), "time_nano",
    "inspect" or None} per create event, in the daemon's order."""

    def __init__(
        self, docker_host: str, *, types: tuple[str, ...] = ("container", "network"), label_key: str | None = None
    ) -> None:
        self._events = docker.DockerClient(base_url=docker_host, timeout=60)
        self._inspector = docker.DockerClient(base_url=docker_host, timeout=60)
        filters = {"type": list(types), "event": ["create"]}
        if label_key:
            filters["label"] = [label_key]
        self._stream = self._events.events(decode=True, filters=filters)
        self._pool = ThreadPoolExecutor(max_workers=INSPECTORS, thread_name_prefix="creation-inspect")
        self._items: list[tuple[dict, Future]] = []
        self._thread = threading.Thread(target=self._follow, name="creation-watcher", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        try:
            for event in self._stream:
                actor = event.get("Actor") or {}
                item = {
                    "type": event.get("Type"),
                    "id": actor.get("ID") or event.get("id"),
                    "attrs": actor.get("Attributes") or {},
                    "time_nano": event.get("timeNano"),
                }
                self._items.append((item, self._pool.submit(self._inspect, item["type"], item["id"])))
        except Exception:  # noqa: BLE001 - the stream ends when close() is called
            return

    def _inspect(self, kind: str, ident: str) -> dict | None:
        try:
            if kind == "container":
                return self._inspector.api.inspect_container(ident)
            return self._inspector.api.inspect_network(ident)
        except docker.errors.NotFound:
            return None

    def close(self) -> None:
        """Stop following; the inspections already started finish (`seen` is then complete)."""
        self._stream.close()
        self._thread.join(timeout=10)
        self._pool.shutdown(wait=True)
        self._events.close()
        self._inspector.close()

    @property
    def seen(self) -> list[dict]:
        return [dict(item, inspect=future.result()) for item, future in self._items]
