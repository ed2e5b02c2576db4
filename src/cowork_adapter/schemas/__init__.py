"""Typed, versioned schemas (msgspec Structs, see record.py) of every file the host writes, one module per file
family."""
