"""`cowork-adapter doctor [the run flags]`: can this machine and this daemon run this campaign?

One verdict a line, `OK|FAIL|SKIP  <check>: <sentence>[ — fix: <what to do>]`, without spending
and without writing: the only thing it creates is a short-lived limit-probe container carrying
the doctor label, removed in `finally`. SKIP marks a check the flags make unnecessary (the key,
meter and campaign for --dry-run or --probe).
  exit 0: every needed check is OK (the run these flags describe could start);
  1: at least one check failed;  2: the flags themselves are refused (by the CLI).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..benchmark.provenance import bench_identity, dataset_ids, seed_identity
from ..benchmark.selection import validate_against_dataset
from ..config import RunConfig
from ..errors import Refusal
from ..host.daemon import daemon_info, docker_failures, docker_version, image_present
from ..host.daemon_kind import DaemonFacts, facts_from_info, owner_refusal, peer_same_network, socket_owner
from ..host.resources import campaign_roots, host_suggestion
from ..resolved import MoneyBounds, ResolvedConfig, reached
from ..schemas.campaign import key_fingerprint
from ..vocab import ExitCode
from .doctor_host import host_checks, host_doctor_command
from .doctor_probes import (
    DOCTOR_LABEL_KEY,
    FAIL,
    GIB,
    OOM_EXIT,
    POSTGRES_IMAGE,
    PROBE_ALLOC_MIB,
    PROBE_MEMORY,
    CheckResult,
    ProbeOutcome,
    _brief,
    fail,
    free_bytes,
    host_tools_check,
    limit_probe,
    meter_headroom,
    ok,
    skip,
)


class Doctor:
    """Runs the checks in order; later checks use what earlier ones learnt (daemon up, seed head, key)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.built = ResolvedConfig.of(cfg)  # the resource root and base image, never None once built
        self.daemon_up = False
        self.seed_head: str | None = None
        self.bench_ok = False
        self.key: str | None = None
        self.usage: float | None = None
        self.facts: DaemonFacts | None = None  # the daemon's kind and unenforced limits (daemon_kind)

    def checks(self) -> list[Callable[[], CheckResult]]:
        return [
            self.docker_host,
            self.daemon_kind,
            self.limits_fit,
            self.limits,
            self.base_image,
            self.postgres_image,
            self.run_root,
            self.resource_disk,
            self.root_disk,
            self.host_tools,
            self.bench,
            self.selection,
            self.seed,
            self.derived_image,
            self.key_present,
            self.key_route,
            self.meter,
            self.campaign,
            self.concurrency,
        ]

    def run(self) -> list[CheckResult]:
        results = []
        for check in self.checks():
            try:
                results.append(check())
            except Exception as exc:  # noqa: BLE001 - a check that breaks is a failed check, not a crash
                name = check.__name__.replace("_", " ")
                results.append(
                    fail(
                        name,
                        f"the check itself failed ({type(exc).__name__}: {_brief(exc)})",
                        "report this; the run's own preflight will check it again",
                    )
                )
        return results

    # ---- docker ----

    def docker_host(self) -> CheckResult:
        host = self.cfg.docker_host
        try:
            info = docker_version(host)
        except docker_failures() as exc:
            return fail(
                "docker host",
                f"the Docker daemon at {host} did not answer ({_brief(exc)}).",
                "start the daemon, or point --docker-host / DOCKER_HOST at the running rootless daemon's socket",
            )
        self.daemon_up = True
        return ok(
            "docker host", f"{host} answers: Docker {info.get('Version', '?')} (API {info.get('ApiVersion', '?')})."
        )

    def daemon_kind(self) -> CheckResult:
        """Rootless or not, its user, the limits it enforces: `run` refuses what FAILs here (run/daemon_check.py)."""
        name = "daemon kind"
        if not self.daemon_up:
            return self._daemon_down(name)
        from ..run.daemon_check import limits_refusal

        host = self.cfg.docker_host
        self.facts = facts_from_info(daemon_info(host), peer_same_network(host), socket_owner(host))
        refusal = owner_refusal(self.facts, host, os.geteuid()) or limits_refusal(self.cfg, self.facts)
        if refusal:
            return fail(name, refusal.rstrip("."), "see docs/install.md (a rootless daemon on a cgroup v2 host)")
        limits = (
            "it enforces the memory, CPU and process limits"
            if self.facts.enforces_limits
            else f"it does not enforce the {', '.join(self.facts.unenforced)} limits (accepted: "
            "--accept-unenforced-limits, disclosed by the report)"
        )
        return ok(name, f"{host} is {self.facts.describe()}; {limits}.")

    def _daemon_down(self, name: str) -> CheckResult:
        return fail(name, "cannot be checked because the Docker daemon did not answer.", "fix the docker host first")

    def limits_fit(self) -> CheckResult:
        """--cpus and --memory against the daemon's CPUs and memory, as the run's preflight fits them."""
        name = "limits fit the daemon"
        if not self.daemon_up:
            return self._daemon_down(name)
        info = daemon_info(self.cfg.docker_host)
        cpus, memory = int(info["NCPU"]), int(info["MemTotal"])
        try:
            fitted = self.cfg.fit_to_daemon(cpus, memory, daemon=self.cfg.docker_host)
        except Refusal as refusal:
            return fail(
                name,
                refusal.sentence.rstrip("."),
                "lower the limit to what the daemon has, or leave it out to take the fitted default",
            )
        sources = [
            "default" if self.cfg.limits.cpus is None else "--cpus",
            "default" if self.cfg.limits.memory is None else "--memory",
        ]
        return ok(
            name,
            f"{fitted.limits.cpus:g} CPUs ({sources[0]}) and {fitted.limits.memory_bytes / GIB:.1f} GiB ({sources[1]}) "
            f"per container, within the daemon's {cpus} CPUs and {memory / GIB:.1f} GiB.",
        )

    def limits(self) -> CheckResult:
        name = "limits enforced"
        if not self.daemon_up:
            return self._daemon_down(name)
        if image_present(self.cfg.docker_host, self.built.base_image) is None:
            return fail(
                name,
                f"cannot probe: the base image {self.built.base_image} is absent.",
                "make the base image present (see the base image check), then run doctor again",
            )
        outcome = limit_probe(self.cfg.docker_host, self.built.base_image)
        killed = outcome.oom_killed or outcome.exit_code == OOM_EXIT
        if not killed and self.cfg.limits.accept_unenforced_limits:
            return ok(name, "memory limits are not enforced here (accepted: --accept-unenforced-limits).")
        if killed:
            return ok(
                name,
                f"a container held to {PROBE_MEMORY} was OOM-killed allocating {PROBE_ALLOC_MIB} MiB "
                f"(exit {outcome.exit_code}); memory limits are enforced.",
            )
        return fail(
            name,
            f"a container given --memory {PROBE_MEMORY} allocated {PROBE_ALLOC_MIB} MiB and exited "
            f"{outcome.exit_code} without being OOM-killed: this daemon does not enforce memory limits.",
            "use a daemon whose cgroups enforce limits (cgroup v2 with the memory controller delegated to the "
            "rootless user, or cgroup v1 with memory accounting), then restart it",
        )

    def _image(self, name: str, ref: str, fix: str) -> CheckResult:
        if not self.daemon_up:
            return self._daemon_down(name)
        info = image_present(self.cfg.docker_host, ref)
        if info is None:
            return fail(name, f"{ref} is not present on the daemon, and runs never pull.", fix)
        return ok(name, f"{ref} is present ({str(info.get('Id', ''))[:19]}).")

    def base_image(self) -> CheckResult:
        return self._image(
            "base image",
            self.built.base_image,
            f"build it once: docker build -t {self.built.base_image} {self.cfg.bench_root}",
        )

    def postgres_image(self) -> CheckResult:
        return self._image(
            "postgres image",
            POSTGRES_IMAGE,
            f"docker pull {POSTGRES_IMAGE} (or docker load it) on this daemon before the run",
        )

    def derived_image(self) -> CheckResult:
        name = "derived image"
        if not self.daemon_up:
            return self._daemon_down(name)
        if self.seed_head is None or not self.bench_ok:
            return fail(
                name,
                "cannot be checked until the seed and the benchmark checks pass.",
                "fix the seed and benchmark checks first",
            )
        from ..image.derived import ImageRequest, label_mismatch
        from ..run.launch import default_image_tag

        tag = default_image_tag(self.cfg, self.seed_head)
        info = image_present(self.cfg.docker_host, tag)
        if info is None:
            if self.cfg.image.build_image:
                return ok(name, f"{tag} is absent; --build-image will build it from {self.built.base_image}.")
            return fail(name, f"{tag} is absent and --build-image was not given.", "add --build-image")
        base = image_present(self.cfg.docker_host, self.built.base_image)
        req = ImageRequest(
            tag=tag,
            base_image=self.built.base_image,
            seed_dir=self.cfg.repo_dir,
            seed_head=self.seed_head,
            bench_commit=self.cfg.bench_commit,
            base_image_id=(base or {}).get("Id"),
        )
        mismatch = label_mismatch(tag, (info.get("Config") or {}).get("Labels") or {}, req)
        if mismatch is None:
            return ok(name, f"{tag} is present and its labels match the seed, benchmark and entrypoint.")
        if self.cfg.image.build_image:
            return ok(name, f"{tag} does not match the pins; --build-image will rebuild it.")
        return fail(name, mismatch.split("; pass")[0] + ".", "add --build-image to rebuild it")

    # ---- disk and host ----

    def run_root(self) -> CheckResult:
        root = self.cfg.run_root
        if root.exists():
            return fail(
                "run root",
                f"{root} already exists; every invocation needs a new run root.",
                "choose a new --run-root (e.g. with a timestamp)",
            )
        if not root.parent.is_dir():
            return fail("run root", f"its parent {root.parent} does not exist.", f"mkdir -p {root.parent}")
        return ok("run root", f"{root} is new and its parent exists.")

    def _disk(self, name: str, path: Path, reserve_gib: float, flag: str) -> CheckResult:
        if not path.is_dir():
            return fail(name, f"{path} is not a directory.", f"create {path} or pass another --resource-root")
        free = free_bytes(path)
        if free < reserve_gib * GIB:
            return fail(
                name,
                f"{path} has {free / GIB:.1f} GiB free, below the {flag} reserve of {reserve_gib:g} GiB.",
                f"free at least {reserve_gib - free / GIB:.1f} GiB on {path}, or use a larger filesystem",
            )
        return ok(name, f"{path} has {free / GIB:.1f} GiB free (reserve {reserve_gib:g} GiB, {flag}).")

    def resource_disk(self) -> CheckResult:
        return self._disk(
            "disk reserve (resource root)", self.built.resource_root, self.cfg.disk.min_free_gib, "--min-free-gib"
        )

    def root_disk(self) -> CheckResult:
        return self._disk("disk reserve (/)", Path("/"), self.cfg.disk.min_root_free_gib, "--min-root-free-gib")

    def host_tools(self) -> CheckResult:
        return host_tools_check()

    # ---- pins ----

    def bench(self) -> CheckResult:
        try:
            identity = bench_identity(self.cfg.bench_root, self.cfg.bench_commit)
        except Refusal as refusal:
            return fail(
                "benchmark",
                refusal.sentence.rstrip("."),
                f"use an unmodified checkout at the pinned commit: git -C {self.cfg.bench_root} checkout "
                f"--detach {self.cfg.bench_commit} with an empty git status --porcelain",
            )
        self.bench_ok = True
        commit = reached(identity.commit, "the benchmark's commit")
        return ok("benchmark", f"{self.cfg.bench_root} is clean at the pinned commit {commit[:12]}.")

    def selection(self) -> CheckResult:
        if not self.bench_ok:
            return fail("selection", "cannot be checked until the benchmark check passes.", "fix the benchmark first")
        dataset = dataset_ids(self.cfg.bench_root)
        if self.cfg.selection.resume_from:
            return ok(
                "selection",
                f"recovery from {len(self.cfg.selection.resume_from)} earlier run root(s); the launcher "
                f"resolves what remains of the {len(dataset)}-task dataset.",
            )
        if self.cfg.selection.task_ids is None:
            return ok("selection", f"no task selectors: the whole pinned dataset ({len(dataset)} tasks) will run.")
        try:
            validate_against_dataset(self.cfg.selection.task_ids, dataset)
        except Refusal as refusal:
            return fail(
                "selection",
                refusal.sentence.rstrip("."),
                "select task ids from tasks/finalpool of the pinned benchmark",
            )
        return ok("selection", f"{len(self.cfg.selection.task_ids)} task(s) of the {len(dataset)}-task pinned dataset.")

    def seed(self) -> CheckResult:
        try:
            identity = seed_identity(self.cfg.repo_dir, allow_dirty=self.cfg.allow_dirty_seed)
        except Refusal as refusal:
            return fail(
                "seed",
                refusal.sentence.rstrip("."),
                "commit the changes, or create a clean detached worktree at the reviewed commit "
                "(git worktree add --detach DIR COMMIT) and pass it as --repo-dir",
            )
        self.seed_head = head = reached(identity.head, "the seed's head")
        if identity.dirty:
            return ok(
                "seed",
                f"{self.cfg.repo_dir} at {head[:12]} is dirty, allowed by --allow-dirty-seed: "
                "a diagnostic run, not a reportable result.",
            )
        return ok("seed", f"{self.cfg.repo_dir} is clean at {head[:12]}.")

    # ---- money (paid runs only) ----

    def _not_needed(self, name: str) -> CheckResult | None:
        if self.cfg.is_paid:
            return None
        mode = "--dry-run" if self.cfg.dry_run else f"--probe {self.cfg.probe}"
        return skip(name, f"not needed: a {mode} run calls no model and spends nothing.")

    def key_route(self) -> CheckResult:
        """Where the key goes: the route the run will really use, tried as its preflight tries it (one short
        container must reach the gateway's socket from its own address: run/daemon_check.py try_route)."""
        name = "key route"
        skipped = self._not_needed(name)
        if skipped:
            return skipped
        if not self.cfg.served_by_gateway:
            return ok(
                name,
                "the key goes into every agent container (--key-in-agent, or a compatible endpoint "
                "without --llm-gateway): the agent under test can read it.",
            )
        if self.facts is None:
            return self._daemon_down(name)
        from ..run.daemon_check import try_route

        tried = try_route(self.cfg, self.facts)
        if tried is None or not tried.reached:
            why = tried.sentence if tried else "no route was tried"
            return fail(name, why.rstrip("."), "see docs/install.md (the key's route on each kind of daemon)")
        if not self.cfg.provider_tls:
            return ok(name, f"--llm-gateway: {tried.sentence}; the key stays in the launcher, containers get tokens.")
        return ok(name, f"the run serves it itself: {tried.sentence}; no container gets the key.")

    def key_present(self) -> CheckResult:
        name = "provider key"
        skipped = self._not_needed(name)
        if skipped:
            return skipped
        env = self.cfg.provider.api_key_env
        value = os.environ.get(env, "")
        if not value.strip():
            return fail(
                name,
                f"the environment variable {env} is empty or unset.",
                f"export {env} from your secret environment "
                "(never on the command line or in a file under the run root)",
            )
        self.key = value.strip()
        return ok(name, f"{env} holds a key (never shown).")

    def meter(self) -> CheckResult:
        name = "key meter"
        skipped = self._not_needed(name)
        if skipped:
            return skipped
        if self.key is None:
            return fail(name, "cannot be checked without the key.", "fix the provider key check first")
        from ..campaign.meter import MeterError

        try:
            headroom, usage = meter_headroom(self.cfg.money.meter_url, self.key)
        except MeterError as exc:
            return fail(
                name,
                f"{self.cfg.money.meter_url} did not give a usable reading ({exc.error_type}: "
                f"{_brief(exc).replace(self.key, '[redacted-key]')}).",
                "check --meter-url and that the key is valid and not revoked",
            )
        self.usage = usage
        effective = headroom.effective
        if effective is None:
            return ok(name, f"{self.cfg.money.meter_url} answers (usage ${usage:.2f}); the key is uncapped.")
        if effective < self.cfg.money.min_key_usd:
            return fail(
                name,
                f"the key has ${effective:.2f} of headroom, below --min-key-usd {self.cfg.money.min_key_usd:g}.",
                "add credits or raise the key's limit (or lower --min-key-usd deliberately)",
            )
        return ok(
            name,
            f"{self.cfg.money.meter_url} answers: usage ${usage:.2f}, headroom ${effective:.2f} "
            f"(at least --min-key-usd {self.cfg.money.min_key_usd:g}).",
        )

    def concurrency(self) -> CheckResult:
        """A concurrency for this host from the campaign's measured per-task use (advice, never a failure)."""
        name = "concurrency"
        if not self.daemon_up:
            return skip(name, "no suggestion: the Docker daemon did not answer, so its CPUs and memory are unknown.")

        found = host_suggestion(
            self.cfg.docker_host, campaign_roots(self.cfg.money.campaign_file, self.cfg.selection.resume_from)
        )
        sentence = found.sentence[0].upper() + found.sentence[1:]
        if found.concurrency is not None and self.cfg.selection.concurrency > found.concurrency:
            sentence += f"; --concurrency {self.cfg.selection.concurrency} is above it"
        return ok(name, sentence + ".")

    def campaign(self) -> CheckResult:
        name = "campaign"
        skipped = self._not_needed(name)
        if skipped:
            return skipped
        from ..run.spending import peek_campaign, resolve_money

        file = self.cfg.money.campaign_file
        if not self.cfg.money.has_campaign:
            return fail(name, "a paid run needs --campaign-file.", "pass --campaign-file, the campaign's shared record")
        if file is not None and not file.parent.is_dir():
            return fail(name, f"the campaign file's directory {file.parent} does not exist.", f"mkdir -p {file.parent}")
        try:
            record = peek_campaign(self.cfg.money)  # the file, or the --campaign-db record
        except Refusal as refusal:
            return fail(
                name, refusal.sentence.rstrip("."), "restore the campaign record from a copy; never recreate it"
            )
        path = self.cfg.money.campaign_location()

        try:
            money = resolve_money(self.cfg.money, record)  # the bounds the run would use, or what it lacks
        except Refusal as refusal:
            return fail(name, refusal.sentence.rstrip("."), "pass what the sentence names")
        bounds = MoneyBounds.of(money)
        if record is None:
            return ok(
                name,
                f"{path} does not exist yet: the run will create it (--new-campaign) with a "
                f"${bounds.campaign_budget_usd:g} ceiling and the key's usage at start as its baseline.",
            )
        if self.key is not None and record.fingerprint != key_fingerprint(self.key):
            return fail(
                name,
                f"{path} belongs to key {record.fingerprint}, not to the key in {self.cfg.provider.api_key_env}.",
                "use the key this campaign was created with, or a new --campaign-file for a new key",
            )
        if record.ceiling_usd != bounds.campaign_budget_usd:
            return fail(
                name,
                f"{path} has a ${record.ceiling_usd:g} ceiling, not --campaign-budget-usd "
                f"{bounds.campaign_budget_usd:g}; a ceiling never changes.",
                f"pass --campaign-budget-usd {record.ceiling_usd:g}",
            )
        stored = record.diagnostic_eval_on_truncation
        if stored is not None and stored != self.cfg.agent.diagnostic_eval_on_truncation:
            return fail(
                name,
                f"{path} runs with --diagnostic-eval-on-truncation {'on' if stored else 'off'}, "
                "and every run of a campaign uses the same setting.",
                ("pass" if stored else "drop") + " --diagnostic-eval-on-truncation",
            )
        if self.cfg.money.prior_spend_usd != 0:
            return fail(
                name, f"{path} already exists, so --prior-spend-usd cannot be declared again.", "drop --prior-spend-usd"
            )
        if record.active_run is not None:
            return fail(
                name,
                f"{path} has an unsettled active run {record.active_run.run_root} "
                f"(launcher pid {record.active_run.launcher_pid}).",
                "if it is still running, wait or `cowork-adapter stop` it; otherwise prove it ended and run "
                f"`cowork-adapter campaign reconcile --campaign-file {path} --run-root "
                f"{record.active_run.run_root} --operator-note '...'`",
            )
        usage = self.usage if self.usage is not None else record.last_usage
        if usage < record.last_usage:
            return fail(
                name,
                f"the key meter reads {usage:.2f}, below the campaign's last accepted usage {record.last_usage:.2f}.",
                "check that --meter-url and the key are the campaign's",
            )
        spending = record.spending(usage)
        if spending.remaining_usd <= bounds.budget_reserve_usd:
            return fail(
                name,
                f"{path} has ${spending.remaining_usd:.2f} remaining, not above the "
                f"${bounds.budget_reserve_usd:g} reserve.",
                "the campaign is spent; settle the budget with its owner before any further paid run",
            )
        return ok(
            name,
            f"{path}: ceiling ${record.ceiling_usd:g}, spent ${spending.spent_usd:.2f}, remaining "
            f"${spending.remaining_usd:.2f} (reserve ${bounds.budget_reserve_usd:g}); no active run.",
        )


def doctor_command(cfg: RunConfig) -> int:
    """Print one verdict a line; 0 when every needed check is OK, else 1."""
    results = Doctor(cfg).run()
    for result in results:
        print(result.line(), flush=True)
    failed = [r for r in results if r.verdict == FAIL]
    mode = (
        "paid run"
        if cfg.is_paid
        else (
            "dry run"
            if cfg.dry_run
            else (f"--probe {cfg.probe} run" if cfg.probe else f"--engine {cfg.agent.engine} run")
        )
    )
    if failed:
        print(f"doctor: {len(failed)} check(s) failed; this {mode} cannot start yet.", flush=True)
        return int(ExitCode.FAILED)
    print(f"doctor: every needed check is OK; this {mode} could start.", flush=True)
    return int(ExitCode.OK)


__all__ = [
    "doctor_command",
    "host_doctor_command",
    "host_checks",
    "Doctor",
    "CheckResult",
    "ProbeOutcome",
    "limit_probe",
    "DOCTOR_LABEL_KEY",
    "OOM_EXIT",
]
