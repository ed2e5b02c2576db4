"""The gateway's per-task tokens and the provider's usage figures, pure (moved out of server.py).

Tokens: `cwg1.<task>.<hmac>`, the HMAC-SHA256 under a per-run random secret of the run label and the
runner's task id. The shim mints them when it creates `agent-<task>` (it reads the secret from a
0600 file under <run_root>/private/, never mounted into a container); the gateway holds the same
secret and recomputes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from pathlib import Path

from ..runroot.layout import GATEWAY_SECRET

TOKEN_PREFIX = "cwg1"
TOKEN_CONTEXT = b"cowork-gateway-token\0"
SECRET_NAME = GATEWAY_SECRET  # in the run root's private/ (RunRoot.gateway_secret)
# The task ids the shim mints tokens for (shim.SAFE_ID); anything else is not a token of ours.
_TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
MAX_TOKEN_CHARS = 256
# A generation id as OpenRouter puts it in every answer and stream chunk (`"id": "gen-..."`).
_GENERATION_ID = re.compile(rb'"id"\s*:\s*"([A-Za-z0-9_.:-]{1,128})"')


def token_mac(secret: bytes, run_label: str, task: str) -> str:
    message = TOKEN_CONTEXT + run_label.encode() + b"\0" + task.encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def mint_token(secret: bytes, run_label: str, task: str) -> str:
    """The token of `task` in run `run_label` (the shim mints the same one; see custody/shim_flags.py)."""
    return f"{TOKEN_PREFIX}.{task}.{token_mac(secret, run_label, task)}"


def token_task(secret: bytes, run_label: str, token: str) -> str | None:
    """The task a token was minted for in this run, or None (malformed, other run, other task)."""
    if len(token) > MAX_TOKEN_CHARS or not token.isascii():  # compare_digest raises on non-ASCII text
        return None
    prefix, _, rest = token.partition(".")
    task, _, mac = rest.rpartition(".")
    if prefix != TOKEN_PREFIX or not _TASK_ID.match(task) or not mac:
        return None
    return task if hmac.compare_digest(mac, token_mac(secret, run_label, task)) else None


def new_secret(private_dir: Path) -> tuple[bytes, Path]:
    """A fresh per-run secret, and the 0600 file the shim reads it from (created, never replaced)."""
    secret = os.urandom(32)
    private_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = private_dir / SECRET_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secret.hex().encode())
    finally:
        os.close(fd)
    return secret, path


def usage_of(obj: object) -> tuple[int | None, int | None, float | None]:
    """(prompt tokens, completion tokens, cost) from a response or chunk's `usage`, when present."""
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if not isinstance(usage, dict):
        return None, None, None

    def number(name: str, kind):
        value = usage.get(name)
        return kind(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return number("prompt_tokens", int), number("completion_tokens", int), number("cost", float)


class StreamUsage:
    """Follows a server-sent event stream as it passes and keeps the last `usage` it carried, and the
    generation id of its first chunk (to ask the provider what a stream cut before its usage cost)."""

    def __init__(self) -> None:
        self._pending = b""
        self.usage: tuple[int | None, int | None, float | None] = (None, None, None)
        self.generation: str | None = None

    def feed(self, data: bytes) -> None:
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            if self.generation is None:
                found_id = _GENERATION_ID.search(line[:512])
                if found_id:
                    self.generation = found_id.group(1).decode()
            if b'"usage"' not in line:
                continue
            try:
                found = usage_of(json.loads(line[5:].strip()))
            except (ValueError, RecursionError):
                continue
            if found != (None, None, None):
                self.usage = found
