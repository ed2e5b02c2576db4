"""`cowork-adapter run`: preflight, admission, the run itself, and a manifest finalised on every path.

Preflight refusals happen before the run root exists, so a refused invocation writes nothing and
the operator can fix the input and retry with the same root. From admission on, run_manifest.json
is the run's record and is finalised whatever happens (refusal, stop, crash).
"""

from __future__ import annotations

import hashlib
import sys
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..benchmark.pin_check import verify_copy
from ..benchmark.provenance import (
    adapter_identity,
    checked_bench,
    clone_at,
    dataset_ids,
    seed_identity,
    upstream_hashes,
)
from ..benchmark.selection import validate_against_dataset
from ..config import Disk, RunConfig
from ..container.protocol import scrub, secret_terms
from ..container.reference import stage_groundtruth
from ..custody.bash_env import ProviderRoute, eval_code_mounts
from ..custody.labels import new_run_label
from ..errors import Refusal
from ..fileio import replace_atomic
from ..gateway.trust import certifi_files
from ..host.daemon import daemon_info, docker_failures
from ..host.daemon_kind import DaemonFacts
from ..host.disk import MIN_FREE_INODE_FRACTION, free_bytes, inodes_short
from ..image.build_lock import build_lock
from ..image.derived import (
    ImageRequest,
    build_derived_image,
    container_digest,
    inspect_image,
    label_mismatch,
    resolve_image,
)
from ..resolved import ResolvedConfig, fitted_cpus, reached
from ..runroot.layout import CONFIGS, RUN_CONFIG, RunRoot
from ..runroot.manifest import utc_now, write_manifest
from ..schemas.manifest import (
    AdmissionLimitsRecord,
    BenchIdentity,
    BenchSubstitute,
    ImageIdentity,
    Limits,
    RunManifest,
    SeedIdentity,
    Selection,
)
from ..schemas.manifest import Refusal as RefusalRecord
from ..schemas.run_config import build_run_config
from ..score.ledger import build_index, write_index
from ..vocab import EngineKind, ExitCode, RunOutcome
from .daemon_check import check_daemon
from .manifest_records import budget_record, daemon_record, hardening_record
from .probes import enforce_inventory, inventory_for_run, run_probe
from .recovery import STAGE as RESUME_STAGE
from .recovery import CampaignPlace, campaign_refusal, resolve_ancestry
from .signals import LAUNCHER_SIGNALS, StopSignal

AGENT_ENTRY = "cowork_entry.py"
GIB = 1 << 30


@dataclass
class Preflight:
    """Everything checked before the run root is created."""

    seed_head: str
    seed: SeedIdentity
    bench: BenchIdentity
    bench_commit: str  # bench.commit, which a checked checkout always has
    dataset: list[str]
    explicit: list[str] | None
    image_tag: str
    image_present: bool
    cfg: RunConfig  # the flags with their limits fitted to the daemon (see RunConfig.fit_to_daemon)
    key: str | None = None  # the provider key, for a paid run: memory only, never written
    daemon: tuple[int, int] | None = None  # the daemon's (CPUs, memory bytes) from docker info
    base_image_id: str | None = None  # what --base-image names now; the derived image's label must match it
    substitutes: list[BenchSubstitute] | None = None  # the checkout's stand-ins for blobs its store lacks
    daemon_facts: DaemonFacts | None = None  # its kind and the limits it cannot enforce (host/daemon_kind.py)


def say(sentence: str) -> None:
    print(f"cowork-adapter: {sentence}", file=sys.stderr, flush=True)


def default_image_tag(cfg: RunConfig, seed_head: str) -> str:
    """`cowork-ouroboros:<seed>-<bench>-<entry>`: other entry code is another tag, so two runs
    building different adapters on one daemon never retag each other's image."""
    return cfg.image.image or f"cowork-ouroboros:{seed_head[:12]}-{cfg.bench_commit[:7]}-{container_digest()[:8]}"


