"""Seeded SIGKILLs of the launcher over every phase of a demo run, each followed by the operator's steps.

One kill (`kill_and_recover`): start `cowork-adapter run` on the demo benchmark in a session of its
own, watch the run (run_manifest.json, image_build.log, events.jsonl, the daemon's listing of the
run's exact label) until the chosen phase begins, wait a jitter drawn from the seed, SIGKILL the
launcher by its pid or its process group, and then do what docs/operating.md tells the operator:

  wait for the watchdog (when the run had one) → `cowork-adapter clear` → `--resume-from` the
  killed run on the same campaign.

Each kill returns its verdicts (`Check`s). What is checked, and from where:
  - no container of the run was created more than 5 s after the kill (the daemon's create events,
    filtered by the run's exact label, followed from before the launch);
  - no agent outlived the blindness bound: the stub engine makes no model requests, so the
    evidence of agent activity is the agent container itself (its die/destroy event times);
  - nothing with the run's label is left after `clear`; look-alike bystanders survive;
  - the resume reran no task whose official receipt was in the killed run's dumps; the report over
    the ancestry has exactly one final row per selected task;
  - the campaign's spend equals the meter's delta. The meter stand-in does not move by itself here
    (rate 0); a charge is added after each kill (in-flight spending the dead launcher never saw) and
    while the resumed run works, so equality is exact.

A kill before the run recorded its image (preflight, image) leaves an ancestor that recovery
refuses in one sentence (it cannot prove the same image); nothing was handed to a runner then,
and the refusal is the checked outcome.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker

from ..custody.docker_ops import label_is_empty
from ..custody.labels import path_label
from ..custody.watchdog import custody_paths
from ..host.daemon import docker_client
from ..vocab import ExitCode
from .chaos_watch import (
    TASKS,
    CreateEvents,
    _agent_seen,
    _stopping,
    kinds_of,
    label_now,
    labelled_names,
    observed_phase,
    receipted,
)
from .env import (
    BYSTANDER_IMAGE,
    Check,
    DemoEnv,
    bystanders_alive,
    make_bystanders,
    read_json,
    remove_bystanders,
    wait_for,
)

SEED_ENV = "COWORK_CHAOS_SEED"
FENCE_SEC = 5.0
BLINDNESS_SEC = 21.0  # the smallest --meter-blindness-sec the CLI accepts: a short bound, a short wait
PHASES = ["preflight", "probe", "image", "runner_start", "in_flight", "stop", "cleanup", "settlement"]
POST_KILL_CHARGE = 0.37  # USD added to the meter after each kill: spending the dead launcher never saw
RESUME_CHARGE = 0.11  # USD added while the resumed run works


def chaos_seed() -> int:
    """The seed from COWORK_CHAOS_SEED, else a fresh one (always printed by the caller)."""
    raw = os.environ.get(SEED_ENV, "").strip()
    return int(raw) if raw else secrets.randbelow(2**31)


@dataclass
class Moment:
    phase: str
    how: str  # "pid" or "group"
    jitter: float  # seconds after the phase's start signal


def pick_moments(seed: int, phases: list[str], hows: tuple[str, ...] = ("pid", "group")) -> list[Moment]:
    """One kill per (phase, how), with a seeded jitter inside each phase's window."""
    rng = random.Random(seed)
    windows = {  # jitter windows (s) after the phase's start signal; each stays inside its phase
        # preflight (clone + hashes) lasts well under 0.1 s on a quiet machine: its window is tiny
        "preflight": (0.0, 0.02),
        "probe": (0.2, 2.0),
        "image": (0.2, 1.5),
        "runner_start": (0.0, 0.4),
        "in_flight": (0.5, 4.0),
        "stop": (0.0, 0.2),
        "cleanup": (0.0, 0.0),
        "settlement": (0.3, 3.0),
    }
    # cleanup: the stop itself now removes the run's containers (supervisor's fast path), so the final
    # cleanup after runner_exited is one relist and its proof, tens of ms: the kill comes at once.
    return [Moment(p, h, round(rng.uniform(*windows[p]), 3)) for p in phases for h in hows]


