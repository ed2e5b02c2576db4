"""The RunConfig fields a resumed or merged run may change: IDENTITY_EXEMPT.

Every other field is compared across runs (`RunConfig.applied_config`, runroot/identity.py).
"""

from __future__ import annotations

# The RunConfig fields that applied_config() leaves out, each with why: where the run is, what it may
# spend, which tasks it runs, how it is operated. Every other field changes the agent's world or its
# money and is compared across resumed and merged runs (runroot/identity.py); tests/unit/test_identity.py
# walks every field and fails on one that is in neither, so a new flag must be placed here or compared.
IDENTITY_EXEMPT: dict[str, str] = {
    "repo_dir": "where the seed is; its head is compared (manifest.seed.head)",
    "bench_root": "where the benchmark is; its commit and the clone's pin check are compared",
    "docker_host": "where containers run; the limits they get are compared",
    "resource_root": "where run roots go",
    "run_root": "where this run writes",
    "selection.tasks": "which tasks: the ledger compares tasks, not configurations",
    "selection.task_file": "which tasks",
    "selection.task_ids": "which tasks",
    "selection.resume_from": "the ancestry itself",
    "selection.concurrency": "how many tasks at once; each task's container limits are compared",
    "selection.trials": "how many times each task runs; each trial is a run root of its own, compared as one",
    "selection.task_validity": "which tasks the report also scores over",
    "money": "how much may be spent, and where it is counted; the per-task limit is compared",
    "hosts": "how several hosts share a campaign",
    "disk": "free-space reserves on the host",
    "provider.api_key_env": "which variable holds the key (never the key)",
    "provider.llm_gateway_host": "where the gateway listens; the route is compared (key_route)",
    "provider.llm_gateway": "compared as key_route",
    "provider.key_in_agent": "compared as key_route",
    "provider.provider_upstream_url": "a test bed's stand-in: compared as provider_standin",
    "provider.provider_standin_address": "a test bed's stand-in: compared as provider_standin",
    "provider.provider_standin_bundle": "a test bed's stand-in: compared as provider_standin",
    "image": "the image's immutable ID is compared (manifest.image.id)",
    "dry_run": "a dry run hands no task to the runner",
    "allow_dirty_seed": "a dirty seed's run is never reportable (manifest.seed.reportable)",
    "probe": "a probe hands no task to the runner",
    "accept_environment_blocked": "which tasks run; blocked tasks stay in every denominator",
    "inventory_from": "qualify's reuse of an inventory taken on the same image",
    "stop_path": "how a stop removes containers",
    "limits.agent_output_cap_mib": (
        "what of the agent exec's output reaches the runner's log (its Status line always does)"
    ),
}
