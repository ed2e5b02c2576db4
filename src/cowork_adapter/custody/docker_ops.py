"""docker-py operations of custody: list, remove and verify a run's resources by its exact label.

Nothing without the run's exact label is ever touched, not even by name: every listing asks the
daemon for `label=org.cowork-adapter.run=<label>` and then re-checks the value client-side.
A listing that fails is never taken as "empty": it raises CustodyError.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from requests.exceptions import RequestException

from ..errors import CustodyError, Refusal
from ..host.daemon import docker_client
from .creations import CREATION_WAIT_SEC, settle
from .labels import RUN_LABEL_KEY, label_filter

DEFAULT_TIMEOUT_SEC = 30
# A removal the daemon already runs (the runner's EXIT trap, a restarted daemon's own cleanup) is
# waited for this long before the relist judges; the relist stays the only proof.
IN_PROGRESS_WAIT_SEC = 30.0
# In-flight creations are waited for in rounds this long, each followed by another removal pass:
# what a creation made is on the daemon before its lock is released (a foreground `docker run`
# holds its lock until its container is removed, a `run -d` until the start answers), so a short
# round removes it as soon as it lands instead of after a long sleep; a round costs one listing.
CREATION_ROUND_SEC = 0.25
# Removals of one kind run in this many threads at most; the client's connection pool is as large,
# so no thread waits for a connection and none is opened past the pool.
REMOVAL_WORKERS = 16
# How often a removal another party runs is checked for its end.
IN_PROGRESS_POLL_SEC = 0.1
# Failures of the transport or the daemon: each one leaves the state unknown.
DOCKER_FAILURES = (DockerException, RequestException, OSError)

Resource = tuple[str, str]  # (id, name)
Log = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Labelled:
    """The run's containers (all states), networks and volumes, as (id, name) pairs.

    A volume's id is its name (the daemon has no other handle for it).
    """

    containers: list[Resource] = field(default_factory=list)
    networks: list[Resource] = field(default_factory=list)
    volumes: list[Resource] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.containers and not self.networks and not self.volumes

    def names(self) -> list[str]:
        """Every resource as `kind name`, for a sentence an operator reads."""
        return (
            [f"container {n}" for _, n in self.containers]
            + [f"network {n}" for _, n in self.networks]
            + [f"volume {n}" for _, n in self.volumes]
        )


@dataclass(frozen=True)
class CleanupReport:
    """What cleanup removed; `errors` holds every removal error, logged even when the end is clean."""

    removed_containers: list[Resource]
    removed_networks: list[Resource]
    errors: list[dict[str, Any]]
    already_gone: int  # removals answered "not found" (a competing cleanup), proven by the relist
    removed_volumes: list[Resource] = field(default_factory=list)

    def names(self) -> list[str]:
        """Every removed resource as `kind name` (as Labelled.names)."""
        return Labelled(self.removed_containers, self.removed_networks, self.removed_volumes).names()


def client(docker_host: str, timeout: int = DEFAULT_TIMEOUT_SEC) -> docker.DockerClient:
    """A client of exactly this daemon with a timeout on every call; raises CustodyError if it cannot connect."""
    try:
        return docker_client(docker_host, timeout, pool=REMOVAL_WORKERS)
    except DOCKER_FAILURES as err:
        raise CustodyError(f"cannot reach the Docker daemon at {docker_host}: {_brief(err)}") from err


def list_labelled(docker_host: str, run_label: str, *, timeout: int = DEFAULT_TIMEOUT_SEC) -> Labelled:
    """The run's resources. Raises CustodyError on any failure: unknown is never empty."""
    dc = client(docker_host, timeout)
    try:
        return _list(dc.api, run_label)
    finally:
        dc.close()


def label_is_empty(docker_host: str, run_label: str, *, timeout: int = DEFAULT_TIMEOUT_SEC) -> bool:
    """True when the daemon holds nothing with the run's label; raises CustodyError when unknown."""
    return list_labelled(docker_host, run_label, timeout=timeout).empty


