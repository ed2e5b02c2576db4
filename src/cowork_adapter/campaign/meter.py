"""The provider key meter (OpenRouter's GET /key and GET /credits), read over HTTPS with httpx.

The key lives only in this object's memory and in the Authorization header; it is never put in
argv or a child's environment, and it is redacted from every error this module raises.
`read_usage` returns the raw numbers, including NaN, infinity or negative values: judging a
reading (finite, non-negative, not lower than the last accepted one) is observe.py's job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

DEFAULT_TIMEOUT_SEC = 5.0
REDACTED = "[redacted-key]"


class MeterError(Exception):
    """A read that produced no usable number. `error_type` is a stable short code."""

    def __init__(self, error_type: str, message: str, observed: Any = None) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.observed = observed  # the raw usage value when there was one (e.g. a string)


@dataclass(frozen=True)
class MeterReading:
    """One /key answer. `usage` is lifetime USD on the key, unvalidated (may be NaN or negative)."""

    usage: float
    limit: float | None
    limit_remaining: float | None
    requested_at_monotonic: float
    # How old the reading already was when this read returned it: 0 for the provider's own answer;
    # a shared campaign's stored reading (shared_meter.py) carries its age, so the blindness bound
    # runs from when the meter was read, not from when another host's copy of it was.
    age_sec: float = 0.0

    @property
    def key_headroom(self) -> float | None:
        """limit_remaining, else limit − usage; None means the key is uncapped."""
        if self.limit_remaining is not None:
            return self.limit_remaining
        if self.limit is not None:
            return self.limit - self.usage
        return None


@dataclass(frozen=True)
class Headroom:
    """What may still be spent: the smaller of the key's limit and the account's credits."""

    key_remaining: float | None  # None: uncapped key
    credits_remaining: float | None  # None: unavailable (see credits_unavailable_reason)
    credits_unavailable_reason: str | None

    @property
    def effective(self) -> float | None:
        bounds = [b for b in (self.key_remaining, self.credits_remaining) if b is not None]
        return min(bounds) if bounds else None


def _number(value: Any, field: str, *, required: bool) -> float | None:
    if value is None and not required:
        return None
    # bool is an int in Python, but `true` is not a dollar amount.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MeterError("non_numeric", f"meter field {field} is not a number: {value!r:.80}", observed=value)
    return float(value)


def _unwrap(body: Any) -> dict:
    if isinstance(body, dict) and isinstance(body.get("data"), dict):
        return body["data"]
    if isinstance(body, dict):
        return body
    raise MeterError("malformed", f"meter body is a {type(body).__name__}, not an object")


class KeyMeter:
    """Reads one key's meter. `base_url` is e.g. https://openrouter.ai/api/v1 (no trailing /key)."""

    def __init__(
        self,
        base_url: str,
        key: str,
        timeout: float = DEFAULT_TIMEOUT_SEC,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not key:
            raise ValueError("the meter needs a non-empty key")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._key = key
        self._monotonic = monotonic

    def _redact(self, text: str) -> str:
        return text.replace(self._key, REDACTED)

    def _get_json(self, path: str, timeout: float) -> Any:
        """GET base_url+path, bounded by `timeout` overall (a worker thread enforces the bound)."""
        outcome: dict[str, Any] = {}

        def call() -> None:
            try:
                per_op = httpx.Timeout(timeout)
                headers = {"Authorization": f"Bearer {self._key}", "Cache-Control": "no-cache"}
                with httpx.Client(timeout=per_op, follow_redirects=False) as client:
                    response = client.get(self.base_url + path, headers=headers)
                outcome["response"] = response
            except BaseException as exc:  # handed to the caller's thread below
                outcome["error"] = exc

        # httpx timeouts are per operation; the join makes the whole read respect its slice.
        worker = threading.Thread(target=call, name="key-meter-read", daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            raise MeterError("timeout", f"GET {path} gave no answer within {timeout:.1f}s")
        if "error" in outcome:
            exc = outcome["error"]
            kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "transport"
            raise MeterError(kind, self._redact(f"GET {path} failed: {type(exc).__name__}: {exc}")) from None
        response: httpx.Response = outcome["response"]
        if response.status_code != 200:
            raise MeterError(
                f"http_{response.status_code}",
                self._redact(f"GET {path} answered HTTP {response.status_code}: {response.text[:200]}"),
            )
        try:
            # Python's json accepts NaN/Infinity tokens: they are kept and judged by the observer.
            return response.json()
        except ValueError as exc:
            raise MeterError("malformed", self._redact(f"GET {path} answered non-JSON: {exc}")) from None

    def read_usage(self, timeout: float | None = None) -> MeterReading:
        """One GET /key. Raises MeterError (key redacted) if no numeric usage came back in time."""
        requested_at = self._monotonic()
        data = _unwrap(self._get_json("/key", self.timeout if timeout is None else timeout))
        if "usage" not in data:
            raise MeterError("missing_usage", "meter body has no usage field")
        return MeterReading(
            usage=_number(data.get("usage"), "usage", required=True),  # type: ignore[arg-type]
            limit=_number(data.get("limit"), "limit", required=False),
            limit_remaining=_number(data.get("limit_remaining"), "limit_remaining", required=False),
            requested_at_monotonic=requested_at,
        )

    def read_credits(self, timeout: float | None = None) -> float | None:
        """total_credits − total_usage from GET /credits; None when either is missing."""
        data = _unwrap(self._get_json("/credits", self.timeout if timeout is None else timeout))
        credits = _number(data.get("total_credits"), "total_credits", required=False)
        used = _number(data.get("total_usage"), "total_usage", required=False)
        if credits is None or used is None:
            return None
        return credits - used

    def headroom(self, timeout: float | None = None) -> Headroom:
        """The key's own bound and the account's credits. /key errors raise; /credits errors
        (e.g. 401/403: current OpenRouter wants a management key there) are reported instead."""
        key_remaining = self.read_usage(timeout).key_headroom
        try:
            credits_remaining = self.read_credits(timeout)
            reason = None if credits_remaining is not None else "credits body lacks total_credits or total_usage"
        except MeterError as exc:
            credits_remaining, reason = None, f"{exc.error_type}: {exc}"
        return Headroom(key_remaining, credits_remaining, reason)
