"""The REAL pinned Cowork Bench under the adapter, with the real Ouroboros 6.97.2 server.

One paid run (`cowork-adapter run --build-image`, the real benchmark checkout as --bench-root, the
real Ouroboros seed as --repo-dir, the test bed's cowork-pack:d943e75 as --base-image) on the first
5 tasks of the test bed's task list at concurrency 2, against the local meter and chat stand-ins.
It is stopped with SIGTERM once some tasks are settled and another agent runs, then continued with
`--resume-from`. A thread follows the daemon's create events throughout, so every container and
network of both invocations is inspected while it lives. The assertions come from those events and
from the files the runs leave: label and limits on every container, a bystander untouched, nothing
labelled left, a receipt for every evaluated task, the key in no file, the report equal to the
ledger, no settled task run twice, and the resumed run's usage records exactly its chat requests.

Needs the real-benchmark test bed (`bash testbed/realbench.sh up`); under CI=true its absence fails.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from docker_watch import CreationWatcher
from realbench_env import (
    WANT_LIMITS,
    RealRun,
    key_leaks,
    labelled_left,
    read_rows,
    real_testbed,
    runner_pid,
    started_ids,
    started_tasks,
    summary_tasks,
)

from cowork_adapter.custody.labels import RUN_LABEL_KEY, path_label, run_label
from cowork_adapter.demo.env import bystanders_alive, make_bystanders, remove_bystanders, wait_for
from cowork_adapter.schemas.audit import LAUNCHER_AUDIT_NAME
from cowork_adapter.vocab import ExitCode

SETTLED = {"passed", "failed", "agent_failed"}
STOP_AFTER_SETTLED = 2  # SIGTERM once this many tasks have a summary row and another agent runs


@pytest.fixture(scope="module")
def bed():
    return real_testbed()


@pytest.fixture(scope="module")
def stopped_and_resumed(bed, docker_host, tmp_path_factory):
    tasks = bed.tasks()
    real = RealRun(bed, tmp_path_factory.mktemp("realbench") / "root", docker_host).start()
    first, second = real.run_root("first"), real.run_root("resumed")
    labels: dict[str, str] = {}  # each drawn at its run's start, read from its manifest
    bystanders = make_bystanders(docker_host, path_label(first))
    watcher = CreationWatcher(docker_host)
    out: dict = {
        "real": real,
        "tasks": tasks,
        "roots": {"first": first, "resumed": second},
        "labels": labels,
        "bystander_ids": set(bystanders["containers"]) | set(bystanders["networks"]),
    }
    started = time.monotonic()
    try:
        proc = real.launch(real.args("first", tasks), "first")
        out["reached"] = wait_for(
            lambda: (
                proc.poll() is not None
                or (
                    len(summary_tasks(first)) >= STOP_AFTER_SETTLED
                    and bool(started_tasks(first) - summary_tasks(first))
                )
            ),
            2400,
            2.0,
        )
        out["first_alive_at_signal"] = proc.poll() is None
        out["bystanders_during"] = bystanders_alive(docker_host, bystanders)
        out["settled_at_signal"] = summary_tasks(first)
        proc.send_signal(signal.SIGTERM)
        out["first_exit"] = proc.wait(timeout=900)
        out["first_s"] = time.monotonic() - started
        out["first_started"] = started_tasks(first)
        out["first_started_ids"] = started_ids(first)
        out["first_pid"] = runner_pid(first)
        out["first_rows"] = read_rows(first)
        labels["first"] = run_label(first)

        served_before = len(real.chat.chat_requests())  # the first run's requests, all answered: it has ended
        resumed_at = time.monotonic()
        proc = real.launch(real.args("resumed", tasks, extra=["--resume-from", str(first)]), "resumed")
        out["resumed_exit"] = proc.wait(timeout=3600)
        out["resumed_s"] = time.monotonic() - resumed_at
        out["resumed_started"] = started_tasks(second)
        out["resumed_started_ids"] = started_ids(second)
        out["resumed_pid"] = runner_pid(second)
        out["resumed_rows"] = read_rows(second)
        out["resumed_requests"] = real.chat.chat_requests()[served_before:]
        labels["resumed"] = run_label(second)
        time.sleep(1)  # the watcher drains the last events
        out["left"] = {name: labelled_left(docker_host, label) for name, label in labels.items()}
        out["bystanders_after"] = bystanders_alive(docker_host, bystanders)
        out["image_ids"] = {
            name: (json.loads((root / "run_manifest.json").read_text()).get("image") or {}).get("id")
            for name, root in out["roots"].items()
            if (root / "run_manifest.json").is_file()
        }
        out["chat_counts"] = dict(real.chat.counts)
    finally:
        watcher.close()
        remove_bystanders(docker_host, bystanders)
        real.stop()
    out["seen"] = watcher.seen
    print(
        f"realbench: first run {out.get('first_s', 0):.0f} s (exit {out.get('first_exit')}), "
        f"resumed run {out.get('resumed_s', 0):.0f} s (exit {out.get('resumed_exit')}); "
        f"chat requests {out['chat_counts']}"
    )
    return out


def logs(out: dict) -> str:
    real: RealRun = out["real"]
    return f"first log:\n{real.log_tail('first')}\nresumed log:\n{real.log_tail('resumed')}"


def runs_containers(out: dict) -> list[tuple[set[str], dict]]:
    """(the runs it may belong to, watcher item) for every container the runners of both runs
    created, found WITHOUT looking at labels: the runner's names (agent/pg/eval-<pid>-<hex>) and its
    unnamed helpers on the run's image (the FK-fix helper names our PostgreSQL; the runner's start-up
    check runs `true`, and as both runs share one image it may be either run's)."""
    found: dict[str, tuple[set[str], dict]] = {}
    for name in ("first", "resumed"):
        pid, image = out.get(f"{name}_pid"), out["image_ids"].get(name)
        if not pid:
            continue
        named = re.compile(rf"(agent|eval|pg)-{pid}-[0-9a-f]{{8}}\Z")
        for item in out["seen"]:
            if item["type"] != "container":
                continue
            cfg = (item["inspect"] or {}).get("Config") or {}
            env = cfg.get("Env") or []
            if named.match(item["attrs"].get("name", "")) or (
                item["attrs"].get("image") == image
                and (any(e.startswith(f"PGHOST=pg-{pid}-") for e in env) or cfg.get("Cmd") == ["true"])
            ):
                found.setdefault(item["id"], (set(), item))[0].add(name)
    return list(found.values())


