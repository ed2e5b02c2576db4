"""run_manifest.json: what a run was (inputs, identity, configuration) and how it ended.

Written at admission, checkpointed once configured, and finalised on every exit path. Recovery
compares `applied_config`, `seed.head`, `bench.commit` and `image.id` across the ancestry.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

import msgspec

from ..vocab import GatewayRoute, SubstituteKind
from .record import Finite, NonNegative, Record, RecordInvalid

MANIFEST_SCHEMA: Final = "cowork_adapter.run_manifest.v1"


class AdapterIdentity(Record):
    version: str
    commit: str | None = None  # the adapter's own git HEAD when installed from a checkout
    dirty: bool | None = None


class SeedIdentity(Record):
    repo_dir: str
    head: str | None = None
    dirty: bool | None = None
    status_sha256: str | None = None
    diff_sha256: str | None = None
    allow_dirty_seed: bool = False
    reportable: bool = True  # false for a dirty seed: a diagnostic run, never a published score


class BenchSubstitute(Record):
    """Content of the run's clone that is not the pinned blob: accepted only because the object
    store lacks that blob (the public snapshot's database seed); see pin_check."""

    path: str
    pinned_blob: str  # the blob id the pinned tree names, absent from the object store
    kind: SubstituteKind
    replacement: str | None = None  # the replace object's id (kind replace_object)
    sha256: str | None = None  # of the file the run's clone holds (set when the clone is verified)
    reason: str = "the pinned blob is missing from the object store"


class BenchVerification(Record):
    """What was compared with the pinned commit in the run's clone before anything started."""

    scope: str  # which paths: every path of the pinned tree
    files: NonNegative  # files whose bytes hash to the blob id the pinned tree names
    bytes: NonNegative
    substitutes: list[BenchSubstitute] = msgspec.field(default_factory=list)
    seconds: Finite = 0.0


class BenchIdentity(Record):
    root: str  # the operator's pinned checkout
    working_copy: str | None = None  # the run's own clone under <run_root>/bench
    commit: str | None = None
    expected_commit: str
    runner_sha256: str | None = None  # run_parallel.sh
    evaluator_sha256: dict[str, str] = msgspec.field(
        default_factory=dict
    )  # task -> evaluation/main.py; utils/... shared
    dataset_size: int | None = None
    # The checkout's git replacements (original -> replacement object), disclosed: a stand-in here
    # is not the published benchmark byte for byte.
    replaced_objects: dict[str, str] = msgspec.field(default_factory=dict)
    skip_worktree: dict[str, str] = msgspec.field(default_factory=dict)  # path -> sha256 of the file used


class WheelRecord(Record):
    filename: str
    sha256: str
    size: int


class ImageIdentity(Record):
    tag: str | None = None
    id: str | None = None  # the immutable ID the runner executes (IMAGE=<id>)
    base_image: str | None = None
    base_image_id: str | None = None
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    wheels: list[WheelRecord] = msgspec.field(default_factory=list)
    built: bool = False


class Selection(Record):
    task_ids: list[str] = msgspec.field(default_factory=list)  # what this invocation hands the runner
    selection_task_ids: list[str] = msgspec.field(default_factory=list)  # the whole selection it answers for
    explicit: bool = False
    resume_from: list[str] = msgspec.field(default_factory=list)  # every ancestor run root, resolved
    resume_generation: int = 0
    settled_elsewhere: list[str] = msgspec.field(default_factory=list)  # skipped: settled in an ancestor


class SharedRun(Record):
    """This launcher as one host of a shared campaign (--shared-campaign): its host run in the
    database, and the file its batch loop appends each claimed batch to (the ledger's selection)."""

    run_id: str
    host: str
    lease_sec: float
    claim_batch: int
    claimed_file: str  # relative to the run root


class AdmissionLimitsRecord(Record):
    """--shared-campaign's admission by load (admission.py): a batch is claimed only within these."""

    max_load_per_cpu: Finite
    min_mem_available_bytes: NonNegative
    max_daemon_ping_sec: Finite


class Limits(Record):
    cpus: float
    memory_bytes: int
    memory_swap_bytes: int
    pids_limit: int
    # What the daemon had when the limits were fitted (docker info NCPU, MemTotal): an unset --cpus
    # is the smaller of 4 and daemon_cpus, an unset --memory the smaller of 16 GiB and daemon_memory_bytes.
    daemon_cpus: int | None = None
    daemon_memory_bytes: int | None = None
    # Issue 37 (custody/agent_exec.py, custody/container_caps.py); None in a manifest from before.
    agent_exec_bound_sec: float | None = None  # the shim ends one agent exec past this
    agent_output_cap_bytes: int | None = None  # what of its output reaches the runner's log
    container_log_max_bytes: int | None = None  # json-file max-size per container (max-file 2)
    container_cap_add: list[str] | None = None  # capabilities kept by --container-cap-add
    task_cap_drop: list[str] | None = None  # what agent, eval and helper containers lose
    pg_cap_drop: list[str] | None = None  # what the task's PostgreSQL loses
    # Issue 38 (host/daemon_kind.py): the daemon's kind (vocab.DaemonKind), the limits it could not enforce
    # (memory, cpu, pids; [] when it enforced them all), and --accept-unenforced-limits. None: from before.
    daemon_kind: str | None = None
    unenforced_limits: list[str] | None = None
    accept_unenforced_limits: bool | None = None


class MeterCadence(Record):
    """The key meter a run read and how often (run/supervisor.py's cadence)."""

    url: str | None = None
    blindness_sec: float | None = None
    poll_sec: float | None = None
    read_slice_sec: float | None = None
    retry_sec: float | None = None


class Budgets(Record):
    """The money and disk bounds of one invocation (run/launch.budget_record): each key is its flag's
    name, as in RunConfig. Every field has a default: a manifest written before this record was typed
    (a plain mapping with these keys, some of them possibly absent) still reads."""

    budget_usd: float | None = None
    campaign_budget_usd: float | None = None
    budget_reserve_usd: float | None = None
    prior_spend_usd: float | None = None
    per_task_cost_usd: float | None = None
    min_key_usd: float | None = None
    meter: MeterCadence | None = None
    min_free_gib: float | None = None
    min_root_free_gib: float | None = None
    dump_max_gib: float | None = None
    dump_max_entries: int | None = None
    dump_max_depth: int | None = None
    resource_root: str | None = None
    api_key_env: str | None = None


class Refusal(Record):
    stage: str
    sentence: str


class ClearedRecord(Record):
    """What `cowork-adapter clear` did to finish a dead run's custody (written once it is done)."""

    at: str
    operator_note: str
    docker_host: str
    processes: str  # the proof that the launcher, watchdog and runner group are gone, as one sentence
    removed_containers: list[str] = msgspec.field(default_factory=list)  # names
    removed_networks: list[str] = msgspec.field(default_factory=list)
    removed_volumes: list[str] = msgspec.field(default_factory=list)
    label_empty: bool  # a fresh listing after removal found nothing with the run's label
    agent_env_removed: bool  # the key file existed and was deleted
    tmpdir_removed: bool
    ledger: str  # "rebuilt: N rows" or "not rebuilt: why"
    # settled | no_campaign_file | no_active_run | active_run_is_another_run | unsettled (the meter or
    # the campaign file failed: the active run is kept for the next `clear`)
    campaign: str


class GatewayRecord(Record):
    """Where the run's model gateway listened, what it forwarded to, what it changed (the default
    OpenRouter route, or --llm-gateway: `route`; a record from before the default route is the latter)."""

    container_url: str  # the base URL agent containers were given (with /v1)
    upstream_url: str  # the provider's base URL the gateway forwarded to
    routed_model: str  # the model id the engine was configured with
    disclosures: list[str] = msgspec.field(default_factory=list)
    route: GatewayRoute = GatewayRoute.OPENAI_COMPATIBLE
    listen_address: str | None = (
        None  # where it listened (host:port); the default route's containers resolve the provider's host to it
    )
    requests: int | None = None  # filled in at the end of the run
    spent_usd: float | None = None  # the sum of the provider's cost figures
    unknown_cost_requests: int | None = None
    # What the gateway's fences counted the unknown-cost requests at (its pessimistic price), apart
    # from spent_usd; the per-request price; refusals and connections that left no log row.
    assumed_usd: float | None = None
    unknown_cost_price_usd: float | None = None
    unlogged_refusals: int | None = None
    allowance_usd: float | None = None
    fence_reason: str | None = None


class RunManifest(Record, rename={"schema_": "schema"}):
    # campaign_run_id: written until the host run's id had one place, shared_run.run_id (which a
    # campaign's report matches a copied run root by); an older manifest carrying both still reads.
    retired_fields: ClassVar[tuple[str, ...]] = ("campaign_run_id",)

    schema_: Literal["cowork_adapter.run_manifest.v1"] = MANIFEST_SCHEMA
    run_root: str
    run_label: str
    created_at: str
    updated_at: str
    argv: list[str]
    adapter: AdapterIdentity
    seed: SeedIdentity | None = None
    bench: BenchIdentity | None = None
    # The run's benchmark clone checked against the pinned commit, before the image or any container
    # (None: not reached, or refused; the refusal says where it differs).
    bench_verified: BenchVerification | None = None
    image: ImageIdentity | None = None
    # The verified clone's folders every eval container mounts read-only over the image's copy
    # (`<clone>/utils:/workspace/utils:ro`): the evaluator code that ran is this clone's (issue 36).
    # None: a run from before it, whose eval containers ran the image's own copy.
    eval_code_mounts: list[str] | None = None
    engine: str = "ouroboros"
    selection: Selection = msgspec.field(default_factory=Selection)
    applied_config: dict[str, Any] = msgspec.field(default_factory=dict)
    limits: Limits | None = None
    budgets: Budgets = msgspec.field(default_factory=Budgets)  # invocation/campaign bounds, meter cadence
    official_command: list[str] = msgspec.field(default_factory=list)
    bash_env: str | None = None
    dry_run: bool = False
    probe: str | None = None
    inventory: dict[str, Any] | None = None
    outcome: str = "started"
    stop_reason: str | None = None
    stop_causes: list[str] = msgspec.field(default_factory=list)
    runner_exit_code: int | None = None
    exit_code: int | None = None
    finished_at: str | None = None
    refusal: Refusal | None = None
    error: dict[str, str] | None = None  # {type, message} for a crash, message scrubbed and capped
    campaign_file: str | None = None
    # --campaign-db (a URL without password) and --campaign-name, when the campaign is in PostgreSQL.
    campaign_db: str | None = None
    campaign_name: str | None = None
    campaign_settlement: str | None = None
    docker_host: str | None = None  # the daemon the run used (`clear` defaults to it)
    # The random nonce hashed with the run root into run_label (custody/labels.py); None in a run
    # root from before it, whose run_label is the path's alone.
    run_nonce: str | None = None
    cleared: ClearedRecord | None = None  # set by `cowork-adapter clear` on a dead run
    # The qualify table given with --task-validity (copied into the run root as task_validity.json).
    task_validity: dict[str, str] | None = None  # {source, sha256}
    llm_gateway: GatewayRecord | None = None
    shared_run: SharedRun | None = None
    # --shared-campaign only: the admission limits of its flags, as run (its batch loop reads its own
    # copy in shared_runner.json, a BatchRunnerConfig).
    admission: AdmissionLimitsRecord | None = None

    @classmethod
    def upgrade(cls, raw: dict[str, Any]) -> dict[str, Any]:
        run_id = raw.pop("campaign_run_id", None)
        shared = raw.get("shared_run")
        if run_id is not None and (shared.get("run_id") if isinstance(shared, dict) else None) != run_id:
            raise RecordInvalid(
                f"the manifest's campaign_run_id {run_id!r} is not its shared_run's run_id; "
                "it cannot be read as one host run"
            )
        return raw
