"""`cowork-adapter demo`: qualification runs of the whole pipeline that spend nothing.

Each scenario runs the real `cowork-adapter run` as a child process on the bundled demo
benchmark, with the stub engine (a plainly named stand-in for Ouroboros) and the local stand-in
for the provider's key meter, then checks its own designed outcome and prints a verdict table.
Exit 0 only when every scenario behaved as designed. What every scenario shares (the prepared
demo, its checks, bystanders) is in demo/env.py; the longer scenarios have their own modules.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..custody.labels import path_label
from ..vocab import DemoScenario, ExitCode
from .chaos import scenario_kill9_random
from .env import (
    DESIGNED,
    Check,
    DemoEnv,
    agent_started,
    bystanders_alive,
    campaign_checks,
    custody_checks,
    make_bystanders,
    prepare,
    read_json,
    read_rows,
    remove_bystanders,
    resource_checks,
    wait_for,
)
from .heartbeat import DemoHeartbeat
from .scenarios_compare import scenario_compare
from .scenarios_diagnostic import scenario_diagnostic
from .scenarios_hostile import scenario_hostile
from .scenarios_inventory import scenario_environment
from .scenarios_load import scenario_hostile_load
from .scenarios_recovery import scenario_kill9_reconcile, scenario_resume


def scenario_pass(env: DemoEnv) -> list[Check]:
    name, campaign = "pass", "campaign-pass.json"
    proc = env.launch(env.run_args(name, list(DESIGNED), campaign=campaign), name)
    code = proc.wait(timeout=1800)
    run_root = env.run_root(name)
    rows = read_rows(run_root)
    manifest = read_json(run_root / "run_manifest.json")
    checks = [
        Check(
            "the launcher exits 0: the provider failure only the engine claimed (--key-in-agent, no gateway "
            "saw it) is agent_failed, not infrastructure",
            code == ExitCode.OK,
            f"exit {code}",
        )
    ]
    said = {
        str(f.get("kind")) for f in rows.get("demo-provider-error", {}).get("tampering") or [] if isinstance(f, dict)
    }
    checks.append(
        Check(
            "demo-provider-error is flagged unverified_infra_claim", "unverified_infra_claim" in said, str(sorted(said))
        )
    )
    for task, want in DESIGNED.items():
        got = rows.get(task, {}).get("status")
        checks.append(Check(f"{task} is {want}", got == want.value, f"got {got}"))
    checks.append(
        Check(
            "the manifest records the immutable image ID",
            str((manifest.get("image") or {}).get("id", "")).startswith("sha256:"),
        )
    )
    checks += resource_checks(env, name, rows)
    checks += custody_checks(env, run_root) + campaign_checks(env, campaign, run_root)
    return checks


def scenario_sigterm(env: DemoEnv) -> list[Check]:
    name, campaign = "sigterm", "campaign-sigterm.json"
    run_root = env.run_root(name)
    bystanders = make_bystanders(env.docker_host, path_label(run_root))  # its own label is drawn at its start
    try:
        proc = env.launch(env.run_args(name, ["demo-hang", "demo-csv-totals"], campaign=campaign), name)
        started = wait_for(lambda: agent_started(run_root), 300)
        time.sleep(3)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=600)
        manifest = read_json(run_root / "run_manifest.json")
        checks = [
            Check("an agent container was running when SIGTERM arrived", started),
            Check("the launcher exits 3 (stopped)", code == ExitCode.STOPPED, f"exit {code}"),
            Check(
                "the stop reason is signal_15",
                manifest.get("stop_reason") == "signal_15",
                str(manifest.get("stop_reason")),
            ),
            Check("every selected task has a ledger row", set(read_rows(run_root)) == {"demo-hang", "demo-csv-totals"}),
        ]
        checks += custody_checks(env, run_root) + campaign_checks(env, campaign, run_root)
        checks.append(
            Check("look-alike bystanders on the same daemon survive", bystanders_alive(env.docker_host, bystanders))
        )
    finally:
        remove_bystanders(env.docker_host, bystanders)
    return checks


def scenario_budget_stop(env: DemoEnv) -> list[Check]:
    name, campaign = "budget-stop", "campaign-budget.json"
    run_root = env.run_root(name)
    rate = 0.25  # USD per second on the stand-in meter while this scenario runs
    # The invocation budget is above the campaign boundary, so the campaign reserve must stop it.
    proc = env.launch(env.run_args(name, ["demo-hang", "demo-csv-totals"], campaign=campaign, budget_usd=100), name)
    started = wait_for(lambda: agent_started(run_root), 300)
    base = env.meter.state()["usage"]
    env.meter.add_usage(38.0)  # jump close to the boundary, then climb steadily across it
    env.meter.set_rate(rate)
    try:
        code = proc.wait(timeout=600)
    finally:
        env.meter.set_rate(0.0005)
    manifest = read_json(run_root / "run_manifest.json")
    record = read_json(env.root / campaign)
    spent = record.get("last_usage", 0) - record.get("usage_baseline", 0) + record.get("prior_spend_usd", 0)
    boundary = 50 - 5  # ceiling − reserve
    overshoot_bound = rate * 15 + rate * 5  # one poll interval plus one read slice of spending
    checks = [
        Check("an agent was running when spending climbed", started, f"usage at climb {base:.2f}"),
        Check("the launcher exits 3 (stopped)", code == ExitCode.STOPPED, f"exit {code}"),
        Check(
            "the stop reason is campaign_budget_reserve",
            manifest.get("stop_reason") == "campaign_budget_reserve",
            str(manifest.get("stop_reason")),
        ),
        Check(
            "campaign spending is within one poll's spend of the boundary",
            boundary <= spent <= boundary + overshoot_bound,
            f"spent ${spent:.2f}, boundary ${boundary}",
        ),
    ]
    return checks + custody_checks(env, run_root) + campaign_checks(env, campaign, run_root)


def scenario_meter_outage(env: DemoEnv) -> list[Check]:
    name, campaign = "meter-outage", "campaign-outage.json"
    run_root = env.run_root(name)
    proc = env.launch(env.run_args(name, ["demo-hang"], campaign=campaign), name)
    started = wait_for(lambda: agent_started(run_root), 300)
    silenced_at = time.monotonic()
    env.meter.silence(True)
    try:
        code = proc.wait(timeout=600)
    finally:
        env.meter.silence(False)
    elapsed = time.monotonic() - silenced_at
    manifest = read_json(run_root / "run_manifest.json")
    monitor = read_json(run_root / "monitor.json")
    checks = [
        Check("an agent was running when the meter went silent", started),
        Check("the launcher exits 3 (stopped)", code == ExitCode.STOPPED, f"exit {code}"),
        Check(
            "the stop reason is budget_meter_unavailable",
            manifest.get("stop_reason") == "budget_meter_unavailable",
            str(manifest.get("stop_reason")),
        ),
        Check("it stopped within the blindness bound plus cleanup time", elapsed <= 30 + 15 + 120, f"{elapsed:.0f}s"),
        Check("monitor.json keeps the rejected readings", bool((monitor.get("meter") or {}).get("rejected"))),
    ]
    return checks + custody_checks(env, run_root)


SCENARIOS: dict[str, Callable[[DemoEnv], list[Check]]] = {
    DemoScenario.PASS.value: scenario_pass,
    DemoScenario.SIGTERM.value: scenario_sigterm,
    DemoScenario.BUDGET_STOP.value: scenario_budget_stop,
    DemoScenario.METER_OUTAGE.value: scenario_meter_outage,
    DemoScenario.DIAGNOSTIC.value: scenario_diagnostic,
    DemoScenario.ENVIRONMENT.value: scenario_environment,
    DemoScenario.HOSTILE.value: scenario_hostile,
    DemoScenario.HOSTILE_LOAD.value: scenario_hostile_load,
    DemoScenario.RESUME.value: scenario_resume,
    DemoScenario.KILL9_RECONCILE.value: scenario_kill9_reconcile,
    DemoScenario.KILL9_RANDOM.value: scenario_kill9_random,
    DemoScenario.COMPARE.value: scenario_compare,
}


def table_label(scenario: str, check: str) -> tuple[str, str]:
    """(scenario column, check column). A scenario of several runs names each run in its checks
    ("[diagnostic-on] ..."), so the table tells its runs apart."""
    if check.startswith("[") and "] " in check:
        run, text = check[1:].split("] ", 1)
        return (f"{scenario} ({run})" if run != scenario else scenario), text
    return scenario, check


def run_demo(*, run_root: Path, docker_host: str | None, scenario: str) -> int:
    """Prepare the demo once, run the chosen scenario(s), print the verdict table."""
    from rich.console import Console
    from rich.table import Table

    docker_host = docker_host or os.environ.get("DOCKER_HOST", "")
    if not docker_host:
        print("cowork-adapter: the demo needs a Docker daemon: pass --docker-host or set DOCKER_HOST.", file=sys.stderr)
        return ExitCode.REFUSED
    if run_root.exists():
        print(f"cowork-adapter: the demo root {run_root} already exists; every demo needs a new root.", file=sys.stderr)
        return ExitCode.REFUSED
    names = list(SCENARIOS) if scenario == DemoScenario.ALL.value else [scenario]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"cowork-adapter: the demo scenario {unknown[0]} is not available yet.", file=sys.stderr)
        return ExitCode.REFUSED

    heartbeat = DemoHeartbeat(len(names)).start()
    results: dict[str, list[Check]] = {}
    try:
        heartbeat.preparing()
        env = prepare(run_root.resolve(), docker_host)
        try:
            for index, name in enumerate(names, 1):
                heartbeat.scenario(index, name)
                try:
                    results[name] = SCENARIOS[name](env)
                except Exception as exc:  # noqa: BLE001 - a broken scenario is a failed verdict, not a crash
                    results[name] = [Check("the scenario ran to its end", False, f"{type(exc).__name__}: {exc}")]
                passed = sum(c.ok for c in results[name])
                heartbeat.scenario_done(name, passed, len(results[name]) - passed)
        finally:
            env.meter.stop()
    finally:
        heartbeat.close()
    table = Table(title=f"cowork-adapter demo ({run_root})")
    for column in ("scenario", "check", "verdict", "detail"):
        table.add_column(column)
    for name, checks in results.items():
        for check in checks:
            table.add_row(*table_label(name, check.name), "PASS" if check.ok else "FAIL", check.detail)
    Console(width=160).print(table)
    ok = all(c.ok for checks in results.values() for c in checks)
    (run_root / "demo_verdicts.json").write_text(
        json.dumps({n: [c.__dict__ for c in cs] for n, cs in results.items()}, indent=2) + "\n"
    )
    print(
        f"demo verdict: {'PASS' if ok else 'FAIL'} ({sum(c.ok for cs in results.values() for c in cs)} of "
        f"{sum(len(cs) for cs in results.values())} checks)"
    )
    return ExitCode.OK if ok else ExitCode.FAILED
