"""Disclosed repairs of known reproducibility faults of the benchmark image, applied only when detected.

Building the pinned benchmark image today does not give the environment of its commit date. Three
faults are known: a vendored server whose own environment resolves the `mcp` SDK 2.x crashes at
start; a server whose sources import psycopg2 finds it missing from its environment; the browser
server finds no Chromium. Each is detected by running DETECT_PY in the base image and repaired in
the derived image without the network: pip repairs from a wheelhouse resolved on the host; the
browser server is pointed at a Chromium the image already has (PLAYWRIGHT_MCP_EXECUTABLE_PATH to a
system Chromium), and where there is none nothing is downloaded: the check says so and the server
fails its inventory. The plan goes on the derived image as the LABEL_REPAIRS label (so a reused
image still discloses it), and the inventory measures the `after` side in the derived image itself.

The image is shared by every selection that uses its tag, so the build plans the repairs of every
server in it; a run discloses only the repairs of servers its selection needs, and only those that
took (`for_selection`, `disclosed`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from ..custody.labels import RUN_LABEL_KEY
from ..errors import Refusal
from ..host.daemon import docker_client
from ..vocab import RepairFault
from .wheelhouse import WheelRecord, build_wheelhouse

# The last 1.x SDK the benchmark's vendored servers were locked to on its commit date.
VENDORED_MCP_PIN = "mcp==1.26.0"
PSYCOPG2_PIN = "psycopg2-binary==2.9.10"
LABEL_REPAIRS = "org.cowork-adapter.repairs"
SERVERS_ROOT = "/opt/local_servers"
CHROMIUM_GLOB = "/root/.cache/ms-playwright/chromium-*"
# The variable the Playwright MCP server reads for its browser, and where Debian-like images put one.
CHROMIUM_ENV = "PLAYWRIGHT_MCP_EXECUTABLE_PATH"
SYSTEM_CHROMIUMS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
REPAIR_WHEELHOUSE = "repair-wheelhouse"
REPAIR_SCRIPT = "repairs.sh"
DETECT_TIMEOUT_SEC = 300
# The build-time detection container is small work: modest fixed limits keep it in bounds.
DETECT_LIMITS: dict[str, Any] = {
    "nano_cpus": 1_000_000_000,
    "mem_limit": 1 << 30,
    "memswap_limit": 1 << 30,
    "pids_limit": 256,
}

# Runs under any python3 >= 3.8 in the image (stdlib only). Prints one JSON document:
# {"servers": [{server, venv, python, mcp, psycopg2, imports_psycopg2, browser, error}], "chromium": [paths],
#  "chromium_env": the executable PLAYWRIGHT_MCP_EXECUTABLE_PATH names (None unless it exists),
#  "system_chromium": [executables at the usual system paths]}
DETECT_PY = r"""
import glob, json, os, re, subprocess, sys
def executable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)
root = sys.argv[1] if len(sys.argv) > 1 else "/opt/local_servers"
probe = ("import json, sys\nimport importlib.metadata as m\n"
         "def v(n):\n    try:\n        return m.version(n)\n    except Exception:\n        return None\n"
         "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'mcp': v('mcp'),"
         " 'psycopg2': v('psycopg2-binary') or v('psycopg2')}))")
pattern = re.compile(r"^\s*(import|from)\s+psycopg2\b", re.M)
skip = {".venv", "venv", "node_modules", ".git", "__pycache__", "site-packages"}
def imports_psycopg2(top):
    seen = 0
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in skip]
        for name in filenames:
            if not name.endswith(".py"):
                continue
            seen += 1
            if seen > 5000:
                return False
            try:
                with open(os.path.join(dirpath, name), "r", errors="replace") as fh:
                    if pattern.search(fh.read(1 << 20)):
                        return True
            except OSError:
                pass
    return False
