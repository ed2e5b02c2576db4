"""A removal the daemon is already running (409 "already in progress") is a competing cleanup:
it is classified as such and waited for, never counted as a failure; the relist still judges."""

from __future__ import annotations

import requests
from docker.errors import APIError, NotFound

from cowork_adapter.custody import docker_ops


def _api_error(status: int, text: str) -> APIError:
    response = requests.Response()
    response.status_code = status
    return APIError(text, response=response, explanation=text)


def test_a_removal_already_in_progress_is_not_a_failure():
    def remove(_api, _ident):
        raise _api_error(409, 'removal of container abc is already in progress')

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