def test_the_first_run_was_stopped_by_sigterm_with_tasks_settled(stopped_and_resumed):
    out = stopped_and_resumed
    assert out["reached"] and out["first_alive_at_signal"], (
        f"the first run did not reach {STOP_AFTER_SETTLED} settled tasks with an agent running\n{logs(out)}"
    )
    assert out["first_exit"] == ExitCode.STOPPED, logs(out)
    manifest = json.loads((out["roots"]["first"] / "run_manifest.json").read_text())
    assert manifest.get("stop_reason") == "signal_15", manifest.get("stop_reason")
    settled = {t for t, r in out["first_rows"].items() if r["status"] in SETTLED}
    assert len(settled) >= STOP_AFTER_SETTLED, out["first_rows"]
    # Every selected task has a row, settled or not.
    assert set(out["first_rows"]) == set(out["tasks"]), sorted(out["first_rows"])


def test_every_needed_server_passed_the_inventory(stopped_and_resumed):
    out = stopped_and_resumed
    blocked = {
        t: r.get("environment_blocked")
        for name in ("first_rows", "resumed_rows")
        for t, r in out[name].items()
        if r["status"] == "environment_blocked"
    }
    assert not blocked, f"tasks blocked by a server that failed the inventory: {blocked}"


def test_the_resumed_run_finished_every_task_and_repeated_no_settled_one(stopped_and_resumed):
    out = stopped_and_resumed
    rows = out["resumed_rows"]
    assert set(rows) == set(out["tasks"]), sorted(rows)
    settled_first = {t for t, r in out["first_rows"].items() if r["status"] in SETTLED}
    assert not (settled_first & out["resumed_started"]), (
        f"settled tasks started again: {sorted(settled_first & out['resumed_started'])}"
    )
    for task in settled_first:
        assert rows[task]["attempt_run_root"] == str(out["roots"]["first"]), rows[task]
    problems = {t: r["status"] for t, r in rows.items() if r["status"] not in SETTLED}
    assert not problems, f"rows not settled after the resume: {problems}\n{logs(out)}"
    assert out["resumed_exit"] == ExitCode.OK, logs(out)
    # The real server called the model for every task it ran (the chat stand-in answered).
    assert sum(out["chat_counts"].values()) >= len(out["tasks"]), out["chat_counts"]