def disk_refusal(resource_root: Path, disk: Disk) -> str | None:
    """A sentence when the resource root or / is below its reserve, else None."""
    checks = (
        (resource_root, disk.min_free_gib, "--min-free-gib"),
        (Path("/"), disk.min_root_free_gib, "--min-root-free-gib"),
    )
    for path, reserve_gib, flag in checks:
        free = free_bytes(path)
        if free < reserve_gib * GIB:
            return f"{path} has {free / GIB:.1f} GiB free, below the {flag} reserve of {reserve_gib:g} GiB."
        short = inodes_short(path)
        if short is not None:
            return (
                f"{path} has {short[0]:,} free inodes, below the reserve of {short[1]:,} "
                f"({MIN_FREE_INODE_FRACTION:.0%} of its inodes): free some files on it."
            )
    return None


def daemon_resources(docker_host: str) -> tuple[int, int]:
    """(CPUs, memory bytes) the daemon reports in `docker info`; a daemon that does not answer is a refusal."""
    try:
        info = daemon_info(docker_host)
    except docker_failures() as exc:
        raise Refusal("docker_host", f"the Docker daemon at {docker_host} did not answer: {exc}") from None
    try:
        return int(info["NCPU"]), int(info["MemTotal"])
    except (KeyError, TypeError, ValueError):
        raise Refusal(
            "docker_host", f"the Docker daemon at {docker_host} did not report its CPUs and memory."
        ) from None


def preflight(cfg: RunConfig) -> Preflight:
    if cfg.run_root.exists():
        raise Refusal(
            "run_root",
            f"the run root {cfg.run_root} already exists; every invocation, dry runs and retries included, "
            "needs a new run root.",
        )
    if not cfg.run_root.parent.is_dir():
        raise Refusal(
            "run_root",
            f"the parent of the run root, {cfg.run_root.parent}, does not exist; create the storage directory first.",
        )
    if not cfg.docker_host:
        raise Refusal(
            "docker_host", "no Docker host was given; pass --docker-host or set DOCKER_HOST to the daemon to use."
        )
    built = ResolvedConfig.of(cfg)
    if not built.resource_root.is_dir():
        raise Refusal("disk", f"the resource root {built.resource_root} is not a directory.")
    daemon = daemon_resources(cfg.docker_host)
    cfg = cfg.fit_to_daemon(*daemon, daemon=cfg.docker_host)
    facts = check_daemon(cfg)  # unenforced limits and a route that reaches no container: refused here
    seed = seed_identity(cfg.repo_dir, allow_dirty=cfg.allow_dirty_seed)
    seed_head = reached(seed.head, "the seed's head")
    bench, substitutes = checked_bench(cfg.bench_root, cfg.bench_commit)
    bench_commit = reached(bench.commit, "the benchmark's commit")
    dataset = dataset_ids(cfg.bench_root)
    explicit = list(cfg.selection.task_ids) if cfg.selection.task_ids is not None else None
    if explicit is not None:
        validate_against_dataset(explicit, dataset)
    reason = disk_refusal(built.resource_root, cfg.disk)
    if reason:
        raise Refusal("disk", reason)
    found: dict[str, dict[str, Any]] = {}
    for ref in (built.base_image, "postgres:15"):
        info = inspect_image(cfg.docker_host, ref)
        if info is None:
            raise Refusal(
                "image",
                f"image {ref} is not present on the daemon at {cfg.docker_host}; nothing is pulled, "
                "so load or build it first.",
            )
        found[ref] = info
    base_id = found[built.base_image].get("Id")
    tag = default_image_tag(cfg, seed_head)
    present = _usable_image(cfg, tag, seed_head, bench_commit, base_id)
    key = None
    if cfg.is_paid:
        from .spending import campaign_store, paid_preflight

        key, cfg = paid_preflight(cfg)  # the money bounds resolved against the campaign
        # A campaign held by another launcher would refuse the admission after the environment probe
        # (a shared host takes no exclusive hold: its admission checks the shared one).
        if not cfg.hosts.shared_campaign:
            campaign_store(cfg.money).refuse_if_locked()
    if cfg.selection.resume_from:
        ancestors = _recovery_preflight(cfg, seed_head, bench_commit, tag if present else None, explicit, dataset)
        _resume_campaign_preflight(cfg, ancestors)
    return Preflight(
        seed_head=seed_head,
        seed=seed,
        bench=bench,
        bench_commit=bench_commit,
        dataset=dataset,
        explicit=explicit,
        image_tag=tag,
        image_present=present,
        cfg=cfg,
        key=key,
        daemon=daemon,
        base_image_id=base_id,
        substitutes=substitutes,
        daemon_facts=facts,
    )


