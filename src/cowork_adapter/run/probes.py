"""Environment qualification before paying: start every MCP server the selected tasks need, in the
derived image, and keep what was found in the manifest (`inventory`).

The probe runs like a task does, without the runner and without any key: a labelled network, a
fresh PostgreSQL seeded from the bench copy's db/init.sql.gz, and one container of the derived
image (the run's label and limits) in which the entrypoint's `--phase inventory` lists each
server's tools through mcp-proxy. One failing server makes mcp-proxy exit for all, so when the
joint listing fails every server is listed again on its own, which names the culprit.
Everything is removed by the run's exact label in `finally` and verified gone.

Entry points: `run_probe` (`--probe inventory|stateful`), and for paid runs `inventory_for_run`
then `enforce_inventory` (refuses a selection that needs a failing server unless accepted).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import RunConfig
from ..custody.docker_ops import cleanup_run
from ..custody.labels import ROLE_LABEL_KEY, ROLE_NETWORK, RUN_LABEL_KEY, role_for_name
from ..errors import Refusal
from ..host.daemon import docker_client
from ..image.repairs import (
    CHROMIUM_GLOB,
    DETECT_PY,
    SERVERS_ROOT,
    disclosed,
    finalize,
    for_selection,
    planned_from_labels,
)
from ..resolved import fitted_cpus, reached
from ..runroot.layout import CONFIGS
from ..runroot.manifest import read_manifest, utc_now, write_manifest
from ..schemas.inventory import Inventory, RepairRecord, ServerInventory
from ..schemas.manifest import RunManifest
from ..schemas.record import convert
from ..vocab import ExitCode, ProbeKind, RunOutcome, ServerHealth

if TYPE_CHECKING:  # docker's models only for the checker: the module imports no docker at load
    from docker.models.containers import Container

PROBE_TASK_PREFIX = "cowork-probe-"
ALL_SERVERS_TASK = "cowork-probe-all"
PG_IMAGE = "postgres:15"
PG_DB, PG_USER, PG_PASSWORD = "cowork_gym", "eigent", "camel"  # the benchmark's own seed credentials
PG_READY_SEC = 300.0
INNER_TIMEOUT_SEC = 240  # `timeout` around each in-container probe (the probe itself waits 180 s)
DOCKER_TIMEOUT_SEC = INNER_TIMEOUT_SEC + 60
STDERR_TAIL_LINES = 6
# Servers that hold state across calls, and calls (each in a fresh HTTP session) that prove it.
STATEFUL_SPECS: dict[str, dict[str, Any]] = {
    "deck": {
        "calls": [
            {"name": "create_deck", "arguments": {"deck_id": "probe", "title": "cowork-state-survives-http-session"}},
            {"name": "add_slide", "arguments": {"deck_id": "probe", "heading": "one"}},
            {"name": "add_slide", "arguments": {"deck_id": "probe", "heading": "two"}},
            {"name": "save_deck", "arguments": {"deck_id": "probe", "filename": "cowork-state-probe.deck.json"}},
        ],
        "expect": "saved 2 slides",
    },
    # The pinned benchmark's stateful servers (tool names as its vendored sources define them). A
    # presentation made in one HTTP session is read back in another: lost state answers "No
    # presentation is currently loaded" instead of naming it; a page opened in one session must
    # be in the browser's snapshot taken from the next.
    "pptx": {
        "calls": [
            {"name": "create_presentation", "arguments": {"id": "cowork-state-probe"}},
            {"name": "add_slide", "arguments": {"presentation_id": "cowork-state-probe", "title": "state probe"}},
            {"name": "get_presentation_info", "arguments": {"presentation_id": "cowork-state-probe"}},
        ],
        "expect": "cowork-state-probe",
    },
    "playwright_with_chunk": {
        "calls": [
            {
                "name": "browser_navigate",
                "arguments": {"url": "data:text/html,<h1>cowork-state-survives-http-session</h1>"},
            },
            {"name": "browser_snapshot", "arguments": {}},
        ],
        "expect": "cowork-state-survives-http-session",
    },
}


# ---------------------------------------------------------------- pure parts


def needed_servers(bench_copy: Path, task_ids: Sequence[str]) -> dict[str, list[str]]:
    """{server: [tasks needing it]} over the tasks' task_config.json `needed_mcp_servers`."""
    needs: dict[str, list[str]] = {}
    for task in task_ids:
        path = Path(bench_copy) / "tasks" / "finalpool" / task / "task_config.json"
        try:
            servers = json.loads(path.read_text(encoding="utf-8")).get("needed_mcp_servers") or []
        except (OSError, ValueError):
            servers = []
        for server in servers:
            if isinstance(server, str) and server:
                needs.setdefault(server, []).append(task)
    return dict(sorted(needs.items()))


