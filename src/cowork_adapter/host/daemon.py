"""The one place a Docker client is made, and the daemon facts more than one command reads.

Every client is of exactly the daemon it names (never the environment's DOCKER_HOST by accident) and
carries a timeout on every call, so a daemon that stops answering is an error, not a hang. `docker`
(and `requests` under it) is imported here on first use: `cowork-adapter --help` must not pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import docker

DOCKER_TIMEOUT_SEC = 30


def docker_client(
    docker_host: str, timeout: float = DOCKER_TIMEOUT_SEC, *, pool: int | None = None
) -> docker.DockerClient:
    """A client of the daemon at `docker_host`; `pool` widens its connection pool for parallel calls."""
    import docker

    extra: dict[str, Any] = {"max_pool_size": pool} if pool else {}
    # docker passes the timeout to requests, which takes a float; the stubs say int.
    return docker.DockerClient(base_url=docker_host, timeout=timeout, **extra)  # type: ignore[arg-type]


def docker_failures() -> tuple[type[BaseException], ...]:
    """What a call to a daemon that is absent, slow or refusing raises."""
    from docker.errors import DockerException
    from requests.exceptions import RequestException

    return (DockerException, RequestException, OSError)


def docker_version(docker_host: str) -> dict[str, Any]:
    """The daemon's version record; raises when it does not answer."""
    client = docker_client(docker_host)
    try:
        return client.version()
    finally:
        client.close()


def daemon_info(docker_host: str) -> dict[str, Any]:
    """The daemon's `docker info` record (NCPU, MemTotal, ...); raises when it does not answer."""
    client = docker_client(docker_host)
    try:
        return client.info()
    finally:
        client.close()


def image_present(docker_host: str, ref: str) -> dict[str, Any] | None:
    """The image's inspect record, None when absent (never pulls)."""
    from docker.errors import ImageNotFound

    client = docker_client(docker_host)
    try:
        return client.api.inspect_image(ref)
    except ImageNotFound:
        return None
    finally:
        client.close()
