"""Behaviours that were implemented but had no test that would catch their loss (issue 21, item 8).

Each test below names the behaviour it guards; each was checked to fail when that behaviour is
removed from the code. The cleanup-failure case needs the daemon and lives in
tests/integration/test_cleanup_unproven.py.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)
from test_recovery import make_run  # noqa: E402  (same directory; pytest puts it on sys.path)

import cowork_adapter.run.run as run_module
from cowork_adapter.benchmark.provenance import dataset_ids, seed_identity
from cowork_adapter.config import RunConfig
from cowork_adapter.container import ouroboros
from cowork_adapter.errors import Refusal
from cowork_adapter.ops.status import status_command
from cowork_adapter.report import make_report
from cowork_adapter.run.launch import _selection, budget_record
from cowork_adapter.run.progress import RunProgress
from cowork_adapter.run.recovery import resolve_ancestry
from cowork_adapter.run.supervisor import Supervisor
from cowork_adapter.runroot.events import EventLog
from cowork_adapter.schemas.ledger import LEDGER_NAME
from cowork_adapter.schemas.monitor import MeterState, Monitor
from cowork_adapter.score.ledger import build_index, write_index

# ---------------------------------------------------------------- a. the real 15 s poll


class RecordingWake:
    """Stands in for the supervisor's wake event: records every wait instead of sleeping, and asks
    the supervisor to stop after a few turns of its loop."""

    def __init__(self, turns: int) -> None:
        self.waits: list[float] = []
        self.turns = turns
        self.supervisor: Supervisor | None = None
        self._set = False

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        if len(self.waits) >= self.turns:
            self.supervisor.request_stop("test_done")
        return self._set

    def set(self) -> None:
        self._set = True

    def clear(self) -> None:
        self._set = False


def test_the_production_supervisor_waits_15_s_between_reads_the_cadence_the_manifest_records(tmp_path):
    """No poll_sec passed (as run.py constructs it): with a fresh reading each turn and a 60 s
    blindness bound, every wait of the loop (MeterSchedule's) is the full 15 s the manifest records."""
    (tmp_path / "seed").mkdir()
    (tmp_path / "bench").mkdir()
    cfg = RunConfig.from_flags(
        repo_dir=tmp_path / "seed",
        bench_root=tmp_path / "bench",
        docker_host="unix:///d",
        run_root=tmp_path / "runs" / "r",
        dry_run=True,
    )
    now = 1000.0
    meter = SimpleNamespace(observe=lambda deadline: (now, None))
    wake = RecordingWake(turns=3)
    supervisor = Supervisor(
        runner_argv=["sleep", "60"],
        runner_env=dict(os.environ),
        runner_cwd=tmp_path,
        console_log=tmp_path / "console.log",
        stop_file=tmp_path / "stop",
        blindness_sec=60.0,
        meter=meter,
        disk_check=lambda: None,
        publish=lambda live: None,
        on_event=lambda kind, data: None,
        clock=lambda: now,
        group_grace_sec=5.0,
        _wake=wake,
    )
    wake.supervisor = supervisor
    result = supervisor.run(anchor=now)
    assert result.stop_reason == "test_done" and result.supervisor_error is None
    assert wake.waits == [15.0, 15.0, 15.0]
    assert budget_record(cfg).meter.poll_sec == 15.0


def test_the_paid_run_builds_its_supervisor_without_overriding_the_poll():
    """The run's Supervisor(...) passes no poll_sec (nor a READ_SLICE of its own): the 15 s
    default is what a paid run uses."""
    tree = ast.parse(Path(run_module.__file__).read_text(encoding="utf-8"))
    calls = [
        node for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Supervisor"
    ]
    assert len(calls) == 1, "run.py should construct exactly one Supervisor"
    assert "poll_sec" not in {kw.arg for kw in calls[0].keywords}


# ---------------------------------------------------------------- b. no selector: all 496 tasks


def test_a_run_without_a_task_selector_selects_every_task_of_the_benchmark(tmp_path):
    bench = tmp_path / "bench"
    pool = bench / "tasks" / "finalpool"
    names = [f"task-{i:03d}" for i in range(496)]
    for name in names:
        (pool / name).mkdir(parents=True)
        (pool / name / "task_config.json").write_text("{}")
    (pool / ".hidden").mkdir()  # neither a dot folder nor a folder without a task_config is a task
    (pool / ".hidden" / "task_config.json").write_text("{}")
    (pool / "not-a-task").mkdir()
    (tmp_path / "seed").mkdir()
    cfg = RunConfig.from_flags(
        repo_dir=tmp_path / "seed",
        bench_root=bench,
        docker_host="unix:///d",
        run_root=tmp_path / "runs" / "r",
        dry_run=True,
    )
    assert cfg.selection.task_ids is None
    dataset = dataset_ids(bench)
    selection = _selection(
        cfg,
        SimpleNamespace(
            explicit=None if cfg.selection.task_ids is None else list(cfg.selection.task_ids), dataset=dataset
        ),
        image=None,
    )
    assert len(selection.task_ids) == 496 and selection.task_ids == sorted(names)
    assert selection.selection_task_ids == selection.task_ids and selection.explicit is False


# ---------------------------------------------------------------- d. cowork_diagnostic_write_failed


def test_a_failed_ledger_write_is_reported_counted_and_shown_by_status(tmp_path, capsys):
    root = tmp_path / "run"
    synth.write_manifest(root, ["a", "b"], outcome="running")
    synth.write_start_evidence(synth.dump_dir(root, "a"))
    (root / LEDGER_NAME).mkdir()  # the ledger's place is taken: its atomic replace must fail
    progress = RunProgress(root, EventLog(root / "events.jsonl"))
    progress.refresh(live=True, interruption_cause="in_progress")  # never raises
    progress.refresh_quietly(live=False, interruption_cause="runner_exited")
    err = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    failed = [x for x in err if x.get("event") == "cowork_diagnostic_write_failed"]
    assert failed and all(x["artifact"] == LEDGER_NAME for x in failed)
    progress.write_monitor(
        Monitor(observed_at="2026-01-01T00:00:00Z", launcher_pid=1, meter=MeterState(blindness_sec=30.0))
    )
    recorded = json.loads((root / "monitor.json").read_text())["diagnostic_write_failures"]
    assert recorded[LEDGER_NAME]["count"] == len(failed) and recorded[LEDGER_NAME]["error"]
    assert status_command(root, as_json=True) == 0
    shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert shown["diagnostic_write_failures"][LEDGER_NAME]["count"] == len(failed)


# ---------------------------------------------------------------- e. checkpoint before each status request


class TaskServer:
    """A minimal GET /api/tasks/<id>: at each request it notes what the dump's checkpointed log
    held, then the 'server' logs one more line; the third request answers a terminal task."""

    def __init__(self, data: Path, dump: Path) -> None:
        self.data, self.dump, self.seen = data, dump, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                copy = outer.dump / "events.jsonl"
                outer.seen.append(copy.read_text() if copy.exists() else None)
                with open(outer.data / "logs" / "events.jsonl", "a") as fh:
                    fh.write(f'{{"n": {len(outer.seen)}}}\n')
                body = json.dumps({"status": "completed" if len(outer.seen) >= 3 else "running"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def test_the_logs_are_checkpointed_before_every_status_request(tmp_path):
    data, dump = tmp_path / "data", tmp_path / "dump" / "ouroboros"
    (data / "logs").mkdir(parents=True)
    (data / "logs" / "events.jsonl").write_text('{"n": 0}\n')
    server = TaskServer(data, dump)
    try:
        result, _ = ouroboros.poll(
            server.port,
            "t-1",
            proc=SimpleNamespace(poll=lambda: None),
            deadline=time.monotonic() + 30,
            on_tick=lambda: ouroboros.checkpoint(str(data), None, str(dump), []),
            on_result=lambda answer: None,
            cost_grace_sec=0,
            interval=0.01,
        )
    finally:
        server.httpd.shutdown()
    assert result["status"] == "completed"
    # Request k found in the dump every line the server had logged before it (lines 0..k-1).
    assert server.seen == ["".join(f'{{"n": {i}}}\n' for i in range(k)) for k in (1, 2, 3)]


# ---------------------------------------------------------------- f. a dirty seed is not reportable


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True
    )


def test_a_dirty_seed_is_refused_unless_allowed_and_then_never_reportable(tmp_path):
    seed = tmp_path / "seed"
    seed.mkdir()
    _git(seed, "init", "-q")
    (seed / "agent.py").write_text("print('seed')\n")
    _git(seed, "add", "agent.py")
    _git(seed, "commit", "-q", "-m", "seed")
    clean = seed_identity(seed, allow_dirty=False)
    assert clean.reportable is True and clean.dirty is False
    (seed / "agent.py").write_text("print('changed')\n")
    with pytest.raises(Refusal, match="uncommitted changes"):
        seed_identity(seed, allow_dirty=False)
    dirty = seed_identity(seed, allow_dirty=True)
    assert dirty.dirty is True and dirty.reportable is False and dirty.allow_dirty_seed is True


def test_the_report_discloses_a_dirty_seeds_run_as_not_reportable(tmp_path):
    clean = make_run(tmp_path / "clean", ["a-1", "a-2"], {"a-1": "pass", "a-2": "fail"})
    assert not any("dirty seed" in d for d in make_report([clean], 1)["disclosures"])
    dirty = make_run(tmp_path / "dirty", ["a-1", "a-2"], {"a-1": "pass", "a-2": "fail"}, seed_dirty=True)
    notes = make_report([dirty], 1)["disclosures"]
    assert any("dirty seed" in n and "not a reportable score" in n for n in notes), notes


# ---------------------------------------------------------------- g. raw request/response blobs never exported


def test_a_checkpoint_exports_only_the_scrubbed_logs_never_raw_request_or_response_blobs(tmp_path):
    data, dump = tmp_path / "data", tmp_path / "dump"
    exported = {f"logs/{name}" for name in ouroboros.LOG_NAMES} | {ouroboros.ATTEMPTS_LEDGER, "task_results/t-1.json"}
    raw = {
        "logs/server.log",
        "logs/llm_requests/0001.json",
        "logs/llm_responses/0001.json",
        "archive/events_0001.jsonl",
        "state/headless_tasks/t-1/data/logs/chat.jsonl",
        "state/raw_response.bin",
        "settings.json",
        "task_results/other.json",
    }
    for rel in exported | raw:
        path = data / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'{{"from": "{rel}", "key": "sk-or-SECRET"}}\n')
    ouroboros.checkpoint(str(data), "t-1", str(dump), ["sk-or-SECRET"])
    copied = sorted(p.name for p in dump.rglob("*") if p.is_file())
    assert copied == sorted(Path(rel).name for rel in exported)
    assert not any("sk-or-SECRET" in p.read_text() for p in dump.rglob("*") if p.is_file())


# ---------------------------------------------------------------- h. old run roots untouched


def _tree(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file and folder under root: content digest (files), mode, mtime in ns."""
    out = {}
    for path in sorted([root, *root.rglob("*")]):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        out[str(path.relative_to(root))] = (digest, st.st_mode, st.st_mtime_ns)
    return out


def test_a_resume_and_a_new_run_leave_older_run_roots_untouched(tmp_path):
    r0 = make_run(tmp_path / "r0", ["a", "b", "c"], {"a": "pass", "b": "infra"})
    r1 = make_run(tmp_path / "r1", ["a", "b", "c"], {"b": "fail"}, task_ids=["b", "c"], resume_from=[r0], generation=1)
    before = {r: _tree(r) for r in (r0, r1)}
    time.sleep(0.01)  # a rewrite with the same bytes would still move an mtime
    plan = resolve_ancestry(
        [r1],
        current_applied_config=synth.CONFIG,
        seed_head=synth.SEED_HEAD,
        bench_commit=synth.BENCH_COMMIT,
        image_id=synth.IMAGE_ID,
        explicit_selection=None,
        dataset_ids=["a", "b", "c"],
    )
    assert plan.remaining == ["c"]
    child = tmp_path / "r2"
    synth.write_manifest(child, ["a", "b", "c"], task_ids=plan.remaining, resume_from=plan.ancestors, generation=2)
    write_index(child, build_index(child, live=True, interruption_cause="in_progress"))
    write_index(child, build_index(child, live=False, interruption_cause="runner_exited"))
    make_report([child], 1)
    fresh = make_run(tmp_path / "r3", ["a", "b", "c"], {"a": "pass"})  # a new, unrelated run
    assert fresh.is_dir()
    assert {r: _tree(r) for r in (r0, r1)} == before
