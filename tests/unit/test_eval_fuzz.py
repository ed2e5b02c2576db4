"""The fuzzer of issue 36: whatever an agent leaves in its dump, a task whose honest answer FAILS is
never sealed or printed `passed`, no command but the task tree's runs, and every deviation is named.

Generated (hypothesis, derandomized: the same examples every run): every field of traj_log.json and
of its config (shell and quote characters, command substitutions, an import path into the agent's
own workspace, newlines, NUL, huge strings, deep nesting, wrong types, invalid UTF-8), the adapter
summary, claim-, receipt-, eval_res- and kept-log-shaped files, and workspace entries (files, links,
FIFOs, a Python module that would touch the canary). Each dump is graded by the REAL eval phase
(container/evalphase.run_eval, as the shim's first eval entry) and the REAL evaluator, with no
Docker, in a temporary /workspace-like tree:
* the demo bench (its utils/ and the demo-csv-totals task, whose answer the agent never wrote);
* the pinned upstream utils/ (git archive of the benchmark fixture at the pin) with the same task.
  Its evaluator imports camel and termcolor, which it never calls on the grading path: stand-ins for
  those two are put after the tree on sys.path. Without the fixture (or git) that half skips and says
  so (under CI=true it fails: CI has the fixture beside the clone).
Every shell payload tries to create a marker in a canary folder; none may exist afterwards.

COWORK_FUZZ_EXAMPLES=N runs N examples per bench (CI: the default below).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowork_adapter.container import gradinglog, protocol, safefile
from cowork_adapter.runroot import custody_evidence

REPO = Path(__file__).resolve().parents[2]
DEMO_BENCH = REPO / "src" / "cowork_adapter" / "demo" / "bench"
TASK = "demo-csv-totals"
ANSWER = "totals.json"
PIN = "d943e75bc0fc8e3b27141979300cd8cbcd1e890d"
FIXTURE_TAR = "cowork_bench-d943e75.git.tar"
EXAMPLES = int(os.environ.get("COWORK_FUZZ_EXAMPLES") or 100)
BOUND_SEC = "2"  # the eval bound: a checker blocked on a FIFO is cut here (a hung eval is no pass)
# Stand-ins for what the pinned evaluator's imports name but its grading path never calls: any
# `camel.*` or `openai.*` module (a module whose every attribute is an inert class) and termcolor.colored.
CAMEL_STUB = """\
import importlib.abc, importlib.machinery, sys, types


class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        return importlib.machinery.ModuleSpec(name, self, is_package=True) if name.startswith("%s.") else None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _stub
        return module

    def exec_module(self, module):
        pass


class _Meta(type):
    def __getattr__(cls, attr):
        return _stub(attr)


def _stub(name):
    return _Meta(name, (), {"__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: self,
                            "__getattr__": lambda self, attr: _stub(attr)})


sys.meta_path.append(_Stubs())


def __getattr__(attr):
    return _stub(attr)
