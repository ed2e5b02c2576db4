"""The agent exec's host-side bounds (issue 37, custody/agent_exec.py): the output cap (pure), the
relay against real processes, and the shim's agent exec against a FAKE docker (the real daemon runs
the same path in tests/integration/test_agent_exec_daemon.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowork_adapter.custody import agent_exec, container_caps, staging_mount
from cowork_adapter.custody.agent_exec import DROP_NOTE, KEPT_LINES, PROTOCOL_LINE_MAX, OutputCap
from cowork_adapter.custody.bash_env import Hardening, TaskDumps, install_custody, runner_digest
from cowork_adapter.custody.shim_config import ContainerLimits

STATUS = b"====== Status: success ======\n"


def run_through(cap: OutputCap, chunks: list[tuple[str, bytes]]) -> dict[str, bytes]:
    out = {"stdout": b"", "stderr": b""}
    for name, data in chunks:
        out[name] += cap.feed(name, data)
    for name in out:
        out[name] += cap.finish(name)
    return out


def test_output_under_the_cap_passes_untouched_and_says_nothing():
    cap = OutputCap(1000)
    out = run_through(cap, [("stdout", b"hello\n"), ("stderr", b"warn\n"), ("stdout", STATUS)])
    assert out == {"stdout": b"hello\n" + STATUS, "stderr": b"warn\n"}
    assert cap.dropped == 0


def test_a_flood_is_cut_at_the_cap_then_one_line_says_how_much_and_the_status_line_still_gets_through():
    cap = OutputCap(1000)
    flood = [("stdout", b"x" * 300 + b"\n")] * 10 + [("stderr", b"e" * 500)]
    out = run_through(cap, flood + [("stdout", STATUS)])
    note = (DROP_NOTE % (1000, 3010 + 500 + len(STATUS) - 1000, 3010 + len(STATUS) - 1000 + 0, 500)).encode()
    head, tail = out["stdout"][:1000], out["stdout"][1000:]
    assert head == (b"x" * 300 + b"\n") * 3 + b"x" * 97
    assert tail == b"\n" + note + STATUS  # the cut line is ended before the note
    assert out["stderr"] == b""  # the cap is shared: stderr came after it was reached
    assert cap.facts()["dropped_bytes"] == 3010 + 500 + len(STATUS) - 1000


def test_a_status_line_cut_by_the_cap_is_given_whole_after_the_note():
    line = b"====== Status: failed ======\n"
    cap = OutputCap(10)
    out = run_through(cap, [("stdout", line)])
    assert out["stdout"].startswith(line[:10] + b"\n[cowork-adapter] agent exec output capped at 10 bytes")
    assert out["stdout"].endswith(b"(stdout 19, stderr 0)\n" + line)


def test_kept_lines_are_bounded_in_number_and_length():
    cap = OutputCap(0)
    forged = [("stdout", b"Status: forged %d\n" % i) for i in range(100)]
    huge = [("stdout", b"Status: " + b"y" * (PROTOCOL_LINE_MAX * 3) + b"\n")]
    out = run_through(cap, forged + huge + [("stdout", b"no newline Status: last")])
    lines = out["stdout"].splitlines(keepends=True)
    assert lines[0].startswith(b"[cowork-adapter] agent exec output capped at 0 bytes")
    assert len(lines) - 1 <= KEPT_LINES
    assert lines[-1] == b"no newline Status: last\n"
    assert all(len(line) <= PROTOCOL_LINE_MAX + 1 for line in lines)


def test_a_status_line_that_ends_a_long_line_of_flood_is_kept_by_its_tail():
    cap = OutputCap(100)
    out = run_through(cap, [("stdout", b"f" * 1_000_000), ("stdout", STATUS)])
    assert out["stdout"].endswith(b"stderr 0)\n" + b"f" * (PROTOCOL_LINE_MAX - len(STATUS)) + STATUS)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    cap_bytes=st.integers(0, 4000),
    pieces=st.lists(
        st.tuples(
            st.sampled_from(["stdout", "stderr"]),
            st.binary(max_size=700) | st.sampled_from([STATUS, b"\n", b"Status: "]),
        ),
        max_size=30,
    ),
    cuts=st.lists(st.integers(1, 64), min_size=1, max_size=8),
)
def test_any_bytes_in_any_chunks_pass_as_a_prefix_and_end_with_the_last_status_line(cap_bytes, pieces, cuts):
    chunks = []
    for i, (name, data) in enumerate(pieces + [("stdout", b"\n" + STATUS)]):
        step = cuts[i % len(cuts)]
        chunks += [(name, data[j : j + step]) for j in range(0, len(data), step)]
    cap = OutputCap(cap_bytes)
    passed = {"stdout": b"", "stderr": b""}
    for name, data in chunks:
        passed[name] += cap.feed(name, data)
    total = sum(len(d) for _, d in chunks)
    sent = {n: b"".join(d for m, d in chunks if m == n) for n in passed}
    assert sum(len(p) for p in passed.values()) == min(total, cap_bytes)
    assert all(sent[n].startswith(passed[n]) for n in passed)  # in order, nothing made up
    assert cap.dropped == total - min(total, cap_bytes)
    tails = {n: cap.finish(n) for n in passed}
    final = passed["stdout"] + tails["stdout"]
    # The entrypoint's Status line, printed last, is the last line the runner's log gets from stdout.
    assert final.endswith(STATUS)
    assert (tails["stdout"] == b"") == (cap.dropped == 0)
    assert len(tails["stdout"]) + len(tails["stderr"]) <= 200 + 2 * KEPT_LINES * (PROTOCOL_LINE_MAX + 1)


def _relay(argv, cap_bytes, bound, drain=agent_exec.DRAIN_SEC):
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    got = {out_r: b"", err_r: b""}

    def drain_fd(fd):
        while chunk := os.read(fd, 1 << 16):
            got[fd] += chunk

    threads = [threading.Thread(target=drain_fd, args=(fd,)) for fd in (out_r, err_r)]
    for t in threads:
        t.start()
    cap = OutputCap(cap_bytes)
    old = agent_exec.DRAIN_SEC
    agent_exec.DRAIN_SEC = drain
    try:
        code, hung = agent_exec.relay(
            child,
            {"stdout": (child.stdout, out_w), "stderr": (child.stderr, err_w)},
            cap,
            None if bound is None else time.monotonic() + bound,
        )
    finally:
        agent_exec.DRAIN_SEC = old
        os.close(out_w)
        os.close(err_w)
    for t in threads:
        t.join()
    return code, hung, got[out_r], got[err_r], cap


def test_relay_caps_a_real_flood_and_returns_the_childs_code():
    script = (
        "import sys\n"
        "for i in range(20000): sys.stdout.write('z' * 99 + '\\n')\n"
        "print('====== Status: success ======')\n"
        "sys.exit(3)"
    )
    code, hung, out, err, cap = _relay([sys.executable, "-c", script], 64 * 1024, None)
    assert (code, hung) == (3, False)
    assert out.startswith(b"z" * 99 + b"\n") and out.endswith(STATUS)
    assert len(out) < 64 * 1024 + 300 and cap.dropped == 20000 * 100 + len(STATUS) - 64 * 1024
    assert err == b""


def test_relay_ends_a_child_past_its_bound_even_when_a_grandchild_holds_its_pipes(tmp_path):
    # The child leaves a grandchild that holds stdout and stderr open for an hour, then waits on it.
    holder = tmp_path / "holder.pid"
    script = (
        "import os, subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])\n"
        f"open({str(holder)!r}, 'w').write(str(p.pid))\n"
        "print('started', flush=True)\n"
        "p.wait()\n"
    )
    try:
        code, hung, out, _, _ = _relay([sys.executable, "-c", script], 1 << 20, 3.0, drain=0.5)
        assert hung is True and code in (-15, -9)
        assert out == b"started\n"
    finally:
        if holder.exists():
            try:
                os.kill(int(holder.read_text()), 9)
            except ProcessLookupError:
                pass


def test_kill_leftovers_is_one_kill_of_every_process_in_the_container_as_root():
    argv = agent_exec.kill_leftovers_argv("agent-1-abcdef12")
    assert argv[:4] == ["exec", "--user", "0", "agent-1-abcdef12"]
    assert argv[4:6] == ["sh", "-c"] and "kill -KILL -1" in argv[6]


def test_the_bound_sits_above_the_runners_own_timeout_and_kill_grace():
    assert agent_exec.agent_bound_sec(1800) == 1800 + agent_exec.RUNNER_KILL_AFTER_SEC + agent_exec.BOUND_MARGIN_SEC


# ---------------------------------------------------------------- the shim against a fake docker

LABEL = "0123456789abcdef0123456789abcdef"
TASK = "demo-csv-totals"
ID = "77-" + runner_digest(TASK)
FAKE = """\
#!{python}
import json, os, subprocess, sys, time
here = {here!r}
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:]}}) + "\\n")
if sys.argv[1:2] == ["exec"] and "sh" in sys.argv:
    sys.exit(0)  # the leftovers' kill
