"""Demo scenarios of recovery and of an ungraceful launcher death.

resume           a run stopped mid-way is resumed twice (each pass stopped again), a third
                 resume with work remaining is refused, and the report over the chain counts
                 every selected task exactly once.
kill9-reconcile  the launcher dies by SIGKILL; its watchdog stops the runner group and removes the
                 run's exact-label resources (the operator's own stop and cleanup find nothing left);
                 the next run is refused for the unsettled active_run; `campaign reconcile` clears
                 it; the next run proceeds on the same usage baseline.

Both drive the real `cowork-adapter run` as a child, like the scenarios in demo/scenarios.py.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..container.procs import group_alive
from ..custody.creations import creations_dir
from ..custody.docker_ops import cleanup_run, label_is_empty
from ..custody.labels import run_label
from ..vocab import ExitCode
from .env import (
    Check,
    DemoEnv,
    agent_started,
    campaign_checks,
    custody_checks,
    read_json,
    read_rows,
    wait_for,
)

SETTLED = {"passed", "failed", "agent_failed"}
RESUME_TASKS = ["demo-csv-totals", "demo-wrong-answer", "demo-hang"]
# demo-hang never ends by itself; a short agent timeout bounds any pass that is not stopped.
SHORT_TIMEOUT = ["--task-timeout", "120"]
CLI_TIMEOUT_S = 900


def summary_tasks(run_root: Path) -> set[str]:
    """Tasks with a row in the runner's own summary.csv (finished from the runner's view)."""
    done: set[str] = set()
    for path in (run_root / "bench" / "benchmark_logs").glob("fully_parallel_*/summary.csv"):
        try:
            with path.open(newline="") as fh:
                done |= {row["task"] for row in csv.DictReader(fh)}
        except (OSError, KeyError, csv.Error):
            continue
    return done


def run_captured(env: DemoEnv, args: list[str], timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
    """A CLI invocation with the key in its environment only; stdout and stderr kept apart."""
    child_env = {**os.environ, env.key_env: env.key}
    return subprocess.run(
        args, env=child_env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def one_sentence(stderr: str) -> str | None:
    """The single non-empty stderr line, or None when there is not exactly one."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    return lines[0] if len(lines) == 1 else None


def settled_tasks(run_root: Path) -> set[str]:
    return {task for task, row in read_rows(run_root).items() if row.get("status") in SETTLED}


def stop_after_agent(env: DemoEnv, proc: subprocess.Popen, run_root: Path) -> tuple[bool, int]:
    """SIGTERM the launcher a little after an agent container began work; (agent seen, exit code)."""
    started = wait_for(lambda: agent_started(run_root) or proc.poll() is not None, 600)
    started = started and agent_started(run_root)
    time.sleep(2)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return started, proc.wait(timeout=600)


