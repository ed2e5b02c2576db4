"""Typed refusals: what an operator can act on, as one sentence and a stable exit code."""

from __future__ import annotations

from .vocab import ExitCode


class Refusal(Exception):
    """A precondition or input the operator must fix. Nothing has been started or written.

    `stage` names where it was refused (flags, run_root, seed, bench, image, campaign, ...).
    The message is one sentence, printed on stderr as-is.
    """

    exit_code: ExitCode = ExitCode.REFUSED

    def __init__(self, stage: str, sentence: str) -> None:
        super().__init__(sentence)
        self.stage = stage
        self.sentence = sentence


class CampaignPersistenceError(Exception):
    """The campaign file could not be written: the run must stop (campaign_persistence_failed)."""


class CustodyError(Exception):
    """Cleanup could not prove that no resource with the run's label remains."""
