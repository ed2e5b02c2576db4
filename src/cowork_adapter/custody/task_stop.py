"""Stop one task's containers, and only its: the run's exact label and the task's runner digest.

Used when a task's dump passed a bound while it ran (runroot/dump_meter.py): its agent (and its
PostgreSQL) are killed so it writes no more, and every sibling runs on. The runner names each
container of a task `<role>-<pid>-<digest>` (bash_env.runner_digest: md5 of the task id), and the
shim admits only containers with the run's label, so the pair names exactly that task's
containers. Killed, not removed: the runner sees its task end as after any agent failure and its
own trap removes them; the run's final cleanup proves them gone in any case.
"""

from __future__ import annotations

from ..errors import CustodyError
from .bash_env import runner_digest
from .docker_ops import DOCKER_FAILURES, client
from .labels import RUN_LABEL_KEY, label_filter


def stop_task_containers(docker_host: str, run_label: str, task: str, *, timeout: int = 30) -> tuple[int, str | None]:
    """(containers killed, None) or (killed so far, the error in one line). Never raises."""
    suffix = "-" + runner_digest(task)
    killed = 0
    try:
        dc = client(docker_host, timeout)
    except CustodyError as exc:
        return 0, str(exc)[:300]
    try:
        listed = dc.api.containers(filters={"label": label_filter(run_label), "status": "running"})
        for item in listed:
            names = [n.lstrip("/") for n in item.get("Names") or []]
            if (item.get("Labels") or {}).get(RUN_LABEL_KEY) != run_label or not any(n.endswith(suffix) for n in names):
                continue
            try:
                dc.api.kill(item["Id"])
                killed += 1
            except DOCKER_FAILURES as exc:  # gone meanwhile, or the daemon refused: say so, go on
                if "No such container" not in str(exc) and "is not running" not in str(exc):
                    return killed, f"{type(exc).__name__}: {str(exc)[:200]}"
    except DOCKER_FAILURES as exc:
        return killed, f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        dc.close()
    return killed, None