def _recovery_preflight(
    cfg: RunConfig,
    seed_head: str,
    bench_commit: str,
    present_tag: str | None,
    explicit: list[str] | None,
    dataset: list[str],
) -> list[str]:
    """Every recovery refusal decidable before anything is written (the ancestry, its manifests,
    dumps, configuration, seed, benchmark, passes; the image's ID when the image is already
    present); every ancestor's root. The plan itself is made again after the image is resolved."""
    image_id = (inspect_image(cfg.docker_host, present_tag) or {}).get("Id") if present_tag else None
    try:
        return resolve_ancestry(
            list(cfg.selection.resume_from),
            current_applied_config=cfg.applied_config(),
            seed_head=seed_head,
            bench_commit=bench_commit,
            image_id=image_id,
            image_pending=image_id is None,
            explicit_selection=explicit,
            dataset_ids=dataset,
        ).ancestors
    except Refusal:
        raise
    except Exception:  # noqa: BLE001 - not a refusal: the admitted run plans again and records a crash
        return [str(Path(p).resolve()) for p in cfg.selection.resume_from]  # the direct parents' campaign still binds


def _resume_campaign_preflight(cfg: RunConfig, ancestors: list[str]) -> None:
    """A resume continues its ancestors' campaign (the same file, or database and name), or is refused."""
    here = CampaignPlace.of(cfg.money.campaign_file, cfg.money.campaign_db, cfg.money.campaign_name)
    exists = True  # a run that spends nothing never creates a campaign
    if cfg.is_paid:
        from .spending import peek_campaign

        exists = peek_campaign(cfg.money) is not None
    sentence = campaign_refusal(ancestors, here, exists)
    if sentence is not None:
        raise Refusal(RESUME_STAGE, sentence)


def _usable_image(cfg: RunConfig, tag: str, seed_head: str, bench_commit: str, base_image_id: str | None) -> bool:
    """True when `tag` exists with labels matching the pins; False when it must be built.

    Without --build-image a missing or mismatching image is a refusal: the run never executes an
    image built from another seed, benchmark, entrypoint or base image (a base rebuilt under the
    same tag has another ID, so the derived image built on the old one is rebuilt or refused).
    """
    info = inspect_image(cfg.docker_host, tag)
    if info is None:
        if not cfg.image.build_image:
            raise Refusal(
                "image", f"image {tag} is not present; pass --build-image to build it from {cfg.image.base_image}."
            )
        return False
    labels = (info.get("Config") or {}).get("Labels") or {}
    req = ImageRequest(
        tag=tag,
        base_image=ResolvedConfig.of(cfg).base_image,
        seed_dir=cfg.repo_dir,
        seed_head=seed_head,
        bench_commit=bench_commit,
        base_image_id=base_image_id,
    )
    mismatch = label_mismatch(tag, labels, req)
    if mismatch and not cfg.image.build_image:
        raise Refusal("image", mismatch + ".")
    return mismatch is None


