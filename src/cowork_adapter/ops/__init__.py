"""Operator commands over a run root or a host: status, stop, clear, doctor."""