def test_the_resumed_runs_usage_records_are_exactly_its_chat_requests(stopped_and_resumed):
    """Issue 16 (f): over the tasks the resumed run ran, the usage in their ledger rows and in the
    run's audit equals the chat stand-in's requests during that run (count, prompt and completion
    tokens). The first run had ended, its requests all answered, before the resumed run began."""
    out = stopped_and_resumed
    second = out["roots"]["resumed"]
    requests = out["resumed_requests"]
    served = (len(requests), sum(r["prompt_tokens"] for r in requests), sum(r["completion_tokens"] for r in requests))
    ran = {t: r for t, r in out["resumed_rows"].items() if r.get("attempt_run_root") == str(second)}
    assert ran and requests, (sorted(ran), len(requests), logs(out))
    usages = [r.get("usage") or {} for r in ran.values()]
    rows = tuple(sum(u.get(k) or 0 for u in usages) for k in ("records", "prompt_tokens", "completion_tokens"))
    assert rows == served, f"ledger usage {rows} != chat requests {served}: {usages}"
    audits = sorted(second.rglob(LAUNCHER_AUDIT_NAME))
    assert audits, f"no {LAUNCHER_AUDIT_NAME} in {second}"
    activity = [t["activity"] for t in json.loads(audits[-1].read_text())["tasks"] if t["instance_id"] in ran]
    assert len(activity) == len(ran), (len(activity), sorted(ran))
    audited = tuple(sum(a[k] for a in activity) for k in ("usage_records", "prompt_tokens", "completion_tokens"))
    assert audited == served, f"audit usage {audited} != chat requests {served}"


def test_every_container_carried_its_runs_exact_label_and_the_limits_while_alive(stopped_and_resumed):
    out = stopped_and_resumed
    found = runs_containers(out)
    names = [item["attrs"].get("name", "") for _, item in found]
    agents = {n.removeprefix("agent-") for n in names if n.startswith("agent-")}
    started = out["first_started_ids"] | out["resumed_started_ids"]
    assert started <= agents, (sorted(started - agents), names)  # the agent of every started task was seen
    # An agent created but never given its task: only where the SIGTERM came between the runner's
    # create and its exec, so only in the stopped first run, and at most one per slot (concurrency 2).
    unstarted = agents - started
    assert all(i.startswith(f"{out['first_pid']}-") for i in unstarted) and len(unstarted) <= 2, (unstarted, names)
    assert sum(n.startswith("pg-") for n in names) >= len(started), names
    problems = []
    for runs, item in found:
        name = item["attrs"].get("name") or item["id"][:12]
        if item["inspect"] is None:
            problems.append(f"{name}: gone before it could be inspected")
            continue
        if (item["inspect"]["Config"].get("Labels") or {}).get(RUN_LABEL_KEY) not in {out["labels"][r] for r in runs}:
            problems.append(f"{name}: label {(item['inspect']['Config'].get('Labels') or {}).get(RUN_LABEL_KEY)!r}")
        got = {k: item["inspect"]["HostConfig"].get(k) for k in WANT_LIMITS}
        if got != WANT_LIMITS:
            problems.append(f"{name}: limits {got}")
    # Any other container or network that carries the label key must carry one of our labels
    # exactly (inventory, image probes, networks), except the deliberate look-alike bystander.
    for item in out["seen"]:
        if item["id"] in out["bystander_ids"] or item["inspect"] is None:
            continue
        labels = (
            (item["inspect"].get("Config") or {}).get("Labels")
            if item["type"] == "container"
            else item["inspect"].get("Labels")
        )
        value = (labels or {}).get(RUN_LABEL_KEY)
        if value is not None and value.startswith(out["labels"]["first"][:8]) and value not in out["labels"].values():
            problems.append(f"{item['type']} {item['attrs'].get('name')}: near-miss label {value!r}")
    assert not problems, problems


def test_nothing_labelled_is_left_and_the_bystander_is_untouched(stopped_and_resumed):
    out = stopped_and_resumed
    assert out["left"] == {"first": [], "resumed": []}, out["left"]
    assert out["bystanders_during"] is True and out["bystanders_after"] is True


def test_every_evaluated_task_has_its_receipt(stopped_and_resumed):
    out = stopped_and_resumed
    evaluated = {t: r for t, r in out["resumed_rows"].items() if r["official_eval_status"] == "completed"}
    assert evaluated, f"no task was evaluated: {out['resumed_rows']}"
    problems = []
    for task, row in evaluated.items():
        receipt = row["official_receipt"]
        path = Path(receipt.get("path") or "")
        if not path.is_absolute():
            path = Path(row.get("attempt_run_root") or "") / path
        if not path.is_file():
            problems.append(f"{task}: no receipt at {path}")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != receipt.get("sha256"):
            problems.append(f"{task}: receipt {path} does not match the row's sha256")
        elif not isinstance(receipt.get("pass"), bool):
            problems.append(f"{task}: receipt pass {receipt.get('pass')!r}")
    assert not problems, problems


