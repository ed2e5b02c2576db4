"""The host: load admission and per-task resource use and the concurrency it suggests."""
