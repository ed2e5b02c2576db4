"""Doctor's verdict lines and its probes of the host and the daemon (the only I/O doctor does).

Apart from the checks (ops/doctor.py, ops/doctor_host.py) so each probe stays a module-level function
a test can replace one at a time, and so the host-only doctor needs none of the run's checks.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass

from ..host.daemon import docker_client
from ..host.disk import free_bytes  # noqa: F401 (doctor and doctor_host read free space through here)

GIB = 1 << 30
PROBE_WAIT_SEC = 90
METER_TIMEOUT_SEC = 5.0
DOCTOR_LABEL_KEY = "org.cowork-adapter.doctor"
POSTGRES_IMAGE = "postgres:15"
PROBE_MEMORY = "64m"
PROBE_ALLOC_MIB = 200
# Touches every byte, so the pages are really charged to the container's memory cgroup.
PROBE_SCRIPT = f"b = b'\\x01' * ({PROBE_ALLOC_MIB} << 20); print(len(b))"
OOM_EXIT = 137
MIN_BASH = (4, 4)
HOST_TOOLS = ("rsync", "mkfifo", "md5sum", "awk", "timeout", "python3", "docker", "git")

OK, FAIL, SKIP = "OK", "FAIL", "SKIP"


@dataclass(frozen=True)
class CheckResult:
    name: str
    verdict: str  # OK | FAIL | SKIP
    sentence: str
    fix: str | None = None

    def line(self) -> str:
        text = f"{self.verdict:<5} {self.name}: {self.sentence}"
        return text + (f" — fix: {self.fix}" if self.fix and self.verdict == FAIL else "")


def ok(name: str, sentence: str) -> CheckResult:
    return CheckResult(name, OK, sentence)


def fail(name: str, sentence: str, fix: str) -> CheckResult:
    return CheckResult(name, FAIL, sentence, fix)


def skip(name: str, sentence: str) -> CheckResult:
    return CheckResult(name, SKIP, sentence)


# ---------------------------------------------------------------------------------------------
# Probes: the only I/O. Module-level so tests can replace one at a time.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeOutcome:
    exit_code: int | None
    oom_killed: bool
    memory_limit: int | None


def limit_probe(docker_host: str, image: str) -> ProbeOutcome:
    """Run `image` held to 64 MiB (no swap) allocating 200 MiB; report how it ended. Always removed."""
    client = docker_client(docker_host)
    token = secrets.token_hex(6)
    container = None
    try:
        container = client.containers.run(
            image,
            entrypoint=["python3", "-c", PROBE_SCRIPT],
            command=[],
            detach=True,
            name=f"cowork-doctor-{token}",
            labels={DOCTOR_LABEL_KEY: token},
            mem_limit=PROBE_MEMORY,
            memswap_limit=PROBE_MEMORY,
            network_disabled=True,
            pids_limit=64,
        )
        result = container.wait(timeout=PROBE_WAIT_SEC)
        container.reload()
        state = container.attrs.get("State") or {}
        memory = (container.attrs.get("HostConfig") or {}).get("Memory")
        return ProbeOutcome(int(result.get("StatusCode")), bool(state.get("OOMKilled")), memory)
    finally:
        try:
            if container is not None:
                container.remove(force=True)
            else:
                # A creation that failed half-way may still have left the container: remove it by its label.
                for leftover in client.containers.list(all=True, filters={"label": f"{DOCTOR_LABEL_KEY}={token}"}):
                    leftover.remove(force=True)
        finally:
            client.close()


def bash_version() -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            ["bash", "-c", 'printf "%s.%s" "${BASH_VERSINFO[0]}" "${BASH_VERSINFO[1]}"'],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        major, minor = out.stdout.strip().split(".")[:2]
        return int(major), int(minor)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def which(tool: str) -> str | None:
    return shutil.which(tool)


def meter_headroom(meter_url: str, key: str):
    """The key's headroom (campaign.meter.Headroom) and its current usage; raises MeterError."""
    from ..campaign.meter import KeyMeter

    meter = KeyMeter(meter_url, key, timeout=METER_TIMEOUT_SEC)
    usage = meter.read_usage(timeout=METER_TIMEOUT_SEC).usage
    return meter.headroom(timeout=METER_TIMEOUT_SEC), usage


def _brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]


def host_tools_check() -> CheckResult:
    """bash >= 4.4 and the tools the benchmark's runner calls, on PATH."""
    name = "host tools"
    missing = [tool for tool in HOST_TOOLS if which(tool) is None]
    version = bash_version()
    problems = []
    if version is None:
        problems.append("bash did not report its version")
    elif version < MIN_BASH:
        problems.append(f"bash is {version[0]}.{version[1]}, older than {MIN_BASH[0]}.{MIN_BASH[1]}")
    if missing:
        problems.append("missing on PATH: " + ", ".join(missing))
    if problems or version is None:
        return fail(
            name,
            "; ".join(problems) + ".",
            "install them on the host (e.g. apt-get install bash rsync coreutils gawk) and put them on PATH",
        )
    return ok(name, f"bash {version[0]}.{version[1]} and {', '.join(HOST_TOOLS)} are on PATH.")
