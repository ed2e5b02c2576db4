"""custody/admission.json: a shared host's batch loop waiting for load (admission.py). Its own
module so `status` reads it without importing the campaign's writers."""

from __future__ import annotations

from datetime import datetime

from .record import Record


class AdmissionState(Record):
    """custody/admission.json: whether this host's batch loop is waiting for load before its next
    claim (admission.py), written when a wait starts and when it ends; `status` shows it."""

    waiting: bool
    sentence: str  # Admission.sentence(): "waiting for load: ..." or "admitting: ..."
    since: datetime  # when the wait started (waiting) or ended (not waiting)
    waited_sec: float = 0.0  # the length of the wait that ended (0 while waiting)
