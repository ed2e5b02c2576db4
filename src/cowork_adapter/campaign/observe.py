"""Reading the key meter inside the blindness bound (the only way a run may keep spending).

One observation runs until a deadline:
  1. read with a timeout of min(5 s, time left);
  2. reject a read that arrived after the deadline, or whose usage is non-numeric, NaN, infinite,
     negative or below the last accepted usage; an error is rejected the same way;
  3. after a rejection pause min(3 s, time left) and read again;
  4. a valid read counts only once it is SAVED to the campaign; a save that ends after the
     deadline raises AcceptedTooLate (the number is on disk, but grants no more time);
  5. when the deadline passes, MeterBlind. CampaignPersistenceError propagates at once.

Time comes from an injected clock, so every timing rule is testable without sleeping.
`MeterSchedule` turns accepted reads into the supervisor's deadlines and waits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import CampaignPersistenceError
from ..vocab import MeterPhase

if TYPE_CHECKING:  # only an annotation here: httpx is imported by whoever builds the meter
    from .meter import MeterReading

POLL_SEC = 15.0
RETRY_SEC = 3.0
READ_SLICE_SEC = 5.0
DEFAULT_BLINDNESS_SEC = 30.0
# A bound must fit one poll wait plus one full read slice, with room to retry.
MIN_BLINDNESS_SEC = POLL_SEC + READ_SLICE_SEC


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def utc_now() -> datetime:
    return datetime.now(UTC)


def validate_blindness(seconds: float) -> float:
    """The blindness bound B in seconds: finite and above 20 (poll 15 + one 5 s read)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        raise ValueError(f"meter blindness must be a finite number of seconds, not {seconds!r}")
    if seconds <= MIN_BLINDNESS_SEC:
        raise ValueError(f"meter blindness must be above {MIN_BLINDNESS_SEC:g} seconds, not {seconds:g}")
    return float(seconds)


