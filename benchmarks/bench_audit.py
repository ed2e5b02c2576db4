"""Benchmark the offline audit against `wc -l` over the same files, in the same run.

Synthesises a run root of 496 tasks with about --size-mb MiB of agent logs (tools, events,
progress, chat, supervisor), written as Ouroboros' append_jsonl writes them (json.dumps with
ensure_ascii=False; --ascii-escaped writes every non-ASCII character as a \\u escape instead, the
costlier case for the argument sieve), under a temporary directory on the same disk, warms the
page cache for both contenders (and compiles the audit's bytecode, as an installed package has
it), then times `wc -l` and `python -m cowork_adapter.audit` as child processes, --repeat times
each, alternating; the best times are compared (machines here are noisy; each pair's ratio is
printed too). Prints the audit's throughput as a ratio to wc -l's, and the audit's peak RSS
(ru_maxrss of the child, the largest single process) and the sampled peak of the summed RSS of
its whole process tree (the audit and its --workers scanning processes). Checks the audit found exactly the planted
findings. Deletes the run root at the end.

Targets: ratio >= 0.5 and peak < 256 MiB; exit 1 when a target is missed (2 on a wrong result).

    .venv/bin/python benchmarks/bench_audit.py --size-mb 1024 [--repeat 5] [--workers N] [--ascii-escaped]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TASKS = 496
TARGET_RATIO = 0.5
TARGET_PEAK_MIB = 256
TS = "2026-01-01T00:00:00.000000+00:00"
WORDS = ("quarterly revenue invoice customer sheet total region north south growth margin "
         "forecast budget review draft summary table column row value Zürich café").split()
# Share of each log in a task's bytes (tools dominate: result previews run to 2,000 chars).
SHARES = {"tools.jsonl": 0.55, "events.jsonl": 0.25, "progress.jsonl": 0.08,
          "chat.jsonl": 0.07, "supervisor.jsonl": 0.05}
PLANTED_EVERY = 31  # every 31st task gets one groundtruth read and one psql call


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _line_pools(rng: random.Random, ascii_escaped: bool) -> dict[str, list[bytes]]:
    """A pool of realistic rows per log, written as Ouroboros' append_jsonl writes them
    (json.dumps with ensure_ascii=False: raw UTF-8), or with every non-ASCII character a \\u
    escape (ascii_escaped: the costlier case, where every such argument must be decoded)."""
    tools = []
    for i in range(400):
        kind = i % 5
        if kind == 0:
            tool, args = "mcp_postgres__execute_sql", {"sql": f"SELECT region, sum(total) FROM sales WHERE q = {i} GROUP BY region"}
        elif kind == 1:
            tool, args = "mcp_filesystem__read_file", {"path": f"/workspace/reports/{_text(rng, 2).replace(' ', '_')}.md"}
        elif kind == 2:
            tool, args = "mcp_excel__write_data_to_excel", {"filepath": "/workspace/out.xlsx", "data": [[_text(rng, 3)] * 3] * 4}
        elif kind == 3:
            tool, args = "run_command", {"command": f"ls -la /workspace && wc -l /workspace/{i}.csv"}
        else:
            tool, args = "mcp_filesystem__write_file", {"path": "/workspace/notes.md", "content": _text(rng, 60)}
        tools.append({"ts": TS, "type": "tool_call", "task_id": "t", "tool": tool, "args": args,
                      "result_preview": _text(rng, rng.randint(20, 320)), "is_error": i % 17 == 0,
                      "status": "ok"})
    events = []
    for i in range(400):
        if i % 5 < 2:
            events.append({"ts": TS, "type": "llm_usage", "task_id": "t", "root_task_id": "t",
                           "model": "anthropic/claude-sonnet-4.5", "provider": "openrouter",
                           "response_provider": "Anthropic", "source": "loop", "round": i,
                           "cost": 0.0123, "cost_known": True, "cost_estimated": False,
                           "prompt_tokens": 12000 + i, "completion_tokens": 300, "cached_tokens": 8000,
                           "cache_write_tokens": 0, "accounting_authority": "physical_attempt_ledger",
                           "projection_update_status": "available", "ledger_attempt_ids": [f"{i:032x}"]})
        else:
            events.append({"ts": TS, "type": rng.choice(["task_progress", "round_start", "context_stats"]),
                           "task_id": "t", "round": i, "note": _text(rng, 25)})
    progress = [{"ts": TS, "task_id": "t", "text": _text(rng, 30)} for _ in range(200)]
    chat = [{"ts": TS, "session_id": "s", "direction": "out", "chat_id": 1, "user_id": 1,
             "text": _text(rng, 80)} for _ in range(100)]
    supervisor = [{"ts": TS, "type": "worker_ready", "pid": 100 + i} for i in range(50)]
    pools = {"tools.jsonl": tools, "events.jsonl": events, "progress.jsonl": progress,
             "chat.jsonl": chat, "supervisor.jsonl": supervisor}
    return {name: [json.dumps(r, ensure_ascii=ascii_escaped).encode() + b"\n" for r in rows]
            for name, rows in pools.items()}


def _write_log(path: Path, pool: list[bytes], target: int, rng: random.Random,
               planted: list[bytes]) -> tuple[int, int]:
    """Write ~target bytes of rows from the pool; returns (bytes, llm_usage-or-tool rows)."""
    out, size = [], 0
    for row in planted:
        out.append(row)
        size += len(row)
    while size < target:
        row = pool[rng.randrange(len(pool))]
        out.append(row)
        size += len(row)
    rng.shuffle(out)
    path.write_bytes(b"".join(out))
    return size, len(out)


def synthesise(root: Path, size_mb: float, seed: int = 7, ascii_escaped: bool = False) -> dict[str, int]:
    rng = random.Random(seed)
    pools = _line_pools(rng, ascii_escaped)
    per_task = size_mb * (1 << 20) / TASKS
    planted_tools = [
        json.dumps({"ts": TS, "type": "tool_call", "task_id": "t", "tool": "run_command",
                    "args": {"command": "cat /bench/tasks/finalpool/x/groundtruth_workspace/answer.xlsx"},
                    "result_preview": "", "is_error": False, "status": "ok"}).encode() + b"\n",
        json.dumps({"ts": TS, "type": "tool_call", "task_id": "t", "tool": "run_command",
                    "args": {"command": "psql -h pg -U app -c 'select 1'"},
                    "result_preview": "", "is_error": False, "status": "ok"}).encode() + b"\n",
    ]
    rows, total = [], 0
    (root / "run_manifest.json").write_text(json.dumps({"schema": "cowork_adapter.run_manifest.v1",
                                                        "applied_config": {}}))
    (root / "monitor.json").write_text(json.dumps({"finished": True}))
    for n in range(TASKS):
        task = f"task-{n:03d}"
        dump = root / "bench" / "dumps" / "abc123" / f"SingleUserTurn-{task}"
        (dump / "ouroboros").mkdir(parents=True)
        for name, share in SHARES.items():
            planted = planted_tools if name == "tools.jsonl" and n % PLANTED_EVERY == 0 else []
            size, _ = _write_log(dump / "ouroboros" / name, pools[name], int(per_task * share), rng, planted)
            total += size
        rows.append({"instance_id": task, "status": "passed", "official_eval_status": "completed",
                     "official_receipt": {"pass": True}, "task_dump": os.path.relpath(dump, root)})
    (root / "result_index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    planted_tasks = len(range(0, TASKS, PLANTED_EVERY))
    return {"bytes": total, "planted_findings": 2 * planted_tasks}


def _log_files(root: Path) -> list[str]:
    return sorted(str(p) for p in (root / "bench" / "dumps").rglob("*.jsonl"))


def _tree_rss_kib(pid: int) -> int:
    """Summed VmRSS of a process and its descendants (0 for any that vanished meanwhile)."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/status") as handle:
                total += next((int(line.split()[1]) for line in handle if line.startswith("VmRSS:")), 0)
            with open(f"/proc/{current}/task/{current}/children") as handle:
                todo.extend(int(c) for c in handle.read().split())
        except (OSError, ValueError):
            continue
    return total


