"""Live progress while `run` works, and the same picture for `status`.

On a terminal the view is a rich table redrawn in place (tasks done of total, passes, failures,
spending, meter age, disk headroom, elapsed time and ETA). When output is not a terminal (a log
file, a pipe, `TERM=dumb`) it prints one timestamped line per change, plus a heartbeat line.
run.py calls `ProgressView.for_stream(stream)`, `.update(monitor)` on every poll and `.close()`
once at the end. The row builders are pure so `status` and the tests share them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..schemas.monitor import Monitor, Progress

PLAIN_HEARTBEAT_SEC = 60.0
LIVE_REFRESH_PER_SEC = 1.0
GIB = 1 << 30


def eta_seconds(done: int, selected: int, elapsed_sec: float, blocked: int = 0) -> float | None:
    """Seconds until every selected task that will run is done, at the pace so far; None before the
    first task. `blocked` (environment-blocked) tasks are selected but never run, so never wait."""
    if done <= 0 or selected <= 0 or elapsed_sec <= 0:
        return None
    return max(0, selected - blocked - done) * (elapsed_sec / done)


def format_duration(seconds: float | None) -> str:
    """`1h02m`, `4m05s`, `12s`; an em dash when unknown."""
    if seconds is None:
        return "—"
    total = int(round(max(0.0, seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def _gib(value: int | None) -> str:
    return "unknown" if value is None else f"{value / GIB:.1f} GiB"


def tally(p: Progress) -> tuple[int, int]:
    """(settled, waiting): rows with their final status, and the rest that is neither settled nor
    running (not started yet, or finished by the runner and waiting for its verdict). With `running`
    they add up to the denominator: passed + failed + agent_failed + infra_failed + not_attempted +
    environment_blocked + running + waiting = selected."""
    settled = p.passed + p.failed + p.agent_failed + p.infra_failed + p.not_attempted + p.environment_blocked
    return settled, max(0, p.selected - settled - p.running)


def _stop_word(monitor: Monitor, stopped: bool | None) -> str:
    """'stopping' only while the run is stopping; 'stopped' once it has ended."""
    return "stopped" if (monitor.finished if stopped is None else stopped) else "stopping"


def summary_line(monitor: Monitor, stopped: bool | None = None) -> str:
    """The run at a glance, in one line (also what `status` prints). "done" counts settled rows, so
    the counts after it add up to the denominator. `stopped`: the run has ended (default: the
    monitor says its launcher finished)."""
    p, s, m = monitor.progress, monitor.spending, monitor.meter
    settled, waiting = tally(p)
    parts = [
        f"{settled}/{p.selected} done",
        f"{p.passed} passed",
        f"{p.failed} failed",
        f"{p.agent_failed} agent_failed",
        f"{p.infra_failed} infra_failed",
        f"{p.running} running",
        f"{p.environment_blocked} environment_blocked",  # after the older fields: readers match the prefix
        f"{p.not_attempted} not_attempted",
        f"{waiting} waiting",
    ]
    if s.run_spent_usd is not None:
        parts.append(f"run ${s.run_spent_usd:.2f}")
    if s.campaign_remaining_usd is not None:
        parts.append(f"campaign left ${s.campaign_remaining_usd:.2f}")
    if m.age_sec is not None:
        parts.append(f"meter {m.age_sec:.0f}s old")
    if monitor.disk.resource_free_bytes is not None:
        parts.append(f"disk {monitor.disk.resource_free_bytes / GIB:.0f} GiB free")
    if monitor.stop_reason:
        parts.append(f"{_stop_word(monitor, stopped)}: {monitor.stop_reason}")
    return " | ".join(parts)


def progress_rows(monitor: Monitor, elapsed_sec: float | None, stopped: bool | None = None) -> list[tuple[str, str]]:
    """(field, value) rows of the progress picture; `elapsed_sec` None leaves elapsed and ETA unknown."""
    p, s, m, d = monitor.progress, monitor.spending, monitor.meter, monitor.disk
    settled, waiting = tally(p)
    eta = (
        None
        if elapsed_sec is None or monitor.finished
        else eta_seconds(p.done, p.selected, elapsed_sec, p.environment_blocked)
    )
    run_spent = _usd(s.run_spent_usd)
    if s.run_budget_usd is not None:
        run_spent += f" of {_usd(s.run_budget_usd)} budget"
        if s.run_spent_usd is not None:
            run_spent += f" ({_usd(max(0.0, s.run_budget_usd - s.run_spent_usd))} left)"
    campaign = f"{_usd(s.campaign_spent_usd)} spent, {_usd(s.campaign_remaining_usd)} remaining"
    if s.reserve_usd is not None:
        campaign += f" (reserve {_usd(s.reserve_usd)})"
    meter = "no accepted reading yet" if m.age_sec is None else f"{m.age_sec:.0f}s old (bound {m.blindness_sec:.0f}s)"
    if m.last_error and m.rejected:
        meter += f"; last rejection: {m.last_error[:80]}"
    disk = (
        f"resource {_gib(d.resource_free_bytes)} free (reserve {_gib(d.resource_reserve_bytes)}), "
        f"/ {_gib(d.root_free_bytes)} free (reserve {_gib(d.root_reserve_bytes)})"
    )
    rows = [
        (
            "tasks",
            f"{settled}/{p.selected} done, {p.running} running, {waiting} waiting, "
            f"{p.not_attempted} not attempted, {p.environment_blocked} environment-blocked",
        ),
        ("passed", str(p.passed)),
        ("failed", str(p.failed)),
        ("agent failures", str(p.agent_failed)),
        ("infrastructure failures", str(p.infra_failed)),
        ("environment-blocked", str(p.environment_blocked)),
        ("run spent", run_spent),
        ("campaign", campaign),
        ("meter", meter),
        ("disk", disk),
        ("elapsed", format_duration(elapsed_sec)),
        ("eta", "finished" if monitor.finished else format_duration(eta)),
    ]
    if monitor.stop_reason:
        rows.append((_stop_word(monitor, stopped), ", ".join(monitor.stop_causes) or monitor.stop_reason))
    return rows


def _rich_capable(stream: TextIO) -> bool:
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and os.environ.get("TERM", "") not in ("", "dumb")


@dataclass
class ProgressView:
    """One run's live progress on `stream`: a rich table on a terminal, plain lines otherwise."""

    stream: TextIO
    rich: bool = False
    started: float = field(default_factory=time.monotonic)
    _last: str = ""
    _last_at: float = 0.0
    _monitor: Monitor | None = None
    _live: Any = None  # rich.live.Live while the table is on screen
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def for_stream(cls, stream: TextIO = sys.stdout) -> ProgressView:
        """The view that suits `stream`: rich when it is a terminal (and TERM is not dumb)."""
        return cls(stream, rich=_rich_capable(stream))

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def update(self, monitor: Monitor) -> None:
        """Show `monitor`; never raises (progress must not stop a run)."""
        try:
            if self.rich:
                self._update_rich(monitor)
            else:
                self._update_plain(monitor)
        except Exception as exc:  # noqa: BLE001 - a broken display falls back to plain lines
            if self.rich:
                self._stop_live()
                self.rich = False
                print(
                    f"cowork-adapter: live display failed ({type(exc).__name__}); plain lines follow.",
                    file=self.stream,
                    flush=True,
                )
                self._update_plain(monitor)

    def close(self) -> None:
        """Leave the final picture on screen and release the terminal."""
        self._stop_live()

    # ---- plain lines ----

    def _update_plain(self, monitor: Monitor) -> None:
        p = monitor.progress
        # Only counts and stop causes decide whether a line is news; ages and free bytes change every poll.
        key = f"{p.to_dict()}|{monitor.stop_causes}|{monitor.finished}"
        now = time.monotonic()
        if key != self._last or now - self._last_at >= PLAIN_HEARTBEAT_SEC:
            stamp = monitor.observed_at.strftime("%Y-%m-%dT%H:%M:%SZ")
            eta = (
                "finished"
                if monitor.finished
                else format_duration(eta_seconds(p.done, p.selected, self.elapsed(), p.environment_blocked))
            )
            print(f"[{stamp}] {summary_line(monitor)} | eta {eta}", file=self.stream, flush=True)
            self._last, self._last_at = key, now

    # ---- rich table ----

    def _update_rich(self, monitor: Monitor) -> None:
        with self._lock:
            self._monitor = monitor
        if self._live is None:
            from rich.console import Console
            from rich.live import Live

            # A COLUMNS/LINES inherited from another shell would fix the table's width; ask the terminal.
            environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
            console = Console(file=self.stream, force_terminal=True, _environ=environ)
            # Lines other code prints on the same terminal go above the table instead of through it.
            ours = self.stream is sys.stdout
            self._live = Live(
                get_renderable=self._render,
                console=console,
                refresh_per_second=LIVE_REFRESH_PER_SEC,
                transient=False,
                redirect_stdout=ours,
                redirect_stderr=ours,
            )
            self._live.start()
        self._live.refresh()

    def _render(self):
        from rich.table import Table

        with self._lock:
            monitor = self._monitor
        table = Table(title="cowork-adapter run", show_header=False, title_justify="left", expand=False)
        table.add_column("field", style="bold")
        table.add_column("value")
        if monitor is None:
            table.add_row("state", "starting")
            return table
        for name, value in progress_rows(monitor, self.elapsed()):
            style = "bold red" if name in ("stopping", "stopped") else None
            table.add_row(name, value, style=style)
        table.caption = f"updated {monitor.observed_at.strftime('%H:%M:%S')} UTC"
        return table

    def _stop_live(self) -> None:
        if self._live is not None:
            try:
                self._live.refresh()
                self._live.stop()
            finally:
                self._live = None