def blocked_by(needs: Mapping[str, Sequence[str]], failed: set[str]) -> dict[str, str]:
    """{task: "mcp_server_failed:a,b"} for every task that needs a failed server."""
    hits: dict[str, list[str]] = {}
    for server in sorted(failed):
        for task in needs.get(server, ()):
            hits.setdefault(task, []).append(server)
    return {task: "mcp_server_failed:" + ",".join(servers) for task, servers in sorted(hits.items())}


def server_inventory(
    server: str,
    report: Mapping[str, Any] | None,
    tasks: Sequence[str],
    repairs: Sequence[Mapping[str, Any]],
    log: str | None,
    stderr_tail: str,
) -> ServerInventory:
    """One server's verdict: the listing decides ok/failed; a repair that took makes ok `repaired`,
    and a repair that did not take (e.g. Chromium still missing) makes it failed."""
    report = report or {"ok": False, "error": "the probe wrote no report for this server"}
    own = [r for r in repairs if r.get("server") == server]
    error = report.get("error") or None
    healthy = bool(report.get("ok")) and int(report.get("tool_count") or 0) > 0
    untaken = [r for r in own if not r.get("took")]
    if healthy and untaken:
        healthy, error = False, "; ".join(f"repair {r['fault']} did not take" for r in untaken)
    if not healthy and stderr_tail:
        error = f"{error or 'failed'} | stderr: {stderr_tail}"
    if not healthy:
        health = ServerHealth.FAILED
    elif own:
        health = ServerHealth.REPAIRED
    else:
        health = ServerHealth.OK
    repair = "; ".join(f"{r['fault']}: {r.get('before') or 'absent'} -> {r.get('after')}" for r in own) or None
    return ServerInventory(
        health=health,
        tool_count=int(report.get("tool_count") or 0),
        tools=list(report.get("tools") or []),
        error=None if healthy else (error or "failed")[:2000],
        log=log,
        tasks=list(tasks),
        repair=repair,
    )


def refusal_sentence(blocked: Mapping[str, str], servers: Mapping[str, Any], probe_dir: str | None) -> str:
    failed = sorted({s for reason in blocked.values() for s in reason.split(":", 1)[-1].split(",")})
    tasks = sorted(blocked)
    shown = ", ".join(tasks[:20]) + (f" and {len(tasks) - 20} more" if len(tasks) > 20 else "")
    where = f" (logs under {probe_dir})" if probe_dir else ""
    return (
        f"tasks {shown} need MCP servers that failed the environment inventory: {', '.join(failed)}{where}; "
        "pass --accept-environment-blocked to run them as environment-blocked."
    )


# ---------------------------------------------------------------- the sandbox