def execute_run(cfg: RunConfig, argv: list[str]) -> int:
    """The whole `run` command; returns the process exit code (see vocab.ExitCode)."""
    try:
        pre = preflight(cfg)
    except Refusal as refusal:
        say(refusal.sentence)
        return ExitCode.REFUSED
    cfg = pre.cfg  # from here on the limits are the ones every container gets
    secrets = [pre.key] if pre.key else []
    cfg.run_root.mkdir()
    label, nonce = new_run_label(cfg.run_root)  # unique to this run, even where the path was used before
    manifest = RunManifest(
        run_root=str(cfg.run_root),
        run_label=label,
        run_nonce=nonce,
        created_at=utc_now(),
        updated_at=utc_now(),
        argv=[scrub(a, secret_terms(secrets)) for a in argv],
        adapter=adapter_identity(),
        seed=pre.seed,
        bench=pre.bench,
        engine=cfg.agent.engine,
        applied_config=cfg.applied_config(),
        limits=Limits(
            cpus=fitted_cpus(cfg),
            memory_bytes=cfg.limits.memory_bytes,
            memory_swap_bytes=cfg.limits.memory_swap_bytes,
            pids_limit=cfg.limits.pids_limit,
            daemon_cpus=pre.daemon[0] if pre.daemon else None,
            daemon_memory_bytes=pre.daemon[1] if pre.daemon else None,
            **hardening_record(cfg),
            **daemon_record(cfg, pre.daemon_facts),
        ),
        budgets=budget_record(cfg),
        dry_run=cfg.dry_run,
        probe=cfg.probe,
        campaign_file=str(cfg.money.campaign_file) if cfg.money.campaign_file else None,
        campaign_db=cfg.money.campaign_db,
        campaign_name=cfg.money.campaign_name if cfg.money.campaign_db else None,
        docker_host=cfg.docker_host,
        admission=AdmissionLimitsRecord(**asdict(cfg.hosts.admission_limits())) if cfg.hosts.shared_campaign else None,
    )
    write_manifest(cfg.run_root, manifest)
    LAUNCHER_SIGNALS.install(RunRoot(cfg.run_root).launcher_output)
    try:
        code = _admitted(cfg, pre, manifest)
    except StopSignal as stop:
        manifest.outcome = RunOutcome.STOPPED
        manifest.stop_reason = stop.cause
        manifest.stop_causes = [stop.cause]
        code = ExitCode.STOPPED
        say(f"stopped by {stop.cause} before the runner started; nothing ran.")
    except Refusal as refusal:
        manifest.outcome = RunOutcome.REFUSED
        manifest.refusal = RefusalRecord(stage=refusal.stage, sentence=refusal.sentence)
        code = ExitCode.REFUSED
        say(refusal.sentence)
    except BaseException as exc:  # noqa: BLE001 - a crash is recorded, then re-raised as exit 1
        manifest.outcome = RunOutcome.CRASHED
        message = scrub("".join(traceback.format_exception_only(type(exc), exc)).strip(), secret_terms(secrets))
        manifest.error = {"type": type(exc).__name__, "message": message[:4000]}
        code = ExitCode.FAILED
        say(f"the run crashed ({type(exc).__name__}); see {RunRoot(cfg.run_root).manifest}.")
        _ledger_after_crash(cfg, pre, manifest)
        if not isinstance(exc, Exception):
            raise
    finally:
        manifest.finished_at = utc_now()
        LAUNCHER_SIGNALS.restore()
    late = [c for c in LAUNCHER_SIGNALS.received if c not in manifest.stop_causes]
    manifest.stop_causes = [*manifest.stop_causes, *late]  # recorded, never interrupting custody
    manifest.exit_code = int(code)
    write_manifest(cfg.run_root, manifest)
    return int(code)


def keep_task_validity(source: Path, run_root: Path) -> dict[str, str]:
    """Copy qualify's table into the run root (the report reads it there) and record its digest."""
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise Refusal("flags", f"--task-validity {source} cannot be read any more: {exc.strerror or exc}.") from None
    replace_atomic(RunRoot(run_root).task_validity, data)
    return {"source": str(source), "sha256": hashlib.sha256(data).hexdigest()}


def _ledger_after_crash(cfg: RunConfig, pre: Preflight, manifest: RunManifest) -> None:
    """A row for every selected task after a crash, so no task leaves the denominator.

    A crash before the selection was recorded records it here (a recovery run's selection needs
    its ancestors resolved, so it is left without rows). Guarded: whatever fails here is said on
    stderr and never replaces the crash being recorded.
    """
    try:
        if manifest.selection is None and not cfg.selection.resume_from:
            manifest.selection = _selection(cfg, pre, manifest.image)  # without ancestors it needs no image
        if manifest.selection is None:
            return
        write_manifest(cfg.run_root, manifest)

        write_index(cfg.run_root, build_index(cfg.run_root, live=False, interruption_cause=RunOutcome.CRASHED.value))
    except Exception as exc:  # noqa: BLE001 - the crash is the record that matters
        say(f"the ledger could not be written after the crash ({type(exc).__name__}: {exc}).")


