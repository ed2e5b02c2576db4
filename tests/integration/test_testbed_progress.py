"""The test bed's builds (testbed/testbed.sh, testbed/realbench.sh) are never silent: a slow step run
through their wrapper (testbed/steps.sh) gives a timestamped line on stderr at least every 10 s, and
stdout stays free for the export lines `eval "$(bash testbed/testbed.sh up)"` reads.

The real images are never rebuilt here: a fake slow step, and a tiny Docker build of a throwaway tag
on the test bed's daemon, go through the same functions the scripts build with."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
import uuid
from itertools import pairwise
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STEPS = REPO / "testbed" / "steps.sh"
LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] (.+)$")
# The beat is every 10 s; a line may come up to a second or so later on a loaded 2-core machine.
MAX_GAP = 10.0 + 2.0


def _run_timed(script: str, env: dict[str, str] | None = None) -> tuple[int, str, list[tuple[float, str]]]:
    """Run a bash script (steps.sh sourced); stderr lines with their arrival times, and stdout."""
    proc = subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-c", f'. "{STEPS}"\n{script}'],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    lines: list[tuple[float, str]] = []
    start = time.monotonic()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.monotonic() - start, line.rstrip("\n")))

    reader = threading.Thread(target=read)
    reader.start()
    assert proc.stdout is not None
    out = proc.stdout.read()  # stderr is the reader's alone
    proc.wait(timeout=300)
    reader.join()
    return proc.returncode, out, lines


def _assert_never_silent(lines: list[tuple[float, str]], ended: float) -> None:
    times = [0.0] + [at for at, _ in lines] + [ended]
    gaps = [later - earlier for earlier, later in pairwise(times)]
    assert max(gaps) <= MAX_GAP, f"a silence of {max(gaps):.1f} s: {lines}"


def test_a_slow_step_gets_a_line_at_least_every_10_seconds(tmp_path):
    log = tmp_path / "slow.log"
    started = time.monotonic()
    code, out, lines = _run_timed(
        f'step_run "[testbed] fake build" "{log}" "starting" "^Step " "\\S" -- '
        "bash -c 'echo Step 1/2 : RUN slow; sleep 1; echo still working; sleep 24; echo Step 2/2 : done; exit 4'; "
        'echo "rc=$?"'
    )
    ended = time.monotonic() - started
    assert out == "rc=4\n"  # only what the script itself prints: no progress on stdout
    assert code == 0
    assert all(LINE.match(text) for _, text in lines), lines  # every stderr line is a timestamped line
    texts = [LINE.match(text).group(1) for _, text in lines]
    assert all(text.startswith("[testbed] fake build: ") for text in texts)
    assert sum("Step 1/2 : RUN slow" in text for text in texts) >= 3  # its own line and two beats in 24 s
    assert any("Step 1/2 : RUN slow - still working" in text for text in texts)
    assert "Step 2/2 : done" in texts[-1]
    _assert_never_silent(lines, ended)
    assert log.read_text() == "Step 1/2 : RUN slow\nstill working\nStep 2/2 : done\n"


def test_a_docker_build_through_the_scripts_builder(docker_host, tmp_path):
    # The same docker_build_logged testbed.sh builds the postgres stand-in with and realbench.sh its
    # images with, on a throwaway tag: its steps are lines, a slow step gets beats.
    tag = f"cowork-readme-steps-test:{uuid.uuid4().hex[:12]}"
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM cowork-testbed/base:bookworm\nRUN echo {tag} && sleep 14\nRUN echo done\n")
    log = tmp_path / "build.log"
    try:
        started = time.monotonic()
        code, out, lines = _run_timed(
            f'docker_build_logged "[testbed] building {tag}" "{log}" -t "{tag}" "{ctx}"',
            env={"DOCKER_HOST": docker_host},
        )
        ended = time.monotonic() - started
        assert code == 0, log.read_text()
        assert out == ""
        assert all(LINE.match(text) for _, text in lines), lines
        texts = [LINE.match(text).group(1) for _, text in lines]
        slow = [text for text in texts if re.search(r"Step 2/3 : RUN echo \S+ && sleep 14", text)]
        assert len(slow) >= 2, texts  # the step's own line and at least one beat while it sleeps
        assert any(not text.endswith("(0m00s in this step)") for text in slow), texts  # a beat within the step
        assert any("Step 3/3 : RUN echo done" in text for text in texts)
        _assert_never_silent(lines, ended)
        assert "Successfully tagged" in log.read_text() or "naming to" in log.read_text()
    finally:
        subprocess.run(
            ["docker", "image", "rm", "-f", tag],
            env={**os.environ, "DOCKER_HOST": docker_host},
            capture_output=True,
            timeout=60,
        )


def test_up_prints_only_export_lines(docker_host):
    # On a test bed that is up and current (as CI's `.ci/run` leaves it), `up` builds nothing: its
    # stdout is exactly what `eval` needs, its progress on stderr.
    tb_dir = os.environ.get("COWORK_TESTBED_DIR", "/var/lib/cowork-testbed")
    if docker_host != f"unix://{tb_dir}/docker.sock":
        pytest.skip(f"{docker_host} is not the test bed's daemon: `up` would start another one")
    done = subprocess.run(
        ["bash", str(REPO / "testbed" / "testbed.sh"), "up"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DOCKER_HOST": docker_host},
    )
    assert done.returncode == 0, done.stderr
    # The rootful daemon's export, then the rootless daemon's socket and user (`testbed.sh rootless env`).
    rootless = f"unix://{tb_dir}/rootless/run/docker.sock"
    user = os.environ.get("COWORK_ROOTLESS_USER", "cowork-rootless")
    assert done.stdout.splitlines() == [
        f"export DOCKER_HOST={docker_host}",
        f"export COWORK_ROOTLESS_DOCKER_HOST={rootless}",
        f"export COWORK_ROOTLESS_USER={user}",
    ]
    assert done.stderr and all(LINE.match(line) for line in done.stderr.splitlines())


def test_a_detached_daemon_never_holds_the_callers_stdout(tmp_path):
    """`eval "$(bash testbed/testbed.sh up)"` reads up's stdout to its end: a daemon started there
    (`detach`, as both dockerd starts are) must not keep that pipe open. The stand-in daemon is a
    `sleep` that outlives the caller; the substitution must end while it still lives."""
    log, pidfile = tmp_path / "daemon.log", tmp_path / "daemon.pid"
    daemon = f'echo $$ >"{pidfile}"; echo daemon-says; exec sleep 300'
    script = f"echo before; detach \"{log}\" bash -c '{daemon}'; echo after"
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f'. "{STEPS}"\nout=$({script}); printf "%s" "$out"'],
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard: the pipe held would wait the sleep's 300 s
    )
    try:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "before\nafter", proc.stdout
        deadline = time.monotonic() + 60  # a hang guard: the daemon writes its pid as it starts
        while not (pidfile.is_file() and pidfile.read_text().endswith("\n")) and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(pidfile.read_text())
        os.kill(pid, 0)  # the daemon outlived the substitution that started it
        assert os.getsid(pid) == pid, "the daemon is not in a session of its own"
        while log.read_text() != "daemon-says\n" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert log.read_text() == "daemon-says\n"
    finally:
        if pidfile.is_file():
            os.kill(int(pidfile.read_text()), 15)