def scenario_resume(env: DemoEnv) -> list[Check]:
    campaign = "campaign-resume.json"
    roots = {n: env.run_root(f"resume-{n}") for n in (1, 2, 3, 4)}
    checks: list[Check] = []

    # Pass 0: stopped once demo-csv-totals has its summary row; demo-hang is still unsettled.
    proc = env.launch(env.run_args("resume-1", RESUME_TASKS, campaign=campaign, extra=SHORT_TIMEOUT), "resume-1")
    wait_for(lambda: "demo-csv-totals" in summary_tasks(roots[1]) or proc.poll() is not None, 900)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    code1 = proc.wait(timeout=600)
    settled1 = settled_tasks(roots[1])
    checks += [
        Check("run 1 is stopped by SIGTERM (exit 3)", code1 == ExitCode.STOPPED, f"exit {code1}"),
        Check(
            "run 1 settled demo-csv-totals and left demo-hang unsettled",
            "demo-csv-totals" in settled1 and "demo-hang" not in settled1,
            f"settled {sorted(settled1)}",
        ),
    ]

    # Pass 1: no selectors, so the original selection is kept and only unsettled tasks run.
    proc = env.launch(
        env.run_args("resume-2", [], campaign=campaign, extra=SHORT_TIMEOUT + ["--resume-from", str(roots[1])]),
        "resume-2",
    )
    started2, code2 = stop_after_agent(env, proc, roots[2])
    sel2 = read_json(roots[2] / "run_manifest.json").get("selection") or {}
    want2 = [t for t in RESUME_TASKS if t not in settled1]
    checks += [
        Check(
            "run 2 keeps the original selection",
            sel2.get("selection_task_ids") == RESUME_TASKS,
            str(sel2.get("selection_task_ids")),
        ),
        Check(
            "run 2 runs only run 1's unsettled tasks",
            sel2.get("task_ids") == want2,
            f"{sel2.get('task_ids')} vs {want2}",
        ),
        Check("run 2 is recovery generation 1", sel2.get("resume_generation") == 1, str(sel2.get("resume_generation"))),
        Check(
            "run 2 was stopped with an agent running (exit 3)", started2 and code2 == ExitCode.STOPPED, f"exit {code2}"
        ),
    ]
    settled12 = settled1 | settled_tasks(roots[2])

    # Pass 2: the last permitted pass.
    proc = env.launch(
        env.run_args("resume-3", [], campaign=campaign, extra=SHORT_TIMEOUT + ["--resume-from", str(roots[2])]),
        "resume-3",
    )
    started3, code3 = stop_after_agent(env, proc, roots[3])
    sel3 = read_json(roots[3] / "run_manifest.json").get("selection") or {}
    want3 = [t for t in RESUME_TASKS if t not in settled12]
    checks += [
        Check(
            "run 3 runs only the tasks unsettled in runs 1 and 2",
            sel3.get("task_ids") == want3,
            f"{sel3.get('task_ids')} vs {want3}",
        ),
        Check("run 3 is recovery generation 2", sel3.get("resume_generation") == 2, str(sel3.get("resume_generation"))),
        Check(
            "run 3 ended (stopped or finished)",
            code3 in (ExitCode.STOPPED, ExitCode.OK, ExitCode.FAILED),
            f"exit {code3}",
        ),
    ]
    remaining = [t for t in RESUME_TASKS if t not in settled12 | settled_tasks(roots[3])]

    # A third pass with work remaining is refused with one sentence.
    out = run_captured(
        env, env.run_args("resume-4", [], campaign=campaign, extra=SHORT_TIMEOUT + ["--resume-from", str(roots[3])])
    )
    sentence = one_sentence(out.stderr) or ""
    if remaining:
        checks.append(
            Check(
                "a third recovery pass with work remaining is refused (exit 2, one sentence)",
                out.returncode == ExitCode.REFUSED and "at most two recovery passes" in sentence,
                f"exit {out.returncode}: {out.stderr.strip()[:300]}",
            )
        )
    else:
        checks.append(
            Check(
                "with nothing remaining, a further resume is an allowed no-op",
                out.returncode == ExitCode.OK,
                f"exit {out.returncode}: {out.stderr.strip()[:300]}",
            )
        )

    # The report over the chain counts each selected task exactly once.
    report = run_captured(
        env,
        [
            sys.executable,
            "-m",
            "cowork_adapter",
            "report",
            str(roots[3]),
            "--json",
            "--output-dir",
            str(env.root / "report-resume"),
        ],
        timeout=300,
    )
    try:
        data = json.loads(report.stdout)
    except ValueError:
        data = {}
    ids = [t.get("instance_id") for t in data.get("tasks", [])]
    counted = sum((data.get("counts") or {}).values())
    csv_row: dict[str, Any] = next((t for t in data.get("tasks", []) if t.get("instance_id") == "demo-csv-totals"), {})
    checks += [
        Check(
            "the report's denominator is the 3 selected tasks",
            data.get("denominator") == 3,
            f"exit {report.returncode}, denominator {data.get('denominator')}",
        ),
        Check(
            "the report lists each task exactly once",
            sorted(ids) == sorted(RESUME_TASKS) and counted == 3,
            f"{ids}, counts sum {counted}",
        ),
        Check(
            "run 1's pass of demo-csv-totals is what the report scores",
            csv_row.get("status") == "passed",
            str(csv_row.get("status")),
        ),
    ]
    for n in (1, 2, 3):
        checks += [Check(f"run {n}: " + c.name, c.ok, c.detail) for c in custody_checks(env, roots[n])]
    checks += campaign_checks(env, campaign, roots[3])
    return checks


def stop_process_group(pgid: int, grace: float = 30.0) -> bool:
    """What an operator does to an orphaned runner: SIGTERM the group, then SIGKILL; True when gone."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
        if wait_for(lambda: not group_alive(pgid), wait, 0.2):
            return True
    return not group_alive(pgid)


def _watchdog_exit(run_root: Path) -> str | None:
    """The reason of the run's watchdog_exited event, or None while there is none."""
    try:
        lines = (run_root / "events.jsonl").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("kind") == "watchdog_exited":
            return str(event.get("reason"))
    return None


