"""A removal the daemon is already running (409 "already in progress") is a competing cleanup:
it is classified as such and waited for, never counted as a failure; the relist still judges."""

from __future__ import annotations

import fcntl
import os
import threading
import time

import requests
from docker.errors import APIError, NotFound

from cowork_adapter.custody import docker_ops
from cowork_adapter.custody.labels import RUN_LABEL_KEY
from cowork_adapter.demo.env import wait_for


def _api_error(status: int, text: str) -> APIError:
    response = requests.Response()
    response.status_code = status
    return APIError(text, response=response, explanation=text)


def test_a_removal_already_in_progress_is_not_a_failure():
    def remove(_api, _ident):
        raise _api_error(409, "removal of container abc is already in progress")

    record = docker_ops._attempt(remove, None, "container", "abc", "pg-1-deadbeef")
    assert record["outcome"] == "in_progress"


def test_another_conflict_is_still_a_failure():
    def remove(_api, _ident):
        raise _api_error(409, "container abc is paused")

    assert docker_ops._attempt(remove, None, "container", "abc", "pg-1-deadbeef")["outcome"] == "failed"


class SlowRemoval:
    """inspect_container finds the container for `rounds` calls, then it is gone."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.calls = 0

    def inspect_container(self, ident):
        self.calls += 1
        if self.calls > self.rounds:
            raise NotFound("gone")
        return {"Id": ident}


def test_waits_until_the_competing_removal_is_done():
    api = SlowRemoval(rounds=2)
    docker_ops._await_removals(api, ["abc"], timeout=10)
    assert api.calls == 3  # seen twice, then gone: no more waiting


def test_the_wait_is_bounded():
    api = SlowRemoval(rounds=10**6)
    docker_ops._await_removals(api, ["abc"], timeout=0.2)
    assert 1 <= api.calls <= 3


class ParallelDaemon:
    """docker-py's APIClient as far as a removal pass uses it; a forced container removal takes
    `delay` s (the daemon kills the container first)."""

    def __init__(self, label: str, containers: int, delay: float, meet: threading.Barrier | None = None) -> None:
        self.label, self.delay, self.lock, self.log = label, delay, threading.Lock(), []
        # `meet`: every removal waits there for the others, so a pass that removes one after the other
        # breaks it (the removal raises) instead of merely taking longer: no wall-time bound to judge.
        self.meet = meet
        self.made = {
            f"c{i}": {"Id": f"c{i}", "Names": [f"/agent-{i}"], "Labels": {RUN_LABEL_KEY: label}}
            for i in range(containers)
        }
        self.nets = {"n0": {"Id": "n0", "Name": "net-0", "Labels": {RUN_LABEL_KEY: label}}}
        self.removed_at: dict[str, float] = {}

    def land(self, ident: str) -> None:
        """A container an in-flight creation made appears on the daemon."""
        with self.lock:
            self.made[ident] = {"Id": ident, "Names": [f"/agent-{ident}"], "Labels": {RUN_LABEL_KEY: self.label}}

    def containers(self, all, filters):  # noqa: A002 - docker-py's own keyword
        with self.lock:
            self.log.append(("list", "containers"))
            return list(self.made.values())

    def networks(self, filters):
        with self.lock:
            self.log.append(("list", "networks"))
            return list(self.nets.values())

    def volumes(self, filters):
        with self.lock:
            self.log.append(("list", "volumes"))
        return {"Volumes": []}

    def remove_container(self, ident, v, force):
        if self.meet is not None:
            self.meet.wait(timeout=60)  # a hang guard: removals one after the other break the barrier
        time.sleep(self.delay)
        with self.lock:
            self.log.append(("rm", ident))
            self.removed_at[ident] = time.monotonic()
            del self.made[ident]

    def remove_network(self, ident):
        with self.lock:
            assert not self.made, "a network is removed only after every container"
            self.log.append(("net", ident))
            del self.nets[ident]


def test_a_removal_pass_removes_the_containers_in_parallel_each_read_first():
    label = "a" * 32
    # All 8 removals must be in flight at once to pass the barrier (one after the other, the first
    # waits alone until the barrier breaks and its removal fails).
    daemon = ParallelDaemon(label, containers=8, delay=0.0, meet=threading.Barrier(8))
    read: list[str] = []

    def before_remove(_api, ident, _name):
        with daemon.lock:
            read.append(ident)
            assert ("rm", ident) not in daemon.log  # the reading comes before its removal

    removed = {"container": [], "network": [], "volume": []}
    errors: list = []
    gone = docker_ops._remove_pass(daemon, label, lambda entry: None, before_remove, errors, removed)
    assert gone == 0 and errors == []
    assert sorted(i for i, _ in removed["container"]) == sorted(f"c{i}" for i in range(8))
    assert removed["network"] == [("n0", "net-0")] and daemon.log[-1] == ("net", "n0")
    assert sorted(read) == sorted(f"c{i}" for i in range(8))
    assert not daemon.meet.broken  # all 8 met: they were removed in parallel


def test_a_pass_removes_the_containers_after_one_listing_and_lists_networks_and_volumes_after():
    """The containers' removals wait for no more than their own listing: the networks' and volumes'
    listings (more round trips to a loaded daemon) come once the containers are gone."""
    label = "b" * 32
    daemon = ParallelDaemon(label, containers=4, delay=0.05)
    removed = {"container": [], "network": [], "volume": []}
    docker_ops._remove_pass(daemon, label, lambda entry: None, None, [], removed)
    assert daemon.log[0] == ("list", "containers")
    assert [kind for kind, _ in daemon.log[1:5]] == ["rm"] * 4
    assert daemon.log[5:] == [("list", "networks"), ("list", "volumes"), ("net", "n0")]


class FakeClient:
    def __init__(self, api) -> None:
        self.api = api

    def close(self) -> None:
        pass


def test_a_container_landing_while_its_creation_is_in_flight_is_removed_at_once_and_the_proof_waits(
    tmp_path, monkeypatch
):
    """An admitted creation still holds its lock (a `docker run` waiting for its answer) when the
    stop's first pass lists: what it makes is removed within a short round of landing, not after
    the creation has ended, and the proof still waits for the lock."""
    label = "c" * 32
    daemon = ParallelDaemon(label, containers=2, delay=0.05)
    monkeypatch.setattr(docker_ops, "client", lambda host, timeout: FakeClient(daemon))
    creations = tmp_path / "creations"
    creations.mkdir()
    lock_path = creations / "99-abc.lock"
    fd = os.open(lock_path, os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the in-flight creation's lock (another open file: it conflicts)
    outcome: dict = {}

    def stop() -> None:
        try:
            outcome["report"] = docker_ops.cleanup_run(
                "unix:///fake", label, lambda entry: None, creations=creations, creation_wait_sec=20
            )
        except Exception as exc:  # noqa: BLE001 - the assertion below names it
            outcome["error"] = exc
        outcome["returned"] = time.monotonic()

    worker = threading.Thread(target=stop)
    worker.start()
    # The first pass has removed what it listed: the stop now waits on the creation's lock.
    assert wait_for(lambda: {"c0", "c1"} <= daemon.removed_at.keys(), timeout=30, step=0.02), daemon.log
    daemon.land("late")
    # Removed while the creation still holds its lock (not after it ended): the event itself, no
    # bound in seconds; the timeout only turns a hang into a failure.
    assert wait_for(lambda: "late" in daemon.removed_at, timeout=30, step=0.02), daemon.removed_at
    assert "returned" not in outcome  # the lock is still held: nothing is proven yet
    released = time.monotonic()
    os.unlink(lock_path)  # the creation ends as the shim ends one: its file removed, its lock closed
    os.close(fd)
    worker.join(10)
    assert "error" not in outcome, outcome
    assert outcome["returned"] >= released
    assert sorted(i for i, _ in outcome["report"].removed_containers) == ["c0", "c1", "late"]
