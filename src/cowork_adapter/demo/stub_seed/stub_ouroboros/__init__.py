"""Stub Ouroboros: a plainly named stand-in for the Ouroboros agent server (see README.md).

Standard library only (plus the mcp SDK client, imported lazily for tool calls); Python 3.10+.
"""

STUB_VERSION = "0.1.0-stub"