def _admitted(cfg: RunConfig, pre: Preflight, manifest: RunManifest) -> int:
    run_root = cfg.run_root
    if cfg.selection.task_validity is not None:
        manifest.task_validity = keep_task_validity(cfg.selection.task_validity, run_root)
    bench_copy = RunRoot(run_root).bench
    clone_at(cfg.bench_root, bench_copy, pre.bench_commit, pre.substitutes or [])
    bench = reached(manifest.bench, "the manifest's benchmark (set when it is made)")
    bench.working_copy = str(bench_copy)
    # What runs is this clone: before any image or container, it must be the pin byte for byte.
    manifest.bench_verified = verify_copy(bench_copy, pre.bench_commit, pre.substitutes or [])
    runner_hash, evaluators = upstream_hashes(bench_copy, pre.dataset)
    bench.runner_sha256 = runner_hash
    bench.evaluator_sha256 = evaluators
    bench.dataset_size = len(pre.dataset)
    manifest.eval_code_mounts = eval_code_mounts(bench_copy)  # what the eval containers run
    write_manifest(run_root, manifest)

    manifest.image = _image(cfg, pre, manifest)
    write_manifest(run_root, manifest)

    selection = _selection(cfg, pre, manifest.image)
    manifest.selection = selection
    if not (cfg.served_by_gateway and pre.key and selection.task_ids and not cfg.dry_run and not cfg.probe):
        return _configured(cfg, pre, manifest, bench_copy, None, _with_ca_targets(cfg, manifest, _standin_route(cfg)))
    from ..gateway.run import close_for_run, open_for_run

    # The inventory's probe before the gateway opens: its exact-label cleanup would remove the network the
    # gateway listens on. The probe reads the run flags: written now, again once the gateway is open.
    replace_atomic(bench_copy / CONFIGS / RUN_CONFIG, build_run_config(cfg).to_json())
    _qualify_environment(cfg, manifest, bench_copy)
    # The gateway lives in this process for the run's lifetime: it dies with the launcher.
    gateway, cfg, manifest.llm_gateway, provider = open_for_run(cfg, pre.key, manifest.run_label, run_root)
    try:
        provider = _with_ca_targets(cfg, manifest, provider)
        return _configured(cfg, pre, manifest, bench_copy, gateway, provider, qualified=True)
    finally:
        close_for_run(gateway, manifest.llm_gateway, run_root)


def _with_ca_targets(cfg: RunConfig, manifest: RunManifest, provider):
    """The provider route with the certifi files of the run's image (gateway/trust.py), asked once per run."""
    if provider is None or manifest.image is None or not manifest.image.id:
        return provider
    return replace(provider, ca_targets=tuple(certifi_files(cfg.docker_host, manifest.image.id, manifest.run_label)))


def _standin_route(cfg: RunConfig):
    """Test beds only (--key-in-agent with --provider-standin-address): a stand-in serving as the provider."""
    if not cfg.provider.provider_standin_address or cfg.provider.provider_standin_bundle is None:
        return None
    from ..gateway.tls import PROVIDER_HOST

    return ProviderRoute(
        host=PROVIDER_HOST,
        address=cfg.provider.provider_standin_address,
        ca_bundle=cfg.provider.provider_standin_bundle,
    )


def _configured(
    cfg: RunConfig,
    pre: Preflight,
    manifest: RunManifest,
    bench_copy: Path,
    gateway,
    provider=None,
    qualified: bool = False,
) -> int:
    """From the run config file on: written, then the runner started under custody (or not, by mode)."""
    run_root = cfg.run_root
    selection = manifest.selection
    run_config = build_run_config(cfg)
    replace_atomic(bench_copy / CONFIGS / RUN_CONFIG, run_config.to_json())
    manifest.official_command = ["bash", "run_parallel.sh", str(cfg.selection.concurrency), *selection.task_ids]
    manifest.outcome = RunOutcome.RUNNING
    write_manifest(run_root, manifest)

    if not selection.task_ids:
        # Never start the runner without task arguments: upstream would then run all 496.

        write_index(run_root, build_index(run_root, live=False, interruption_cause="nothing_remaining"))
        manifest.outcome = RunOutcome.NOTHING_REMAINING
        print(f"cowork-adapter: nothing remains to run; every selected task is settled in {selection.resume_from}.")
        return ExitCode.OK
    if cfg.dry_run:
        image_id = reached(reached(manifest.image, "the run's image").id, "the run's image ID")
        manifest.outcome = RunOutcome.DRY_RUN
        print(f"cowork-adapter: dry run recorded in {RunRoot(run_root).manifest} (image {image_id[:19]}).")
        return ExitCode.OK
    if cfg.probe:
        return run_probe(cfg, manifest, bench_copy)
    if not qualified:  # a gateway run's came before its gateway opened (_admitted)
        _qualify_environment(cfg, manifest, bench_copy)
    if not manifest.selection.task_ids:
        write_index(cfg.run_root, build_index(cfg.run_root, live=False, interruption_cause="environment_blocked"))
        manifest.outcome = RunOutcome.INCOMPLETE
        say("every remaining task is environment-blocked; nothing was run.")
        return ExitCode.FAILED
    from .run import run_in_custody
    from .spending import CampaignSpending, NoSpending, SharedCampaignSpending

    # Every run has the same custody; only its spending policy differs.
    if cfg.spends_nothing:  # oracle / nop: no key, meter or campaign
        if cfg.agent.engine == EngineKind.ORACLE.value:
            stage_groundtruth(bench_copy, manifest.selection.task_ids)
        return run_in_custody(cfg, manifest, bench_copy, NoSpending(cfg))
    key = reached(pre.key, "the provider key (paid_preflight)")
    spending = SharedCampaignSpending(cfg, key) if cfg.hosts.shared_campaign else CampaignSpending(cfg, key)
    return run_in_custody(cfg, manifest, bench_copy, spending, key=key, gateway=gateway, provider=provider)


