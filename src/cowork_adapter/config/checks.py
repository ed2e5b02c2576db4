"""The checks of RunConfig that read more than one field (or a file): money flags with a reference
engine, a shared campaign's flags, the admission limits, --campaign-db's URL, --task-validity's table.
Each returns or raises the one sentence that refuses the combination.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from ..campaign.db_url import PASSWORD_SENTENCE, password_part
from ..defaults import (
    DEFAULT_MAX_DAEMON_PING_SEC,
    DEFAULT_MAX_LOAD_PER_CPU,
    DEFAULT_MIN_MEM_AVAILABLE_BYTES,
    GIB,
    InvalidFlag,
    flag_name,
)
from ..errors import Refusal
from ..schemas.validity import read_validity
from .groups import MONEY_FIELDS, Hosts, Money, Selection


def not_below(reserve: float | None, ceiling: float | None) -> bool:
    """True when both are known and the reserve leaves nothing of the ceiling to spend."""
    return reserve is not None and ceiling is not None and reserve >= ceiling


def check_task_validity(path: Path, bench_commit: str) -> None:
    """--task-validity must be qualify's table for this benchmark commit."""
    table = read_validity(path)
    if table.bench_commit != bench_commit:
        raise Refusal(
            "flags",
            f"--task-validity {path} qualifies benchmark commit {table.bench_commit[:12]}, "
            f"not this run's {bench_commit[:12]}; qualify this commit first.",
        )


def reference_money_sentence(engine: str, field: str) -> str:
    return f"--engine {engine} spends nothing and takes no campaign, budget or meter flag; remove {flag_name(field)}."


def refuse_money_flags(engine: str, argv: Sequence[str]) -> None:
    """A money flag on the command line with a reference engine is refused, even at its default value."""
    names = {flag_name(f): f for f in MONEY_FIELDS}
    for element in argv:
        field = names.get(element.split("=", 1)[0])
        if field is not None:
            raise Refusal("flags", reference_money_sentence(engine, field))


def check_shared_flags(hosts: Hosts, money: Money, selection: Selection) -> str | None:
    """The one sentence that refuses a --shared-campaign combination, or None."""
    if not hosts.shared_campaign:
        if hosts.claim_batch != 2 or hosts.host_lease_sec != 60.0:
            return "--claim-batch and --host-lease-sec are only meaningful with --shared-campaign."
        if (hosts.max_load_per_cpu, hosts.min_mem_available_gib, hosts.max_daemon_ping_sec) != (
            DEFAULT_MAX_LOAD_PER_CPU,
            DEFAULT_MIN_MEM_AVAILABLE_BYTES / GIB,
            DEFAULT_MAX_DAEMON_PING_SEC,
        ):
            return (
                "--max-load-per-cpu, --min-mem-available-gib and --max-daemon-ping-sec are only meaningful "
                "with --shared-campaign."
            )
        return None
    if money.campaign_db is None:
        return "--shared-campaign needs --campaign-db: the hosts share the campaign through that database."
    if selection.resume_from:
        return "--shared-campaign takes its tasks from the campaign's claims, so --resume-from does not apply."
    if not 1 <= hosts.claim_batch <= 1000:
        return f"--claim-batch must be 1 to 1000, not {hosts.claim_batch}."
    if not (math.isfinite(hosts.host_lease_sec) and 8 <= hosts.host_lease_sec <= 3600):
        return f"--host-lease-sec must be 8 to 3600 seconds, not {hosts.host_lease_sec:g}."
    return check_admission_flags(hosts)


def check_admission_flags(hosts: Hosts) -> str | None:
    """The one sentence that refuses an admission limit, or None. The upper bounds only catch a
    typo (a unit slip); the daemon watch calls the daemon lost long before a 600 s ping."""
    if not (math.isfinite(hosts.max_load_per_cpu) and 0 < hosts.max_load_per_cpu <= 1000):
        return f"--max-load-per-cpu must be more than 0 and at most 1000, not {hosts.max_load_per_cpu:g}."
    if not (math.isfinite(hosts.min_mem_available_gib) and 0 <= hosts.min_mem_available_gib <= 65536):
        return f"--min-mem-available-gib must be 0 to 65536 GiB, not {hosts.min_mem_available_gib:g}."
    if not (math.isfinite(hosts.max_daemon_ping_sec) and 0 < hosts.max_daemon_ping_sec <= 600):
        return f"--max-daemon-ping-sec must be more than 0 and at most 600 seconds, not {hosts.max_daemon_ping_sec:g}."
    return None


def check_campaign_db_url(url: str) -> None:
    """--campaign-db: a postgresql:// URL naming a database, with no password in it (a password in
    argv is visible to every user of the host, like a provider key would be)."""
    try:
        parts = urlsplit(url)
        has_password = password_part(url) is not None
    except ValueError:
        raise InvalidFlag("--campaign-db is not a valid URL.") from None
    if parts.scheme not in ("postgresql", "postgres"):
        raise InvalidFlag("--campaign-db must be a postgresql:// URL.")
    if has_password:
        raise InvalidFlag(PASSWORD_SENTENCE)
    if not parts.path.strip("/"):
        raise InvalidFlag("--campaign-db must name a database (postgresql://HOST[:PORT]/DATABASE).")
