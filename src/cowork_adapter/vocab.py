"""The host's name for the one vocabulary module (it lives in container/ so the image can copy it)."""

from .container.vocab import *  # noqa: F401,F403
from .container.vocab import (  # noqa: F401  (explicit names for readers and type checkers)
    INFRA_RUNTIME_REASONS,
    TRUNCATION_RUNTIME_REASONS,
    Vocab,
)