def _qualify_environment(cfg: RunConfig, manifest: RunManifest, bench_copy: Path) -> None:
    """Before any charge: every MCP server the selection needs must start and list its tools.

    A needed failing server refuses the run; with --accept-environment-blocked its tasks stay in
    the denominator as environment_blocked, but are not handed to the runner (a certain failure
    should cost no model money).
    """
    inventory = inventory_for_run(cfg, manifest, bench_copy)
    enforce_inventory(cfg, manifest, inventory)
    blocked = set(inventory.get("blocked_tasks") or {})
    if blocked:
        manifest.selection.task_ids = [t for t in manifest.selection.task_ids if t not in blocked]
        manifest.official_command = [
            "bash",
            "run_parallel.sh",
            str(cfg.selection.concurrency),
            *manifest.selection.task_ids,
        ]
        write_manifest(cfg.run_root, manifest)


def _image(cfg: RunConfig, pre: Preflight, manifest: RunManifest) -> ImageIdentity:
    built = ResolvedConfig.of(cfg)
    req = ImageRequest(
        tag=pre.image_tag,
        base_image=built.base_image,
        seed_dir=cfg.repo_dir,
        seed_head=pre.seed_head,
        bench_commit=pre.bench_commit,
        base_image_id=pre.base_image_id,
    )
    wheels = []
    made = False
    if not pre.image_present:
        # Another launcher may be building the same tag: wait for it, then use its image if it fits.
        with build_lock(req.tag):
            if not _usable_image(cfg, req.tag, pre.seed_head, pre.bench_commit, pre.base_image_id):
                wheels = build_derived_image(
                    cfg.docker_host,
                    req,
                    RunRoot(cfg.run_root).image_context,
                    RunRoot(cfg.run_root).image_build_log,
                    manifest.run_label,
                    lambda: disk_refusal(built.resource_root, cfg.disk),
                    progress=sys.stderr,
                )
                made = True
    return resolve_image(cfg.docker_host, req, built=made, wheels=wheels)


def _selection(cfg: RunConfig, pre: Preflight, image: ImageIdentity) -> Selection:
    if not cfg.selection.resume_from:
        ids = pre.explicit if pre.explicit is not None else pre.dataset
        return Selection(task_ids=list(ids), selection_task_ids=list(ids), explicit=pre.explicit is not None)

    plan = resolve_ancestry(
        list(cfg.selection.resume_from),
        current_applied_config=cfg.applied_config(),
        seed_head=pre.seed_head,
        bench_commit=pre.bench_commit,
        image_id=image.id,
        explicit_selection=pre.explicit,
        dataset_ids=pre.dataset,
    )
    return Selection(
        task_ids=list(plan.remaining),
        selection_task_ids=list(plan.selection_task_ids),
        explicit=pre.explicit is not None,
        resume_from=[str(a) for a in plan.ancestors],
        resume_generation=plan.generation,
        settled_elsewhere=sorted(plan.settled),
    )
