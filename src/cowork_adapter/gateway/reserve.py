"""The per-task limit, reserved before a request is forwarded and settled after: pure logic.

Why: checking a task's sum before forwarding and adding the cost after lets N concurrent requests
all pass the check before any is counted, so the task overshoots its limit by N answers. Here a
chat request first reserves its most expensive possible answer (`worst_cost`: the clamped output
tokens at the run's completion price plus the body's length as prompt tokens at the prompt price,
or the run's assumed figure when the price is unknown), and is forwarded only if the task's settled
costs plus everything it has reserved stay within the limit. When its answer is done the
reservation is replaced by what it really cost (the provider's figure, or what the provider's
generation stats report, else the assumed figure).

One exception keeps a task whose limit is below one worst answer usable at all: a task with nothing
in flight may send one request while its settled sum is under the limit (its overshoot is then at
most one answer, as on the engine's own route). Assumed figures count against the task only: the
run-wide fence (server.py) counts the provider's figures, so one task's dropped streams stop that
task, never its siblings.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

# A byte of JSON body is at most one prompt token (tokenizers emit fewer tokens than bytes for text):
# the body's length bounds the prompt of a text request. Images are priced otherwise; the provider's
# figure settles them.
PROMPT_TOKENS_PER_BYTE = 1.0


@dataclass(frozen=True)
class Price:
    """The run's model price in USD per token (OpenRouter's /models `pricing`)."""

    prompt: float
    completion: float


def worst_cost(body_bytes: int, max_tokens: int, price: Price | None, assumed_usd: float) -> float:
    """The most one request may cost: its output cap at the completion price plus its body as prompt."""
    if price is None:
        return assumed_usd
    return max_tokens * price.completion + body_bytes * PROMPT_TOKENS_PER_BYTE * price.prompt


def output_cap(shaped: dict, default: int) -> int:
    """The output tokens a shaped body may produce (gateway/policy.py clamped and set them)."""
    caps = [
        shaped[n]
        for n in ("max_tokens", "max_completion_tokens")
        if isinstance(shaped.get(n), int) and not isinstance(shaped.get(n), bool)
    ]
    return min(caps) if caps else default


def price_from_models(listing: object, model: str) -> Price | None:
    """The price of `model` in an OpenRouter-shaped model list (`data[].pricing.prompt/completion`,
    USD per token as strings), or None when it is not there or not numbers."""
    data = listing.get("data") if isinstance(listing, dict) else None
    for entry in data if isinstance(data, list) else ():
        if isinstance(entry, dict) and entry.get("id") == model and isinstance(entry.get("pricing"), dict):
            try:
                prompt = float(entry["pricing"]["prompt"])
                completion = float(entry["pricing"]["completion"])
            except (KeyError, TypeError, ValueError):
                return None
            if 0 <= prompt < math.inf and 0 <= completion < math.inf:  # NaN fails both comparisons
                return Price(prompt=prompt, completion=completion)
    return None


class TaskLimits:
    """Each task's settled costs and open reservations against one per-task limit (None: no limit)."""

    def __init__(self, limit_usd: float | None) -> None:
        self.limit_usd = limit_usd
        self._lock = threading.Lock()
        self.spent: dict[str, float] = {}
        self.held: dict[str, float] = {}
        self.open: dict[str, int] = {}

    def settled(self, task: str) -> float:
        return self.spent.get(task, 0.0)

    def over(self, task: str) -> bool:
        return self.limit_usd is not None and self.settled(task) >= self.limit_usd

    def reserve(self, task: str, worst_usd: float) -> bool:
        """Hold `worst_usd` for one request of `task`; False (nothing held) when it might overshoot."""
        with self._lock:
            spent, held, count = self.spent.get(task, 0.0), self.held.get(task, 0.0), self.open.get(task, 0)
            if self.limit_usd is not None:
                if spent >= self.limit_usd:
                    return False
                if count and spent + held + worst_usd > self.limit_usd:
                    return False
            self.held[task] = held + worst_usd
            self.open[task] = count + 1
            return True

    def settle(self, task: str, worst_usd: float, charge_usd: float) -> None:
        """Replace one reservation of `task` by what the request really cost (0 when nothing billed)."""
        with self._lock:
            self.held[task] = max(0.0, self.held.get(task, 0.0) - worst_usd)
            self.open[task] = max(0, self.open.get(task, 0) - 1)
            if not self.open[task]:
                self.held.pop(task, None)
                self.open.pop(task, None)
            self.spent[task] = self.spent.get(task, 0.0) + charge_usd

    def charge(self, task: str, charge_usd: float) -> None:
        """A cost without a reservation (a look-up the provider bills, or a test's bookkeeping)."""
        with self._lock:
            self.spent[task] = self.spent.get(task, 0.0) + charge_usd
