"""One task's containers stopped, and only its (issue 37 deliverable 3), on the real private daemon.

A task whose dump passed a bound has its containers killed by the run's exact label and the task's
runner digest (custody/task_stop.py): its sibling's containers, a container of another run that
names the same task, and an unlabelled one with its name all keep running.
"""

from __future__ import annotations

import uuid

import docker
import pytest

from cowork_adapter.custody.bash_env import runner_digest
from cowork_adapter.custody.labels import RUN_LABEL_KEY
from cowork_adapter.custody.task_stop import stop_task_containers

IMAGE = "cowork-testbed/base:bookworm"


@pytest.fixture
def scene(docker_host: str):
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    api = client.api
    label, other = uuid.uuid4().hex, uuid.uuid4().hex
    made: dict[str, str] = {}

    def container(key: str, name: str, labels: dict[str, str]) -> None:
        made[key] = api.create_container(IMAGE, ["sleep", "120"], name=name, labels=labels)["Id"]
        api.start(made[key])

    hostile, sibling = f"hostile-{label[:6]}", f"sibling-{label[:6]}"
    try:
        container("agent", f"agent-101-{runner_digest(hostile)}", {RUN_LABEL_KEY: label})
        container("pg", f"pg-101-{runner_digest(hostile)}", {RUN_LABEL_KEY: label})
        container("sibling", f"agent-102-{runner_digest(sibling)}", {RUN_LABEL_KEY: label})
        container("other_run", f"agent-103-{runner_digest(hostile)}", {RUN_LABEL_KEY: other})
        container("unlabelled", f"agent-104-{runner_digest(hostile)}", {})
        yield api, label, hostile, made
    finally:
        for ident in made.values():
            try:
                api.remove_container(ident, force=True)
            except docker.errors.NotFound:
                pass
        client.close()


def test_only_the_tasks_own_containers_of_the_run_are_stopped(scene, docker_host):
    api, label, hostile, made = scene
    assert stop_task_containers(docker_host, label, hostile) == (2, None)
    running = {key: api.inspect_container(ident)["State"]["Running"] for key, ident in made.items()}
    assert running == {"agent": False, "pg": False, "sibling": True, "other_run": True, "unlabelled": True}
    assert stop_task_containers(docker_host, label, hostile) == (0, None)  # nothing left running: nothing to do
