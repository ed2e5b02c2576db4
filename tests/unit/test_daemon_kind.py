"""The daemon's kind and limits from recorded `docker info` answers, and the route checks built on them.

tests/unit/daemon_info/: rootful_cgroup_v1.json and rootless_cgroup_v1.json are this machine's two test-bed
daemons' answers (recorded, trimmed to the fields read); the cgroup v2 ones are composed (no such host here:
each says so in its `_note`).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from run_flags import config_for

from cowork_adapter.host.daemon_kind import (
    DaemonFacts,
    bind_failure,
    facts_from_info,
    owner_refusal,
    peer_same_network,
    socket_peer,
    unenforced_refusal,
)
from cowork_adapter.run import daemon_check
from cowork_adapter.vocab import DaemonKind

INFO = Path(__file__).parent / "daemon_info"
HOST = "unix:///run/user/1000/docker.sock"
PAID = dict(dry_run=False, campaign_file=Path("/nonexistent/cowork-test/campaign.json"))


def recorded(name: str) -> dict[str, Any]:
    return json.loads((INFO / f"{name}.json").read_text())


def test_rootful_cgroup_v1_enforces_every_limit() -> None:
    facts = facts_from_info(recorded("rootful_cgroup_v1"), same_network=True)
    assert facts.kind is DaemonKind.ROOTFUL
    assert facts.unenforced == () and facts.enforces_limits
    assert unenforced_refusal(facts, HOST) is None


def test_rootless_cgroup_v1_enforces_none_and_is_refused_naming_why() -> None:
    facts = facts_from_info(recorded("rootless_cgroup_v1"))
    assert facts.kind is DaemonKind.ROOTLESS
    assert (facts.cgroup_version, facts.cgroup_driver) == ("1", "none")
    assert facts.unenforced == ("memory", "cpu", "pids")
    sentence = unenforced_refusal(facts, HOST)
    assert sentence is not None
    assert "rootless daemon on a cgroup v1 host enforces no limit" in sentence
    assert "--accept-unenforced-limits" in sentence and HOST in sentence


def test_rootless_cgroup_v2_enforces_its_delegated_limits() -> None:
    facts = facts_from_info(recorded("rootless_cgroup_v2"))
    assert facts.kind is DaemonKind.ROOTLESS and facts.cgroup_version == "2"
    assert facts.enforces_limits and unenforced_refusal(facts, HOST) is None


def test_rootless_cgroup_v2_without_cpu_delegated_is_refused_for_cpu_only() -> None:
    facts = facts_from_info(recorded("rootless_cgroup_v2_no_cpu"))
    assert facts.unenforced == ("cpu",)
    sentence = unenforced_refusal(facts, HOST)
    assert sentence is not None and "the cpu limit (its cgroups lack those controllers)" in sentence


def test_a_warning_alone_marks_its_limit_unenforced() -> None:
    info = {**recorded("rootful_cgroup_v1"), "Warnings": ["WARNING: No memory limit support"]}
    assert facts_from_info(info).unenforced == ("memory",)


def test_another_network_namespace_makes_a_daemon_rootless_even_without_the_option() -> None:
    # The namespaces decide where the bridge is, whatever the security options say.
    assert facts_from_info(recorded("rootful_cgroup_v1"), same_network=False).kind is DaemonKind.ROOTLESS


_flag = st.sampled_from([True, False, None])
_options = st.lists(
    st.sampled_from(["name=seccomp,profile=default", "name=rootless", "name=cgroupns", "name=apparmor", "x"]),
    max_size=4,
)
_warnings = st.lists(
    st.sampled_from(
        [
            "WARNING: No memory limit support",
            "WARNING: No cpu cfs quota support",
            "WARNING: No pids limit support",
            "WARNING: Running in rootless-mode without cgroups.",
            "WARNING: bridge-nf-call-iptables is disabled",
        ]
    )
    | st.text(max_size=40),
    max_size=5,
)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    options=_options,
    warnings=_warnings,
    driver=st.sampled_from(["cgroupfs", "systemd", "none", "", None]),
    memory=_flag,
    cpu=_flag,
    pids=_flag,
    same=_flag,
)
def test_generated_answers(options, warnings, driver, memory, cpu, pids, same) -> None:
    info = {
        "SecurityOptions": options,
        "Warnings": warnings,
        "CgroupDriver": driver,
        "MemoryLimit": memory,
        "CpuCfsQuota": cpu,
        "PidsLimit": pids,
    }
    facts = facts_from_info(info, same_network=same)
    assert (facts.kind is DaemonKind.ROOTLESS) == ("name=rootless" in options or same is False)
    no_cgroups = driver == "none" or any("without cgroups" in w.lower() for w in warnings)
    for limit, flag in (("memory", memory), ("cpu", cpu), ("pids", pids)):
        if flag is False or no_cgroups:
            assert limit in facts.unenforced
    assert (unenforced_refusal(facts, HOST) is None) == facts.enforces_limits


def _rootless(same: bool | None = False) -> DaemonFacts:
    return facts_from_info(recorded("rootless_cgroup_v1"), same_network=same)


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.EADDRNOTAVAIL, "no interface of this host has the address 172.17.0.1"),
        (errno.EADDRINUSE, "another process holds 172.17.0.1:443"),
        (errno.EACCES, "net.ipv4.ip_unprivileged_port_start at most 443 (it is 1024)"),
    ],
)
def test_a_failed_bind_names_its_real_cause(code: int, words: str) -> None:
    sentence = bind_failure(OSError(code, os.strerror(code)), "172.17.0.1", 443, port_start=1024, euid=1000)
    assert words in sentence
    if code != errno.EACCES:
        assert "root" not in sentence


def test_the_run_refuses_an_address_this_host_lacks_before_anything_is_built() -> None:
    # A real bind of TEST-NET-1 (RFC 5737), which no interface here has: the cause, not "needs root".
    cfg = config_for(**PAID, llm_gateway=True, llm_gateway_host="192.0.2.1")
    ours = facts_from_info(recorded("rootful_cgroup_v1"), same_network=True)
    sentence = daemon_check.route_refusal(cfg, ours)
    assert sentence is not None
    assert "no interface of this host has the address 192.0.2.1" in sentence
    assert daemon_check.route_refusal(config_for(**PAID, key_in_agent=True), ours) is None


def test_the_flag_accepts_unenforced_limits_and_is_compared() -> None:
    facts = _rootless()
    assert daemon_check.limits_refusal(config_for(**PAID), facts) is not None
    accepted = config_for(**PAID, accept_unenforced_limits=True)
    assert daemon_check.limits_refusal(accepted, facts) is None
    assert accepted.applied_config()["accept_unenforced_limits"] is True
    assert "accept_unenforced_limits" not in config_for(**PAID).applied_config()


def test_the_peer_of_a_unix_socket_in_our_namespace_is_ours(tmp_path: Path) -> None:
    path = tmp_path / "d.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen(1)
        assert peer_same_network(f"unix://{path}") is True
    assert peer_same_network("tcp://127.0.0.1:2375") is None
    assert peer_same_network(f"unix://{tmp_path / 'absent.sock'}") is None


SERVE = (
    "import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1); "
    "print(1, flush=True); time.sleep(60)"
)


def test_the_peer_of_a_unix_socket_in_another_network_namespace_is_not(tmp_path: Path) -> None:
    # A listener in a network namespace of its own (a user namespace too, so no privilege is needed), as
    # RootlessKit's dockerd is.
    path = tmp_path / "ns.sock"
    server = subprocess.Popen(
        ["unshare", "-U", "-r", "-n", sys.executable, "-c", SERVE, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "1"
        assert peer_same_network(f"unix://{path}") is False
    finally:
        server.kill()
        server.wait(timeout=10)


def test_root_driving_another_users_rootless_daemon_is_refused_naming_that_user() -> None:
    # The PermissionError at the tool-server check: root's folders are nobody's inside.
    facts = facts_from_info(recorded("rootless_cgroup_v1"), same_network=False, owner_uid=1001)
    sentence = owner_refusal(facts, HOST, euid=0)
    assert sentence is not None and "run cowork-adapter as uid 1001" in sentence and "uid 0" in sentence
    assert owner_refusal(facts, HOST, euid=1001) is None
    rootful = facts_from_info(recorded("rootful_cgroup_v1"), same_network=True, owner_uid=0)
    assert owner_refusal(rootful, HOST, euid=1000) is None  # a rootful daemon's group members drive it


def test_the_socket_peer_is_its_listener(tmp_path: Path) -> None:
    path = tmp_path / "p.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen(1)
        assert socket_peer(f"unix://{path}") == (os.getpid(), os.geteuid())
