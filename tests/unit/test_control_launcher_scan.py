"""run_view.is_launcher_of: another process's unresolvable run root never breaks `status`."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from cowork_adapter.ops.run_view import is_launcher_of


def test_a_launcher_naming_a_symlink_loop_is_not_ours_and_raises_nothing(tmp_path: Path) -> None:
    # Found when a concurrent test's launcher named a looping --run-root: `status` of an
    # unrelated run crashed on resolving it while scanning /proc for launchers.
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    ours = tmp_path / "ours"
    ours.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "cowork_adapter", "run", "--run-root", str(loop)]
    )
    try:
        deadline = time.monotonic() + 10
        while "cowork_adapter" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert is_launcher_of(proc.pid, ours) is False
    finally:
        proc.kill()
        proc.wait()
