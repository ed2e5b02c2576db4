"""Receipts settle tasks across a killed launcher (issue 15 item 2), on the real Docker engine.

A demo run (stub engine, meter stand-in) has its meter silenced as soon as an agent starts, so no
meter poll succeeds and the supervisor publishes nothing from then on: its live ledger must still
settle each receipted task within a few seconds (the refresher, not the meter, drives it). The
test then kills it with SIGKILL (launcher and runner group) while demo-hang is still running; its
labelled resources are removed by exact label. Its result_index.jsonl is then replaced by a stale copy
(written before any receipt) or deleted. `--resume-from` must hand the runner none of the
receipted tasks (its argv, its dumps and its custody evidence say so), and the resumed run's
ledger must hold exactly one final row per selected task, the receipted ones carried from the
killed run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from cowork_adapter.container import protocol
from cowork_adapter.container.procs import group_alive
from cowork_adapter.custody.docker_ops import cleanup_run, label_is_empty
from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.chaos import cli
from cowork_adapter.demo.env import agent_started, prepare, wait_for
from cowork_adapter.demo.scenarios_recovery import stop_after_agent
from cowork_adapter.errors import CustodyError
from cowork_adapter.schemas.ledger import LEDGER_NAME, read_index
from cowork_adapter.vocab import ExitCode, TaskStatus

TASKS = ["demo-csv-totals", "demo-wrong-answer", "demo-hang"]
RECEIPTED = {"demo-csv-totals": TaskStatus.PASSED, "demo-wrong-answer": TaskStatus.FAILED}


BLIND_S = 240
REFRESH_BOUND_S = 10  # the refresher ticks every ~2 s; generous for a loaded 2-core machine


def ledger_settles(run_root: Path) -> bool:
    """The live ledger rows of the receipted tasks say what their receipts say."""
    try:
        rows = {r.instance_id: r.status for r in read_index(run_root / LEDGER_NAME)}
    except (OSError, ValueError):
        return False
    return all(rows.get(t) is s for t, s in RECEIPTED.items())


def dumps(run_root: Path) -> dict[str, Path]:
    return {p.name[len("SingleUserTurn-") :]: p for p in (run_root / "bench" / "dumps").glob("*/SingleUserTurn-*")}


def valid_verdict(dump: Path) -> bool | None:
    """The literal pass of the dump's valid completed receipt, read by the protocol alone."""
    claim, _ = protocol.read_json_record(str(dump / protocol.CLAIM_NAME))
    if not protocol.valid_claim(claim):
        return None
    receipt, _ = protocol.read_json_record(protocol.receipt_path(str(dump), claim["attempt_id"]))
    if not protocol.valid_receipt(receipt, claim) or receipt.get("official_run") is not True:
        return None
    returned = receipt.get("returned")
    verdict = returned.get("pass") if isinstance(returned, dict) else None
    return verdict if isinstance(verdict, bool) else None


def receipted(run_root: Path) -> dict[str, bool]:
    out = {}
    for task, dump in dumps(run_root).items():
        verdict = valid_verdict(dump)
        if verdict is not None:
            out[task] = verdict
    return out


def runner_pid(run_root: Path) -> int | None:
    try:
        lines = (run_root / "events.jsonl").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("kind") == "runner_started" and event.get("pid"):
            return int(event["pid"])
    return None


def event_kinds(run_root: Path) -> list[str]:
    try:
        lines = (run_root / "events.jsonl").read_text().splitlines()
    except OSError:
        return []
    kinds = []
    for line in lines:
        try:
            kinds.append(json.loads(line).get("kind"))
        except ValueError:
            continue  # a line still being appended
    return kinds


def custody_tasks(run_root: Path) -> set[str]:
    folder = run_root / "custody" / "evidence"
    return {p.read_text().strip().rsplit("/", 1)[-1] for p in folder.glob("*.task")} if folder.is_dir() else set()


def remove_leftovers(docker_host: str, label: str, attempts: int = 6) -> bool:
    """Exact-label cleanup, retried: a `docker run` the kill cut short may still be completed by the
    daemon after a listing (the operator's situation too)."""
    for _ in range(attempts):
        try:
            cleanup_run(docker_host, label, lambda entry: None)
        except CustodyError:
            time.sleep(2)
            continue
        return label_is_empty(docker_host, label)
    return False


