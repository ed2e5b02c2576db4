"""The model gateway: the key on the host, per-task tokens, fences and shaping."""