def cleanup_run(
    docker_host: str,
    run_label: str,
    log: Log,
    *,
    timeout: int = DEFAULT_TIMEOUT_SEC,
    before_remove: Callable[[Any, str, str], None] | None = None,
    creations: Path | None = None,
    creation_wait_sec: float = CREATION_WAIT_SEC,
) -> CleanupReport:
    """Force-remove the run's containers (with their anonymous volumes), then its networks and its
    labelled volumes, then prove by a fresh listing that none remains.

    `creations` is the run's in-flight creations directory (custody/creations.py): after each
    removal pass, every creation still in flight there is waited for (a few seconds at a time, up
    to `creation_wait_sec` in all) and, when any was found, what it made is removed by another
    pass; the proof waits until no creation is in flight.

    `before_remove(api, id, name)` runs before each container's removal (the resource reading of a
    container the runner left behind); whatever it raises is ignored, the removal always follows.

    A "not found" during removal (a competing cleanup) counts as success only because the relist
    is empty. Raises CustodyError when a listing fails (state unknown), a creation is still in
    flight at the bound, or anything survives.
    Every removal error goes through `log` as {"event": "cleanup_remove", ...}.
    """
    dc = client(docker_host, timeout)
    try:
        errors: list[dict[str, Any]] = []
        removed: dict[str, list[Resource]] = {"container": [], "network": [], "volume": []}
        gone = 0
        deadline = time.monotonic() + creation_wait_sec
        in_flight = 0
        while True:
            gone += _remove_pass(dc.api, run_label, log, before_remove, errors, removed)
            try:
                settled = settle(creations, min(deadline, time.monotonic() + CREATION_ROUND_SEC))
            except OSError as err:
                raise CustodyError(f"cannot read the run's in-flight creations in {creations}: {err}") from err
            if settled.in_flight and time.monotonic() >= deadline:
                log({"event": "cleanup_creations_in_flight", "run_label": run_label, "in_flight": settled.in_flight})
                raise CustodyError(
                    f"{settled.in_flight} container creation(s) of run {run_label} still in flight "
                    f"after {creation_wait_sec:g} s"
                )
            if not settled.ended and not settled.in_flight:
                break  # nothing landed since this pass listed: the relist below is the proof
            if settled.ended or settled.in_flight != in_flight:  # a line per change, not per short round
                log(
                    {
                        "event": "cleanup_creations_settled",
                        "run_label": run_label,
                        "ended": settled.ended,
                        "in_flight": settled.in_flight,
                    }
                )
            in_flight = settled.in_flight
        try:
            remaining = _list(dc.api, run_label)
        except CustodyError as err:
            log({"event": "cleanup_relist_failed", "run_label": run_label, "error": str(err)})
            raise CustodyError(f"cannot verify custody after cleanup: {err}") from err
        if not remaining.empty:
            log(
                {
                    "event": "cleanup_remaining",
                    "run_label": run_label,
                    "containers": [list(r) for r in remaining.containers],
                    "networks": [list(r) for r in remaining.networks],
                    "volumes": [list(r) for r in remaining.volumes],
                }
            )
            raise CustodyError(f"resources with run label {run_label} survived cleanup: {', '.join(remaining.names())}")
        return CleanupReport(removed["container"], removed["network"], errors, gone, removed["volume"])
    finally:
        dc.close()


