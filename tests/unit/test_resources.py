"""Per-task resource use: the shim's reading before removal, the per-task sums, the ledger schema,
the status/report views and the concurrency arithmetic. No Docker: a fake daemon socket speaks
the stats API (tests/integration/test_resource_use.py measures a real container).
"""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from cowork_adapter.custody import shim_daemon
from cowork_adapter.custody.bash_env import install_custody
from cowork_adapter.custody.shim_config import ContainerLimits
from cowork_adapter.host.resources import (
    METHOD_SENTENCE,
    NOT_TIED,
    STOP_UNREAD_CAUSE,
    Suggestion,
    read_task_resources,
    row_samples,
    suggest_concurrency,
    summarize,
    summary_line,
    unread_by_stop,
)
from cowork_adapter.ops.status import _resource_use, render_status_text
from cowork_adapter.report.render import _task_table
from cowork_adapter.schemas.ledger import RunnerRow, TaskRow
from cowork_adapter.schemas.record import decode
from cowork_adapter.score.context import IndexContext
from cowork_adapter.score.ledger import _classify_task_uncached

GIB = 2**30
MIB = 2**20

V1_ANSWER = {  # the shape this test bed's daemon gives (cgroup v1), trimmed
    "read": "2026-12-01T22:11:02.5Z",
    "memory_stats": {"usage": 3_000_000, "max_usage": 104_157_184, "limit": 536_870_912},
    "cpu_stats": {"cpu_usage": {"total_usage": 2_253_683_593}},
}
STOPPED_ANSWER = {"read": "0001-01-01T00:00:00Z", "memory_stats": {}, "cpu_stats": {"cpu_usage": {"total_usage": 0}}}
V2_ANSWER = {
    "read": "2026-12-01T22:11:02.5Z",
    "memory_stats": {"usage": 5_000_000, "limit": 1},
    "cpu_stats": {"cpu_usage": {"total_usage": 9_000_000}},
}


# ---------------------------------------------------------------- parsing one stats answer


def test_a_cgroup_v1_answer_gives_the_daemons_peak_not_the_usage():
    assert shim_daemon.parse_stats(V1_ANSWER) == (104_157_184, 2_253_683_593, 3_000_000, None)


@pytest.mark.parametrize(
    "answer, cause",
    [
        (STOPPED_ANSWER, "container_not_running"),  # all zeros: the cgroup is gone, not an idle task
        (V2_ANSWER, "daemon_reports_no_peak"),
        ({"read": "2026-12-01T00:00:00Z", "memory_stats": {"max_usage": 7}, "cpu_stats": {}}, "no_cpu_stats"),
        ("not a dict", "stats_unreadable"),
    ],
)
def test_a_missing_value_is_none_with_its_cause_never_zero(answer, cause):
    peak, cpu_ns, _usage, got = shim_daemon.parse_stats(answer)
    assert got == cause
    assert peak != 0 and cpu_ns != 0
    if cause != "no_cpu_stats":
        assert peak is None


# ---------------------------------------------------------------- the shim before `rm`


