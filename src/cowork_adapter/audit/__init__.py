"""The offline audit of a run root: `cowork-adapter audit --run-dir RUN [--output FILE] [--workers N]`.

One-way flow, one module each (each imports only those before it):
  read   log files to blocks of whole lines, lines to typed rows (msgspec; json.loads the arbiter)
  rules  which tool-call arguments point at answers, graders or the database (pure logic)
  scan   one task dump's logs counted, findings and gaps noted (read + rules)
  inputs the run's records and ledger read, where each dump is, the shim's evidence (read, scan)
  task   one task's dump opened, its logs scanned, its records read (inputs, scan)
  run    every task scanned by forked workers, totals summed (forked, inputs, task, taskdb)
  write  the report created exclusively, and the command (run)
"""

from __future__ import annotations

from .run import build_audit
from .write import audit_run, run_audit_command

__all__ = ["audit_run", "build_audit", "run_audit_command"]