mode = open(os.path.join(here, "mode")).read().strip() if os.path.exists(os.path.join(here, "mode")) else ""
if mode == "flood":
    for _ in range(3000):
        sys.stdout.write("f" * 1023 + "\\n")
    sys.stderr.write("e" * 5000)
    print("====== Status: success ======", flush=True)
elif mode == "hold":
    # The exec's output held by a leftover: this docker never ends by itself.
    print("====== Status: success ======", flush=True)
    time.sleep(3600)
sys.exit(0)
"""


@pytest.fixture
def shim_bed(tmp_path):
    fake_dir = tmp_path / "fake"
    fake_dir.mkdir()
    fake = fake_dir / "docker"
    fake.write_text(FAKE.format(python=sys.executable, here=str(fake_dir)))
    fake.chmod(0o755)
    (tmp_path / "resources").mkdir()
    dumps = tmp_path / "run" / "bench" / "dumps"
    dumps.mkdir(parents=True)
    evidence = tmp_path / "run" / "custody" / "evidence"
    files = install_custody(
        tmp_path / "run",
        real_docker=str(fake),
        docker_host="unix:///tmp/fake.sock",
        run_label=LABEL,
        limits=ContainerLimits(cpus=1, memory_bytes=256 * 1024 * 1024, pids_limit=64),
        stop_file=tmp_path / "run" / "STOP",
        resource_root=tmp_path / "resources",
        min_free_bytes=0,
        evidence_dir=evidence,
        agent_env_file=None,
        environ={},
        dumps=TaskDumps(dumps_dir=dumps, short="openrouter/m", tasks=(TASK,), eval_bound_sec=30.0),
        hardening=Hardening(agent_bound_sec=2.0, agent_output_cap_bytes=100_000, log_max_bytes=1 << 20),
    )

    def run(mode: str) -> subprocess.CompletedProcess:
        (fake_dir / "mode").write_text(mode)
        env = dict(os.environ, **files.runner_env)
        return subprocess.run(
            [str(files.wrapper), "exec", f"agent-{ID}", "python3", "entry.py", "--task_dir", TASK],
            env=env,
            capture_output=True,
            timeout=120,
        )

    def calls() -> list[list[str]]:
        return [json.loads(line)["argv"] for line in (fake_dir / "calls.jsonl").read_text().splitlines()]

    def facts() -> list[dict]:
        return [json.loads(line) for line in (evidence / f"{ID}.agent_exec.jsonl").read_text().splitlines()]

    return run, calls, facts


def test_the_shim_caps_the_agent_execs_output_and_the_status_line_gets_through(shim_bed):
    run, calls, facts = shim_bed
    done = run("flood")
    assert done.returncode == 0
    assert len(done.stdout) + len(done.stderr) < 100_000 + 400
    assert done.stdout.endswith(b"dropped (stdout %d, stderr 5000)\n" % (3000 * 1024 + len(STATUS) - 100_000) + STATUS)
    [fact] = facts()
    assert fact["dropped_bytes"] == 3000 * 1024 + 5000 + len(STATUS) - 100_000 and fact["hung"] is False
    # Then one kill(-1) in the agent's container ends whatever the agent left running there.
    # The last exec (the task database's probe may inspect its pg container after it: not an exec).
    assert [c for c in calls() if c[0] == "exec"][-1] == [
        "exec",
        "--user",
        "0",
        f"agent-{ID}",
        "sh",
        "-c",
        "kill -KILL -1 2>/dev/null; exit 0",
    ]


def test_the_shim_ends_an_agent_exec_whose_output_is_held_at_its_bound(shim_bed):
    run, calls, facts = shim_bed
    done = run("hold")
    assert done.returncode == 143  # the docker CLI ended by SIGTERM, as a shell reports it
    assert STATUS in done.stdout
    [fact] = facts()
    assert fact["hung"] is True and fact["bound_sec"] == 2.0 and fact["leftovers_kill"] == 0
    assert [c for c in calls() if c[0] == "exec"][-1][:4] == ["exec", "--user", "0", f"agent-{ID}"]


# ---------------------------------------------------------------- creations: log, capabilities, staging


def test_every_creation_gets_the_bounded_log_and_its_roles_capability_drops(shim_bed, tmp_path):
    run, calls, _ = shim_bed
    env = _runner_env(tmp_path)
    for name in (f"agent-{ID}", f"pg-{ID}"):
        done = subprocess.run(
            [str(tmp_path / "run" / "custody" / "shim" / "docker"), "run", "-d", "--name", name, "img", "sleep", "1"],
            env=env,
            capture_output=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
    agent_argv, pg_argv = [a for a in calls() if a[0] == "run"]
    for argv, dropped in ((agent_argv, container_caps.TASK_DROP), (pg_argv, container_caps.PG_DROP)):
        assert [argv[i + 1] for i, a in enumerate(argv) if a == "--cap-drop"] == list(dropped)
        assert "MKNOD" in dropped
        assert argv[argv.index("--log-driver") + 1] == "json-file"
        assert [argv[i + 1] for i, a in enumerate(argv) if a == "--log-opt"] == ["max-size=1048576", "max-file=2"]
        assert argv.index("--cap-drop") < argv.index("img")  # options, before the image
    assert "KILL" in container_caps.PG_DROP and "KILL" not in container_caps.TASK_DROP


@pytest.mark.parametrize(
    "flag",
    [
        ["--privileged"],
        ["--cap-add", "MKNOD"],
        ["--cap-add=ALL"],
        ["--log-opt", "max-size=1g"],
        ["--log-driver", "none"],
    ],
)
def test_a_creation_that_would_win_back_a_capability_or_an_unbounded_log_is_refused(shim_bed, tmp_path, flag):
    _, calls, _ = shim_bed
    done = subprocess.run(
        [
            str(tmp_path / "run" / "custody" / "shim" / "docker"),
            "run",
            "-d",
            "--name",
            f"agent-{ID}",
            *flag,
            "img",
            "sleep",
            "1",
        ],
        env=_runner_env(tmp_path),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 75 and b"flag_conflict" in done.stderr
    assert not (tmp_path / "fake" / "calls.jsonl").exists() or not [a for a in calls() if a[0] == "run"]


def test_the_runners_staging_copy_is_mounted_narrowed_to_the_tasks_own_folder(shim_bed, tmp_path):
    _, calls, _ = shim_bed
    staging_root = tmp_path / "resources" / f"tmp-{LABEL[:12]}"
    staging = staging_root / f"cowork-stage-{ID}.abc123"
    (staging / "tasks" / "finalpool" / TASK).mkdir(parents=True)
    dumps = tmp_path / "run" / "bench" / "dumps"
    wrapper = str(tmp_path / "run" / "custody" / "shim" / "docker")
    done = subprocess.run(
        [
            wrapper,
            "run",
            "-d",
            "--name",
            f"agent-{ID}",
            "-e",
            "A=1",
            "-v",
            f"{dumps}:/workspace/dumps",
            "-v",
            f"{staging}/tasks:/workspace/tasks",
            "img",
            "sleep",
            "1",
        ],
        env=_runner_env(tmp_path),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    [argv] = [a for a in calls() if a[0] == "run"]
    assert f"{staging}/tasks/finalpool/{TASK}:/workspace/tasks/finalpool/{TASK}" in argv
    assert f"{staging}/tasks:/workspace/tasks" not in argv
    # Another target inside the staging root, or a --mount of it, refuses the creation.
    for extra in (["-v", f"{staging}:/workspace/other"], ["--mount", f"type=bind,source={staging},target=/x"]):
        refused = subprocess.run(
            [wrapper, "run", "-d", "--name", f"agent-{ID}", *extra, "img", "sleep", "1"],
            env=_runner_env(tmp_path),
            capture_output=True,
            timeout=60,
        )
        assert refused.returncode == 75 and b"staging_mount_refused" in refused.stderr


def test_a_staging_folder_reached_through_a_link_is_refused_never_followed(tmp_path):
    staging = tmp_path / "stage" / "tasks"
    (staging / "finalpool").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (staging / "finalpool" / TASK).symlink_to(tmp_path / "elsewhere")
    assert staging_mount.narrowed(f"{staging}:/workspace/tasks", str(tmp_path / "stage"), TASK)[1] is True
    assert staging_mount.narrowed(f"{staging}:/workspace/tasks", str(tmp_path / "stage"), "../x")[1] is True
    assert staging_mount.narrowed(f"{staging}:/workspace/tasks", str(tmp_path / "stage"), None)[1] is True
    assert staging_mount.narrowed("/data/x:/workspace/tasks", str(tmp_path / "stage"), TASK) == (
        "/data/x:/workspace/tasks",
        False,
    )


def _runner_env(tmp_path: Path) -> dict:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "COWORK_SHIM_CONFIG": str(tmp_path / "run" / "custody" / "shim_config.json"),
    }
