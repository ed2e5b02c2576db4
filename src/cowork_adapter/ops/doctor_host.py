"""`cowork-adapter doctor` without the run flags: the host's checks (daemon, its CPUs and memory,
host tools, disk), then what a run's doctor also needs. Apart from ops/doctor.py, whose checks need
a whole run configuration."""

from __future__ import annotations

from pathlib import Path

from ..host.daemon import daemon_info, docker_failures, docker_version
from ..vocab import ExitCode
from .doctor_probes import FAIL, GIB, CheckResult, _brief, fail, free_bytes, host_tools_check, ok

# What a run's doctor needs beyond the host (said by `doctor` without them).
RUN_FLAGS_NEEDED = (
    "--repo-dir SEED_CHECKOUT",
    "--run-root NEW_DIR",
    "--bench-root BENCH_CHECKOUT (or COWORK_BENCH_ROOT)",
)


def _free_check(name: str, path: Path, reserve_gib: float, flag: str) -> CheckResult:
    try:
        free = free_bytes(path)
    except OSError as exc:
        return fail(name, f"the free space of {path} cannot be read ({exc.strerror}).", "check that the folder exists")
    if free < reserve_gib * GIB:
        return fail(
            name,
            f"{path} has {free / GIB:.1f} GiB free, below the {flag} reserve of {reserve_gib:g} GiB.",
            f"free space on {path}, or pass a lower {flag}",
        )
    return ok(name, f"{path} has {free / GIB:.1f} GiB free (the {flag} reserve is {reserve_gib:g} GiB).")


def host_checks(
    docker_host: str | None, folder: Path, *, min_free_gib: float = 200.0, min_root_free_gib: float = 40.0
) -> list[CheckResult]:
    """The checks that need no run flags: the daemon, its CPUs and memory, host tools, disk."""
    results = []
    if docker_host is None or not docker_host.strip():
        results.append(
            fail(
                "docker host",
                "no Docker daemon is named.",
                "pass --docker-host or export DOCKER_HOST (the test bed: unix:///var/lib/cowork-testbed/docker.sock)",
            )
        )
    else:
        try:
            version = docker_version(docker_host)
            info = daemon_info(docker_host)
        except docker_failures() as exc:
            results.append(
                fail(
                    "docker host",
                    f"the Docker daemon at {docker_host} did not answer ({_brief(exc)}).",
                    "start the daemon, or point --docker-host / DOCKER_HOST at its socket",
                )
            )
        else:
            results.append(
                ok(
                    "docker host",
                    f"{docker_host} answers: Docker {version.get('Version', '?')} "
                    f"(API {version.get('ApiVersion', '?')}).",
                )
            )
            cpus, memory = int(info.get("NCPU") or 0), int(info.get("MemTotal") or 0)
            results.append(
                ok(
                    "daemon resources",
                    f"{cpus} CPUs and {memory / GIB:.1f} GiB of memory; each task "
                    f"container gets {min(4, cpus)} CPUs and "
                    f"{min(16 * GIB, memory) / GIB:.1f} GiB by default.",
                )
            )
    results.append(host_tools_check())
    results.append(_free_check("disk (resource root)", folder, min_free_gib, "--min-free-gib"))
    results.append(_free_check("disk (/)", Path("/"), min_root_free_gib, "--min-root-free-gib"))
    return results


def host_doctor_command(
    docker_host: str | None, folder: Path | None = None, *, min_free_gib: float = 200.0, min_root_free_gib: float = 40.0
) -> int:
    """`doctor` without the run flags: check the host, then say what a run's doctor also needs.
    `folder`: where runs would go (--resource-root; default the current folder)."""
    results = host_checks(
        docker_host, folder or Path.cwd(), min_free_gib=min_free_gib, min_root_free_gib=min_root_free_gib
    )
    for result in results:
        print(result.line(), flush=True)
    failed = [r for r in results if r.verdict == FAIL]
    print(
        f"doctor: the host checks {'found ' + str(len(failed)) + ' problem(s)' if failed else 'are OK'}. "
        f"To check a run as well (the benchmark at its pin, the seed, the images, memory-limit enforcement, "
        f"the selection, and for a paid run the key, meter and campaign), give the run's flags: "
        f"{', '.join(RUN_FLAGS_NEEDED)} and the rest as for `run`.",
        flush=True,
    )
    return int(ExitCode.FAILED if failed else ExitCode.OK)
