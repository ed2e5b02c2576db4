"""What the launcher-kill bench (chaos.py) watches of a run, read-only: the daemon's create and destroy
events for the run's label, the run root's events and the phase they show, and the tasks whose official
receipt the run's dumps hold. Apart from chaos.py, which kills, clears and resumes."""

from __future__ import annotations

import threading
from pathlib import Path

from ..container import protocol
from ..custody.docker_ops import list_labelled
from ..custody.labels import RUN_LABEL_KEY, run_label
from ..host.daemon import docker_client
from ..runroot.events import read_all
from .env import read_json

TASKS = ["demo-csv-totals", "demo-wrong-answer"]  # the demo tasks a kill's run selects


class CreateEvents:
    """Follows the daemon's container create/destroy events of one run's exact label, with their times.

    The label is drawn when the launcher starts (a per-run nonce), after this starts following: every
    event carrying the label KEY is kept with its value, and `times` / `gone` keep those whose value
    is the label the run recorded in its manifest (none before it has one: nothing labelled exists)."""

    def __init__(self, docker_host: str, run_root: Path) -> None:
        self.client = docker_client(docker_host, 60)
        self.run_root = run_root
        self._seen: list[tuple[str, float, str, str]] = []  # (action, daemon time in s, name, label value)
        self._stream = self.client.events(
            decode=True, filters={"type": ["container"], "event": ["create", "destroy"], "label": [RUN_LABEL_KEY]}
        )
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        try:
            for event in self._stream:
                attributes = (event.get("Actor") or {}).get("Attributes") or {}
                at = int(event.get("timeNano", 0)) / 1e9
                self._seen.append(
                    (event.get("Action", ""), at, attributes.get("name", ""), attributes.get(RUN_LABEL_KEY, ""))
                )
        except Exception:  # noqa: BLE001 - the stream ends when close() is called
            return

    def _of_run(self, action: str) -> list[tuple[float, str]]:
        label = label_now(self.run_root)
        return [(at, name) for act, at, name, value in list(self._seen) if act == action and value == label]

    @property
    def times(self) -> list[tuple[float, str]]:  # creates: (daemon time in s, container name)
        return self._of_run("create")

    @property
    def gone(self) -> list[tuple[float, str]]:  # destroys
        return self._of_run("destroy")

    def close(self) -> None:
        self._stream.close()
        self._thread.join(timeout=10)
        self.client.close()


def events_of(run_root: Path) -> list[dict]:
    return read_all(run_root / "events.jsonl") if (run_root / "events.jsonl").exists() else []


def kinds_of(run_root: Path) -> list[str]:
    return [str(e.get("kind")) for e in events_of(run_root)]


def label_now(run_root: Path) -> str | None:
    """The label the run recorded, or None before its manifest exists (nothing carries it yet)."""
    try:
        return run_label(run_root)
    except (OSError, ValueError):
        return None


def labelled_names(docker_host: str, label: str | None) -> list[str]:
    if label is None:
        return []
    try:
        return [name for _, name in list_labelled(docker_host, label, timeout=10).containers]
    except Exception:  # noqa: BLE001 - a busy daemon: not seen yet
        return []


def observed_phase(run_root: Path) -> str:
    """The phase the run is in now, from what it wrote (the verdict names what was really hit)."""
    kinds = kinds_of(run_root)
    if "settlement" in kinds or "run_finished" in kinds:
        return "finished"
    if "cleanup" in kinds:
        return "settlement"
    if "runner_exited" in kinds:
        return "cleanup"
    if "stop_requested" in kinds or _stopping(run_root):
        return "stop"
    if "runner_started" in kinds:
        return "in_flight" if _agent_seen(run_root) else "runner_start"
    if "run_admitted" in kinds or "watchdog_started" in kinds:
        return "runner_start"
    manifest = read_json(run_root / "run_manifest.json")
    if not manifest:
        return "before_run_root"
    if manifest.get("image"):
        return "probe"
    if (run_root / "image_build.log").exists():
        return "image"
    return "preflight"


def _stopping(run_root: Path) -> bool:
    """The supervisor fenced for a signal (its stop file) and is stopping the runner group; the
    stop_requested event is written only after the runner has exited."""
    try:
        return (run_root / "custody" / "stop").read_text().startswith("signal_")
    except OSError:
        return False


def _agent_seen(run_root: Path) -> bool:
    evidence = run_root / "custody" / "evidence"
    return evidence.is_dir() and any(p.suffix == ".task" for p in evidence.iterdir())


def receipted(run_root: Path) -> set[str]:
    """Tasks settled by a valid official receipt (claim + write-once receipt with a true/false pass).

    Only the dump folders are listed (dumps/<model>/<Turn>-<task>/), never their workspaces,
    which the agent phase is still changing (it removes the workspace's .git at the end).
    """
    found = set()
    for dump in (run_root / "bench" / "dumps").glob("*/*"):
        claim, _ = protocol.read_json_record(str(dump / protocol.CLAIM_NAME))
        if not protocol.valid_claim(claim):
            continue
        receipt, _ = protocol.read_json_record(protocol.receipt_path(str(dump), claim["attempt_id"]))
        returned = receipt.get("returned") if protocol.valid_receipt(receipt, claim) else None
        if not isinstance(returned, dict) or not isinstance(returned.get("pass"), bool):
            continue  # no receipt, or the evaluator gave no verdict: not settled, may be retried
        # Dumps live in <model>/<Turn>-<task id>/: the task is the one the folder's name ends with.
        task = next((t for t in TASKS if dump.name.endswith("-" + t)), None)
        if task:
            found.add(task)
    return found