class _FakeDaemon(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


# The inspect answer's part the shim reads (the daemon's container state: an OOM kill in it).
INSPECT_ANSWER = {"Id": "c0ffee", "State": {"Status": "running", "Running": True, "OOMKilled": True, "ExitCode": 0}}


@pytest.fixture
def fake_daemon():
    """A unix-socket HTTP server answering the stats API; records each request and whether the
    fake docker had already been called for it (it must not: the reading precedes removal)."""
    folder = Path(tempfile.mkdtemp(prefix="res", dir="/tmp"))  # short: unix socket paths are limited
    seen: list[dict] = []
    calls_file = folder / "fake" / "calls.jsonl"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append({"path": self.path, "docker_called_before": calls_file.exists()})
            name = self.path.split("/")[2]
            answer = INSPECT_ANSWER if self.path.split("?")[0].endswith("/json") else V1_ANSWER
            body, code = (json.dumps(answer).encode(), 200) if name.startswith("agent-") else (b"{}", 404)
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = _FakeDaemon(str(folder / "d.sock"), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, seen
    server.shutdown()
    server.server_close()


def _install(folder: Path, docker_host: str):
    fake_dir = folder / "fake"
    fake_dir.mkdir(exist_ok=True)
    fake = fake_dir / "docker"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(fake_dir / 'calls.jsonl')!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "sys.exit(4)\n"
    )
    fake.chmod(0o755)
    (folder / "resources").mkdir(exist_ok=True)
    files = install_custody(
        folder / "run",
        real_docker=str(fake),
        docker_host=docker_host,
        run_label="0" * 32,
        limits=ContainerLimits(cpus=1, memory_bytes=256 * MIB, pids_limit=64),
        stop_file=folder / "run" / "STOP",
        resource_root=folder / "resources",
        min_free_bytes=0,
        evidence_dir=folder / "evidence",
        agent_env_file=None,
        environ={},
    )
    return files, fake_dir / "calls.jsonl"


def _run(files, *argv):
    return subprocess.run(
        [str(files.wrapper), *argv], env={"PATH": os.environ["PATH"]}, capture_output=True, text=True, timeout=30
    )


def test_rm_reads_each_task_container_from_the_daemon_before_the_real_rm(fake_daemon):
    folder, seen = fake_daemon
    files, calls = _install(folder, f"unix://{folder / 'd.sock'}")
    argv = ["rm", "-fv", "agent-7-0000abcd", "pg-7-0000abcd", "net-7-0000abcd", "helper-x"]
    done = _run(files, *argv)
    assert done.returncode == 4  # the real docker's exit code, untouched
    assert [json.loads(x) for x in calls.read_text().splitlines()] == [argv]  # exact argv, once
    assert [s["path"].split("?")[0] for s in seen] == [
        "/containers/agent-7-0000abcd/stats",
        "/containers/agent-7-0000abcd/json",  # its OOM state
        "/containers/pg-7-0000abcd/stats",
    ]
    assert not any(s["docker_called_before"] for s in seen)
    lines = [json.loads(x) for x in (folder / "evidence" / "7-0000abcd.resources.jsonl").read_text().splitlines()]
    assert [
        (r["container"], r["role"], r["command"], r["memory_peak_bytes"], r["cpu_ns"], r["cause"]) for r in lines
    ] == [
        ("agent-7-0000abcd", "agent", "rm", 104_157_184, 2_253_683_593, None),
        ("pg-7-0000abcd", "pg", "rm", None, None, "container_absent"),
    ]
    assert (lines[0]["oom_killed"], lines[0]["state_exit_code"], lines[0]["state_cause"]) == (True, 0, None)


def test_container_stop_is_read_too_and_a_dead_daemon_never_blocks_the_command(tmp_path):
    folder = Path(tempfile.mkdtemp(prefix="res", dir="/tmp"))
    files, calls = _install(folder, f"unix://{folder / 'nobody.sock'}")
    done = _run(files, "container", "stop", "-t", "3", "eval-9-00000000")
    assert done.returncode == 4
    assert json.loads(calls.read_text()) == ["container", "stop", "-t", "3", "eval-9-00000000"]
    (line,) = (folder / "evidence" / "9-00000000.resources.jsonl").read_text().splitlines()
    reading = json.loads(line)
    assert reading["container"] == "eval-9-00000000" and reading["command"] == "container stop"
    assert reading["memory_peak_bytes"] is None and reading["cause"].startswith("stats_read_failed:")


# ---------------------------------------------------------------- a task's totals


def test_a_task_sums_its_containers_and_a_later_empty_read_does_not_erase_a_good_one():
    containers = [("pg-1", "pg"), ("agent-1", "agent")]
    readings = [
        {"container": "pg-1", "memory_peak_bytes": 40 * MIB, "cpu_ns": 1_000_000_000},
        {"container": "pg-1", "memory_peak_bytes": None, "cpu_ns": None, "cause": "container_not_running"},
        {"container": "agent-1", "memory_peak_bytes": 300 * MIB, "cpu_ns": 2_500_000_000},
    ]
    use = summarize(containers, readings)
    assert use.peak_memory_bytes == 340 * MIB
    assert use.cpu_seconds == 3.5
    assert use.basis == METHOD_SENTENCE


def test_a_container_without_a_reading_makes_the_total_unknown_with_the_reason_never_a_partial_sum():
    use = summarize(
        [("pg-1", "pg"), ("agent-1", "agent")],
        [{"container": "agent-1", "memory_peak_bytes": 300 * MIB, "cpu_ns": 2_000_000_000}],
    )
    assert use.peak_memory_bytes is None and use.cpu_seconds is None
    assert use.basis == "unknown: pg-1: no reading (one is taken when the container is removed)"
    v2 = summarize(
        [("agent-1", "agent")],
        [{"container": "agent-1", "memory_peak_bytes": None, "cpu_ns": 5, "cause": "daemon_reports_no_peak"}],
    )
    assert v2.peak_memory_bytes is None and v2.cpu_seconds == 0.0
    assert "daemon_reports_no_peak" in v2.basis


def test_a_stop_never_asks_the_daemon_and_says_why_the_task_is_unknown(tmp_path):
    """The stop's hook (custody/stop_removal.py) writes a line naming its cause for each measured
    container, none for another, and never touches the daemon (its api argument is None here)."""
    note = unread_by_stop(tmp_path)
    for name in ("agent-5-aa", "pg-5-aa", "eval-5-aa", "helper-5-aa", "other"):
        note(None, "id-" + name, name)
    lines = [json.loads(line) for line in (tmp_path / "5-aa.resources.jsonl").read_text().splitlines()]
    assert [r["container"] for r in lines] == ["agent-5-aa", "pg-5-aa", "eval-5-aa"]
    assert {(r["command"], r["cause"], r["memory_peak_bytes"], r["cpu_ns"]) for r in lines} == {
        ("adapter_stop", STOP_UNREAD_CAUSE, None, None)
    }
    use = summarize([("agent-5-aa", "agent")], lines[:1])
    assert use.peak_memory_bytes is None and STOP_UNREAD_CAUSE in use.basis


def test_no_container_tied_to_the_task_is_unknown_with_a_reason():
    assert summarize([], []) is NOT_TIED
    assert NOT_TIED.peak_memory_bytes is None and NOT_TIED.cpu_seconds is None and NOT_TIED.basis


def _evidence(root: Path) -> Path:
    folder = root / "custody" / "evidence"
    folder.mkdir(parents=True)
    (folder / "5-aa.task").write_text("finalpool/task-a\n")
    creations = [
        {"name": "net-5-aa", "role": "network", "admitted": True},
        {"name": "pg-5-aa", "role": "pg", "admitted": True},
        {"name": "agent-5-aa", "role": "agent", "admitted": True},
        {"name": "eval-5-aa", "role": "eval", "admitted": False, "cause": "admission_stopped"},
        {"name": None, "role": "other", "admitted": True},
    ]
    (folder / "creations.jsonl").write_text("".join(json.dumps(c) + "\n" for c in creations))
    readings = [
        {"container": "agent-5-aa", "memory_peak_bytes": 200 * MIB, "cpu_ns": 4_000_000_000},
        {"container": "pg-5-aa", "memory_peak_bytes": 50 * MIB, "cpu_ns": 1_000_000_000},
    ]
    (folder / "5-aa.resources.jsonl").write_text("".join(json.dumps(r) + "\n" for r in readings) + '{"torn')
    return folder


def test_the_ledger_row_takes_the_admitted_containers_of_the_task_from_the_evidence(tmp_path):
    _evidence(tmp_path)
    assert set(read_task_resources(tmp_path)) == {"task-a"}
    ctx = IndexContext(run_root=tmp_path, manifest=None, bench=tmp_path / "bench")
    ctx.refresh()
    row = _classify_task_uncached(ctx, "task-a", live=False, interruption_cause="runner_exited")
    assert row.peak_memory_bytes == 250 * MIB and row.cpu_seconds == 5.0
    assert [c.container for c in row.resource_containers] == ["pg-5-aa", "agent-5-aa"]  # not the refused eval
    other = _classify_task_uncached(ctx, "task-b", live=False, interruption_cause="runner_exited")
    assert other.peak_memory_bytes is None and other.cpu_seconds is None and other.resource_basis == NOT_TIED.basis


# ---------------------------------------------------------------- schema


OLD_ROW = (
    '{"schema": "cowork_adapter.task_result.v1", "ts": "2026-11-30T10:00:00Z", "instance_id": "t", '
    '"status": "passed", "reason_code": "official_pass", "official_eval_status": "completed"}'
)


def test_a_row_written_before_the_fields_existed_still_reads():
    row = decode(OLD_ROW, TaskRow)
    assert row.peak_memory_bytes is None and row.cpu_seconds is None
    assert row.resource_basis is None and row.resource_containers == []


def test_the_fields_round_trip_through_a_ledger_line():
    row = decode(OLD_ROW, TaskRow).replace(
        **{"peak_memory_bytes": 5, "cpu_seconds": 1.5, "resource_basis": METHOD_SENTENCE}
    )
    back = decode(row.to_line(), TaskRow)
    assert (back.peak_memory_bytes, back.cpu_seconds, back.resource_basis) == (5, 1.5, METHOD_SENTENCE)


# ---------------------------------------------------------------- status and report


def _row(task: str, peak: int | None, cpu: float | None, duration: float | None = None, containers=()) -> TaskRow:
    return decode(OLD_ROW, TaskRow).replace(
        **{
            "instance_id": task,
            "peak_memory_bytes": peak,
            "cpu_seconds": cpu,
            "runner_row": RunnerRow(status="success", duration_s=duration) if duration else None,
            "resource_containers": list(containers),
        }
    )


def test_status_summarizes_median_and_max_and_counts_the_unknown():
    from cowork_adapter.schemas.ledger import ContainerUse

    unknown = _row("c", None, None, containers=[ContainerUse(container="agent-x", role="agent")])
    rows = [_row("a", 100 * MIB, 10.0), _row("b", 300 * MIB, 30.0), _row("d", 200 * MIB, 20.0), unknown]
    use = _resource_use(rows)
    assert use["peak_memory_bytes_median"] == 200 * MIB and use["peak_memory_bytes_max"] == 300 * MIB
    assert use["cpu_seconds_median"] == 20.0 and use["cpu_seconds_max"] == 30.0
    assert use["tasks_measured"] == 3 and use["tasks_unknown"] == 1
    assert use["text"] == (
        "resource use: peak memory median 200 MiB, max 300 MiB (3 task(s)); "
        "CPU time median 20.0 s, max 30.0 s (3 task(s)); 1 task(s) unknown"
    )
    assert _resource_use(None) is None
    assert summary_line([]) == "resource use: none measured yet (0 task(s) with containers)"


def test_status_text_shows_the_resource_line():
    status = {
        "run_root": "/r",
        "state": "finished",
        "outcome": "completed",
        "launcher_pid": None,
        "launcher_alive": False,
        "progress": {"done": 1, "selected": 1, "running": 0},
        "elapsed_sec": 1.0,
        "eta_sec": None,
        "cleanup_proven": True,
        "campaign_settlement": None,
        "stop_reason": None,
        "stop_causes": [],
        "exit_code": None,
        "problems": [],
        "error": None,
        "refusal": None,
        "resource_use": {"text": "resource use: peak memory median 1 MiB"},
    }
    lines = render_status_text(status, None)
    assert "  resource use: peak memory median 1 MiB" in lines


def test_the_report_task_table_has_peak_memory_and_cpu_time_columns():
    report = {
        "tasks": [
            {
                "instance_id": "a",
                "status": "passed",
                "reason_code": "r",
                "cost_usd": None,
                "provenance": None,
                "peak_memory_bytes": 512 * MIB,
                "cpu_seconds": 12.34,
            },
            {
                "instance_id": "b",
                "status": "passed",
                "reason_code": "r",
                "cost_usd": None,
                "provenance": None,
                "peak_memory_bytes": None,
                "cpu_seconds": None,
            },
        ]
    }
    head, rows = _task_table(report)
    assert head[4:6] == ["peak memory", "CPU time"]
    assert rows[0][4:6] == ["512 MiB", "12.3 s"]
    assert rows[1][4:6] == ["unknown", "unknown"]


# ---------------------------------------------------------------- the concurrency suggestion


def test_nothing_measured_says_so_and_suggests_nothing():
    found = suggest_concurrency(8, 32 * GIB, [], [])
    assert found.concurrency is None
    assert "no task's resource use has been measured yet" in found.sentence


def test_memory_bounds_by_the_largest_peak():
    # 80 % of 16 GiB = 12.8 GiB; the largest task 3 GiB -> 4; CPU (8 CPUs / 0.5) would allow 16.
    found = suggest_concurrency(8, 16 * GIB, [1 * GIB, 3 * GIB, 2 * GIB], [0.5, 0.5, 0.4])
    assert found.concurrency == 4
    assert "memory allows 4" in found.sentence and "CPU allows 16" in found.sentence
    assert "3072 MiB" in found.sentence


def test_cpu_bounds_by_the_largest_rate():
    # 8 CPUs / the largest 1.5 CPU per task -> 5; memory (0.8 * 64 GiB / 1 GiB) would allow 51.
    found = suggest_concurrency(8, 64 * GIB, [GIB], [0.2, 0.9, 1.5])
    assert found.concurrency == 5
    assert "CPU allows 5" in found.sentence and "memory allows 51" in found.sentence
    assert "largest measured rate 1.50" in found.sentence


def test_never_below_one_and_an_idle_task_does_not_suggest_infinity():
    assert suggest_concurrency(2, 4 * GIB, [10 * GIB], [3.0]).concurrency == 1
    idle = suggest_concurrency(4, 1000 * GIB, [MIB], [0.05, 0.01])
    assert idle.concurrency == 16 and "counted as the floor 0.25" in idle.sentence  # 4 CPUs / 0.25


def test_without_durations_memory_alone_decides_and_says_so():
    found = suggest_concurrency(4, 10 * GIB, [GIB], [])
    assert found.concurrency == 8 and "CPU not considered" in found.sentence


def test_an_unknown_host_size_suggests_nothing():
    assert suggest_concurrency(None, None, [GIB], [1.0]) == Suggestion(
        None,
        "the daemon did not report its CPUs and memory, so no concurrency is suggested from the 1 measured task(s)",
    )


def test_rates_need_a_wall_clock_duration():
    peaks, rates = row_samples([_row("a", GIB, 30.0, duration=60.0), _row("b", 2 * GIB, 10.0), _row("c", None, None)])
    assert peaks == [GIB, 2 * GIB] and rates == [0.5]


def test_the_readers_share_one_bounded_get_and_keep_their_causes(fake_daemon, tmp_path):
    """read_stats and read_state GET the daemon through one daemon_get_json: an answer past its cap is no
    JSON (never a partial reading), and each reader still names a missing answer in its own words."""
    folder, seen = fake_daemon
    config = {"docker_host": f"unix://{folder / 'd.sock'}"}
    path = "/containers/agent-1-0000abcd/json"
    assert shim_daemon.daemon_get_json(config, path, 1 << 20) == (200, INSPECT_ANSWER, None)
    assert shim_daemon.daemon_get_json(config, path, 10) == (200, None, None)  # cut at the cap: not JSON
    assert shim_daemon.daemon_get_json(config, "/containers/pg-1-0000abcd/json", 1 << 20) == (404, {}, None)
    assert shim_daemon.read_state(config, "agent-1-0000abcd")["oom_killed"] is True
    assert shim_daemon.read_stats(config, "agent-1-0000abcd")["memory_peak_bytes"] == 104_157_184
    assert len(seen) == 5
    unsupported = {"docker_host": "ssh://somewhere"}
    assert shim_daemon.read_stats(unsupported, "agent-1")["cause"] == "daemon_address_unsupported"
    assert shim_daemon.read_state(unsupported, "agent-1")["state_cause"] == "daemon_address_unsupported"
    dead = {"docker_host": f"unix://{tmp_path / 'nobody.sock'}"}
    status, data, failure = shim_daemon.daemon_get_json(dead, path, 1 << 20)
    assert (status, data) == (None, None) and failure in ("FileNotFoundError", "ConnectionRefusedError")
    assert shim_daemon.read_stats(dead, "agent-1")["cause"] == "stats_read_failed:" + failure
    assert shim_daemon.read_state(dead, "agent-1")["state_cause"] == "inspect_failed:" + failure
