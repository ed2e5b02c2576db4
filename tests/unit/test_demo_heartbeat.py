"""The demo's progress lines: one on every step, and one at least every interval while a step runs."""

from __future__ import annotations

import io
import re

from cowork_adapter.demo.env import wait_for
from cowork_adapter.demo.heartbeat import DemoHeartbeat
from cowork_adapter.demo.scenarios import table_label

LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] demo \d+m\d\ds: .+, \d+m\d\ds in; \d+ checks so far \(\d+ passed")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_each_step_is_said_with_elapsed_times_and_the_checks_so_far():
    clock, out = Clock(), io.StringIO()
    beat = DemoHeartbeat(3, stream=out, interval=3600, clock=clock).start()
    beat.preparing()
    clock.now += 65
    beat.scenario(1, "pass")
    clock.now += 30
    beat.scenario_done("pass", 12, 1)
    beat.scenario(2, "meter-outage")
    clock.now += 7
    line = beat.line()
    beat.close()
    lines = out.getvalue().splitlines()
    assert all(LINE.match(text) for text in lines), lines
    assert "preparing the demo benchmark" in lines[1]
    assert "demo 1m05s: scenario 1/3 pass, 0m00s in" in lines[2]
    assert (
        "scenario pass done (12 passed, 1 FAILED)" in lines[3] and "13 checks so far (12 passed, 1 FAILED)" in lines[3]
    )
    assert "demo 1m42s: scenario 2/3 meter-outage, 0m07s in; 13 checks so far" in line


def test_a_long_step_still_gets_a_line_every_interval():
    out = io.StringIO()
    beat = DemoHeartbeat(1, stream=out, interval=0.05).start()
    beat.scenario(1, "kill9-random")
    # The step lasts until three beats were said (a fixed 0.6 s could pass with the beat thread
    # barely run on a loaded machine); the count below is then the beats' own.
    wait_for(lambda: out.getvalue().count("scenario 1/1 kill9-random") >= 4, 30, 0.02)
    beat.close()
    lines = [text for text in out.getvalue().splitlines() if "scenario 1/1 kill9-random" in text]
    assert len(lines) >= 4, lines  # the step's own line and the beats while it runs


def test_a_scenario_of_several_runs_labels_each_run_in_the_table():
    assert table_label("diagnostic", "[diagnostic-on] the launcher exits 0") == (
        "diagnostic (diagnostic-on)",
        "the launcher exits 0",
    )
    assert table_label("diagnostic", "[diagnostic-off] no file") == ("diagnostic (diagnostic-off)", "no file")
    assert table_label("pass", "[pass] every row") == ("pass", "every row")
    assert table_label("pass", "every row") == ("pass", "every row")