def _remove_pass(
    api: Any,
    run_label: str,
    log: Log,
    before_remove: Callable[[Any, str, str], None] | None,
    errors: list[dict[str, Any]],
    removed: dict[str, list[Resource]],
) -> int:
    """List the run's resources and remove them, each kind in parallel (containers first: a network
    or volume cannot be removed while a container uses it); the number of those already gone or
    being removed.

    In parallel because a forced removal waits for the daemon to kill the container: one after the
    other, a run's dozen containers take seconds, all at once about the time of the slowest one.
    Killed mid-pass, this process leaves nothing half-owned: a removal the daemon accepted finishes
    there, the rest stays labelled for the next cleanup (the watchdog's, `clear`'s)."""
    gone = 0
    rest = None
    for kind, remove in (("container", _remove_container), ("network", _remove_network), ("volume", _remove_volume)):
        # The containers are listed alone and removed at once: the networks' and volumes' listings
        # (two more round trips to a daemon that may be slow under load) come while nothing of the
        # run can still run, and see what the container removals left.
        if kind == "container":
            items = _list_containers(api, run_label)
        else:
            if rest is None:
                rest = _list(api, run_label, containers=False)
            items = rest.networks if kind == "network" else rest.volumes
        hook = before_remove if kind == "container" else None

        # This kind's hook, remover and name bound now (the calls all end inside _in_parallel, but a
        # closure over the loop's variables would read whatever they hold when it runs)
        def remove_one(item: tuple[str, str], hook: Any = hook, remove: Any = remove, kind: str = kind) -> Any:
            return _read_and_remove(hook, remove, api, kind, *item)

        outcomes = _in_parallel(remove_one, items)
        for (ident, name), error in zip(items, outcomes, strict=True):
            if error is None:
                removed[kind].append((ident, name))
                continue
            log(error)  # here, in this thread: `log` need not be thread-safe
            errors.append(error)
            gone += error["outcome"] in ("not_found", "in_progress")
        if kind == "container":  # a network is freed only once a competing removal of its container is done
            _await_removals(
                api, [e["id"] for e in errors if e["outcome"] == "in_progress" and e["kind"] == "container"]
            )
    return gone


def _read_and_remove(
    before_remove: Callable[[Any, str, str], None] | None,
    remove: Callable[[Any, str], None],
    api: Any,
    kind: str,
    ident: str,
    name: str,
) -> dict[str, Any] | None:
    """One resource: its reading first (a container's accounting dies with it), then its removal."""
    if before_remove is not None:
        try:
            before_remove(api, ident, name)
        except Exception:  # noqa: BLE001 - a reading never stands in custody's way
            pass
    return _attempt(remove, api, kind, ident, name)


def _in_parallel(work: Callable[[Resource], Any], items: list[Resource]) -> list[Any]:
    """`work` of every item, in at most REMOVAL_WORKERS threads; results in the items' order."""
    if len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(len(items), REMOVAL_WORKERS), thread_name_prefix="custody-rm") as pool:
        return list(pool.map(work, items))


def image_identity(
    docker_host: str, ref: str, *, timeout: int = DEFAULT_TIMEOUT_SEC
) -> tuple[str, dict[str, str], list[str]]:
    """(immutable image Id, labels, repo digests) of a local image; Refusal("image") when missing or Id-less."""
    try:
        dc = docker_client(docker_host, timeout)
    except DOCKER_FAILURES as err:
        raise Refusal("image", f"Cannot reach the Docker daemon at {docker_host} to inspect image {ref}.") from err
    try:
        info = dc.api.inspect_image(ref)
    except (ImageNotFound, NotFound):
        raise Refusal("image", f"The image {ref} is not present on the Docker daemon.") from None
    except DOCKER_FAILURES as err:
        raise Refusal("image", f"Cannot inspect the image {ref}: {_brief(err)}.") from err
    finally:
        dc.close()
    image_id = info.get("Id") if isinstance(info, dict) else None
    if not image_id:
        raise Refusal("image", f"The image {ref} has no Id in its inspect result.")
    labels = ((info.get("Config") or {}).get("Labels")) or {}
    return image_id, dict(labels), list(info.get("RepoDigests") or [])


# ---------------------------------------------------------------- fail closed on a bypass


@dataclass(frozen=True)
class CustodyGap:
    """Evidence that the runner created something outside the shim (or the shim's records disagree)."""

    unlabelled_runner_containers: list[Resource]
    unlabelled_runner_networks: list[Resource]

    @property
    def breached(self) -> bool:
        return bool(self.unlabelled_runner_containers or self.unlabelled_runner_networks)


