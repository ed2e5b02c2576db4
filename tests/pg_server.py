"""A real PostgreSQL server for tests: the test bed's postgres:15 image, one container per test module.

Labelled with this server's own id and removed by that exact label only (never by name or image);
reached from the host at the container's address on the test bed's bridge.
"""

from __future__ import annotations

import time
import uuid

import docker
import psycopg2
import pytest

IMAGE = "postgres:15"
LABEL = "org.cowork-adapter.test.pgserver"
PASSWORD = "multihost-test"


class PgServer:
    def __init__(self, docker_host: str) -> None:
        self.client = docker.DockerClient(base_url=docker_host, timeout=120)
        self.id = uuid.uuid4().hex[:12]
        self.container = self.client.containers.run(
            IMAGE,
            detach=True,
            labels={LABEL: self.id},
            environment={"POSTGRES_PASSWORD": PASSWORD, "POSTGRES_DB": "campaign"},
        )
        self.wait_ready()

    @property
    def url(self) -> str:
        self.container.reload()
        address = next(iter(self.container.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
        return f"postgresql://postgres:{PASSWORD}@{address}:5432/campaign"

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg2.connect(self.url, connect_timeout=3).close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"PostgreSQL {self.id} did not accept connections in {timeout} s:\n"
                        + self.container.logs(tail=20).decode(errors="replace")
                    ) from None
                time.sleep(0.5)

    def restart(self) -> None:
        self.container.restart(timeout=10)
        self.wait_ready()

    def fresh_database(self, name: str) -> str:
        """A new empty database on this server: each test its own schema history."""
        conn = psycopg2.connect(self.url)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()
        return self.url.rsplit("/", 1)[0] + "/" + name

    def remove(self) -> None:
        for container in self.client.containers.list(all=True, filters={"label": f"{LABEL}={self.id}"}):
            container.remove(force=True, v=True)
        self.client.close()


# The module fixture both PostgreSQL test modules import: one server a module, removed by its label.
@pytest.fixture(scope="module")
def server(docker_host: str):
    pg = PgServer(docker_host)
    try:
        yield pg
    finally:
        pg.remove()
