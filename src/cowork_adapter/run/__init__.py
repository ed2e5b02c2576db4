"""The run's life: launch, preflight, the supervised runner, the stop, recovery, progress."""
