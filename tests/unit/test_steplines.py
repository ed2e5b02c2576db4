"""Step lines of a long step (the derived image's build): a line on each step, one every interval
while a step lasts, none after the step ends."""

from __future__ import annotations

import io
import re
import time

from cowork_adapter.steplines import StepLines

LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] building x:y: (.+) \(\d+m\d\ds in this step\)$")


def test_each_step_and_a_beat_while_it_lasts():
    out = io.StringIO()
    with StepLines("building x:y", out, interval=0.05) as lines:
        lines.set("Step 1/3 : FROM base\n")
        time.sleep(0.5)
        lines.set("Step 2/3 : RUN " + "pip install x " * 20)
    after = out.getvalue()
    time.sleep(0.2)
    assert out.getvalue() == after  # nothing once the build is over
    steps = [LINE.match(text).group(1) for text in after.splitlines()]
    assert steps[0] == "starting"
    assert steps.count("Step 1/3 : FROM base") >= 4  # its own line and the beats while it ran
    assert steps[-1].startswith("Step 2/3 : RUN pip install x") and steps[-1].endswith("...") and len(steps[-1]) == 120
