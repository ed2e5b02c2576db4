"""What the run's manifest records of this invocation's bounds: money and disk (Budgets), the daemon's kind
and the limits it cannot enforce, and the shim's hardening. Pure: built from the config and facts already read.
"""

from __future__ import annotations

from typing import Any

from ..campaign.observe import POLL_SEC, READ_SLICE_SEC, RETRY_SEC
from ..config import RunConfig
from ..custody.bash_env import Hardening
from ..host.daemon_kind import DaemonFacts
from ..schemas.manifest import Budgets, MeterCadence


def budget_record(cfg: RunConfig) -> Budgets:
    """The money and disk bounds of this invocation, as the manifest records them."""
    money, disk = cfg.money, cfg.disk
    return Budgets(
        budget_usd=money.budget_usd,
        campaign_budget_usd=money.campaign_budget_usd,
        budget_reserve_usd=money.budget_reserve_usd,
        prior_spend_usd=money.prior_spend_usd,
        per_task_cost_usd=cfg.agent.per_task_cost_usd,
        min_key_usd=money.min_key_usd,
        meter=MeterCadence(
            url=money.meter_url,
            blindness_sec=money.meter_blindness_sec,
            poll_sec=POLL_SEC,
            read_slice_sec=READ_SLICE_SEC,
            retry_sec=RETRY_SEC,
        ),
        min_free_gib=disk.min_free_gib,
        min_root_free_gib=disk.min_root_free_gib,
        dump_max_gib=disk.dump_max_gib,
        dump_max_entries=disk.dump_max_entries,
        dump_max_depth=disk.dump_max_depth,
        resource_root=str(cfg.resource_root),
        api_key_env=cfg.provider.api_key_env,
    )


def daemon_record(cfg: RunConfig, facts: DaemonFacts | None) -> dict[str, Any]:
    """The manifest's limits.daemon_kind, unenforced_limits and accept_unenforced_limits."""
    if facts is None:
        return {}
    return {
        "daemon_kind": facts.kind.value,
        "unenforced_limits": list(facts.unenforced),
        "accept_unenforced_limits": cfg.limits.accept_unenforced_limits,
    }


def hardening_record(cfg: RunConfig) -> dict:
    """The manifest's record of the shim's issue-37 bounds (the same Hardening run.py installs)."""
    h = Hardening.for_run(cfg.agent.task_timeout, cfg.limits.agent_output_cap_mib, cfg.limits.container_cap_add)
    return {
        "agent_exec_bound_sec": h.agent_bound_sec,
        "agent_output_cap_bytes": h.agent_output_cap_bytes,
        "container_log_max_bytes": h.log_max_bytes,
        "container_cap_add": list(h.cap_keep),
        "task_cap_drop": h.dropped("agent"),
        "pg_cap_drop": h.dropped("pg"),
    }