def scenario_kill9_reconcile(env: DemoEnv) -> list[Check]:
    campaign = "campaign-kill9.json"
    campaign_path = env.root / campaign
    killed_root, next_root = env.run_root("kill9"), env.run_root("kill9-next")
    proc = env.launch(env.run_args("kill9", ["demo-hang"], campaign=campaign), "kill9")
    started = wait_for(lambda: agent_started(killed_root) or proc.poll() is not None, 600) and agent_started(
        killed_root
    )
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    # The run's watchdog contains the dead launcher's run on its own; the operator's steps below
    # come after it (run concurrently, two exact-label cleanups would race on the same removals).
    watchdog_done = wait_for(lambda: _watchdog_exit(killed_root) is not None, 60, 0.2)
    before = read_json(campaign_path)
    active = before.get("active_run") or {}
    checks = [
        Check("the agent was running when the launcher got SIGKILL", started),
        Check(
            "the watchdog fenced the run, stopped the runner and proved cleanup",
            watchdog_done and _watchdog_exit(killed_root) == "custody_finished",
            str(_watchdog_exit(killed_root)),
        ),
        Check(
            "the campaign keeps the killed run as its active_run",
            str(active.get("run_root")) == str(killed_root),
            str(active.get("run_root")),
        ),
    ]

    # The operator's part: stop the orphaned runner group, then exact-label cleanup.
    pgid = active.get("runner_pgid")
    group_gone = stop_process_group(int(pgid)) if pgid else False
    cleanup_log: list[dict] = []
    try:
        report = cleanup_run(
            env.docker_host, run_label(killed_root), cleanup_log.append, creations=creations_dir(killed_root)
        )
        removed = [n for _, n in report.removed_containers + report.removed_networks]
        cleaned = label_is_empty(env.docker_host, run_label(killed_root))
        detail = f"removed {removed}" + (f"; {json.dumps(cleanup_log)[:200]}" if cleanup_log else "")
    except Exception as exc:  # noqa: BLE001 - unproven cleanup is a failed check, not a crash
        cleaned, detail = False, f"{type(exc).__name__}: {exc}"
    checks += [
        Check("the orphaned runner process group was recorded and is gone", bool(pgid) and group_gone, f"pgid {pgid}"),
        Check("exact-label cleanup left nothing with the killed run's label", cleaned, detail[:300]),
    ]

    # While active_run is unsettled, the next run is refused and the campaign file is untouched.
    raw_before = campaign_path.read_bytes()
    out = run_captured(env, env.run_args("kill9-refused", ["demo-csv-totals"], campaign=campaign))
    sentence = one_sentence(out.stderr) or ""
    checks += [
        Check(
            "the next run is refused for the unsettled active run (exit 2, one sentence)",
            out.returncode == ExitCode.REFUSED and "active run" in sentence,
            f"exit {out.returncode}: {out.stderr.strip()[:300]}",
        ),
        Check(
            "the refused run left the campaign file byte-for-byte unchanged", campaign_path.read_bytes() == raw_before
        ),
    ]

    rec = run_captured(
        env,
        [
            sys.executable,
            "-m",
            "cowork_adapter",
            "campaign",
            "reconcile",
            "--campaign-file",
            str(campaign_path),
            "--run-root",
            str(killed_root),
            "--operator-note",
            "launcher SIGKILLed in the demo; runner group stopped; exact-label cleanup proven empty",
            "--api-key-env",
            env.key_env,
            "--meter-url",
            env.meter.base_url,
            "--docker-host",
            env.docker_host,
        ],
        timeout=300,
    )
    after = read_json(campaign_path)
    same = {
        k: (before.get(k), after.get(k)) for k in ("usage_baseline", "ceiling_usd", "prior_spend_usd", "fingerprint")
    }
    checks += [
        Check(
            "campaign reconcile exits 0",
            rec.returncode == ExitCode.OK,
            f"exit {rec.returncode}: {rec.stderr.strip()[:300]}",
        ),
        Check("reconcile cleared active_run", after.get("active_run") is None),
        Check(
            "reconcile kept baseline, ceiling, prior spend and key", all(a == b for a, b in same.values()), str(same)
        ),
        Check("reconcile recorded the operator's note", bool(after.get("reconciliations"))),
    ]

    proc = env.launch(env.run_args("kill9-next", ["demo-csv-totals"], campaign=campaign), "kill9-next")
    code = proc.wait(timeout=1200)
    final = read_json(campaign_path)
    checks += [
        Check(
            "the next run proceeds (exit 0 or 1 per its task)", code in (ExitCode.OK, ExitCode.FAILED), f"exit {code}"
        ),
        Check(
            "the next run's task has its designed result",
            (read_rows(next_root).get("demo-csv-totals") or {}).get("status") == "passed",
        ),
        Check(
            "the campaign keeps the same usage baseline",
            final.get("usage_baseline") == before.get("usage_baseline"),
            f"{before.get('usage_baseline')} -> {final.get('usage_baseline')}",
        ),
    ]
    checks += custody_checks(env, next_root) + campaign_checks(env, campaign, next_root)
    return checks