class ProbeSandbox:
    """A labelled network, a seeded PostgreSQL and one idle derived-image container to exec probes in.

    Use as a context manager; leaving it removes everything with the run's label and verifies it
    (CustodyError when anything survives).
    """

    def __init__(self, cfg: RunConfig, manifest: RunManifest, bench_copy: Path, probe_root: Path):
        self.cfg, self.manifest, self.bench_copy, self.probe_root = cfg, manifest, Path(bench_copy), probe_root
        self.label = manifest.run_label
        self.client = docker_client(cfg.docker_host, DOCKER_TIMEOUT_SEC)
        suffix = self.label[:12]
        self.net_name, self.pg_name, self.box_name = (f"{p}-{suffix}" for p in ("net-probe", "pg-probe", "probe"))
        self.box: Container | None = None  # the probe container, from __enter__ on

    @property
    def started(self) -> Container:
        """The probe container: every caller runs inside the `with`, after __enter__ started it."""
        return reached(self.box, "the probe container (__enter__)")

    def _limits(self) -> dict[str, Any]:
        return {
            "nano_cpus": int(fitted_cpus(self.cfg) * 1e9),
            "mem_limit": self.cfg.limits.memory_bytes,
            "memswap_limit": self.cfg.limits.memory_swap_bytes,
            "pids_limit": self.cfg.limits.pids_limit,
        }

    def __enter__(self) -> ProbeSandbox:
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        # The run's exact label on every object, so a launcher killed mid-probe leaves nothing that
        # `cowork-adapter clear` (or this __exit__) cannot find; the role says which part it was.
        labels = {RUN_LABEL_KEY: self.label}
        self.client.networks.create(
            self.net_name, driver="bridge", labels={**labels, ROLE_LABEL_KEY: ROLE_NETWORK}, check_duplicate=True
        )
        volumes = {}
        seed = self.bench_copy / "db" / "init.sql.gz"
        if seed.is_file():
            volumes[str(seed)] = {"bind": "/docker-entrypoint-initdb.d/init.sql.gz", "mode": "ro"}
        pg = self.client.containers.run(
            PG_IMAGE,
            name=self.pg_name,
            detach=True,
            network=self.net_name,
            labels={**labels, ROLE_LABEL_KEY: role_for_name(self.pg_name)},
            volumes=volumes,
            environment={"POSTGRES_DB": PG_DB, "POSTGRES_USER": PG_USER, "POSTGRES_PASSWORD": PG_PASSWORD},
            **self._limits(),
        )
        self._wait_pg(pg)
        env = {
            "PGHOST": self.pg_name,
            "PG_HOST": self.pg_name,
            "PGPORT": "5432",
            "PGUSER": PG_USER,
            "PGPASSWORD": PG_PASSWORD,
            "PGDATABASE": PG_DB,
            "LOCAL_SERVERS_PATH": SERVERS_ROOT,
            "PYTHON_BIN": "/opt/venv/bin/python3",
        }
        volumes = {
            str(self.bench_copy / CONFIGS): {"bind": "/workspace/configs", "mode": "ro"},
            str(self.probe_root / "tasks"): {"bind": "/workspace/tasks", "mode": "ro"},
            str(self.probe_root / "out"): {"bind": "/probe", "mode": "rw"},
        }
        image = reached(self.manifest.image, "the run's image (the image phase)")
        self.box = self.client.containers.run(
            reached(image.id, "the run's image ID"),
            ["sleep", "7200"],
            name=self.box_name,
            detach=True,
            network=self.net_name,
            labels={**labels, ROLE_LABEL_KEY: role_for_name(self.box_name)},
            environment=env,
            volumes=volumes,
            working_dir="/workspace",
            **self._limits(),
        )

    def _wait_pg(self, pg) -> None:
        """TCP readiness, like the runner: the socket answers during init, before the seed loaded."""
        deadline = time.monotonic() + PG_READY_SEC
        while time.monotonic() < deadline:
            pg.reload()
            if pg.status == "exited":
                raise Refusal("inventory", f"the probe's PostgreSQL exited during start-up: {pg.logs(tail=5)!r}")
            code, _ = pg.exec_run(["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-U", PG_USER, "-d", PG_DB])
            if code == 0:
                return
            time.sleep(1)
        raise Refusal("inventory", f"the probe's PostgreSQL was not ready within {PG_READY_SEC:.0f}s.")

    def entry(self, phase: str, task: str, out_sub: str, env: Mapping[str, str] | None = None) -> int:
        """Run the entrypoint's `--phase` for `task` with output in <probe_root>/out/<out_sub>; its exit code."""
        argv = [
            "timeout",
            "-k",
            "10",
            str(INNER_TIMEOUT_SEC),
            "/opt/venv/bin/python3",
            "-u",
            "/workspace/cowork_entry.py",
            "--task_dir",
            task,
            "--phase",
            phase,
            "--probe-output",
            f"/probe/{out_sub}",
        ]
        code, output = self.started.exec_run(argv, environment=dict(env or {}), workdir="/workspace")
        (self.probe_root / "out").mkdir(parents=True, exist_ok=True)
        with open(self.probe_root / "out" / f"{out_sub}.console.log", "wb") as fh:
            fh.write(_bytes(output))
        return int(code if code is not None else 1)

    def detect(self) -> dict[str, Any]:
        """The repair detector's document, measured in the derived image."""
        code, output = self.started.exec_run(["/usr/bin/python3", "-c", DETECT_PY, SERVERS_ROOT, CHROMIUM_GLOB])
        text = _bytes(output).decode("utf-8", "replace").strip()
        if code != 0 or not text:
            return {"servers": [], "chromium": [], "error": text[-300:]}
        return json.loads(text.splitlines()[-1])

    def __exit__(self, *exc) -> None:
        try:
            cleanup_run(self.cfg.docker_host, self.label, lambda record: _console(f"cleanup: {record}"))
        finally:
            self.client.close()