def test_the_key_is_in_no_file(stopped_and_resumed):
    out = stopped_and_resumed
    real: RealRun = out["real"]
    leaks = key_leaks(real.root / "runs", real.key) + key_leaks(real.root / "storage", real.key)
    assert not leaks, leaks


def test_the_report_equals_the_ledger(stopped_and_resumed):
    out = stopped_and_resumed
    second = out["roots"]["resumed"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cowork_adapter",
            "report",
            str(second),
            "--json",
            "--output-dir",
            str(second.parent / "report"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    rows = out["resumed_rows"]
    assert report["denominator"] == len(rows) == len(out["tasks"])
    assert report["passed"] == sum(r["status"] == "passed" for r in rows.values())
    want = Counter(r["status"] for r in rows.values())
    got = {k: v for k, v in report["counts"].items() if v}
    assert got == dict(want), (got, want)
    by_task = {t["instance_id"]: t for t in report["tasks"]}
    assert {t: r["status"] for t, r in by_task.items()} == {t: r["status"] for t, r in rows.items()}


def test_the_honest_engine_has_no_tampering_finding(stopped_and_resumed):
    # Issue 27: every row carries the check's result (a list; None would be a row written without
    # it), and for the real, honest Ouroboros engine that list is empty in both runs and the report.
    out = stopped_and_resumed
    for name in ("first", "resumed"):
        rows = out[f"{name}_rows"]
        found = {t: r.get("tampering") for t, r in rows.items() if r.get("tampering") != []}
        assert rows and not found, f"{name}: {found}"
    second = out["roots"]["resumed"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cowork_adapter",
            "report",
            str(second),
            "--json",
            "--output-dir",
            str(second.parent / "report-tampering"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    tampering = report["tampering"]
    assert tampering["findings"] == 0 and tampering["tasks_not_checked"] == [], tampering
    assert tampering["tasks_checked"] == report["denominator"], tampering
    assert tampering["audit_seen"] is None or tampering["audit_seen"]["findings"] == 0, tampering["audit_seen"]


def test_the_resumed_run_exports_to_an_inspect_log_that_reads_back_whole(stopped_and_resumed):
    """The real engine's run (its recovery ancestry merged) as an Inspect AI log, read back with
    inspect_ai: every task a sample, the ledger's verdicts and usage, and the transcript of every
    task whose Ouroboros logged tool calls."""
    from inspect_ai.analysis import samples_df
    from inspect_ai.log import read_eval_log

    from cowork_adapter.export import log_name
    from cowork_adapter.report import make_report
    from cowork_adapter.report.build import row_cost
    from cowork_adapter.report.merge import load_runs, merge_rows

    out = stopped_and_resumed
    second = out["roots"]["resumed"]
    logs = second.parent / "inspect-logs"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cowork_adapter",
            "export",
            str(second),
            "--format",
            "inspect",
            "--output-dir",
            str(logs),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    log = read_eval_log(str(logs / log_name(second)))
    samples = {s.id: s for s in log.samples}
    assert sorted(samples) == sorted(out["tasks"])
    merged = merge_rows(load_runs([second]))
    for task, sample in samples.items():
        row = merged[task].row
        assert sample.scores["official"].value == ("C" if row.status.value == "passed" else "I"), task
        assert sample.scores["official"].metadata["status"] == row.status.value, task
        usage = sample.model_usage[log.eval.model]
        if row.usage is not None and not row.usage.unreadable:
            assert (usage.input_tokens, usage.output_tokens) == (row.usage.prompt_tokens, row.usage.completion_tokens)
        cost = row_cost(row)
        assert usage.total_cost == (pytest.approx(cost) if cost is not None else None), task
        tools = Path(merged[task].provenance) / "bench" / "dumps"
        logged = [p for p in tools.glob(f"*/SingleUserTurn-{task}/ouroboros/tools.jsonl") if p.stat().st_size > 0]
        if logged:  # the engine logged tool calls: the transcript shows them
            assert any(m.role == "assistant" and m.tool_calls for m in sample.messages), task
            assert any(e.event == "tool" for e in sample.events), task
    assert any(s.messages for s in samples.values()), "no task's transcript came through"
    report = make_report([second], 1)
    frame = samples_df(str(logs / log_name(second)))
    assert (frame["score_official"] == "C").mean() == pytest.approx(report["pass_at_1"])
