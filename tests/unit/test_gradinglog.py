"""The traj_log.json the eval phase writes for the evaluator (container/gradinglog.py, issue 36):
the status mapping, the launch time, the difference list and the writer, as pure parts."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import pytest

from cowork_adapter.container import gradinglog, protocol
from cowork_adapter.container.gradinglog import HostFacts

T0 = datetime(2026, 12, 3, 10, 0, 0).timestamp()  # local time, as the containers format it
HOST = HostFacts(started=T0 + 0.4, ended=T0 + 95.0, max_steps=40)
PROMPT = "Workspace /workspace/dumps/s_m/SingleUserTurn-t/workspace. Now: {time}"
BUILT = "2026-12-03 10:02:00 Thursday"  # the eval container's own build, two minutes later
CANONICAL = {
    "task_dir": "t",
    "id": "t",
    "task_root": "/workspace/dumps/s_m/SingleUserTurn-t",
    "log_file": "/workspace/dumps/s_m/SingleUserTurn-t/traj_log.json",
    "agent_workspace": "/workspace/dumps/s_m/SingleUserTurn-t/workspace",
    "needed_mcp_servers": ["files"],
    "needed_local_tools": [],
    "task_str": "Do it.",
    "launch_time": BUILT,
    "max_turns": None,
    "max_steps_under_single_turn_mode": None,
    "single_turn_mode": True,
    "cn_mode": False,
    "system_prompts": {"agent": PROMPT.format(time=BUILT), "user": None},
    "initialization": {"workspace": "tasks/finalpool/t/initial_workspace", "process_command": "python3 -m p"},
    "stop": {"user_phrases": ["#### STOP"], "tool_names": ["local-claim_done"]},
    "evaluation": {
        "evaluation_command": "python3 -m tasks.finalpool.t.evaluation.main",
        "groundtruth_workspace": "tasks/finalpool/t/groundtruth_workspace",
    },
    "meta": {},
    "local_token_key_session": None,
}


def honest(launch="2026-12-03 10:00:01 Thursday", **config) -> dict:
    """What an honest engine writes in the sanitized agent container (no ground truth, no evaluator)."""
    cfg = json.loads(json.dumps(CANONICAL))
    cfg.update(
        launch_time=launch,
        evaluation={"evaluation_command": None, "groundtruth_workspace": None},
        system_prompts={"agent": PROMPT.format(time=launch), "user": None},
        **config,
    )
    return {
        "config": cfg,
        "status": "success",
        "start_time": datetime.fromtimestamp(T0 + 1).isoformat(),
        "end_time": datetime.fromtimestamp(T0 + 90).isoformat(),
    }


@pytest.mark.parametrize(
    "value, mapped",
    [
        ("success", "success"),
        ("failed", "failed"),
        ("max_turns_reached", "max_turns_reached"),
        ("interrupted", "interrupted"),
        ("Success", "failed"),
        ("success ", "failed"),
        ('success"; true; "', "failed"),
        (True, "failed"),
        (None, "failed"),
        (["success"], "failed"),
        ({"success": 1}, "failed"),
    ],
)
def test_the_status_is_the_agents_only_when_upstream_knows_it_exactly(value, mapped):
    assert gradinglog.map_status(value) == mapped


def test_the_launch_time_has_the_upstream_format_and_round_trips():
    stamp = gradinglog.launch_time(T0 + 0.9)
    assert stamp == "2026-12-03 10:00:00 Thursday"
    assert gradinglog.launch_epoch(stamp) == T0
    for bad in (
        "2026-12-03 10:00:00 Friday",
        '2026-12-03 10:00:00"; touch /tmp/x; "',
        "2026-12-03 10:00:00",
        "2026-13-03 10:00:00 Thursday",
        1764756000,
        None,
        "2026-12-03 10:00:00 Thursday\n",
    ):
        assert gradinglog.launch_epoch(bad) is None


def test_iso_times_naive_utc_or_offset():
    assert gradinglog.iso_epoch(datetime.fromtimestamp(T0).isoformat()) == T0
    utc = datetime.fromtimestamp(T0, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # the adapter's agent phase
    assert gradinglog.iso_epoch(utc) == T0
    assert gradinglog.iso_epoch("x" * 100) is None and gradinglog.iso_epoch("yesterday") is None


def test_host_facts_are_taken_out_of_the_environment():
    env = {gradinglog.STARTED_ENV: "100.5", gradinglog.ENDED_ENV: "200.0", gradinglog.MAX_STEPS_ENV: "40", "X": "1"}
    assert gradinglog.host_facts(env) == HostFacts(100.5, 200.0, 40) and env == {"X": "1"}
    for bad in (
        {gradinglog.STARTED_ENV: "nan", gradinglog.ENDED_ENV: "2"},
        {gradinglog.STARTED_ENV: "5", gradinglog.ENDED_ENV: "4"},
        {gradinglog.STARTED_ENV: "inf", gradinglog.ENDED_ENV: "inf"},
        {},
    ):
        assert gradinglog.host_facts(dict(bad))[:2] == (None, None)


def test_an_honest_log_differs_in_nothing():
    assert gradinglog.log_differences(honest(), CANONICAL, HOST) == []
    assert gradinglog.grading_differences(honest()["config"], CANONICAL) == []
    # An upstream engine puts the runner's --max_steps there; the adapter's own phase writes Z times.
    upstream = honest(max_steps_under_single_turn_mode=40)
    upstream["start_time"] = datetime.fromtimestamp(T0 + 1, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert gradinglog.log_differences(upstream, CANONICAL, HOST) == []


@pytest.mark.parametrize(
    "change, names",
    [
        ({"status": "SUCCESS"}, ["status"]),
        ({"status": 1}, ["status"]),
        ({"start_time": "2026-12-03T09:00:00"}, ["start_time"]),  # an hour before the exec
        ({"end_time": None}, ["end_time"]),
        ({"extra": 1}, ["traj_log:extra_keys"]),
        ({"config": "x"}, ["config:not_object"]),
    ],
)
def test_a_top_level_field_an_honest_engine_would_not_write_is_named(change, names):
    assert gradinglog.log_differences(dict(honest(), **change), CANONICAL, HOST) == names


@pytest.mark.parametrize(
    "change, names",
    [
        # (the prompt then no longer holds the stated launch time either)
        (
            {"launch_time": '2026-12-03 10:00:01"; touch /tmp/owned; echo "'},
            ["config.launch_time", "config.system_prompts"],
        ),
        ({"launch_time": "2026-12-02 10:00:01 Wednesday"}, ["config.launch_time", "config.system_prompts"]),
        ({"max_steps_under_single_turn_mode": 41}, ["config.max_steps_under_single_turn_mode"]),
        ({"task_str": "Do nothing."}, ["config.task_str"]),
        ({"stop": {"user_phrases": [], "tool_names": []}}, ["config.stop"]),
        ({"initialization": {"workspace": None, "process_command": "sh"}}, ["config.initialization"]),
        ({"bogus": 1}, ["config:extra_keys"]),
    ],
)
def test_a_config_field_unlike_the_task_trees_is_named(change, names):
    log = honest()
    log["config"].update(change)
    assert gradinglog.log_differences(log, CANONICAL, HOST) == names


def test_a_missing_config_field_is_named():
    log = honest()
    del log["config"]["meta"]
    assert gradinglog.log_differences(log, CANONICAL, HOST) == ["config.meta"]


def test_without_host_facts_only_the_shapes_are_held():
    log = honest(launch="2020-01-01 00:00:00 Wednesday")
    log["config"]["system_prompts"] = {"agent": PROMPT.format(time="2020-01-01 00:00:00 Wednesday"), "user": None}
    assert gradinglog.log_differences(log, CANONICAL, HostFacts()) == []
    log["config"]["launch_time"] = "soon"
    assert gradinglog.log_differences(log, CANONICAL, HostFacts()) == ["config.launch_time", "config.system_prompts"]


def test_the_host_log_is_the_task_trees_config_with_the_hosts_time_and_a_known_status():
    written = gradinglog.host_log(CANONICAL, '"; touch /tmp/x; "', HOST, now=T0 + 500)
    assert written["status"] == "failed"
    assert written["config"]["launch_time"] == "2026-12-03 10:00:00 Thursday"
    assert written["config"]["system_prompts"]["agent"] == PROMPT.format(time="2026-12-03 10:00:00 Thursday")
    rest = {k: v for k, v in written["config"].items() if k not in ("launch_time", "system_prompts")}
    assert rest == {k: v for k, v in CANONICAL.items() if k not in ("launch_time", "system_prompts")}
    assert written["start_time"] == datetime.fromtimestamp(HOST.started).isoformat()
    assert written["end_time"] == datetime.fromtimestamp(HOST.ended).isoformat()
    assert (
        gradinglog.host_log(CANONICAL, "interrupted", HostFacts(), now=T0)["start_time"]
        == datetime.fromtimestamp(T0).isoformat()
    )


class _Config:
    def to_dict(self):
        return json.loads(json.dumps(CANONICAL))


def _forged() -> dict:
    log = honest()
    log["config"].update(
        agent_workspace="tasks/finalpool/t/groundtruth_workspace",
        launch_time='x"; touch /tmp/owned; "',
        evaluation={"evaluation_command": "sh -c 'exit 0'", "groundtruth_workspace": None},
    )
    log["status"] = "success"
    return log


def test_the_writer_keeps_the_agents_bytes_and_writes_the_hosts(tmp_path):
    log = tmp_path / protocol.LOG_NAME
    raw = json.dumps(_forged()).encode()
    log.write_bytes(raw)
    done = gradinglog.write_host_log(str(tmp_path), _Config(), HOST, repeat=False, now=T0 + 500)
    assert done.grading_differ == ["agent_workspace", "evaluation.evaluation_command"]
    assert done.log_differ == ["config.launch_time", "config.system_prompts"]
    assert (tmp_path / gradinglog.AGENT_LOG_NAME).read_bytes() == raw
    assert done.agent_log["state"] == "present" and done.agent_log["bytes"] == len(raw)
    written = json.loads(log.read_text())
    assert written == gradinglog.host_log(CANONICAL, "success", HOST, now=0)
    # A repeat entry (the first died before its claim) reads the original it kept, not its own log.
    again = gradinglog.write_host_log(str(tmp_path), _Config(), HOST, repeat=True, now=T0 + 600)
    assert again == done and json.loads(log.read_text()) == written


@pytest.mark.parametrize(
    "raw, cause",
    [
        (b"\xff\xfe{}", "traj_log:invalid"),
        (b"[" * 100_000, "traj_log:invalid"),
        (b'{"a": 1, "a": 2}', "traj_log:invalid"),
        (b"NaN", "traj_log:invalid"),
        (b"[1, 2]", "traj_log:not_object"),
    ],
)
def test_an_unreadable_log_is_replaced_by_a_failed_one(tmp_path, raw, cause):
    (tmp_path / protocol.LOG_NAME).write_bytes(raw)
    done = gradinglog.write_host_log(str(tmp_path), _Config(), HOST, repeat=False, now=T0)
    assert done.log_differ[0] == cause and done.grading_differ == []
    assert json.loads((tmp_path / protocol.LOG_NAME).read_text())["status"] == "failed"
    assert (tmp_path / gradinglog.AGENT_LOG_NAME).read_bytes() == raw


def test_no_log_writes_nothing(tmp_path):
    done = gradinglog.write_host_log(str(tmp_path), _Config(), HOST, repeat=False, now=T0)
    assert done == gradinglog.Written([], [], done.agent_log) and done.agent_log["state"] == "absent"
    assert os.listdir(tmp_path) == []
