"""Step lines of a long step (the derived image's build): a line on each step, one every interval
while a step lasts, none after the step ends."""

from __future__ import annotations

import io
import re
import threading
import time

from cowork_adapter.demo.env import wait_for
from cowork_adapter.image.steplines import StepLines

LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] building x:y: (.+) \(\d+m\d\ds in this step\)$")


def test_each_step_and_a_beat_while_it_lasts():
    out = io.StringIO()
    with StepLines("building x:y", out, interval=0.05) as lines:
        lines.set("Step 1/3 : FROM base\n")
        # The step lasts until three beats were said (a fixed 0.5 s could pass with the beat thread
        # barely run on a loaded machine); the count below is then the beats' own.
        wait_for(lambda: out.getvalue().count("Step 1/3 : FROM base") >= 4, 30, 0.02)
        lines.set("Step 2/3 : RUN " + "pip install x " * 20)
    after = out.getvalue()
    time.sleep(0.2)
    assert out.getvalue() == after  # nothing once the build is over
    steps = [LINE.match(text).group(1) for text in after.splitlines()]
    assert steps[0] == "starting"
    assert steps.count("Step 1/3 : FROM base") >= 4  # its own line and the beats while it ran
    assert steps[-1].startswith("Step 2/3 : RUN pip install x") and steps[-1].endswith("...") and len(steps[-1]) == 120


def test_a_wrapped_command_logs_everything_and_steps_on_its_step_lines(tmp_path):
    # The test bed's builds run through run_logged: the whole output in the log, a line per step
    # line, the latest detail only in the beats, the command's exit code returned.
    import re as _re

    from cowork_adapter.image.steplines import run_logged

    log = tmp_path / "build.log"
    # The command holds its detail until a beat has shown it (the watcher below says so), 30 s at
    # most: a fixed 0.4 s could pass without a beat when the beat thread or the reader of the
    # command's output is not run in time on a loaded machine.
    shown = tmp_path / "beat-shown"
    script = (
        "echo 'I: Retrieving Packages'; echo 'I: Unpacking libc6'; "
        f"for _ in $(seq 300); do [ -e '{shown}' ] && break; sleep 0.1; done; "
        "printf 'I: Configuring 10%%\\rI: Configuring base\\n'; sleep 0.3; echo 'noise'; exit 3"
    )
    out = io.StringIO()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if "I: Retrieving Packages - I: Unpacking libc6" in out.getvalue():
                shown.write_text("")
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        code = run_logged(
            "[testbed] debootstrap",
            ["bash", "-c", script],
            str(log),
            _re.compile(r"^I: (?!Unpacking)"),
            _re.compile(r"^I: Unpacking"),
            out,
            interval=0.1,
            first="warming up",
        )
    finally:
        done.set()
        watcher.join(timeout=10)
    assert code == 3
    assert log.read_bytes() == (
        b"I: Retrieving Packages\nI: Unpacking libc6\nI: Configuring 10%\rI: Configuring base\nnoise\n"
    )
    said = [
        _re.match(r"^\[\d\d:\d\d:\d\d\] \[testbed\] debootstrap: (.+) \(\d+m\d\ds in this step\)$", line).group(1)
        for line in out.getvalue().splitlines()
    ]
    assert said[0] == "warming up"
    assert "I: Retrieving Packages - I: Unpacking libc6" in said  # a beat shows the detail
    assert "I: Unpacking libc6" not in said  # a detail is never a line of its own
    assert said.count("I: Configuring base") >= 1  # the carriage return's last state is the step
    assert not any("noise" in text for text in said)


def test_a_command_killed_by_a_signal_and_a_missing_command(tmp_path):
    import re as _re

    from cowork_adapter.image.steplines import main, run_logged

    code = run_logged(
        "x",
        ["bash", "-c", "kill -TERM $$"],
        str(tmp_path / "a.log"),
        _re.compile("^Step"),
        stream=io.StringIO(),
        interval=5,
    )
    assert code == 128 + 15
    assert main(["--what", "x", "--log", str(tmp_path / "b.log"), "--step", "^S", "--", "/nonexistent/cmd"]) == 127
