"""A run root's files: the manifest, the events log, the task dumps."""
