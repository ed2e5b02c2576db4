"""The benchmark copy: task selection, pinned identity, provenance."""