def _bytes(output: bytes | Iterator[bytes] | None) -> bytes:
    """exec_run's output: bytes when not streamed (never streamed here), None when there was none."""
    return output if isinstance(output, bytes) else b""


def _console(line: str) -> None:
    print(f"cowork-adapter: {line}", file=sys.stderr, flush=True)


def _write_probe_tasks(probe_root: Path, servers: Sequence[str]) -> None:
    """Synthetic task configs: one needing every server, and one per server (to name a culprit)."""
    pool = probe_root / "tasks" / "finalpool"
    for task, needed in [(ALL_SERVERS_TASK, list(servers))] + [(PROBE_TASK_PREFIX + s, [s]) for s in servers]:
        (pool / task).mkdir(parents=True, exist_ok=True)
        (pool / task / "task_config.json").write_text(json.dumps({"needed_mcp_servers": needed}, indent=2))
    (probe_root / "out").mkdir(parents=True, exist_ok=True)


def _read_report(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def _tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " / ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())[:1500]


def _list_servers(
    box: ProbeSandbox, probe_root: Path, servers: Sequence[str]
) -> dict[str, tuple[dict[str, Any] | None, Path]]:
    """{server: (its report, its output dir)}: jointly first, then one by one when that fails."""
    out = probe_root / "out"
    box.entry("inventory", ALL_SERVERS_TASK, "all")
    joint = _read_report(out / "all" / "inventory.json")
    if servers and all(isinstance(joint.get(s), dict) and joint[s].get("ok") for s in servers):
        return {s: (joint[s], out / "all") for s in servers}
    found: dict[str, tuple[dict[str, Any] | None, Path]] = {}
    for server in servers:
        sub = PROBE_TASK_PREFIX + server
        box.entry("inventory", sub, sub)
        report = _read_report(out / sub / "inventory.json").get(server)
        # Written in the container: anything but a mapping is no report (the server fails, not the probe).
        found[server] = (report if isinstance(report, dict) else None, out / sub)
    return found


def _stateful(box: ProbeSandbox, probe_root: Path, servers: Sequence[str]) -> dict[str, Any]:
    """{server: {ok, sessions, error}} for needed servers with a stateful spec."""
    results: dict[str, Any] = {}
    for server in servers:
        spec = STATEFUL_SPECS.get(server)
        if spec is None:
            continue
        sub = f"stateful-{server}"
        box.entry(
            "stateful",
            PROBE_TASK_PREFIX + server,
            sub,
            env={"COWORK_STATEFUL_PROBE": json.dumps({"server": server, **spec})},
        )
        report = _read_report(probe_root / "out" / sub / "stateful.json")
        sessions = report.get("sessions") or []
        ok = bool(report.get("ok")) and len(sessions) == len(spec["calls"])
        results[server] = {
            "ok": ok,
            "sessions": len(sessions),
            "session_ids": [s.get("session_id") for s in sessions],
            "expect": spec["expect"],
            "error": None if ok else (report.get("error") or "no report"),
        }
    return results


def collect_inventory(
    cfg: RunConfig, manifest: RunManifest, bench_copy: Path, task_ids: Sequence[str], *, stateful: bool = False
) -> Inventory:
    """Probe every server `task_ids` need (no key, no meter, no campaign) and return the inventory."""
    started = utc_now()
    probe_root = Path(cfg.run_root) / "probes"
    needs = needed_servers(bench_copy, task_ids)
    planned, checks = planned_from_labels(manifest.image.labels if manifest.image else {})
    planned = for_selection(planned, needs)  # the image carries every server's repairs; a run discloses its own
    reports: dict[str, tuple[dict[str, Any] | None, Path]] = {}
    detection: dict[str, Any] = {"servers": [], "chromium": []}
    stateful_results: dict[str, Any] = {}
    if needs or planned:
        _write_probe_tasks(probe_root, list(needs))
        with ProbeSandbox(cfg, manifest, bench_copy, probe_root) as box:
            if needs:
                reports = _list_servers(box, probe_root, list(needs))
            if planned:
                detection = box.detect()
            if stateful:
                stateful_results = _stateful(box, probe_root, list(needs))
    repairs = finalize(planned, detection)  # every measured record: one that did not take fails its server
    taken, not_taken = disclosed(repairs)  # only repairs that took are disclosed as repairs
    servers = {}
    for server, tasks in needs.items():
        report, folder = reports.get(server, (None, probe_root / "out"))
        log = folder / f"{server}.stderr.log"
        servers[server] = server_inventory(
            server,
            report,
            tasks,
            repairs,
            str(log) if log.exists() else None,
            _tail(log) if not (report or {}).get("ok") else "",
        )
    failed = {name for name, s in servers.items() if s.health is ServerHealth.FAILED}
    inventory = Inventory(
        image_id=manifest.image.id if manifest.image and manifest.image.id else "",
        started_at=started,
        finished_at=utc_now(),
        servers=servers,
        blocked_tasks=blocked_by(needs, failed),
        repairs=[RepairRecord(**r) for r in taken],
        checks=[*checks, *not_taken],
        probe_dir=str(probe_root / "out"),
    )
    if stateful:
        inventory.checks.append({"check": "stateful", "result": stateful_results or "no stateful server needed"})
    return inventory


# ---------------------------------------------------------------- entry points


def inventory_for_run(cfg: RunConfig, manifest: RunManifest, bench_copy: Path) -> dict[str, Any]:
    """Probe the servers this run's tasks need; store the inventory in the manifest (written) and return it.

    Model-free and charge-free: no key reaches the containers, the meter and the campaign are not
    touched. Raises CustodyError if cleanup cannot be verified.
    """
    tasks = list(manifest.selection.task_ids) if manifest.selection else []
    image_id = manifest.image.id if manifest.image and manifest.image.id else ""
    reused = (
        reusable_inventory(cfg.inventory_from, image_id, needed_servers(bench_copy, tasks))
        if cfg.inventory_from
        else None
    )
    if reused is not None:
        _console(f"the inventory of {cfg.inventory_from} (same image, same servers) is reused; nothing probed again.")
    found = reused or collect_inventory(cfg, manifest, bench_copy, tasks)
    inventory = found.to_manifest()
    manifest.inventory = inventory
    write_manifest(Path(cfg.run_root), manifest)
    _print_inventory(inventory)
    return inventory


def reusable_inventory(source_root: Path, image_id: str, needs: Mapping[str, list[str]]) -> Inventory | None:
    """The inventory another run root recorded, when it holds for this run: taken on the same image
    and over every server this selection needs (with the same tasks blocked). Else None: probe anew.
    Only `qualify` asks, for its nop pass right after its oracle pass over the same selection."""
    try:
        found = convert(read_manifest(Path(source_root)).inventory, Inventory)
    except (OSError, ValueError, AttributeError):
        return None
    if not image_id or found.image_id != image_id or set(found.servers) != set(needs):
        return None
    needed_tasks = {task for tasks in needs.values() for task in tasks}
    if not set(found.blocked_tasks) <= needed_tasks:
        return None
    return found.replace(reused_from=str(source_root), accepted_blocked=False)


def enforce_inventory(cfg: RunConfig, manifest: RunManifest, inventory: Mapping[str, Any]) -> None:
    """Refuse (stage `inventory`) a selection that needs a failing server, unless the operator
    passed --accept-environment-blocked: then the inventory records the acceptance and those
    tasks stay in the selection, where the ledger classifies them environment_blocked."""
    blocked = dict(inventory.get("blocked_tasks") or {})
    if not blocked:
        return
    if not cfg.accept_environment_blocked:
        raise Refusal(
            "inventory", refusal_sentence(blocked, inventory.get("servers") or {}, inventory.get("probe_dir"))
        )
    accepted = {**inventory, "accepted_blocked": True}
    manifest.inventory = accepted
    write_manifest(Path(cfg.run_root), manifest)
    _console(f"{len(blocked)} tasks are environment-blocked by accepted failing servers: {', '.join(sorted(blocked))}.")


def run_probe(cfg: RunConfig, manifest: RunManifest, bench_copy: Path) -> int:
    """`--probe inventory|stateful`: the inventory of every selected task's servers (stateful adds
    the state-survives-sessions check on servers that hold state). Exit 0 when all are usable."""
    stateful = cfg.probe == ProbeKind.STATEFUL  # a str Enum: equal to "stateful" too
    tasks = list(manifest.selection.task_ids) if manifest.selection else []
    inventory = collect_inventory(cfg, manifest, bench_copy, tasks, stateful=stateful).to_manifest()
    manifest.outcome = RunOutcome.PROBE
    manifest.inventory = inventory
    write_manifest(Path(cfg.run_root), manifest)
    _print_inventory(inventory)
    ok = not inventory["blocked_tasks"]
    if stateful:
        results: Any = next((c["result"] for c in inventory["checks"] if c.get("check") == "stateful"), {})
        for server, result in results.items() if isinstance(results, dict) else []:
            verdict = "state survived separate HTTP sessions" if result["ok"] else f"FAILED: {result['error']}"
            print(f"cowork-adapter: stateful {server}: {verdict}", flush=True)
            ok = ok and result["ok"]
    return int(ExitCode.OK if ok else ExitCode.FAILED)


def _print_inventory(inventory: Mapping[str, Any]) -> None:
    for name, s in (inventory.get("servers") or {}).items():
        detail = s.get("repair") if s["health"] == ServerHealth.REPAIRED.value else s.get("error")
        print(
            f"cowork-adapter: inventory {name}: {s['health']}, {s['tool_count']} tools"
            + (f" ({detail})" if detail and s["health"] != ServerHealth.OK.value else ""),
            flush=True,
        )
    for repair in inventory.get("repairs") or []:
        print(
            f"cowork-adapter: repair {repair['server']}: {repair['fault']} {repair['before']} -> {repair['after']}",
            flush=True,
        )
