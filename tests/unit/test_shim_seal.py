"""Per-task dumps and the host's seal (issue 27): the docker shim against a FAKE docker.

The fake records each argv; on `exec eval-<id>` it plays the eval container by writing the
official records into the task's dump on the host (where the per-task mount puts them), so the
seal the shim writes afterwards can be checked without a daemon. The real daemon runs the same
paths in tests/integration (test_demo_hostile.py, test_run_custody.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from cowork_adapter.container import protocol
from cowork_adapter.custody import shim_words
from cowork_adapter.custody.bash_env import TaskDumps, eval_code_mounts, install_custody, runner_digest
from cowork_adapter.custody.shim_config import ContainerLimits
from cowork_adapter.errors import Refusal
from cowork_adapter.schemas.record import decode
from cowork_adapter.schemas.seal import EvalSeal, read_seals

LABEL = "0123456789abcdef0123456789abcdef"
TASK, OTHER = "demo-csv-totals", "demo-wrong-answer"
SHORT = "openrouter/m"
ID = "77-" + runner_digest(TASK)

FAKE_DOCKER = """\
#!{python}
import json, os, sys, time
here = {here!r}
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:]}}) + "\\n")
if sys.argv[1:2] == ["ps"]:
    sys.exit(0)  # no agent container: the eval phase would see `absent`
if sys.argv[1:2] == ["inspect"]:
    sys.stderr.write("Error: No such container: " + sys.argv[-1] + "\\n")
    sys.exit(1)  # no task database (pg-<id>): the shim's database check records `absent`
if sys.argv[1:2] == ["exec"] and any(a.startswith("eval-") for a in sys.argv):
    hang = os.path.join(here, "hang")
    if os.path.exists(hang):
        time.sleep(float(open(hang).read()))
    root = os.environ["FAKE_TASK_ROOT"]
    if os.path.lexists(os.path.join(root, "eval_res.json")):  # the eval phase sets a planted one aside
        os.rename(os.path.join(root, "eval_res.json"), os.path.join(root, "planted-eval_res.json"))
    claim = {{"schema": "cowork_adapter.eval_attempt.v1", "attempt_id": "a" * 32, "bindings": {{}},
             "evidence": {{"grading_inputs_differ": ["evaluation.evaluation_command"], "planted_before_eval": [],
                          "grading_log_rewritten": ["status"]}}}}
    open(os.path.join(root, "ouroboros_eval_claim.json"), "w").write(json.dumps(claim))
    open(os.path.join(root, "eval_res.json"), "w").write(json.dumps({{"pass": False}}))
    receipt = {{"schema": "cowork_adapter.eval_receipt.v1", "attempt_id": "a" * 32, "official_run": True,
               "cause": "evaluated", "raised": None, "returned": {{"pass": False}}}}
    open(os.path.join(root, "ouroboros_eval_receipt-" + "a" * 32 + ".json"), "w").write(json.dumps(receipt))