def custody_gap(docker_host: str, run_label: str, runner_pid: int, *, timeout: int = DEFAULT_TIMEOUT_SEC) -> CustodyGap:
    """Compare the daemon with the runner's naming: any `agent|eval|pg-<pid>-<hex>` container or
    `net-<pid>-<hex>` network without the run's exact label was created past the shim.

    Only reads; raises CustodyError when the daemon cannot be listed.
    """
    pattern = re.compile(rf"(agent|eval|pg|net)-{int(runner_pid)}-[0-9a-f]{{8}}\Z")
    dc = client(docker_host, timeout)
    try:
        containers = dc.api.containers(all=True)
        networks = dc.api.networks()
    except DOCKER_FAILURES as err:
        raise CustodyError(f"cannot list the daemon at {docker_host}: {_brief(err)}") from err
    finally:
        dc.close()
    loose_c = [
        (c["Id"], _container_name(c))
        for c in containers
        if pattern.match(_container_name(c)) and (c.get("Labels") or {}).get(RUN_LABEL_KEY) != run_label
    ]
    loose_n = [
        (n["Id"], n.get("Name", ""))
        for n in networks
        if pattern.match(n.get("Name", "")) and (n.get("Labels") or {}).get(RUN_LABEL_KEY) != run_label
    ]
    return CustodyGap(loose_c, loose_n)


# ---------------------------------------------------------------- internals


def _list(api: docker.APIClient, run_label: str, *, containers: bool = True) -> Labelled:
    """The run's resources; with containers=False its networks and volumes only."""
    wanted = label_filter(run_label)
    listed = _list_containers(api, run_label) if containers else []
    try:
        networks = api.networks(filters={"label": wanted})
        volumes = (api.volumes(filters={"label": wanted}) or {}).get("Volumes") or []
    except DOCKER_FAILURES as err:
        raise CustodyError(f"cannot list resources with run label {run_label}: {_brief(err)}") from err
    # The daemon filter is exact; the client-side check keeps that a property of this code too.
    return Labelled(
        containers=listed,
        networks=[(n["Id"], n.get("Name", "")) for n in networks if _owned(n, run_label)],
        volumes=[(v["Name"], v["Name"]) for v in volumes if _owned(v, run_label)],
    )


def _list_containers(api: docker.APIClient, run_label: str) -> list[Resource]:
    """The run's containers in every state (exact label, checked client-side too)."""
    try:
        containers = api.containers(all=True, filters={"label": label_filter(run_label)})
    except DOCKER_FAILURES as err:
        raise CustodyError(f"cannot list resources with run label {run_label}: {_brief(err)}") from err
    return [(c["Id"], _container_name(c)) for c in containers if _owned(c, run_label)]


def _owned(item: dict[str, Any], run_label: str) -> bool:
    return (item.get("Labels") or {}).get(RUN_LABEL_KEY) == run_label


def _container_name(item: dict[str, Any]) -> str:
    names: Iterable[str] = item.get("Names") or []
    return next((n.lstrip("/") for n in names), "")


def _remove_container(api: docker.APIClient, ident: str) -> None:
    api.remove_container(ident, v=True, force=True)


def _remove_network(api: docker.APIClient, ident: str) -> None:
    api.remove_network(ident)


def _remove_volume(api: docker.APIClient, name: str) -> None:
    api.remove_volume(name, force=True)


def _attempt(remove: Callable[[Any, str], None], api: Any, kind: str, ident: str, name: str) -> dict[str, Any] | None:
    """Run one removal: None when it worked, else the error record (outcome not_found, in_progress or failed)."""
    error: BaseException
    try:
        remove(api, ident)
        return None
    except NotFound as err:
        outcome, error = "not_found", err
    except APIError as err:
        outcome = "in_progress" if err.status_code == 409 and "already in progress" in str(err) else "failed"
        error = err
    except DOCKER_FAILURES as err:
        outcome, error = "failed", err
    return {
        "event": "cleanup_remove",
        "kind": kind,
        "id": ident,
        "name": name,
        "outcome": outcome,
        "error": _brief(error),
    }


def _await_removals(api: docker.APIClient, ids: list[str], timeout: float = IN_PROGRESS_WAIT_SEC) -> None:
    """Wait (bounded) until containers another removal is deleting are gone; the relist then judges."""
    deadline = time.monotonic() + timeout
    pending = list(ids)
    while pending and time.monotonic() < deadline:
        still = []
        for ident in pending:
            try:
                api.inspect_container(ident)
                still.append(ident)
            except NotFound:
                continue
            except DOCKER_FAILURES:
                return  # the daemon fails us: the relist will say what is known
        pending = still
        if pending:
            time.sleep(IN_PROGRESS_POLL_SEC)


def _brief(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}"
