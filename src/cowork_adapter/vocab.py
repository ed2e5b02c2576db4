"""The host's name for the one vocabulary module (it lives in container/ so the image can copy it)."""

from .container.vocab import *  # noqa: F401,F403
from .container.vocab import (  # noqa: F401  (explicit names for readers and type checkers)
    INFRA_RUNTIME_REASONS,
    TRUNCATION_RUNTIME_REASONS,
    Vocab,
)


class SubstituteKind(Vocab):
    """How an operator's checkout stands in for a blob the benchmark's object store lacks (host only:
    the run's clone is checked on the host, never in a container)."""

    SKIP_WORKTREE = "skip_worktree"  # a file written in place and marked skip-worktree
    REPLACE_OBJECT = "replace_object"  # a refs/replace/<pinned blob> object


class GatewayRoute(Vocab):
    """Which face the run's model gateway showed the engine (host only: the gateway runs in the launcher)."""

    # --llm-gateway: an OpenAI-compatible endpoint; the engine routes openai-compatible::<model>.
    OPENAI_COMPATIBLE = "openai_compatible"
    # The default: the gateway serves the provider's own host over TLS (gateway/tls.py); the engine
    # keeps the seed's OpenRouter route unchanged.
    PROVIDER_TLS = "provider_tls"
