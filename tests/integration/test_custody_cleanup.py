"""Exact-label cleanup against the real private daemon: the run's resources go, bystanders stay."""

from __future__ import annotations

import threading
import uuid

import docker
import pytest

from cowork_adapter.custody import docker_ops
from cowork_adapter.custody.docker_ops import (
    cleanup_run,
    custody_gap,
    image_identity,
    label_is_empty,
    list_labelled,
)
from cowork_adapter.custody.labels import RUN_LABEL_KEY
from cowork_adapter.errors import CustodyError, Refusal

IMAGE = "cowork-testbed/base:bookworm"
DEAD_HOSTS = ["unix:///nonexistent/cowork-no-daemon.sock", "tcp://127.0.0.1:1"]


@pytest.fixture
def scene(docker_host: str):
    """A run (label L, task id X) with two containers on its network, and bystanders that share
    its id in their names or carry a label value that is close to L but not L."""
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    api = client.api
    ident = "ctclean" + uuid.uuid4().hex[:8]
    label = uuid.uuid4().hex  # 32 hex like a real run label
    near = label[:-1] + ("0" if label[-1] != "0" else "1")
    made_containers: list[str] = []
    made_networks: list[str] = []

    def network(name, labels=None):
        net = api.create_network(name, labels=labels or {})
        made_networks.append(net["Id"])
        return net["Id"]

    def container(name, labels=None, net=None):
        host_config = api.create_host_config(network_mode=net) if net else None
        made = api.create_container(IMAGE, ["sleep", "60"], name=name, labels=labels or {}, host_config=host_config)
        made_containers.append(made["Id"])
        api.start(made["Id"])
        return made["Id"]

    try:
        run_net = network(f"net-{ident}-run", {RUN_LABEL_KEY: label})
        run = {
            "pg": container(f"pg-{ident}", {RUN_LABEL_KEY: label}, f"net-{ident}-run"),
            "eval": container(f"eval-{ident}", {RUN_LABEL_KEY: label}, f"net-{ident}-run"),
        }
        bystanders = {
            "agent_unlabelled": container(f"agent-{ident}"),
            "near_label": container(f"helper-{ident}", {RUN_LABEL_KEY: near}),
            "longer_label": container(f"agent-{ident}-x", {RUN_LABEL_KEY: label + "0"}),
        }
        bystander_nets = {
            "net_unlabelled": network(f"net-{ident}"),
            "net_near": network(f"net-{ident}-near", {RUN_LABEL_KEY: near}),
        }
        yield {
            "host": docker_host,
            "api": api,
            "id": ident,
            "label": label,
            "run": run,
            "run_net": run_net,
            "bystanders": bystanders,
            "bystander_nets": bystander_nets,
        }
    finally:
        for cid in made_containers:
            try:
                api.remove_container(cid, force=True, v=True)
            except docker.errors.NotFound:
                pass
        for nid in made_networks:
            try:
                api.remove_network(nid)
            except docker.errors.NotFound:
                pass
        client.close()


def exists_container(api, cid: str) -> bool:
    try:
        api.inspect_container(cid)
        return True
    except docker.errors.NotFound:
        return False


def exists_network(api, nid: str) -> bool:
    try:
        api.inspect_network(nid)
        return True
    except docker.errors.NotFound:
        return False


def test_cleanup_removes_exactly_the_labelled_resources(scene):
    host, label, api = scene["host"], scene["label"], scene["api"]
    listed = list_labelled(host, label)
    assert sorted(i for i, _ in listed.containers) == sorted(scene["run"].values())
    assert [i for i, _ in listed.networks] == [scene["run_net"]]
    assert label_is_empty(host, label) is False

    logged: list[dict] = []
    report = cleanup_run(host, label, logged.append)

    assert sorted(n for _, n in report.removed_containers) == sorted([f"pg-{scene['id']}", f"eval-{scene['id']}"])
    assert [n for _, n in report.removed_networks] == [f"net-{scene['id']}-run"]
    assert report.errors == [] and logged == [] and report.already_gone == 0
    assert label_is_empty(host, label) is True
    assert not any(exists_container(api, cid) for cid in scene["run"].values())
    assert all(exists_container(api, cid) for cid in scene["bystanders"].values())
    assert all(exists_network(api, nid) for nid in scene["bystander_nets"].values())
    assert not exists_network(api, scene["run_net"])


