"""Benchmark the documented `cowork-adapter audit` command against `wc -l` over the same files.

Synthesises a run root of 496 tasks with about --size of agent logs (tools, events, progress,
chat, supervisor), every row drawn afresh (no row repeats, so no cache of the audit always hits),
written as Ouroboros' append_jsonl writes them (json.dumps with ensure_ascii=False; --ascii-escaped
writes every non-ASCII character as a \\u escape instead), under a temporary directory on the same
disk (BENCH_TMPDIR to choose it). It warms the page cache for both contenders and compiles the
package's bytecode (as an installed package has it), then times `wc -l FILES` and the console
script `cowork-adapter audit --run-dir RUN --output FILE` (interpreter start-up and imports
included) as child processes, --repeat times each, alternating. Prints both times side by side
(min / median / max), the throughput ratio (wc -l time / audit time: 1.0 is as fast as wc -l)
per pair as min / median / max, and the audit's peak memory: ru_maxrss of the child from
wait4 (the largest process: the audit or one of its --workers scanning processes) and the
sampled peak of the summed RSS of its process tree. Checks the audit found exactly the planted
findings. Deletes the run root at the end.

--against SRC adds a third contender in the same alternation: the audit of another source tree
(SRC is its `src` folder, e.g. the previous commit unpacked by `git archive HEAD~1 src | tar -x`),
run as `python -m cowork_adapter audit` with PYTHONPATH=SRC, paired against this tree run the
same way: wall and CPU (user + sys of the process and its workers) of each as min / median /
max, and the CPU ratio this / other per pair (CPU time is what stays comparable under the load
of a shared machine). --root DIR synthesises into DIR once and reuses it on later runs (kept).
--stages N then profiles the CPU (user + sys) of one process over the same logs, each stage added
in turn, N rounds (medians): reading, + the UTF-8 check, + the long-integer and DEL checks and the
separators, + msgspec's decoding, all of audit.read, the five scanners, the whole build_audit;
and the budget the ratio target leaves: wc -l's median time / 0.25, less the command's start-up
(the command on a run with no task, --repeat times), times the workers, beside audit.read's CPU.

Targets (issue 18): median ratio >= 0.25 and peak < 256 MiB; exit 1 when a target is missed
(2 on a wrong result).

    .venv/bin/python benchmarks/bench_audit.py --size 1G [--repeat 5] [--workers N] [--ascii-escaped] [--keep]
        [--against OTHER/src] [--root DIR] [--stages N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

TASKS = 496
TARGET_RATIO = 0.25
TARGET_PEAK_MIB = 256
TS = "2026-01-01T00:00:00.000000+00:00"
WORDS = [
    "quarterly",
    "revenue",
    "invoice",
    "customer",
    "sheet",
    "total",
    "region",
    "north",
    "south",
    "growth",
    "margin",
    "forecast",
    "budget",
    "review",
    "draft",
    "summary",
    "table",
    "column",
    "row",
    "value",
    "Zürich",
    "café",
]
# Share of each log in a task's bytes (tools dominate: result previews run to 2,000 chars).
SHARES = {
    "tools.jsonl": 0.55,
    "events.jsonl": 0.25,
    "progress.jsonl": 0.08,
    "chat.jsonl": 0.07,
    "supervisor.jsonl": 0.05,
}
PLANTED_EVERY = 31  # every 31st task gets one groundtruth read and one psql call


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, k=n)) + f" {rng.getrandbits(48):x}"


def _tool_row(rng: random.Random, task: str, i: int) -> dict:
    """One tool call, its arguments and result preview drawn afresh (no row repeats)."""
    kind = rng.randrange(5)
    if kind == 0:
        tool, args = (
            "mcp_postgres__execute_sql",
            {"sql": f"SELECT region, sum(total) FROM sales_{rng.getrandbits(32):x} WHERE q = {i} GROUP BY region"},
        )
    elif kind == 1:
        tool, args = "mcp_filesystem__read_file", {"path": f"/workspace/reports/{_text(rng, 2).replace(' ', '_')}.md"}
    elif kind == 2:
        tool, args = (
            "mcp_excel__write_data_to_excel",
            {"filepath": f"/workspace/out-{i}.xlsx", "data": [[_text(rng, 3) for _ in range(3)] for _ in range(4)]},
        )
    elif kind == 3:
        tool, args = "run_command", {"command": f"ls -la /workspace && wc -l /workspace/{rng.getrandbits(40):x}.csv"}
    else:
        tool, args = "mcp_filesystem__write_file", {"path": f"/workspace/notes-{i}.md", "content": _text(rng, 60)}
    return {
        "ts": TS,
        "type": "tool_call",
        "task_id": task,
        "tool": tool,
        "args": args,
        "result_preview": _text(rng, rng.randint(20, 320)),
        "is_error": rng.random() < 0.06,
        "status": "ok",
    }


def _event_row(rng: random.Random, task: str, i: int) -> dict:
    if rng.random() < 0.4:
        return {
            "ts": TS,
            "type": "llm_usage",
            "task_id": task,
            "root_task_id": task,
            "model": "anthropic/claude-sonnet-4.5",
            "provider": "openrouter",
            "response_provider": "Anthropic",
            "source": "loop",
            "round": i,
            "cost": round(rng.uniform(0.001, 0.05), 6),
            "cost_known": True,
            "cost_estimated": False,
            "prompt_tokens": rng.randint(2000, 60000),
            "completion_tokens": rng.randint(10, 900),
            "cached_tokens": rng.randint(0, 2000),
            "cache_write_tokens": 0,
            "accounting_authority": "physical_attempt_ledger",
            "projection_update_status": "available",
            "ledger_attempt_ids": [f"{rng.getrandbits(128):032x}"],
        }
    return {
        "ts": TS,
        "type": rng.choice(["task_progress", "round_start", "context_stats"]),
        "task_id": task,
        "round": i,
        "note": _text(rng, 25),
    }


# How each log's rows are made (every row drawn afresh: no row repeats, so no cache always hits).
ROW_MAKERS = {
    "tools.jsonl": _tool_row,
    "events.jsonl": _event_row,
    "progress.jsonl": lambda rng, task, i: {"ts": TS, "task_id": task, "text": _text(rng, 30)},
    "chat.jsonl": lambda rng, task, i: {
        "ts": TS,
        "session_id": "s",
        "direction": "out",
        "chat_id": 1,
        "user_id": 1,
        "text": _text(rng, 80),
    },
    "supervisor.jsonl": lambda rng, task, i: {"ts": TS, "type": "worker_ready", "pid": 100 + i},
}


def _write_log(
    path: Path, name: str, task: str, target: int, rng: random.Random, planted: list[bytes], ascii_escaped: bool
) -> int:
    """Write ~target bytes of fresh rows (the planted ones at random places); returns the bytes."""
    out, size, make = list(planted), sum(map(len, planted)), ROW_MAKERS[name]
    while size < target:
        row = json.dumps(make(rng, task, len(out)), ensure_ascii=ascii_escaped).encode() + b"\n"
        out.append(row)
        size += len(row)
    rng.shuffle(out)
    path.write_bytes(b"".join(out))
    return size


def _write_run_records(root: Path) -> None:
    """The run-level records a finished run has besides its ledger: manifest and monitor."""
    (root / "run_manifest.json").write_text(
        json.dumps({"schema": "cowork_adapter.run_manifest.v1", "applied_config": {}})
    )
    (root / "monitor.json").write_text(json.dumps({"finished": True}))


def synthesise(root: Path, size_mb: float, seed: int = 7, ascii_escaped: bool = False) -> dict[str, int]:
    rng = random.Random(seed)
    per_task = size_mb * (1 << 20) / TASKS
    planted_tools = [
        json.dumps(
            {
                "ts": TS,
                "type": "tool_call",
                "task_id": "t",
                "tool": "run_command",
                "args": {"command": "cat /bench/tasks/finalpool/x/groundtruth_workspace/answer.xlsx"},
                "result_preview": "",
                "is_error": False,
                "status": "ok",
            }
        ).encode()
        + b"\n",
        json.dumps(
            {
                "ts": TS,
                "type": "tool_call",
                "task_id": "t",
                "tool": "run_command",
                "args": {"command": "psql -h pg -U app -c 'select 1'"},
                "result_preview": "",
                "is_error": False,
                "status": "ok",
            }
        ).encode()
        + b"\n",
    ]
    rows, total = [], 0
    _write_run_records(root)
    for n in range(TASKS):
        task = f"task-{n:03d}"
        dump = root / "bench" / "dumps" / "abc123" / f"SingleUserTurn-{task}"
        (dump / "ouroboros").mkdir(parents=True)
        for name, share in SHARES.items():
            planted = planted_tools if name == "tools.jsonl" and n % PLANTED_EVERY == 0 else []
            total += _write_log(
                dump / "ouroboros" / name, name, task, int(per_task * share), rng, planted, ascii_escaped
            )
        rows.append(
            {
                "instance_id": task,
                "status": "passed",
                "official_eval_status": "completed",
                "official_receipt": {"pass": True},
                "task_dump": os.path.relpath(dump, root),
            }
        )
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


def _timed_module_audit(src: str, root: Path, report: Path, workers: int | None) -> tuple[float, float, str | None]:
    """(wall s, CPU s, the report's text or None on failure) of `python -m cowork_adapter audit`
    importing the package from `src`."""
    argv = [sys.executable, "-m", "cowork_adapter", "audit", "--run-dir", str(root), "--output", str(report)]
    if workers is not None:
        argv += ["--workers", str(workers)]
    env = {**os.environ, "PYTHONPATH": src}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    text = report.read_text() if os.waitstatus_to_exitcode(status) == 0 and report.is_file() else None
    report.unlink(missing_ok=True)
    return wall, usage.ru_utime + usage.ru_stime, text


def _stage_runs(root: Path, files: list[str]) -> list[tuple[str, Any]]:
    """(name, function) of each stage: the reader's steps added in turn, then whole layers."""
    from cowork_adapter.audit import read, run, scan

    readers = {"tools.jsonl": scan._TOOL_ROWS, "events.jsonl": scan._EVENT_ROWS}

    def upto(step: int) -> None:
        for path in files:
            name, sink = os.path.basename(path), scan.TaskScan()
            reader = readers.get(name, scan._OBJECTS)
            for block in read.iter_blocks(path, sink, name):
                if step == 4:
                    read.read_rows(block, reader, name, sink)
                    continue
                block.count = 1  # no line count: read_rows would have it for free
                text, _ = block.whole_lines()
                if step >= 1:
                    read._is_utf8(text)
                if step >= 2:
                    read._may_hold_long_integer(text)
                    read._KEY_SEARCH.find_matches_as_indexes(text)
                    joined = text.replace(b"\n", read._SEPARATOR)
                if step >= 3:
                    reader.block.decode_lines(joined)

    def scanners() -> None:
        table = dict(scan.LOG_SCANNERS)
        for path in files:
            table[os.path.basename(path)](path, os.path.basename(path), scan.TaskScan())

    names = (
        "reading the files",
        "+ the UTF-8 check",
        "+ long-integer/DEL checks, separators",
        "+ msgspec decoding",
        "all of audit.read",
    )
    return [
        *((name, lambda step=step: upto(step)) for step, name in enumerate(names)),
        ("the five scanners", scanners),
        ("whole build_audit", lambda: run.build_audit(root, 1)),
    ]


def _print_stages(root: Path, files: list[str], rounds: int) -> dict[str, float]:
    """Print the CPU of each stage (min / median / max); return the medians by stage name."""
    stages = _stage_runs(root, files)
    times: dict[str, list[float]] = {name: [] for name, _ in stages}
    for _ in range(rounds):
        for name, function in stages:
            before = os.times()
            function()
            after = os.times()
            times[name].append(after.user - before.user + after.system - before.system)
    print(
        f"CPU by stage, one process, each stage added in turn ({rounds} rounds; load average {os.getloadavg()[0]:.2f}):"
    )
    for name, values in times.items():
        print(f"  {name:40s}{_spread(values)}")
    return {name: statistics.median(values) for name, values in times.items()}


def _empty_run(base: Path) -> Path:
    """A run root with no task (a manifest, a monitor record, an empty ledger): auditing it
    costs the command's start-up, imports and report writing, and no scanning."""
    root = base / "empty-run"
    root.mkdir()
    _write_run_records(root)
    (root / "result_index.jsonl").write_text("")
    return root


def _print_budget(command: str, base: Path, repeat: int, wc_times: list[float], read_cpu: float, workers: int) -> None:
    """What the ratio target leaves for scanning, against what reading alone costs.

    The command meets TARGET_RATIO when it takes at most wc -l / TARGET_RATIO of wall. Its
    start-up (the same command on a run with no task, timed here) is serial; what is left is
    shared by `workers` processes, so it holds at most `workers` times that much CPU (perfect
    balance, no cost of forking). audit.read's CPU is from the stages above (one process)."""
    empty = _empty_run(base)
    walls, cpus = [], []
    for run in range(repeat):
        report = base / f"empty-{run}.json"
        wall, status, _, cpu, _ = _timed_child(
            [command, "audit", "--run-dir", str(empty), "--output", str(report)], subprocess.DEVNULL
        )
        if status != 0:
            print(f"the audit of a run with no task exited {status}", file=sys.stderr)
            return
        report.unlink()
        walls.append(wall)
        cpus.append(cpu)
    allowed = statistics.median(wc_times) / TARGET_RATIO
    left = allowed - statistics.median(walls)
    print(
        f"budget for ratio {TARGET_RATIO} (load average {os.getloadavg()[0]:.2f}): the command in "
        f"{allowed:.3f} s of wall (wc -l median / {TARGET_RATIO}); its start-up on a run with no task, "
        f"{repeat} runs: wall min / median / max {_spread(walls)} s, CPU median {statistics.median(cpus):.3f} s"
    )
    print(
        f"  leaves {left:.3f} s of wall for scanning: at most {max(left, 0.0) * workers:.3f} s of CPU over "
        f"{workers} worker(s); all of audit.read alone takes {read_cpu:.3f} s of CPU (one process, median)"
        + ("  -> out of reach with this reader" if read_cpu > left * workers else "")
    )


def _size_mib(text: str) -> float:
    """'1G', '512M', '300' (MiB) -> MiB."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}.get(text[-1:])
    number = float(text[:-1] if scale else text)
    if number <= 0:
        raise argparse.ArgumentTypeError("the size must be positive")
    return number * (scale or 1.0)


def _spread(values: list[float]) -> str:
    return f"{min(values):7.3f} / {statistics.median(values):7.3f} / {max(values):7.3f}"


def _shared(report: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """(totals, tasks) without the fields a tree may add that the other lacks (the tampering
    fields of issue 27): both trees must agree on every fact they both report."""
    added = ("ledger_tampering", "tampering_seen", "tampering_seen_by_kind")
    return report["totals"], [{k: v for k, v in t.items() if k not in added} for t in report["tasks"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=_size_mib, default=1024.0, help="agent logs to write: 1G, 512M... (default 1G)")
    parser.add_argument("--keep", action="store_true", help="keep the synthetic run root")
    parser.add_argument(
        "--ascii-escaped",
        action="store_true",
        help="write non-ASCII text as \\u escapes (json.dumps' default) instead of raw UTF-8",
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each contender, alternating")
    parser.add_argument(
        "--workers", type=int, default=None, help="the audit's --workers (default: its own default, the CPU count)"
    )
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        help="another tree's src folder: its audit timed too, paired with this tree's",
    )
    parser.add_argument("--stages", type=int, default=0, help="rounds of the in-process CPU profile by stage (0: none)")
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="synthesise into this folder once, and reuse it when it holds a run (kept)",
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    command = shutil.which("cowork-adapter", path=str(Path(sys.executable).parent)) or shutil.which("cowork-adapter")
    if command is None:
        parser.error("the cowork-adapter command is not installed (bash scripts/install.sh)")
    if args.against is not None and not (args.against / "cowork_adapter" / "__main__.py").is_file():
        parser.error(f"--against {args.against}: no cowork_adapter package there")
    base = Path(tempfile.mkdtemp(prefix="bench-audit-", dir=os.environ.get("BENCH_TMPDIR")))
    try:
        root = base / "run" if args.root is None else args.root
        facts_path = root / "bench_facts.json"
        if facts_path.is_file():
            facts = json.loads(facts_path.read_text())
            files = _log_files(root)
            print(f"reusing {root}: {len(files)} files, {facts['bytes'] / (1 << 20):.1f} MiB")
        else:
            root.mkdir(parents=True)
            t0 = time.perf_counter()
            facts = synthesise(root, args.size, ascii_escaped=args.ascii_escaped)
            facts_path.write_text(json.dumps(facts))
            files = _log_files(root)
            print(
                f"synthesised {len(files)} files, {facts['bytes'] / (1 << 20):.1f} MiB of non-repeating rows in "
                f"{time.perf_counter() - t0:.1f}s under {root}"
            )
        subprocess.run(["wc", "-l", *files], stdout=subprocess.DEVNULL, check=True)  # warm the cache
        # The package's bytecode as an installed package has it: an editable install where
        # PYTHONDONTWRITEBYTECODE is set would otherwise compile edited modules on every run.
        package = importlib.util.find_spec("cowork_adapter").submodule_search_locations[0]
        subprocess.run([sys.executable, "-m", "compileall", "-q", package], stdout=subprocess.DEVNULL, check=True)
        if args.against is not None:
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", str(args.against)], stdout=subprocess.DEVNULL, check=True
            )
        wc_times, audit_times, audit_cpus, peak_kib, tree_kib = [], [], [], 0, 0
        paired: dict[str, tuple[list[float], list[float]]] = {"this": ([], []), "other": ([], [])}
        data: dict = {}
        loads = [os.getloadavg()[0]]
        for run in range(args.repeat):  # alternating, so both see the same machine weather
            wc_s, wc_rc, _, _, _ = _timed_child(["wc", "-l", *files], subprocess.DEVNULL)
            report = base / f"audit-{run}.json"
            audit_argv = [command, "audit", "--run-dir", str(root), "--output", str(report)]
            if args.workers is not None:
                audit_argv += ["--workers", str(args.workers)]
            audit_s, audit_rc, peak, cpu, tree = _timed_child(audit_argv, subprocess.DEVNULL)
            if wc_rc != 0 or audit_rc != 0:
                print(f"wc exit {wc_rc}, audit exit {audit_rc}", file=sys.stderr)
                return 2
            data = json.loads(report.read_text())
            report.unlink()
            if data["totals"]["findings"] != facts["planted_findings"]:
                print(
                    f"the audit found {data['totals']['findings']} references, not exactly the "
                    f"{facts['planted_findings']} planted",
                    file=sys.stderr,
                )
                return 2
            if args.against is not None:
                order = [("this", str(Path(package).parent)), ("other", str(args.against))]
                for name, tree_src in order if run % 2 == 0 else order[::-1]:
                    wall, cpu_s, text = _timed_module_audit(tree_src, root, base / f"{name}-{run}.json", args.workers)
                    other = None if text is None else json.loads(text)
                    if other is None or _shared(other) != _shared(data):
                        print(f"the {name} tree's audit failed or its report differs", file=sys.stderr)
                        return 2
                    paired[name][0].append(wall)
                    paired[name][1].append(cpu_s)
            loads.append(os.getloadavg()[0])
            wc_times.append(wc_s)
            audit_times.append(audit_s)
            audit_cpus.append(cpu)
            peak_kib, tree_kib = max(peak_kib, peak), max(tree_kib, tree)
        mib = facts["bytes"] / (1 << 20)
        ratios = [w / a for w, a in zip(wc_times, audit_times, strict=True)]
        ratio = statistics.median(ratios)
        peak_mib = peak_kib / 1024
        print(f"{'':28s}   min   / median  /   max   ({args.repeat} alternating runs each, {mib:.0f} MiB)")
        print(f"{'wc -l (s)':28s}{_spread(wc_times)}")
        print(
            f"{'cowork-adapter audit (s)':28s}{_spread(audit_times)}   "
            f"({data['totals']['lines_scanned']} lines, {data['totals']['tool_calls']} tool calls, "
            f"{data['totals']['usage_records']} usage records)"
        )
        print(f"{'audit CPU incl. workers (s)':28s}{_spread(audit_cpus)}")
        print(f"{'ratio wc -l / audit time':28s}{_spread(ratios)}   target: median >= {TARGET_RATIO}")
        print(
            f"audit throughput (median): {mib / statistics.median(audit_times):.0f} MiB/s; "
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
        )
        print(
            f"audit peak memory: {peak_mib:.1f} MiB ru_maxrss (largest process); sampled peak of the "
            f"process tree: {tree_kib / 1024:.1f} MiB  target < {TARGET_PEAK_MIB} MiB"
        )
        print(f"findings: {data['totals']['findings']} (planted {facts['planted_findings']})")
        if args.against is not None:
            this, other = paired["this"], paired["other"]
            print(
                f"paired, `python -m cowork_adapter audit` of each tree ({args.repeat} pairs, order alternating; "
                f"load average {min(loads):.1f}-{max(loads):.1f}):"
            )
            print(f"{'  this tree wall / CPU (s)':28s}{_spread(this[0])}  /{_spread(this[1])}")
            print(f"{'  other tree wall / CPU (s)':28s}{_spread(other[0])}  /{_spread(other[1])}")
            print(f"{'  CPU ratio this / other':28s}{_spread([a / b for a, b in zip(this[1], other[1], strict=True)])}")
        if args.stages > 0:
            medians = _print_stages(root, files, args.stages)
            _print_budget(
                command, base, args.repeat, wc_times, medians["all of audit.read"], args.workers or os.cpu_count() or 1
            )
        missed = [
            name
            for name, ok in (
                ("ratio", ratio >= TARGET_RATIO),
                ("peak", max(peak_mib, tree_kib / 1024) < TARGET_PEAK_MIB),
            )
            if not ok
        ]
        if missed:
            print(f"target missed: {', '.join(missed)}")
            return 1
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)  # a --root folder is kept for reuse


if __name__ == "__main__":
    sys.exit(main())
