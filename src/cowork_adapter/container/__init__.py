"""Code that runs inside the task containers, under the benchmark's own interpreter.

Standard library only, Python 3.10+, relative imports only: the image copies this directory
as-is, and the host imports the pieces both sides need (claim protocol, receipt reader, scrub).
"""