def cli(env: DemoEnv, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cowork_adapter", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, env.key_env: env.key},
    )


@dataclass
class KillResult:
    moment: Moment
    name: str
    hit: str = ""
    checks: list[Check] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # wall time of each step, for the record


class ChaosBench:
    """The shared demo environment of a series of kills (one bench, one cached image)."""

    def __init__(self, env: DemoEnv, prefix: str = "chaos") -> None:
        self.env = env
        self.prefix = prefix
        self.fresh_tags: list[str] = []
        env.meter.set_rate(0.0)  # the meter moves only by the charges below, so spend checks are exact

    def args(self, name: str, moment: Moment, tasks: list[str], extra: list[str]) -> list[str]:
        more = ["--task-timeout", "90", "--meter-blindness-sec", str(BLINDNESS_SEC), *extra]
        if moment.phase == "image":
            # A tag no run used before: the derived image is built, so there is an image phase to hit.
            tag = f"cowork-ouroboros:chaos-{secrets.token_hex(6)}"
            self.fresh_tags.append(tag)
            more += ["--image", tag]
        return self.env.run_args(name, tasks, campaign=f"campaign-{name}.json", extra=more)

    def launch(self, name: str, args: list[str]) -> subprocess.Popen:
        """The launcher in a session of its own, so a kill of its process group spares us."""
        with open(self.env.root / f"{name}.log", "ab") as log:  # the child has its own copy of the descriptor
            return subprocess.Popen(
                args,
                env={**os.environ, self.env.key_env: self.env.key},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def remove_fresh_images(self) -> None:
        client = docker_client(self.env.docker_host, 120)
        try:
            for tag in self.fresh_tags:
                try:
                    client.images.remove(tag, force=True)
                except docker.errors.NotFound:
                    pass
        finally:
            client.close()

    # ------------------------------------------------------------------ reaching a phase

    def _reach(self, moment: Moment, proc: subprocess.Popen, run_root: Path, tasks: list[str]) -> bool:
        """Wait until the phase begins (True), with the extra action some phases need."""
        env = self.env
        alive = lambda: proc.poll() is None  # noqa: E731
        phase = moment.phase
        if phase == "preflight":
            return wait_for(lambda: (run_root / "run_manifest.json").exists() or not alive(), 300, 0.002) and alive()
        if phase == "probe":
            return (
                wait_for(
                    lambda: (
                        any(n.startswith("pg-probe-") for n in labelled_names(env.docker_host, label_now(run_root)))
                        or not alive()
                    ),
                    300,
                    0.1,
                )
                and alive()
            )
        if phase == "image":
            return wait_for(lambda: (run_root / "image_build.log").exists() or not alive(), 300, 0.02) and alive()
        if phase == "runner_start":
            return wait_for(lambda: "runner_started" in kinds_of(run_root) or not alive(), 300, 0.02) and alive()
        if phase == "in_flight":
            return wait_for(lambda: _agent_seen(run_root) or not alive(), 300, 0.1) and alive()
        if phase == "settlement":
            # A run that ends by itself, every task receipted (so the resume has receipts to honour):
            # once every receipt exists the meter goes silent, which holds the final reading (bounded
            # by the blindness bound) open after cleanup.
            if not wait_for(lambda: receipted(run_root) >= set(tasks) or not alive(), 300, 0.05):
                return False
            env.meter.silence(True)
            return (
                wait_for(lambda: "cleanup" in kinds_of(run_root) or not alive(), 120, 0.01)
                and alive()
                and "settlement" not in kinds_of(run_root)
            )
        # stop, cleanup: the stop begins with a SIGTERM once an agent works.
        if not (wait_for(lambda: _agent_seen(run_root) or not alive(), 300, 0.1) and alive()):
            return False
        time.sleep(2)
        proc.send_signal(signal.SIGTERM)
        if phase == "stop":
            return wait_for(lambda: _stopping(run_root) or not alive(), 60, 0.01) and alive()
        return wait_for(lambda: "runner_exited" in kinds_of(run_root) or not alive(), 120, 0.01) and alive()

    # ------------------------------------------------------------------ one kill and the operator's steps

    def kill_and_recover(self, moment: Moment, index: int, tasks: list[str] | None = None) -> KillResult:
        env = self.env
        tasks = list(tasks or TASKS)
        name = f"{self.prefix}-{index:02d}-{moment.phase}-{moment.how}"
        result = KillResult(moment, name)
        run_root = env.run_root(name)
        campaign = env.root / f"campaign-{name}.json"
        # The run's own label is drawn at its start: the bystanders carry its path's label (another
        # run at the same path, or one from before the nonce) and a near-identical one.
        bystanders = make_bystanders(env.docker_host, path_label(run_root))
        client = docker_client(env.docker_host, 60)
        unlabelled = client.containers.run(
            BYSTANDER_IMAGE, ["sleep", "3600"], detach=True, name=f"agent-{secrets.token_hex(5)}"
        )
        creates = CreateEvents(env.docker_host, run_root)
        usage_before = env.meter.state()["usage"]
        started = time.time()
        proc = self.launch(name, self.args(name, moment, tasks, []))
        checks = result.checks
        try:
            reached = self._reach(moment, proc, run_root, tasks)
            if reached:
                time.sleep(moment.jitter)
            signal_it = (
                (lambda sig: os.kill(proc.pid, sig)) if moment.how == "pid" else (lambda sig: os.killpg(proc.pid, sig))
            )
            if proc.poll() is None:
                # Frozen first, so the phase read from disk is the one the kill really hits (a short
                # phase can end while its files are being read); SIGKILL ends a stopped process alike.
                signal_it(signal.SIGSTOP)
            result.hit = observed_phase(run_root)
            killed_at = time.time()
            result.seconds["to_kill"] = round(killed_at - started, 1)
            if proc.poll() is None:
                signal_it(signal.SIGKILL)
            proc.wait(timeout=60)
            env.meter.silence(False)
            checks.append(
                Check(
                    f"the launcher was SIGKILLed (by {moment.how}) in phase {moment.phase}",
                    reached and result.hit == moment.phase and proc.returncode == -signal.SIGKILL,
                    f"hit {result.hit}, exit {proc.returncode}, jitter {moment.jitter}s",
                )
            )
            env.meter.add_usage(POST_KILL_CHARGE)
            checks += self._contained(run_root, creates, killed_at)
            result.seconds["contained"] = round(time.time() - killed_at, 1)
            campaign_existed = campaign.exists()
            usage_at_campaign = usage_before if campaign_existed else env.meter.state()["usage"]
            receipts = receipted(run_root)

            # The operator's command as `status` names it: --campaign-file only when the run created one.
            with_campaign = ["--campaign-file", str(campaign)] if campaign_existed else []
            out = cli(
                env,
                "clear",
                str(run_root),
                "--operator-note",
                f"chaos kill {name}",
                *with_campaign,
                "--meter-url",
                env.meter.base_url,
                "--docker-host",
                env.docker_host,
                "--api-key-env",
                env.key_env,
            )
            result.seconds["clear"] = round(time.time() - killed_at - result.seconds["contained"], 1)
            checks.append(
                Check(
                    "`cowork-adapter clear` exits 0",
                    out.returncode == ExitCode.OK,
                    f"exit {out.returncode}: {(out.stderr or out.stdout).strip()[-300:]}",
                )
            )
            label = label_now(run_root)
            checks.append(
                Check(
                    "nothing with the run's exact label is left after clear",
                    label is None or label_is_empty(env.docker_host, label),
                    str(label),
                )
            )
            if not campaign_existed:
                checks.append(
                    Check(
                        "clear created no campaign file and no lock for a run that had none",
                        not any(env.root.glob(f"campaign-{name}.json*")),
                    )
                )
            checks.append(
                Check(
                    "the bystanders (the path's label, a near-identical one, unlabelled agent-*) survive",
                    bystanders_alive(env.docker_host, bystanders)
                    # a listed container has an id
                    and client.containers.get(unlabelled.id).status == "running",  # type: ignore[arg-type]
                )
            )
            resumed_at = time.time()
            checks += self._resume(run_root, name, campaign, tasks, receipts, usage_at_campaign)
            result.seconds["resume"] = round(time.time() - resumed_at, 1)
        finally:
            env.meter.silence(False)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            creates.close()
            remove_bystanders(env.docker_host, bystanders)
            unlabelled.remove(force=True)
            client.close()
        return result

    def _contained(self, run_root: Path, creates: CreateEvents, killed_at: float) -> list[Check]:
        """The watchdog's containment, judged from the daemon's own events."""
        env = self.env
        had_watchdog = (run_root / "custody" / "processes.json").exists()
        done = True
        if had_watchdog:
            done = wait_for(lambda: "watchdog_exited" in kinds_of(run_root), BLINDNESS_SEC + 30, 0.2)
        time.sleep(1)  # a late creation would show in the event stream now
        late = [(round(t - killed_at, 2), n) for t, n in creates.times if t > killed_at + FENCE_SEC]
        agents = {n for _, n in creates.times if n.startswith("agent-")}
        gone_at = {n: t for t, n in creates.gone}
        alive_agents = [n for n in agents if n in labelled_names(env.docker_host, label_now(run_root))]
        outlived = [
            (n, round(gone_at[n] - killed_at, 1))
            for n in agents
            if n in gone_at and gone_at[n] > killed_at + BLINDNESS_SEC
        ]
        key_gone = not custody_paths(run_root)["agent_env"].exists()
        return [
            Check(
                "the watchdog finished its custody (or the run had none yet)",
                done,
                "watchdog" if had_watchdog else "killed before the watchdog existed",
            ),
            Check("the key's env file is gone before the operator's clear", key_gone),
            Check("no container of the run was created more than 5 s after the kill", not late, str(late)),
            Check(
                "no agent (the stub engine's only activity) outlived the blindness bound after the kill",
                not alive_agents and not outlived,
                f"alive {alive_agents}, removed late {outlived}",
            ),
        ]

    def _resume(
        self, killed: Path, name: str, campaign: Path, tasks: list[str], receipts: set[str], usage_at_campaign: float
    ) -> list[Check]:
        env = self.env
        child_name = f"{name}-resume"
        child = env.run_root(child_name)
        manifest = read_json(killed / "run_manifest.json")
        args = env.run_args(
            child_name,
            [],
            campaign=campaign.name,
            extra=["--task-timeout", "90", "--meter-blindness-sec", str(BLINDNESS_SEC), "--resume-from", str(killed)],
        )
        proc = self.launch(child_name, args)
        # A charge while the resumed run's agent works (a resume with nothing remaining runs none).
        if (
            manifest.get("image")
            and wait_for(lambda: _agent_seen(child) or proc.poll() is not None, 300, 0.2)
            and _agent_seen(child)
            and proc.poll() is None
        ):
            env.meter.add_usage(RESUME_CHARGE)
        code = proc.wait(timeout=600)
        log = (env.root / f"{child_name}.log").read_text(errors="replace")
        checks: list[Check] = []
        if not manifest.get("image"):
            # Killed before the image was recorded: recovery cannot prove the same image and refuses.
            sentences = [line for line in log.splitlines() if line.startswith("cowork-adapter:")]
            checks.append(
                Check(
                    "the resume of a run killed before its image is refused in one sentence (exit 2)",
                    code == ExitCode.REFUSED and len(sentences) == 1,
                    f"exit {code}: {log.strip()[-200:]}",
                )
            )
            checks.append(
                Check(
                    "no campaign was charged by the refused resume",
                    not campaign.exists() or _spend_matches(campaign, env.meter.state()["usage"], usage_at_campaign)[0],
                )
            )
            return checks
        selection = (read_json(child / "run_manifest.json").get("selection") or {}).get("task_ids") or []
        rerun = sorted(receipts & (set(selection) | receipted(child)))
        checks.append(
            Check(
                "the resume ended (exit 0 or 1)",
                code in (ExitCode.OK, ExitCode.FAILED),
                f"exit {code}; see {child_name}.log",
            )
        )
        checks.append(
            Check(
                "the resume reran no task with a receipt in the killed run",
                not rerun,
                f"receipted {sorted(receipts)}, rerun {rerun}",
            )
        )
        report = cli(
            env, "report", str(child), "--json", "--output-dir", str(env.root / f"report-{child_name}"), timeout=300
        )
        try:
            data = json.loads(report.stdout)
        except ValueError:
            data = {}
        ids = [t.get("instance_id") for t in data.get("tasks", [])]
        checks.append(
            Check(
                "exactly one final row per task across the ancestry",
                sorted(ids) == sorted(tasks) and data.get("denominator") == len(tasks),
                f"exit {report.returncode}, rows {ids}",
            )
        )
        ok, detail = _spend_matches(campaign, env.meter.state()["usage"], usage_at_campaign)
        checks.append(Check("the campaign's spend equals the meter's delta, with no active run", ok, detail))
        return checks


def _spend_matches(campaign: Path, usage_now: float, usage_at_campaign: float) -> tuple[bool, str]:
    shown = subprocess.run(
        [sys.executable, "-m", "cowork_adapter", "campaign", "show", "--campaign-file", str(campaign), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        record = json.loads(shown.stdout)
    except ValueError:
        return False, f"campaign show exit {shown.returncode}: {shown.stderr.strip()[:200]}"
    spent = float(record.get("spent_usd", -1))
    delta = usage_now - usage_at_campaign
    ok = abs(spent - delta) < 1e-9 and record.get("active_run") is None
    return ok, f"spent {spent:.6f}, meter delta {delta:.6f}, active_run {bool(record.get('active_run'))}"


# The demo's short tour: three seeded kills, one early (no runner yet), one with agents at work,
# one in a late phase, each by pid or by group as the seed says.
DEMO_PHASE_GROUPS = (("probe", "runner_start"), ("in_flight", "stop"), ("cleanup", "settlement"))


def scenario_kill9_random(env: DemoEnv) -> list[Check]:
    """`kill9-random`: seeded launcher SIGKILLs, each followed by clear and resume, with verdicts."""
    seed = chaos_seed()
    rng = random.Random(seed)
    phases = [rng.choice(group) for group in DEMO_PHASE_GROUPS]
    moments = [pick_moments(rng.randrange(2**31), [phase], (rng.choice(("pid", "group")),))[0] for phase in phases]
    print(
        f"kill9-random: seed {seed} ({SEED_ENV}={seed} reproduces): "
        + ", ".join(f"{m.phase} by {m.how}" for m in moments),
        flush=True,
    )
    saved_rate = env.meter.state().get("rate_usd_per_sec", 0.0005)
    bench = ChaosBench(env, prefix="kill9-random")
    checks: list[Check] = []
    try:
        for index, moment in enumerate(moments):
            result = bench.kill_and_recover(moment, index)
            checks += [
                Check(f"kill {index + 1} ({moment.phase}, {moment.how}): {c.name}", c.ok, c.detail)
                for c in result.checks
            ]
    finally:
        bench.remove_fresh_images()
        env.meter.set_rate(saved_rate)
    return checks