def json_usage(value: Any) -> float | str | None:
    """A usage value as JSON can hold it with allow_nan=False: number, null, or a repr string."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else repr(float(value))
    return repr(value)[:80]


@dataclass(frozen=True)
class Observation:
    """One diagnostic record: a rejected read, or the acceptance that followed rejections."""

    observed_at: str
    phase: str
    attempt: int
    previous_usage: float | None
    observed_usage: float | str | None
    accepted: bool
    error_type: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AcceptedReading:
    """A saved reading. `request_time` (monotonic) is when it was asked for: the new anchor."""

    request_time: float
    usage: float
    limit: float | None
    limit_remaining: float | None
    attempts: int
    observed_at: datetime


class MeterBlind(TimeoutError):
    """No reading was accepted and saved before the deadline: stop (budget_meter_unavailable)."""

    def __init__(self, last_error: str | None, observations: list[Observation] | None = None) -> None:
        super().__init__(last_error or "no meter reading was accepted before the deadline")
        self.last_error = last_error
        self.observations = observations or []


class AcceptedTooLate(MeterBlind):
    """The reading was saved, but the save ended after the deadline: it grants no more time."""


def judge_usage(usage: Any, previous: float | None) -> tuple[str, str] | None:
    """(error_type, error) when a meter usage must be rejected, else None."""
    if isinstance(usage, bool) or not isinstance(usage, (int, float)):
        return "non_numeric", f"usage {usage!r:.80} is not a number"
    if math.isnan(usage):
        return "nan", "usage is NaN"
    if math.isinf(usage):
        return "infinite", f"usage is {usage!r}"
    if usage < 0:
        return "negative", f"usage {usage!r} is negative"
    if previous is not None and usage < previous:
        return "decreased", f"usage {usage!r} is below the last accepted {previous!r}"
    return None


@dataclass
class MeterObserver:
    """Runs observations. `read(timeout)` asks the meter; `save(usage, observed_at)` persists an
    accepted usage (Campaign.record_usage); `last_accepted()` is the usage a read must not go below.
    `on_observation` receives every rejected read and every acceptance that followed a rejection.
    """

    read: Callable[[float], MeterReading]
    save: Callable[[float, datetime], None]
    last_accepted: Callable[[], float | None]
    clock: Clock = field(default_factory=SystemClock)
    on_observation: Callable[[Observation], None] = lambda _obs: None
    wall: Callable[[], datetime] = utc_now
    read_slice_sec: float = READ_SLICE_SEC
    retry_sec: float = RETRY_SEC

    def observe(self, deadline: float, *, phase: MeterPhase | str = MeterPhase.POLL) -> AcceptedReading:
        """Return the first reading accepted and saved before `deadline` (monotonic seconds)."""
        seen: list[Observation] = []
        last_error: str | None = None
        attempt = 0
        while True:
            left = deadline - self.clock.monotonic()
            if left <= 0:
                raise MeterBlind(last_error, seen)
            attempt += 1
            previous = self.last_accepted()
            requested = self.clock.monotonic()
            observed: Any = None
            try:
                reading = self.read(min(self.read_slice_sec, left))
            except CampaignPersistenceError:
                raise
            except Exception as exc:  # any failed read is one rejected observation
                problem = (getattr(exc, "error_type", None) or type(exc).__name__, str(exc) or type(exc).__name__)
                observed = getattr(exc, "observed", None)
            else:
                observed = reading.usage
                arrived = self.clock.monotonic()
                if arrived > deadline:
                    problem = ("late", f"the reading arrived {arrived - deadline:.1f}s after the deadline")
                else:
                    problem = judge_usage(reading.usage, previous)  # type: ignore[assignment]  # None: no problem
                if problem is None:
                    observed_at = self.wall()
                    self.save(reading.usage, observed_at)  # CampaignPersistenceError propagates
                    if seen:
                        self._emit(seen, phase, attempt, previous, observed, accepted=True)
                    if self.clock.monotonic() > deadline:
                        raise AcceptedTooLate("the accepted reading was saved after the deadline", seen)
                    return AcceptedReading(
                        # A stored reading of another host's poll is as old as that poll: the next
                        # deadline runs from then, so a reading host is never blind for longer.
                        request_time=requested - max(0.0, reading.age_sec),
                        usage=float(reading.usage),
                        limit=reading.limit,
                        limit_remaining=reading.limit_remaining,
                        attempts=attempt,
                        observed_at=observed_at,
                    )
            error_type, last_error = problem
            self._emit(
                seen, phase, attempt, previous, observed, accepted=False, error_type=error_type, error=last_error
            )
            left = deadline - self.clock.monotonic()
            if left <= 0:
                raise MeterBlind(last_error, seen)
            self.clock.sleep(min(self.retry_sec, left))

    def _emit(
        self, seen: list[Observation], phase: Any, attempt: int, previous: float | None, observed: Any, **rest: Any
    ) -> None:
        obs = Observation(
            observed_at=self.wall().isoformat(),
            phase=str(phase),
            attempt=attempt,
            previous_usage=previous,
            observed_usage=json_usage(observed),
            **rest,
        )
        seen.append(obs)
        self.on_observation(obs)


@dataclass
class MeterSchedule:
    """The supervisor's meter cadence around one anchor (request time of the last saved read).

    Healthy meter: reads at anchor, +15, +30, ... . Every wait leaves one full read slice
    before anchor + B, so a slow step elsewhere shortens the wait instead of blinding the run.
    """

    blindness_sec: float
    anchor: float
    poll_sec: float = POLL_SEC
    read_slice_sec: float = READ_SLICE_SEC

    def __post_init__(self) -> None:
        self.blindness_sec = validate_blindness(self.blindness_sec)

    @property
    def deadline(self) -> float:
        return self.anchor + self.blindness_sec

    def accept(self, reading: AcceptedReading) -> None:
        self.anchor = max(self.anchor, reading.request_time)

    def expired(self, now: float) -> bool:
        return now >= self.deadline

    def age(self, now: float) -> float:
        return max(0.0, now - self.anchor)

    def next_wait(self, now: float) -> float:
        """Seconds to wait before the next read: min(poll, anchor + B − slice − now), ≥ 0."""
        return max(0.0, min(self.poll_sec, self.deadline - self.read_slice_sec - now))