def _timed_child(argv: list[str], stdout) -> tuple[float, int, int, float, int]:
    """(seconds, exit status, peak RSS KiB, CPU seconds, sampled peak tree RSS KiB) of one child."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], _tree_rss_kib(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    # wait4's usage covers the child and the children it waited for (the scanning workers).
    return elapsed, proc.returncode, usage.ru_maxrss, usage.ru_utime + usage.ru_stime, peak[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024.0)
    parser.add_argument("--keep", action="store_true", help="keep the synthetic run root")
    parser.add_argument("--ascii-escaped", action="store_true",
                        help="write non-ASCII text as \\u escapes (json.dumps' default) instead of raw UTF-8")
    parser.add_argument("--repeat", type=int, default=5,
                        help="timed runs of each contender, alternating; the best of each is compared")
    parser.add_argument("--workers", type=int, default=None,
                        help="the audit's --workers (default: its own default, the CPU count)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    base = Path(tempfile.mkdtemp(prefix="bench-audit-", dir=os.environ.get("BENCH_TMPDIR")))
    try:
        root = base / "run"
        root.mkdir()
        t0 = time.perf_counter()
        facts = synthesise(root, args.size_mb, ascii_escaped=args.ascii_escaped)
        files = _log_files(root)
        print(f"synthesised {len(files)} files, {facts['bytes'] / (1 << 20):.1f} MiB in "
              f"{time.perf_counter() - t0:.1f}s under {base}")
        subprocess.run(["wc", "-l", *files], stdout=subprocess.DEVNULL, check=True)  # warm the cache
        # The audit's bytecode as an installed package has it: an editable install where
        # PYTHONDONTWRITEBYTECODE is set would otherwise compile edited modules on every run.
        package = importlib.util.find_spec("cowork_adapter").submodule_search_locations[0]
        subprocess.run([sys.executable, "-m", "compileall", "-q", package], stdout=subprocess.DEVNULL, check=True)
        wc_times, audit_times, audit_cpus, peak_kib, tree_kib = [], [], [], 0, 0
        for run in range(args.repeat):  # alternating, so both see the same machine weather
            wc_s, wc_rc, _, _, _ = _timed_child(["wc", "-l", *files], subprocess.DEVNULL)
            report = base / f"audit-{run}.json"
            audit_argv = [sys.executable, "-m", "cowork_adapter.audit", "--run-dir", str(root),
                          "--output", str(report)]
            if args.workers is not None:
                audit_argv += ["--workers", str(args.workers)]
            audit_s, audit_rc, peak, cpu, tree = _timed_child(audit_argv, subprocess.DEVNULL)
            if wc_rc != 0 or audit_rc != 0:
                print(f"wc exit {wc_rc}, audit exit {audit_rc}", file=sys.stderr)
                return 2
            data = json.loads(report.read_text())
            if data["totals"]["findings"] != facts["planted_findings"]:
                print(f"the audit found {data['totals']['findings']} references, not exactly the "
                      f"{facts['planted_findings']} planted", file=sys.stderr)
                return 2
            wc_times.append(wc_s)
            audit_times.append(audit_s)
            audit_cpus.append(cpu)
            peak_kib, tree_kib = max(peak_kib, peak), max(tree_kib, tree)
        mib = facts["bytes"] / (1 << 20)
        wc_s, audit_s = min(wc_times), min(audit_times)
        audit_cpu = audit_cpus[audit_times.index(audit_s)]
        ratio = wc_s / audit_s
        ratios = sorted(w / a for w, a in zip(wc_times, audit_times))
        peak_mib = peak_kib / 1024
        print(f"wc -l : {wc_s:8.3f}s  {mib / wc_s:9.1f} MiB/s  (best of {args.repeat})")
        print(f"audit : {audit_s:8.3f}s  {mib / audit_s:9.1f} MiB/s  (best of {args.repeat}; "
              f"{data['totals']['lines_scanned']} lines, {data['totals']['tool_calls']} tool calls, "
              f"{data['totals']['usage_records']} usage records)")
        print(f"ratio (audit throughput / wc -l throughput): {ratio:.3f}  target >= {TARGET_RATIO}  "
              f"(per run pair: {' '.join(f'{r:.3f}' for r in ratios)})")
        print(f"audit CPU time (with workers, best run): {audit_cpu:.2f}s; load average {os.getloadavg()[0]:.2f} "
              f"on {os.cpu_count()} CPUs")
        print(f"audit peak RSS: {peak_mib:.1f} MiB (largest process); sampled peak of the process tree: "
              f"{tree_kib / 1024:.1f} MiB  target < {TARGET_PEAK_MIB} MiB")
        print(f"findings: {data['totals']['findings']} (planted {facts['planted_findings']})")
        missed = [name for name, ok in (("ratio", ratio >= TARGET_RATIO),
                                        ("peak", max(peak_mib, tree_kib / 1024) < TARGET_PEAK_MIB)) if not ok]
        if missed:
            print(f"target missed: {', '.join(missed)}")
            return 1
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