servers = []
for top in sorted(glob.glob(os.path.join(root, "*", ""))):
    name = os.path.basename(os.path.dirname(top))
    entry = {"server": name, "venv": None, "python": None, "mcp": None, "psycopg2": None, "error": None,
             "imports_psycopg2": imports_psycopg2(top), "browser": "playwright" in name.lower()}
    for venv in (".venv", "venv"):
        py = os.path.join(top, venv, "bin", "python")
        if os.path.exists(py):
            entry["venv"] = os.path.join(top, venv)
            try:
                out = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=60)
                if out.returncode == 0 and out.stdout.strip():
                    entry.update(json.loads(out.stdout.strip().splitlines()[-1]))
                else:
                    entry["error"] = (out.stderr.strip().splitlines() or ["exit %d" % out.returncode])[-1][:300]
            except Exception as exc:
                entry["error"] = "%s: %s" % (type(exc).__name__, exc)
            break
    servers.append(entry)
named = os.environ.get("PLAYWRIGHT_MCP_EXECUTABLE_PATH")
print(json.dumps({"servers": servers, "chromium": sorted(glob.glob(sys.argv[2] if len(sys.argv) > 2 else "")),
                  "chromium_env": named if executable(named) else None,
                  "system_chromium": [p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if executable(p)]}))
