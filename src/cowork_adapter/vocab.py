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


class KeyRoute(Vocab):
    """Where the provider key is and how the agent's model calls reach the provider (docs/security.md,
    the key's path). Recorded in the applied config: runs on different routes are never merged or resumed
    into one another (the key within the agent's reach is another world than the key on the host)."""

    GATEWAY_OPENROUTER = "gateway_openrouter"  # the default: the run's gateway serves openrouter.ai over TLS
    GATEWAY_OPENAI = "gateway_openai"  # --llm-gateway: the gateway's OpenAI-compatible face
    KEY_IN_AGENT = "key_in_agent"  # --key-in-agent, or an OpenAI-compatible endpoint without --llm-gateway
    NONE = "none"  # a reference engine (oracle, nop): no model call, no key


class InspectLogStatus(Vocab):
    """An exported Inspect log's status, in inspect_ai's own words (host only: export/status.py maps each
    RunOutcome to one): how the run as a process ended, never how the agent did."""

    STARTED = "started"  # no end recorded: the run is live, or its launcher died unrecorded
    SUCCESS = "success"  # the runner finished (rows without a verdict are sample errors)
    CANCELLED = "cancelled"  # a stop reason ended it, or `clear` finished it
    ERROR = "error"  # it crashed or was refused; the log's error says how
