"""A private tmux server for the tests that watch a command as a person would (tmux capture-pane)."""

from __future__ import annotations

import secrets
import subprocess


class Tmux:
    """A private tmux server (its own socket): started and killed by the test that made it."""

    def __init__(self, prefix: str, scrollback: int = 500) -> None:
        self.socket = f"{prefix}-{secrets.token_hex(4)}"
        self.scrollback = scrollback

    def __call__(self, *args: str, check: bool = True) -> str:
        out = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        if check and out.returncode != 0:
            raise AssertionError(f"tmux {args[0]} failed: {out.stderr.strip()}")
        return out.stdout

    def pane(self, session: str) -> str:
        return self("capture-pane", "-p", "-J", "-S", f"-{self.scrollback}", "-t", session)

    def kill(self) -> None:
        self("kill-server", check=False)