"""


@dataclass(frozen=True)
class PlannedRepair:
    """One repair the derived image applies: `requirement` goes into `venv` (Chromium: `target`)."""

    server: str
    fault: str
    before: str | None
    requirement: str
    venv: str | None = None
    python: str | None = None

    def record(self) -> dict[str, Any]:
        return asdict(self)


def major(version: str | None) -> int | None:
    """The leading integer of a version string, None when there is none."""
    head = (version or "").split(".", 1)[0]
    return int(head) if head.isdigit() else None


def plan_repairs(detection: Mapping[str, Any]) -> tuple[list[PlannedRepair], list[dict[str, Any]]]:
    """(repairs, checks) for a DETECT_PY document: pure, so every fault is decided in one table.

    checks records what was looked at and found healthy or not applicable (the Chromium check
    always yields one entry), so a report can say a repair was considered and not needed.
    """
    repairs: list[PlannedRepair] = []
    checks: list[dict[str, Any]] = []
    servers = [s for s in detection.get("servers") or [] if isinstance(s, Mapping) and s.get("server")]
    for s in servers:
        name, venv, python = str(s["server"]), s.get("venv"), s.get("python")
        mcp_major = major(s.get("mcp"))
        if venv and mcp_major is not None and mcp_major >= 2:
            repairs.append(
                PlannedRepair(name, RepairFault.MCP_SDK_2X.value, s.get("mcp"), VENDORED_MCP_PIN, venv, python)
            )
        if venv and s.get("imports_psycopg2") and not s.get("psycopg2") and python:
            repairs.append(PlannedRepair(name, RepairFault.PSYCOPG2_MISSING.value, None, PSYCOPG2_PIN, venv, python))
    browsers = [str(s["server"]) for s in servers if s.get("browser")]
    repairs += chromium_repairs(browsers, detection, checks)
    return repairs, checks


def chromium_repairs(
    browsers: Sequence[str], detection: Mapping[str, Any], checks: list[dict[str, Any]]
) -> list[PlannedRepair]:
    """The browser servers' Chromium, without the network: a Chromium the server already finds (the
    variable's, or Playwright's own download) needs nothing; a system Chromium the variable does not
    name yet is named (the repair); with neither, the check says the server will fail."""
    if not browsers:
        checks.append({"check": "chromium", "result": "not_applicable", "detail": "no playwright server in the image"})
        return []
    named, downloaded = detection.get("chromium_env"), list(detection.get("chromium") or [])
    system = list(detection.get("system_chromium") or [])
    if named or downloaded:
        checks.append({"check": "chromium", "result": "present", "detail": named or downloaded[0]})
        return []
    if not system:
        checks.append(
            {
                "check": "chromium",
                "result": "absent",
                "detail": f"no Chromium in the image (neither {CHROMIUM_ENV} nor {', '.join(SYSTEM_CHROMIUMS)}); "
                "nothing is downloaded at build time, so the browser server fails its inventory",
            }
        )
        return []
    return [
        PlannedRepair(name, RepairFault.CHROMIUM_MISSING.value, None, f"{CHROMIUM_ENV}={system[0]}")
        for name in browsers
    ]


def for_selection(planned: Sequence[PlannedRepair], needed: Collection[str]) -> list[PlannedRepair]:
    """The planned repairs of the servers a selection needs (the image carries every server's)."""
    return [r for r in planned if r.server in needed]


def disclosed(records: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(repairs to disclose, checks) of finalize()'s records: a repair is disclosed only when it took;
    one that did not take is kept as a failed check (its server's inventory says how it failed)."""
    took = [dict(r) for r in records if r.get("took")]
    failed = [
        {
            "check": "repair",
            "result": "did_not_take",
            "detail": f"{r.get('server')}: {r.get('fault')} -> {r.get('requirement')}",
        }
        for r in records
        if not r.get("took")
    ]
    return took, failed


def wheel_requirements(repairs: Sequence[PlannedRepair]) -> dict[str, list[str]]:
    """{python version: pins} the repair wheelhouse must hold (pip repairs only)."""
    out: dict[str, list[str]] = {}
    for r in repairs:
        if r.fault != RepairFault.CHROMIUM_MISSING.value and r.python:
            pins = out.setdefault(r.python, [])
            if r.requirement not in pins:
                pins.append(r.requirement)
    return out


_SCRIPT_HEAD = """\
#!/bin/sh
# Disclosed repairs of the benchmark image (cowork-adapter), each applied because it was detected.
set -eu
wh=/tmp/cowork-repair-wheelhouse
# A server environment made by uv has no pip: use uv, else the proxy venv's pip aimed at it.
pipin() {
  py=$1; dir=$2; shift 2
  if "$py" -m pip --version >/dev/null 2>&1; then
    "$py" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$dir" "$@"
  elif command -v uv >/dev/null 2>&1; then
    uv pip install --quiet --python "$py" --no-index --find-links "$dir" "$@"
  else
    /opt/mcp-proxy-venv/bin/python -m pip --python "$py" install --quiet --no-index --find-links "$dir" "$@"
  fi
}
"""


def repair_script(repairs: Sequence[PlannedRepair]) -> str:
    """The POSIX shell run by the repair stage; a pip repair that does not take fails the build."""
    lines = [_SCRIPT_HEAD]
    for r in repairs:
        said = f"[cowork-repair] {r.server}: {r.fault} ({r.before or 'absent'}) -> {r.requirement}"
        lines.append(f"echo {shlex.quote(said)}")
        if r.fault == RepairFault.CHROMIUM_MISSING.value:
            # The ENV line of the repair stage names it; here only prove it is an executable.
            lines.append(f"test -x {shlex.quote(r.requirement.partition('=')[2])}")
            continue
        py = shlex.quote(f"{r.venv}/bin/python")
        lines.append(f'pipin {py} "$wh/{r.python}" {shlex.quote(r.requirement)}')
        if r.fault == RepairFault.MCP_SDK_2X.value:
            check = (
                "import importlib.metadata as m, sys; v = m.version('mcp'); "
                "sys.exit(0 if int(v.split('.')[0]) < 2 else 'mcp is still ' + v)"
            )
        else:
            check = "import psycopg2"
        lines.append(f"{py} -c {shlex.quote(check)}")
    return "\n".join(lines) + "\n"


def repair_stage(repairs: Sequence[PlannedRepair]) -> str:
    """Dockerfile lines of the repair stage ("" when nothing was detected)."""
    if not repairs:
        return ""
    browsers = sorted({r.requirement for r in repairs if r.fault == RepairFault.CHROMIUM_MISSING.value})
    return "".join(f"ENV {requirement}\n" for requirement in browsers[:1]) + (
        f"COPY {REPAIR_WHEELHOUSE} /tmp/cowork-repair-wheelhouse\n"
        f"COPY {REPAIR_SCRIPT} /tmp/cowork-repairs.sh\n"
        "RUN sh /tmp/cowork-repairs.sh && rm -rf /tmp/cowork-repair-wheelhouse /tmp/cowork-repairs.sh\n"
    )


def label_value(repairs: Sequence[PlannedRepair], checks: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(
        {"repairs": [r.record() for r in repairs], "checks": list(checks)}, sort_keys=True, separators=(",", ":")
    )


def planned_from_labels(labels: Mapping[str, str] | None) -> tuple[list[PlannedRepair], list[dict[str, Any]]]:
    """The plan an image carries in LABEL_REPAIRS; ([], []) for an image built without it."""
    raw = (labels or {}).get(LABEL_REPAIRS)
    if not raw:
        return [], []
    doc = json.loads(raw)
    return [PlannedRepair(**r) for r in doc.get("repairs") or []], list(doc.get("checks") or [])


def after_value(repair: PlannedRepair, detection: Mapping[str, Any]) -> str | None:
    """What `detection` (run in the derived image) shows for the repaired item, None when absent."""
    if repair.fault == RepairFault.CHROMIUM_MISSING.value:
        # Took when the derived image's variable names an executable Chromium.
        return detection.get("chromium_env") or None
    for s in detection.get("servers") or []:
        if isinstance(s, Mapping) and s.get("server") == repair.server:
            return s.get("mcp") if repair.fault == RepairFault.MCP_SDK_2X.value else s.get("psycopg2")
    return None


def repair_took(repair: PlannedRepair, after: str | None) -> bool:
    if repair.fault == RepairFault.MCP_SDK_2X.value:
        found = major(after)
        return found is not None and found < 2
    return after is not None


def finalize(repairs: Sequence[PlannedRepair], after_detection: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Manifest records {server, fault, requirement, before, after, took}: `after` is measured."""
    out = []
    for r in repairs:
        after = after_value(r, after_detection)
        out.append(
            {
                "server": r.server,
                "fault": r.fault,
                "requirement": r.requirement,
                "before": r.before,
                "after": after,
                "took": repair_took(r, after),
            }
        )
    return out


def detect(
    docker_host: str,
    image: str,
    run_label: str,
    *,
    limits: Mapping[str, Any] | None = None,
    timeout: int = DETECT_TIMEOUT_SEC,
) -> dict[str, Any]:
    """Run DETECT_PY in `image` (no network, the run's label, removed afterwards); its document."""
    client = docker_client(docker_host, timeout)
    container = None
    try:
        container = client.containers.create(
            image,
            ["/usr/bin/python3", "-c", DETECT_PY, SERVERS_ROOT, CHROMIUM_GLOB],
            labels={RUN_LABEL_KEY: run_label},
            network_disabled=True,
            user="0",
            **dict(limits or DETECT_LIMITS),
        )
        container.start()
        status = container.wait(timeout=timeout)
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace").strip()
        if status.get("StatusCode") != 0 or not out:
            err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace").strip()[-300:]
            raise Refusal("image", f"detecting repairs in {image} failed (exit {status.get('StatusCode')}): {err}")
        return json.loads(out.splitlines()[-1])
    except (docker.errors.DockerException, ValueError) as exc:
        raise Refusal("image", f"detecting repairs in {image} failed: {exc}") from exc
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except docker.errors.DockerException:
                pass  # the run's exact-label cleanup removes it
        client.close()


def prepare_repairs(
    docker_host: str, base_image: str, run_label: str, context_dir: Path, platforms: list[str]
) -> tuple[list[PlannedRepair], list[dict[str, Any]], list[WheelRecord]]:
    """Detect faults in the base image and put what the repair stage needs into the build context.

    Returns (repairs, checks, wheels of the repair wheelhouse). Writes `repairs.sh` and
    `repair-wheelhouse/<python>/` under context_dir only when something must be repaired.
    """
    repairs, checks = plan_repairs(detect(docker_host, base_image, run_label))
    wheels: list[WheelRecord] = []
    if not repairs:
        return repairs, checks, wheels
    for python, pins in wheel_requirements(repairs).items():
        wheels += build_wheelhouse(
            pins, context_dir / REPAIR_WHEELHOUSE / python, python_version=python, platforms=platforms
        )
    (context_dir / REPAIR_WHEELHOUSE).mkdir(exist_ok=True)
    (context_dir / REPAIR_SCRIPT).write_text(repair_script(repairs))
    return repairs, checks, wheels
