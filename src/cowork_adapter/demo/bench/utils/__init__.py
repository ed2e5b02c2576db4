"""Helpers an engine uses on the demo benchmark (same names as the real benchmark's utils)."""