sys.exit(0)
"""


class SealBed:
    def __init__(self, root: Path, eval_bound: float = 30.0, eval_mounts: tuple = ()) -> None:
        self.fake_dir = root / "fake"
        self.fake_dir.mkdir()
        fake = self.fake_dir / "docker"
        fake.write_text(FAKE_DOCKER.format(python=sys.executable, here=str(self.fake_dir)))
        fake.chmod(0o755)
        (root / "resources").mkdir()
        self.bench = root / "run" / "bench"
        self.dumps = self.bench / "dumps"
        self.dumps.mkdir(parents=True)
        self.evidence = root / "run" / "custody" / "evidence"
        self.files = install_custody(
            root / "run",
            real_docker=str(fake),
            docker_host="unix:///tmp/fake.sock",
            run_label=LABEL,
            limits=ContainerLimits(cpus=1, memory_bytes=256 * 1024 * 1024, pids_limit=64),
            stop_file=root / "run" / "STOP",
            resource_root=root / "resources",
            min_free_bytes=0,
            evidence_dir=self.evidence,
            agent_env_file=None,
            environ={},
            dumps=TaskDumps(
                dumps_dir=self.dumps,
                short=SHORT,
                tasks=(TASK, OTHER),
                eval_bound_sec=eval_bound,
                eval_mounts=eval_mounts,
            ),
        )
        self.task_root = self.dumps / "openrouter_m" / f"SingleUserTurn-{TASK}"

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        env = {"PATH": os.environ["PATH"], "FAKE_TASK_ROOT": str(self.task_root)}
        return subprocess.run(
            [str(self.files.wrapper), *args], env=env, capture_output=True, text=True, timeout=timeout
        )

    def calls(self) -> list[list[str]]:
        path = self.fake_dir / "calls.jsonl"
        return [json.loads(line)["argv"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture()
def bed(tmp_path):
    return SealBed(tmp_path)


def test_an_agent_container_mounts_only_its_own_task_dump(bed):
    done = bed.run(
        "run",
        "-d",
        "--name",
        f"agent-{ID}",
        "-v",
        f"{bed.dumps}:/workspace/dumps",
        "-v",
        f"{bed.bench}/configs:/workspace/configs:ro",
        "img",
        "sleep",
        "7200",
    )
    assert done.returncode == 0, done.stderr
    [argv] = [a for a in bed.calls() if a[0] == "run"]
    rel = f"openrouter_m/SingleUserTurn-{TASK}"
    assert f"{bed.dumps}/{rel}:/workspace/dumps/{rel}" in argv
    assert f"{bed.dumps}:/workspace/dumps" not in argv  # the whole folder is never mounted
    assert f"{bed.bench}/configs:/workspace/configs:ro" in argv
    assert bed.task_root.is_dir() and not bed.task_root.is_symlink()


@pytest.mark.parametrize(
    "args",
    [
        ["--name", f"pg-{ID}", "-v", "{dumps}:/workspace/dumps"],  # not an agent or eval container
        ["--name", f"agent-{ID}", "-v", "{dumps}/openrouter_m:/workspace/dumps"],  # a part of the folder
        ["--name", f"agent-{ID}", "-v", "{dumps}:/elsewhere"],  # the folder at another path
        ["--name", f"agent-{ID}", "--volume={dumps}:/workspace/dumps:ro", "-v", "/tmp:/workspace/dumps/x"],
        ["--name", f"agent-{ID}", "--mount", "type=bind,source={dumps},target=/workspace/dumps"],
        ["--name", f"agent-{ID}", "--volumes-from", "agent-1-00000000"],
        ["--name", f"agent-{ID}", "-dv", "{dumps}:/workspace/dumps"],  # a cluster hiding the mount
    ],
)
def test_any_other_mount_of_the_dumps_is_refused(bed, args):
    done = bed.run("run", "-d", *[a.format(dumps=bed.dumps) for a in args], "img", "true")
    assert done.returncode == shim_words.EXIT_REFUSED and "dump_mount_refused" in done.stderr
    assert not [a for a in bed.calls() if a[0] == "run"]


def test_a_container_of_no_task_of_the_run_is_refused(bed):
    done = bed.run("run", "-d", "--name", "agent-77-ffffffff", "-v", f"{bed.dumps}:/workspace/dumps", "img", "true")
    assert done.returncode == shim_words.EXIT_REFUSED and "task_unknown" in done.stderr


def test_the_eval_exec_is_sealed_once_with_what_the_host_read(bed):
    bed.task_root.mkdir(parents=True)
    os.mkfifo(bed.task_root / "eval_res.json")  # planted before the exec: the seal names it
    (bed.task_root / "ouroboros_summary.json").write_text('{"task": "x"}')
    before = time.time()
    assert bed.run("exec", f"agent-{ID}", "python3", "entry.py", "--task_dir", TASK, "--max_steps", "7").returncode == 0
    after = time.time()
    # The summary's bytes as the agent exec left them, held where no container reaches.
    assert (bed.evidence / f"{ID}.agent_summary.json").read_bytes() == (
        bed.task_root / "ouroboros_summary.json"
    ).read_bytes()
    done = bed.run("exec", f"eval-{ID}", "python3", "entry.py", "--task_dir", TASK, "--phase", "eval")
    assert done.returncode == 0, done.stderr
    exec_argv = [a for a in bed.calls() if a[0] == "exec" and f"eval-{ID}" in a][0]
    env = dict(exec_argv[i + 1].split("=", 1) for i, a in enumerate(exec_argv) if a == "-e")
    held = protocol.file_facts(str(bed.task_root / "ouroboros_summary.json"))["sha256"]
    # The agent exec's window as the host saw it: the eval phase's launch_time and times (issue 36).
    started, ended = float(env.pop("COWORK_AGENT_STARTED_AT")), float(env.pop("COWORK_AGENT_ENDED_AT"))
    assert before <= started <= ended <= after
    assert env == {
        "COWORK_AGENT_CONTAINER_STATE": "absent",
        "COWORK_EVAL_ENTRY": "first",
        "COWORK_AGENT_SUMMARY_SHA256": held,
        "COWORK_EVAL_BOUND_SEC": "30.0",
        "COWORK_AGENT_MAX_STEPS": "7",
    }
    seal = read_seals(bed.bench.parent)[TASK].seal
    assert isinstance(seal, EvalSeal) and seal.runner_id == ID and seal.entry == "first" and not seal.hung
    assert [(e.name, e.kind) for e in seal.pre] == [("eval_res.json", "fifo")]
    assert seal.claim.sha256 == protocol.file_facts(str(bed.task_root / protocol.CLAIM_NAME))["sha256"]
    assert seal.eval_res.sha256 == protocol.file_facts(str(bed.task_root / "eval_res.json"))["sha256"]
    assert seal.verdict is not None and seal.verdict.official_run and seal.verdict.pass_ is False
    assert seal.grading_inputs_differ == ["evaluation.evaluation_command"] and seal.grading_log_rewritten == ["status"]
    assert seal.agent_summary_sha256 == held
    # A second eval exec of the same task is a repeat: told so, and never re-sealed.
    first = (bed.evidence / f"{ID}.seal.json").read_bytes()
    bed.run("exec", f"eval-{ID}", "python3", "entry.py", "--task_dir", TASK, "--phase", "eval")
    assert "COWORK_EVAL_ENTRY=repeat" in [a for a in bed.calls() if a[0] == "exec" and f"eval-{ID}" in a][-1]
    assert (bed.evidence / f"{ID}.seal.json").read_bytes() == first


def test_a_hung_eval_exec_is_ended_at_the_bound_and_sealed_as_hung(tmp_path):
    bed = SealBed(tmp_path, eval_bound=1.0)
    bed.task_root.mkdir(parents=True)
    (bed.fake_dir / "hang").write_text("600")
    # The wrapper runs the shim in a new interpreter: lower its margin through the installed copy of its module.
    program = bed.files.shim_dir / "shim_seal.py"
    assert "BOUND_MARGIN_SEC = 60.0" in program.read_text()
    program.write_text(program.read_text().replace("BOUND_MARGIN_SEC = 60.0", "BOUND_MARGIN_SEC = 1.0"))
    done = bed.run("exec", f"eval-{ID}", "python3", "entry.py", "--task_dir", TASK, "--phase", "eval", timeout=30)
    assert done.returncode != 0
    seal = decode((bed.evidence / f"{ID}.seal.json").read_bytes(), EvalSeal)
    assert seal.hung and seal.ended_at - seal.started_at < 15 and seal.verdict is None


def test_a_fractional_eval_bound_is_kept_not_refused(tmp_path):
    # COWORK_EVAL_BOUND_SEC is read as a float (custody/bash_env.py): the shim's config used to be an
    # int field, so 90.5 refused the run ("custody settings are invalid").
    bed = SealBed(tmp_path, eval_bound=90.5)
    assert json.loads(bed.files.shim_config.read_text())["eval_bound_sec"] == 90.5


def test_tasks_sharing_the_runners_id_are_refused(tmp_path):
    # Two tasks whose md5 prefixes collide would share agent-/eval- container names and dumps.
    first, second = _colliding_pair()
    with pytest.raises(Refusal, match="share the runner's container id"):
        install_custody(
            tmp_path / "run",
            real_docker=sys.executable,
            docker_host="unix:///x",
            run_label=LABEL,
            limits=ContainerLimits(cpus=1, memory_bytes=256 * 1024 * 1024, pids_limit=64),
            stop_file=tmp_path / "STOP",
            resource_root=tmp_path,
            min_free_bytes=0,
            evidence_dir=tmp_path / "e",
            agent_env_file=None,
            environ={},
            dumps=TaskDumps(dumps_dir=tmp_path, short="s/m", tasks=(first, second), eval_bound_sec=1.0),
        )
    assert not (tmp_path / "run").exists()


def _colliding_pair() -> tuple[str, str]:
    seen: dict[str, str] = {}
    n = 0
    while True:
        name = f"task-{n}"
        digest = runner_digest(name)
        if digest in seen:
            return seen[digest], name
        seen[digest] = name
        n += 1


def test_a_shim_killed_during_the_eval_leaves_a_head_the_host_seals_late(bed):
    from cowork_adapter.schemas.seal import SealHead
    from cowork_adapter.score.taskread import late_seal

    bed.task_root.mkdir(parents=True)
    assert bed.run("exec", f"eval-{ID}", "python3", "entry.py", "--task_dir", TASK, "--phase", "eval").returncode == 0
    head_file, seal_file = bed.evidence / f"{ID}.seal-head.json", bed.evidence / f"{ID}.seal.json"
    head = decode(head_file.read_bytes(), SealHead)
    assert head.entry == "first" and head.agent_container_state == "absent"
    seal_file.unlink()  # as if the shim had been SIGKILLed after the head, before its seal
    late = late_seal(bed.bench.parent, head, bed.task_root, bed.dumps)
    assert late is not None and late.entry == "late" and late.ended_at is None
    assert late.verdict is not None and late.verdict.pass_ is False
    assert late.eval_res.sha256 == protocol.file_facts(str(bed.task_root / "eval_res.json"))["sha256"]
    assert decode(seal_file.read_bytes(), EvalSeal) == late  # written once for every later reader
    # A head that cannot show the agent's container was gone is never sealed late.
    present = msgspec.structs.replace(head, agent_container_state="present")
    assert late_seal(bed.bench.parent, present, bed.task_root, bed.dumps) is None


def test_no_late_seal_while_the_exec_may_run_or_of_a_record_planted_before_it(bed):
    from cowork_adapter.container.procs import start_ticks
    from cowork_adapter.schemas.seal import PreEntry, SealHead
    from cowork_adapter.score.taskread import late_seal

    bed.task_root.mkdir(parents=True)
    assert bed.run("exec", f"eval-{ID}", "python3", "entry.py", "--task_dir", TASK, "--phase", "eval").returncode == 0
    (bed.evidence / f"{ID}.seal.json").unlink()
    head = decode((bed.evidence / f"{ID}.seal-head.json").read_bytes(), SealHead)
    assert head.shim_pid is not None and head.shim_start_ticks is not None
    # A live shim (this very process stands in for it): the exec may still be running.
    alive = msgspec.structs.replace(head, shim_pid=os.getpid(), shim_start_ticks=start_ticks(os.getpid()))
    assert late_seal(bed.bench.parent, alive, bed.task_root, bed.dumps) is None
    # The claim now in the dump stood there before the exec (planted, not yet set aside).
    claim_sha = protocol.file_facts(str(bed.task_root / protocol.CLAIM_NAME))["sha256"]
    planted = msgspec.structs.replace(head, pre=[PreEntry(name=protocol.CLAIM_NAME, kind="regular", sha256=claim_sha)])
    assert late_seal(bed.bench.parent, planted, bed.task_root, bed.dumps) is None
    assert not (bed.evidence / f"{ID}.seal.json").exists()
    assert late_seal(bed.bench.parent, head, bed.task_root, bed.dumps) is not None


def test_the_agent_exec_is_told_to_end_what_the_agent_left_running(bed):
    assert bed.run("exec", f"agent-{ID}", "python3", "entry.py", "--task_dir", TASK).returncode == 0
    [argv] = [a for a in bed.calls() if a[0] == "exec"]
    assert argv[:5] == ["exec", "-e", "COWORK_END_STRAYS=1", "-e", "COWORK_TASKDB_ACK=1"] and argv[5] == f"agent-{ID}"


def test_end_strays_does_nothing_outside_the_runners_agent_container(monkeypatch):
    from cowork_adapter.container import procs

    monkeypatch.setenv(procs.END_STRAYS_ENV, "1")  # even with the marker: PID 1 here is not `sleep`
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with open("/proc/1/cmdline", "rb") as fh:
            assert os.path.basename(fh.read().split(b"\0")[0]) != b"sleep"
        assert procs.end_strays() == 0 and child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_eval_containers_run_the_pinned_evaluator_code_read_only(tmp_path):
    """Issue 36: the run's verified clone's utils/ over the image's copy, in eval containers only."""
    bench = tmp_path / "run" / "bench"
    (bench / "utils" / "evaluation").mkdir(parents=True)
    (bench / "runner_only").mkdir()
    mounts = eval_code_mounts(bench)
    assert mounts == [f"{bench.resolve()}/utils:/workspace/utils:ro"]
    bed = SealBed(tmp_path, eval_mounts=tuple(mounts))
    for name in (f"eval-{ID}", f"agent-{ID}", f"pg-{ID}"):
        done = bed.run("run", "-d", "--name", name, "-v", f"{bed.dumps}:/workspace/dumps", "img", "sleep", "1")
        assert done.returncode == 0 or name.startswith("pg-"), done.stderr
    runs = {a[a.index("--name") + 1]: a for a in bed.calls() if a[0] == "run"}
    assert runs[f"eval-{ID}"][runs[f"eval-{ID}"].index(mounts[0]) - 1] == "--volume"
    assert mounts[0] not in runs[f"agent-{ID}"]
    assert eval_code_mounts(tmp_path / "nothing") == []