@pytest.fixture(scope="module")
def killed(docker_host, tmp_path_factory):
    """A demo run SIGKILLed (launcher and runner group) after two receipts; labelled leftovers removed."""
    env = prepare(tmp_path_factory.mktemp("receipts") / "root", docker_host)
    root = env.run_root("killed")
    # A long blindness bound keeps the run going while the meter is silent (not part of the
    # applied configuration, so the resumed runs may use the default).
    proc = env.launch(
        env.run_args("killed", TASKS, campaign="campaign-killed.json", extra=["--meter-blindness-sec", str(BLIND_S)]),
        "killed",
    )
    live_settled = None
    try:
        assert wait_for(lambda: agent_started(root) or proc.poll() is not None, 600), "no agent started"
        assert proc.poll() is None, f"the launcher ended early (exit {proc.returncode})"
        env.meter.silence(True)
        stale = (root / LEDGER_NAME).read_bytes()  # the live ledger before any receipt
        assert wait_for(lambda: set(RECEIPTED) <= set(receipted(root)) or proc.poll() is not None, BLIND_S - 30), (
            f"receipts so far: {receipted(root)}"
        )
        assert proc.poll() is None, f"the launcher ended before the kill (exit {proc.returncode})"
        # The receipts may come before the first poll that meets the silence: wait for that poll's
        # rejection, so what settles the ledger cannot be a publish after an accepted reading.
        assert wait_for(lambda: "meter_rejected" in event_kinds(root) or proc.poll() is not None, 60, 0.2), (
            "no meter poll met the silence"
        )
        live_settled = wait_for(lambda: ledger_settles(root), REFRESH_BOUND_S, 0.2)
        pid = runner_pid(root)
        assert pid, "the runner's start was not recorded"
        os.kill(proc.pid, signal.SIGKILL)  # the launcher dies without any cleanup code running
        os.killpg(pid, signal.SIGKILL)  # and so does the runner's whole group (its own session)
        proc.wait(timeout=60)
        assert wait_for(lambda: not group_alive(pid), 30, 0.2), "the runner group outlived SIGKILL"
    finally:
        env.meter.silence(False)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    assert remove_leftovers(env.docker_host, run_label(root)), "the killed run's labelled resources survived"
    (root / "private" / "agent.env").unlink(missing_ok=True)
    # The operator's `clear` settles the killed run in its campaign: every resume continues that campaign.
    cleared = cli(
        env,
        "clear",
        str(root),
        "--operator-note",
        "killed by the receipts test",
        "--campaign-file",
        str(env.root / "campaign-killed.json"),
        "--meter-url",
        env.meter.base_url,
        "--docker-host",
        env.docker_host,
        "--api-key-env",
        env.key_env,
    )
    assert cleared.returncode == ExitCode.OK, cleared.stdout + cleared.stderr
    yield env, root, stale, live_settled
    env.meter.stop()


def test_the_live_ledger_settled_receipts_while_the_meter_was_silent(killed):
    _, root, _, settled = killed
    assert settled, f"the live ledger did not settle the receipted tasks within {REFRESH_BOUND_S} s of their receipts"
    # The silence held until the kill: a rejected reading, and no accepted one after it.
    kinds = event_kinds(root)
    assert "meter_rejected" in kinds, "the meter was never silent"
    assert "meter_reading" not in kinds[kinds.index("meter_rejected") :]


def test_the_kill_left_receipts_and_an_unsettled_task(killed):
    _, root, stale, _ = killed
    verdicts = receipted(root)
    assert {t: verdicts.get(t) for t in RECEIPTED} == {"demo-csv-totals": True, "demo-wrong-answer": False}
    assert "demo-hang" not in verdicts
    rows = [json.loads(line) for line in stale.decode().splitlines() if line.strip()]
    # The stale copy must really be stale, or the resume below would prove nothing.
    assert not any(r["status"] in ("passed", "failed") for r in rows), rows


def resume(env, root: Path, name: str) -> tuple[Path, int]:
    child = env.run_root(name)
    proc = env.launch(
        env.run_args(
            name,
            [],
            campaign="campaign-killed.json",  # the ancestor's campaign
            extra=["--resume-from", str(root)],
        ),
        name,
    )
    started, code = stop_after_agent(env, proc, child)
    assert started, f"the resumed run started no agent (exit {code}); see {env.root / (name + '.log')}"
    assert label_is_empty(env.docker_host, run_label(child))
    return child, code


@pytest.mark.parametrize("ledger", ["stale", "deleted"])
def test_resume_reruns_no_receipted_task_and_keeps_one_final_row_per_task(killed, ledger):
    env, root, stale, _ = killed
    if ledger == "stale":
        (root / LEDGER_NAME).write_bytes(stale)
    else:
        (root / LEDGER_NAME).unlink(missing_ok=True)
    before = receipted(root)
    child, code = resume(env, root, f"resume-{ledger}")
    assert code == ExitCode.STOPPED

    manifest = json.loads((child / "run_manifest.json").read_text())
    handed = manifest["official_command"][3:]  # bash run_parallel.sh <concurrency> <tasks...>
    assert handed == ["demo-hang"] and manifest["selection"]["task_ids"] == ["demo-hang"]
    assert sorted(manifest["selection"]["settled_elsewhere"]) == sorted(RECEIPTED)
    assert not set(RECEIPTED) & set(dumps(child)), "a receipted task got a dump in the resumed run"
    assert not set(RECEIPTED) & custody_tasks(child), "a receipted task got a container in the resumed run"
    assert receipted(root) == before  # the killed run's evidence is untouched

    rows = read_index(child / LEDGER_NAME)
    assert sorted(r.instance_id for r in rows) == sorted(TASKS)  # exactly one row per task
    assert not any(r.provisional for r in rows)
    by_task = {r.instance_id: r for r in rows}
    for task, status in RECEIPTED.items():
        assert (by_task[task].status, by_task[task].attempt_run_root) == (status, str(root))
    assert by_task["demo-hang"].attempt_run_root == str(child)
    assert by_task["demo-hang"].status is TaskStatus.INFRA_FAILED
