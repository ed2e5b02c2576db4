"""Typed, versioned schemas (pydantic) of every file the host writes, one module per file family."""