"""
STUBS = {
    "termcolor.py": "def colored(text, *args, **kwargs):\n    return text\n",
    "camel/__init__.py": CAMEL_STUB % "camel",
    "openai/__init__.py": CAMEL_STUB % "openai",
}
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
        HealthCheck.large_base_example,
    ],
)


# ---------------------------------------------------------------- the trees and their workers


def _fixture_tar() -> Path | None:
    for folder in (
        os.environ.get("COWORK_REAL_FIXTURES"),
        REPO / ".." / "shared" / "fixtures",
        REPO / ".." / ".." / "shared" / "fixtures",
    ):
        if folder and (Path(folder) / FIXTURE_TAR).is_file():
            return Path(folder) / FIXTURE_TAR
    return None


def _demo_tree(root: Path) -> Path:
    shutil.copytree(DEMO_BENCH / "utils", root / "utils")
    shutil.copytree(DEMO_BENCH / "tasks" / "finalpool" / TASK, root / "tasks" / "finalpool" / TASK)
    return root


def _upstream_tree(root: Path, scratch: Path) -> tuple[Path | None, str]:
    """The pinned utils/ with the demo task (and the demo's task_script, which its checker imports)."""
    tar = _fixture_tar()
    if tar is None or shutil.which("git") is None:
        return None, f"no fixture {FIXTURE_TAR} (COWORK_REAL_FIXTURES, ../shared/fixtures) or no git"
    with tarfile.open(tar) as handle:
        handle.extractall(scratch, filter="data")
    [git_dir] = [p for p in scratch.iterdir() if p.name.endswith(".git")]
    root.mkdir()
    archive = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", PIN, "utils", "configs"], capture_output=True, check=True
    )
    subprocess.run(["tar", "x", "-C", str(root)], input=archive.stdout, check=True)
    shutil.copy(DEMO_BENCH / "utils" / "task_script.py", root / "utils" / "task_script.py")
    shutil.copytree(DEMO_BENCH / "tasks" / "finalpool" / TASK, root / "tasks" / "finalpool" / TASK)
    stubs = scratch / "stubs"
    for name, text in STUBS.items():
        path = stubs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    importer = (
        "import sys; sys.path.insert(0, '.'); sys.path.append(sys.argv[1]); "
        "from utils.evaluation.evaluator import TaskEvaluator; from utils.data_structures.task_config import TaskConfig"
    )
    probe = subprocess.run(
        [sys.executable, "-c", importer, str(stubs)], cwd=root, capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return None, "the pinned evaluator's imports cannot be satisfied here: " + probe.stderr.strip().splitlines()[-1]
    return root, str(stubs)


class Worker:
    """The eval phase of one tree in a long-lived process (eval_fuzz_worker.py); restarted after an
    entry that ended it (the eval bound kills its own process, as in the container)."""

    def __init__(self, root: Path, stubs: str = "") -> None:
        self.root, self.stubs = root, stubs
        (root / "dumps").mkdir(exist_ok=True)
        (root / "cfg").mkdir(exist_ok=True)
        self.canary = root / "canary"
        self.canary.mkdir(exist_ok=True)
        self.log = open(root / "worker.log", "ab")  # noqa: SIM115 - the workers' output, open while they live
        self.n = 0
        self.proc: subprocess.Popen | None = None

    def _start(self) -> None:
        read, write = os.pipe()
        env = {k: v for k, v in os.environ.items() if not k.startswith("COWORK_")}
        env["PYTHONPATH"] = str(REPO / "src")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("eval_fuzz_worker.py")), str(self.root), str(write)]
            + ([self.stubs] if self.stubs else []),
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=self.log,
            pass_fds=(write,),
            cwd=self.root,
            env=env,
            text=True,
        )
        os.close(write)
        self.replies = os.fdopen(read)

    def ask(self, request: dict) -> dict | None:
        """The reply, or None when the entry ended the process (the eval bound)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.replies.readline()
        if not line:
            self.proc.wait()
            self.proc = None
            return None
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        self.log.close()


@pytest.fixture(scope="module")
def demo_worker(tmp_path_factory):
    worker = Worker(_demo_tree(tmp_path_factory.mktemp("demo-bench")))
    yield worker
    worker.close()


@pytest.fixture(scope="module")
def upstream_worker(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("upstream")
    root, note = _upstream_tree(scratch / "bench", scratch)
    if root is None:
        print(f"\nfuzz: the pinned upstream half did not run: {note}", file=sys.stderr)
        if os.environ.get("CI") == "true":  # CI has the fixture beside the clone: its absence is a failure
            pytest.fail(note)
        pytest.skip(note)
    worker = Worker(root, note)
    yield worker
    worker.close()


# ---------------------------------------------------------------- what an agent can leave


def payloads(marker: str, short: str) -> st.SearchStrategy[str]:
    """Shell, quoting, substitution and import-path payloads, each trying to create `marker`."""
    touch = f"touch {marker}"
    module = f"dumps.{short}.SingleUserTurn-{TASK}.workspace.evil"
    return st.sampled_from(
        [
            f'"; {touch}; echo "',
            f"'; {touch}; '",
            f"$({touch})",
            f"`{touch}`",
            f"\n{touch}\n",
            f"x && {touch}",
            f"x | {touch}",
            f"x; {touch} #",
            f'2026-12-03 10:00:00" ; {touch} ; "',
            f"\0; {touch}",
            f"python3 -m {module}",
            f"sh -c '{touch}'",
            f"{module}",
            f"$(python3 -m {module})",
            f'success"; {touch}; "',
        ]
    )


def values(marker: str, short: str) -> st.SearchStrategy:
    leaf = st.one_of(
        payloads(marker, short),
        st.text(max_size=40),
        st.text(alphabet="\"'`$;|&\n\0\\ (){}", max_size=30),
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.sampled_from(["success", "failed", "max_turns_reached", "interrupted", "SUCCESS", "success\n"]),
        st.integers(1, 3).map(lambda k: "A" * (300_000 * k)),
    )
    return st.recursive(
        leaf,
        lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=8), kids, max_size=3)),
        max_leaves=8,
    )


LOG_FIELDS = ("config", "status", "start_time", "end_time", "extra")
RECORD_NAMES = (
    protocol.CLAIM_NAME,
    protocol.EVAL_RES_NAME,
    protocol.RECEIPT_PREFIX + "a" * 32 + ".json",
    gradinglog.AGENT_LOG_NAME,
    "ouroboros_summary.json",
)
FORGED = json.dumps({"pass": True, "details": "All evaluation checks passed, and task status is success"})


@st.composite
def dumps(draw, marker: str, short: str, config_keys: list) -> dict:
    """One dump: what replaces traj_log.json (raw bytes, or fields changed in an honest log), the
    records planted beside it, and the workspace entries."""
    value = values(marker, short)
    raw = draw(
        st.one_of(
            st.none(),
            st.none(),
            st.none(),
            st.binary(max_size=64),
            st.sampled_from([b"[" * 100_000, b"\xff\xfe\x00{}", b'{"config": ' * 5000, b"NaN", b'{"a": 1, "a": 2}']),
        )
    )
    top = draw(st.dictionaries(st.sampled_from(LOG_FIELDS), value, max_size=3))
    config = draw(
        st.dictionaries(
            st.sampled_from(
                config_keys + ["evaluation.evaluation_command", "evaluation.groundtruth_workspace", "extra"]
            ),
            value,
            max_size=4,
        )
    )
    status = draw(st.sampled_from(["success", "success", "success", None]))
    records = draw(
        st.dictionaries(
            st.sampled_from(RECORD_NAMES), st.sampled_from(["forged", "garbage", "fifo", "link"]), max_size=3
        )
    )
    workspace = draw(
        st.dictionaries(
            st.sampled_from([ANSWER, "notes.txt", "evil.py", "sub"]),
            st.sampled_from(["text", "fifo", "link_truth", "link_etc", "link_log", "dir"]),
            max_size=3,
        )
    )
    text = draw(value)
    return {
        "raw": raw,
        "top": top,
        "config": config,
        "status": status,
        "records": records,
        "workspace": workspace,
        "text": text if isinstance(text, str) else json.dumps(text),
    }


def _set(config: dict, dotted: str, value) -> None:
    if dotted.startswith("evaluation."):
        evaluation = config.get("evaluation") if isinstance(config.get("evaluation"), dict) else {}
        config["evaluation"] = dict(evaluation, **{dotted.split(".", 1)[1]: value})
    else:
        config[dotted] = value


def build_dump(task_root: Path, spec: dict, honest: dict, marker: str, bench_root: Path) -> bytes:
    """Write the dump the spec describes; returns the traj_log.json bytes the agent left."""
    workspace = task_root / "workspace"
    workspace.mkdir(parents=True)
    log = json.loads(json.dumps(honest))
    if spec["status"] is not None:
        log["status"] = spec["status"]
    for name, value in spec["config"].items():
        _set(log["config"], name, value)
    log.update(spec["top"])
    data = (
        spec["raw"] if spec["raw"] is not None else json.dumps(log, ensure_ascii=False).encode("utf-8", "surrogatepass")
    )
    (task_root / protocol.LOG_NAME).write_bytes(data)
    for name, kind in spec["records"].items():
        path = task_root / name
        if kind == "forged":
            path.write_text(FORGED)
        elif kind == "garbage":
            path.write_text(spec["text"], errors="surrogatepass")
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to("/etc/passwd")
    truth = bench_root / "tasks" / "finalpool" / TASK / "groundtruth_workspace" / ANSWER
    for name, kind in spec["workspace"].items():
        path = workspace / name
        if kind == "text" and name == "evil.py":
            path.write_text(f"open({marker!r}, 'w').close()\n")
        elif kind == "text" and name != ANSWER:  # never the answer itself: the honest answer must fail
            path.write_text(spec["text"], errors="surrogatepass")
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "link_truth":
            path.symlink_to(truth)
        elif kind == "link_etc":
            path.symlink_to("/etc/passwd")
        elif kind == "link_log":
            path.symlink_to(task_root / protocol.LOG_NAME)
        elif kind == "dir":
            path.mkdir()
    return data


def _equivalent(name: str, value, honest_config: dict, max_steps: int) -> bool:
    """Whether a changed config value is one an honest engine may write (gradinglog's allowances)."""
    if name in gradinglog.GRADING_FIELDS:
        canon = honest_config.get(name)
        return (
            isinstance(value, str)
            and value
            and os.path.normpath(os.path.abspath(value)) == os.path.normpath(os.path.abspath(canon))
        )
    if name.startswith("evaluation."):
        return value is None
    if name == "max_steps_under_single_turn_mode":
        return value == max_steps or value == honest_config.get(name)
    return value == honest_config.get(name)


def expected_names(spec: dict, honest: dict, max_steps: int) -> set:
    """The fields the claim must name (any of each group), from what the spec changed."""
    if spec["raw"] is not None:
        return {"traj_log:*"}
    need = set()
    status = spec["top"].get("status", spec["status"] if spec["status"] is not None else honest["status"])
    if ("status" in spec["top"] or spec["status"] is not None) and gradinglog.map_status(status) != status:
        need.add("status")
    if "extra" in spec["top"]:
        need.add("traj_log:extra_keys")
    for name in ("start_time", "end_time"):
        if name in spec["top"] and spec["top"][name] != honest[name]:
            need.add(name)
    if "config" in spec["top"]:
        if spec["top"]["config"] != honest["config"]:
            need.add("config:*")
        return need
    for name, value in spec["config"].items():
        if name == "extra":
            need.add("config:extra_keys")
        elif not _equivalent(name, value, honest["config"], max_steps):
            need.add(name if name.startswith("evaluation.") or name in gradinglog.GRADING_FIELDS else "config." + name)
    return need


def _named(evidence: dict) -> set:
    return set(evidence.get("grading_inputs_differ") or []) | set(evidence.get("grading_log_rewritten") or [])


def _covered(need: str, named: set) -> bool:
    if need == "config:*":  # the whole config replaced: some config field (or the object) is named
        return any(n.startswith(("config", "evaluation")) or n in gradinglog.GRADING_FIELDS for n in named)
    if need.endswith(":*"):
        return any(n.startswith(need[:-1]) for n in named)
    if need in ("task_dir", "id", "task_root", "log_file", "agent_workspace") or need.startswith("evaluation."):
        return need in named or "evaluation" in named
    return need in named or need in {"config." + n for n in named}


# ---------------------------------------------------------------- the property


class Fuzz:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.keys: list = []
        self.counts = {"examples": 0, "evaluated": 0, "hung": 0, "refused": 0, "declined": 0}

    def one(self, spec: dict) -> None:
        w = self.worker
        w.n += 1
        short = f"fuzz_{os.getpid()}_{w.n}"
        marker = str(w.canary / "owned")
        now = time.time()
        started, ended = now - 120.0, now - 1.0
        (w.root / "cfg" / f"{short}.json").write_text(json.dumps({"agent_short_name": short}))
        honest = w.ask({"op": "honest", "task": TASK, "short": short, "launch": gradinglog.launch_time(started + 0.5)})
        assert honest is not None
        honest.update(
            status="success", start_time=gradinglog.iso_local(started + 1), end_time=gradinglog.iso_local(ended - 1)
        )
        task_root = w.root / "dumps" / short / f"SingleUserTurn-{TASK}"
        data = build_dump(task_root, spec, honest, marker, w.root)
        try:  # a log strict JSON refuses (Infinity, say) is named as unreadable, whatever it changed
            protocol.strict_loads(data.decode("utf-8"))
            need = expected_names(spec, honest, 40)
        except (UnicodeDecodeError, ValueError, RecursionError):
            need = {"traj_log:*"}
        env = {
            "COWORK_RUN_CONFIG": str(w.root / "cfg" / f"{short}.json"),
            "COWORK_EVAL_ENTRY": "first",
            "COWORK_AGENT_CONTAINER_STATE": "absent",
            "COWORK_EVAL_BOUND_SEC": BOUND_SEC,
            gradinglog.STARTED_ENV: repr(started),
            gradinglog.ENDED_ENV: repr(ended),
            gradinglog.MAX_STEPS_ENV: "40",
        }
        reply = w.ask({"op": "eval", "task": TASK, "env": env})
        self.counts["examples"] += 1
        # Never a printed pass: the eval phase's verdict lines are what the runner greps.
        if reply is None:
            self.counts["hung"] += 1
        else:
            assert reply["code"] != 0, reply
            assert not [ln for ln in reply["out"].splitlines() if ln.startswith("Pass:") and "True" in ln], reply
        # Never a sealed pass: the host's own read of the dump (runroot/custody_evidence.py), as the seal takes it.
        sealed = custody_evidence.read_seal_inputs(safefile, str(task_root), str(w.root / "dumps"))
        verdict = sealed["verdict"]
        assert verdict is None or verdict["pass"] is not True, sealed
        for receipt in task_root.glob(protocol.RECEIPT_PREFIX + "*.json"):
            value, _ = protocol.read_json_record(str(receipt))
            assert not (
                isinstance(value, dict)
                and isinstance(value.get("returned"), dict)
                and value["returned"].get("pass") is True
                and value.get("official_run") is True
            ), value
        # No command but the task tree's ran.
        assert list(w.canary.iterdir()) == []
        # Every deviation named, in the claim the seal carries.
        claim, cause = protocol.read_json_record(str(task_root / protocol.CLAIM_NAME))
        assert claim is not None, cause
        evidence = claim["evidence"]
        named = _named(evidence)
        for name in need:
            assert _covered(name, named), (name, named, spec)
        assert set(sealed["grading_log_rewritten"]) <= named and set(sealed["grading_inputs_differ"]) <= named
        moved = {m.split(":", 1)[0] for m in evidence["planted_before_eval"]}
        assert moved == {n for n in spec["records"] if n != "ouroboros_summary.json"}, (moved, spec["records"])
        receipt = next(iter(task_root.glob(protocol.RECEIPT_PREFIX + "*.json")), None)
        cause = (protocol.read_json_record(str(receipt))[0] or {}).get("cause", "") if receipt else "hung"
        self.counts["evaluated" if cause == "evaluated" else "refused"] += 1
        shutil.rmtree(task_root, ignore_errors=True)


def _config_keys(worker: Worker) -> list:
    honest = worker.ask({"op": "honest", "task": TASK, "short": "keys", "launch": "x"})
    assert honest is not None
    return sorted(honest["config"])


def _run(worker: Worker, label: str) -> None:
    fuzz = Fuzz(worker)
    keys = _config_keys(worker)
    marker = str(worker.canary / "owned")  # every shell payload tries to create it

    @FUZZ
    @given(spec=dumps(marker, "fuzz", keys))
    def prop(spec):
        fuzz.one(spec)

    prop()
    print(f"\nfuzz ({label}): {fuzz.counts}", file=sys.stderr)
    assert fuzz.counts["examples"] >= min(EXAMPLES, 50)
    assert fuzz.counts["evaluated"] > 0  # the evaluator itself ran on generated dumps, not only refusals


def test_no_dump_makes_the_demo_evaluator_pass_a_failing_task(demo_worker):
    _run(demo_worker, "demo bench")


def test_no_dump_makes_the_pinned_upstream_evaluator_pass_a_failing_task(upstream_worker):
    _run(upstream_worker, "pinned upstream utils")


def test_the_honest_log_names_nothing_and_the_checker_runs(demo_worker):
    """The baseline the property stands on: an unchanged honest log is evaluated (and fails, its
    answer missing) with nothing named."""
    fuzz = Fuzz(demo_worker)
    spec = {"raw": None, "top": {}, "config": {}, "status": None, "records": {}, "workspace": {}, "text": ""}
    fuzz.one(spec)
    assert fuzz.counts["evaluated"] == 1