def test_competing_removal_ends_clean_and_is_logged(scene, monkeypatch):
    host, label, api = scene["host"], scene["label"], scene["api"]
    original = docker_ops._remove_container
    raced: list[str] = []
    first = threading.Lock()  # the containers are removed in parallel: exactly one loses the race

    def competing_then_ours(client_api, ident):
        with first:
            lose = not raced
            if lose:
                raced.append(ident)
        if lose:  # another cleanup wins the race for this container
            api.remove_container(ident, force=True, v=True)
        original(client_api, ident)

    monkeypatch.setattr(docker_ops, "_remove_container", competing_then_ours)
    logged: list[dict] = []
    report = cleanup_run(host, label, logged.append)

    assert report.already_gone == 1
    assert [(e["event"], e["outcome"], e["id"]) for e in logged] == [("cleanup_remove", "not_found", raced[0])]
    assert report.errors == logged
    assert label_is_empty(host, label)
    assert all(exists_container(api, cid) for cid in scene["bystanders"].values())


def test_a_survivor_raises_custody_error_naming_it(scene, monkeypatch):
    host, label = scene["host"], scene["label"]
    survivor = f"pg-{scene['id']}"
    original = docker_ops._remove_container

    def refuse_pg(client_api, ident):
        if ident == scene["run"]["pg"]:
            raise docker.errors.APIError("simulated removal failure")
        original(client_api, ident)

    monkeypatch.setattr(docker_ops, "_remove_container", refuse_pg)
    logged: list[dict] = []
    with pytest.raises(CustodyError, match=survivor):
        cleanup_run(host, label, logged.append)
    events = [(e["event"], e.get("outcome"), e.get("name")) for e in logged]
    assert ("cleanup_remove", "failed", survivor) in events
    # pg still holds the run network, so its removal fails too and is logged as well.
    assert ("cleanup_remove", "failed", f"net-{scene['id']}-run") in events
    assert events[-1][0] == "cleanup_remaining"
    assert not exists_container(scene["api"], scene["run"]["eval"])


def test_a_failed_relist_is_unknown_and_raises(scene, monkeypatch):
    original = docker_ops._list
    calls: list[int] = []

    def relist_fails(api, run_label, **kinds):
        calls.append(1)
        if len(calls) > 1:
            raise CustodyError("simulated listing failure")
        return original(api, run_label, **kinds)

    monkeypatch.setattr(docker_ops, "_list", relist_fails)
    logged: list[dict] = []
    with pytest.raises(CustodyError, match="cannot verify custody"):
        cleanup_run(scene["host"], scene["label"], logged.append)
    assert logged[-1]["event"] == "cleanup_relist_failed"


@pytest.mark.parametrize("dead_host", DEAD_HOSTS)
def test_a_daemon_that_does_not_answer_is_custody_error_never_empty(dead_host):
    label = uuid.uuid4().hex
    with pytest.raises(CustodyError):
        list_labelled(dead_host, label, timeout=5)
    with pytest.raises(CustodyError):
        label_is_empty(dead_host, label, timeout=5)
    with pytest.raises(CustodyError):
        cleanup_run(dead_host, label, lambda record: None, timeout=5)


def test_image_identity(docker_host):
    image_id, labels, digests = image_identity(docker_host, IMAGE)
    assert image_id.startswith("sha256:") and len(image_id) == 71
    assert isinstance(labels, dict) and isinstance(digests, list)
    # The immutable Id names the same image.
    assert image_identity(docker_host, image_id)[0] == image_id
    with pytest.raises(Refusal) as caught:
        image_identity(docker_host, "cowork-testbed/absent-" + uuid.uuid4().hex[:8] + ":none")
    assert caught.value.stage == "image"
    with pytest.raises(Refusal) as caught:
        image_identity(DEAD_HOSTS[0], IMAGE, timeout=5)
    assert caught.value.stage == "image"


def test_custody_gap_flags_runner_named_resources_without_the_label(docker_host):
    client = docker.DockerClient(base_url=docker_host, timeout=60)
    pid = 900000 + uuid.uuid4().int % 90000  # beyond pid_max defaults: no real runner has it
    label = uuid.uuid4().hex
    suffix = uuid.uuid4().hex[:8]
    made = []
    try:
        labelled = client.api.create_container(
            IMAGE, ["true"], name=f"agent-{pid}-{suffix}", labels={RUN_LABEL_KEY: label}
        )
        made.append(labelled["Id"])
        assert not custody_gap(docker_host, label, pid).breached
        loose = client.api.create_container(IMAGE, ["true"], name=f"eval-{pid}-{suffix}")
        made.append(loose["Id"])
        gap = custody_gap(docker_host, label, pid)
        assert gap.breached and gap.unlabelled_runner_containers == [(loose["Id"], f"eval-{pid}-{suffix}")]
    finally:
        for cid in made:
            client.api.remove_container(cid, force=True, v=True)
        client.close()
