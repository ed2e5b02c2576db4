"""Files written by the pydantic models these records replaced still read, and write back byte for byte.

tests/unit/pydantic_written/ holds one file of each kind written by the pydantic models (commit
d30dba6; campaign.json, task_validity.json, inventory.json and cowork_adapter_run.json at 1117537:
before each moved to msgspec), each field filled where the model has one. Decoding them with
today's records and writing them again must give the same bytes: a run root written before the
change stays readable by `status`, `clear`, recovery and the report, and a file rewritten after it
(monitor.json, the manifest) is the same document.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cowork_adapter.custody.shim_config import ContainerLimits, ShimConfig
from cowork_adapter.runroot.events import EventLog
from cowork_adapter.schemas.campaign import parse_campaign
from cowork_adapter.schemas.custody import CustodyProcesses, ProcessIdentity
from cowork_adapter.schemas.events import MeterReading, RunFinished, TaskStarted, parse_event
from cowork_adapter.schemas.inventory import Inventory
from cowork_adapter.schemas.ledger import TaskRow, read_index
from cowork_adapter.schemas.manifest import RunManifest
from cowork_adapter.schemas.monitor import MeterState, Monitor, Progress
from cowork_adapter.schemas.record import RecordInvalid, convert, decode
from cowork_adapter.schemas.run_config import EntrypointConfigFile
from cowork_adapter.schemas.validity import TaskValidity
from cowork_adapter.vocab import EventKind

WRITTEN = Path(__file__).parent / "pydantic_written"
# Fields added to a kind after its fixture was written: an old file lacks them and reads as null.
ADDED_SINCE = {
    "run_manifest.json": {
        "campaign_db",
        "campaign_name",
        "llm_gateway",
        "shared_run",
        "bench_verified",
        "admission",
        "run_nonce",
        "eval_code_mounts",
    },
    "campaign.json": {"stop"},
    "shim_config.json": {
        "gateway_secret_file",
        "creations_dir",
        "dumps_dir",
        "dump_short",
        "task_names",
        "eval_bound_sec",
        "provider_host",
        "provider_address",
        "provider_ca_bundle",
        "provider_ca_targets",
        "eval_mounts",
        "agent_bound_sec",
        "agent_output_cap_bytes",
        "log_max_bytes",
        "cap_keep",
        "staging_root",
    },
    "result_index.jsonl": {"gateway", "tampering", "infra_cause"},
}


@pytest.mark.parametrize(
    "name,kind",
    [
        ("run_manifest.json", RunManifest),
        ("monitor.json", Monitor),
        ("processes.json", CustodyProcesses),
        ("shim_config.json", ShimConfig),
    ],
)
def test_a_document_written_by_the_old_models_reads_and_writes_back_the_same(name: str, kind: type) -> None:
    text = (WRITTEN / name).read_text(encoding="utf-8")
    record = decode(text, kind)
    assert_same_document(record.to_json(), text, ADDED_SINCE.get(name, set()), indent=2)


def assert_same_document(written: str, text: str, added_since: set[str], **dumps: object) -> None:
    """`written` is `text` key for key and in the same order, apart from optional fields added to the
    kind after the fixture was written (several hosts, the model gateway), which come back as null."""
    fields = json.loads(written)
    old = json.loads(text)
    if isinstance(fields.get("budgets"), dict) and isinstance(old.get("budgets"), dict):
        # The manifest's budgets became a typed record (Budgets) with the keys budget_record always
        # wrote; a key this hand-filled fixture left out comes back as null.
        budgets = fields["budgets"]
        assert all(budgets[key] is None for key in budgets if key not in old["budgets"])
        fields["budgets"] = {key: value for key, value in budgets.items() if key in old["budgets"]}
    if isinstance(fields.get("limits"), dict) and isinstance(old.get("limits"), dict):
        # Issue 37 added the shim's bounds to the manifest's limits: an old file lacks them (null).
        limits = fields["limits"]
        assert all(limits[key] is None for key in limits if key not in old["limits"])
        fields["limits"] = {key: value for key, value in limits.items() if key in old["limits"]}
    added = {key: value for key, value in fields.items() if key not in old}
    assert set(added) <= added_since and all(value is None for value in added.values())
    kept = {key: value for key, value in fields.items() if key not in added}
    assert json.dumps(kept, ensure_ascii=False, **dumps) + "\n" == text  # type: ignore[arg-type]


def test_an_old_campaign_file_reads_and_writes_back_the_same() -> None:
    text = (WRITTEN / "campaign.json").read_text(encoding="utf-8")
    record = parse_campaign(text)
    written = json.loads(record.to_json())
    # A reconciliation's previous usage (kept since issue 28) comes back as null in an old file's entries.
    for entry in written["reconciliations"]:
        assert entry.pop("previous_usage") is None and entry.pop("previous_usage_observed_at") is None
    # The derived keys recomputed, in the same place; `stop` (shared campaigns) comes back as null.
    assert_same_document(json.dumps(written, indent=2) + "\n", text, ADDED_SINCE["campaign.json"], indent=2)
    assert record.spent_usd == 2.5


def test_an_old_validity_table_and_inventory_read_and_write_back_the_same() -> None:
    text = (WRITTEN / "task_validity.json").read_text(encoding="utf-8")
    assert decode(text, TaskValidity).to_json() == text
    inventory = json.loads((WRITTEN / "inventory.json").read_text(encoding="utf-8"))  # as the manifest holds it
    assert convert(inventory, Inventory).to_manifest() == inventory


def test_an_old_entrypoint_config_reads_and_writes_back_the_same() -> None:
    text = (WRITTEN / "cowork_adapter_run.json").read_text(encoding="utf-8")
    config = decode(text, EntrypointConfigFile)
    assert config.to_json() == text and config.truncation_reason_codes == ["a", "z"]
    with pytest.raises(RecordInvalid, match="credentials"):
        config.replace(settings={"OPENROUTER_API_KEY": "x"})


def test_old_ledger_rows_and_events_read_and_write_back_the_same() -> None:
    ledger = (WRITTEN / "result_index.jsonl").read_text(encoding="utf-8")
    rows = read_index(WRITTEN / "result_index.jsonl")
    for row, line in zip(rows, ledger.splitlines(keepends=True), strict=True):
        assert_same_document(row.to_line(), line, ADDED_SINCE["result_index.jsonl"], separators=(",", ":"))
    lines = (WRITTEN / "events.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    events = [parse_event(json.loads(line)) for line in lines]
    assert len({type(e) for e in events}) == 20  # every kind of event is in the file
    assert [event.to_line() for event in events] == lines


def test_a_record_built_in_code_is_converted_and_checked_like_a_decoded_one() -> None:
    """What the pydantic models did on construction: coerce to the declared types, refuse bad values."""
    monitor = Monitor(observed_at="2026-01-01T00:00:00Z", launcher_pid=1, meter={"blindness_sec": 30})
    assert monitor.observed_at.year == 2026 and isinstance(monitor.meter, MeterState)
    assert monitor.meter.blindness_sec == 30.0 and '"blindness_sec": 30.0' in monitor.to_json()
    assert decode(monitor.to_json(), Monitor) == monitor
    for bad in ({"last_usage": math.nan}, {"last_usage": math.inf}, {"blindness_sec": 0}):
        with pytest.raises(RecordInvalid):
            MeterState(**{"blindness_sec": 30, **bad})
    with pytest.raises(RecordInvalid):
        Progress(done=-1)
    with pytest.raises(RecordInvalid):
        ProcessIdentity(pid=0)
    with pytest.raises(RecordInvalid, match="memory_swap_bytes must be at least memory_bytes"):
        ContainerLimits(cpus=1, memory_bytes=1 << 30, memory_swap_bytes=1 << 20, pids_limit=16)
    assert ContainerLimits(cpus=1, memory_bytes=1 << 30, pids_limit=16).memory_swap_bytes == 1 << 30
    with pytest.raises(RecordInvalid):
        TaskStarted(ts="t", task="a", kind=EventKind.RUN_FINISHED)  # a kind's class holds only its kind
    manifest = decode((WRITTEN / "run_manifest.json").read_text(encoding="utf-8"), RunManifest)
    assert manifest.replace(applied_config={"root": Path("/x")}).applied_config == {
        "root": "/x"
    }  # as pydantic wrote it
    assert (
        TaskRow(ts="t", instance_id="a", status="passed", reason_code="x", official_eval_status="completed")
        .replace(cpu_seconds=2)
        .cpu_seconds
        == 2.0
    )


def test_unknown_fields_and_unknown_kinds_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RecordInvalid, match="surprise"):
        decode(json.dumps({**json.loads((WRITTEN / "processes.json").read_text()), "surprise": 1}), CustodyProcesses)
    with pytest.raises(RecordInvalid):
        parse_event({"schema": "cowork_adapter.event.v1", "ts": "t", "kind": "no_such_kind"})
    with pytest.raises(RecordInvalid):
        parse_event({"ts": "t", "kind": "run_finished"})  # outcome is required
    log = EventLog(tmp_path / "events.jsonl")
    with pytest.raises(RecordInvalid):
        log.append(EventKind.METER_READING, usage="lots")
    log.append(EventKind.METER_READING, usage=1, extra={"k": None})
    written = (tmp_path / "events.jsonl").read_text()
    assert '"usage":1.0' in written and '"run_spent_usd"' not in written and '"extra":{"k":null}' in written
    assert (
        isinstance(log.read_new_typed()[0], MeterReading)
        and RunFinished is parse_event({"ts": "t", "kind": "run_finished", "outcome": "completed"}).__class__
    )


def test_a_manifest_with_the_retired_campaign_run_id_reads_as_its_shared_run(tmp_path: Path) -> None:
    """Shared hosts once wrote their host run's id twice (campaign_run_id and shared_run.run_id):
    such a manifest still reads everywhere a manifest is read, and is written back with it once."""
    from cowork_adapter.ops.run_view import read_run
    from cowork_adapter.runroot.manifest import read_manifest
    from cowork_adapter.schemas.manifest import SharedRun

    base = json.loads((WRITTEN / "run_manifest.json").read_text(encoding="utf-8"))
    shared = SharedRun(run_id="r1", host="h", lease_sec=60, claim_batch=1, claimed_file="claims.jsonl").to_dict()
    (tmp_path / "run_manifest.json").write_text(json.dumps({**base, "campaign_run_id": "r1", "shared_run": shared}))
    manifest = read_manifest(tmp_path)
    assert manifest.shared_run.run_id == "r1" and "campaign_run_id" not in manifest.to_json()
    assert read_run(tmp_path).manifest == manifest  # status reads it too
    for wrong, words in (
        ({"campaign_run_id": "r2", "shared_run": shared}, "is not its shared_run's run_id"),
        ({"campaign_run_id": "r1"}, "is not its shared_run's run_id"),
        ({"campaign_run_id": None, "another_field": 1}, "unknown field"),
    ):
        with pytest.raises(RecordInvalid, match=words):
            decode(json.dumps({**base, **wrong}), RunManifest)


def test_a_manifest_with_the_untyped_budgets_reads_as_the_budgets_record(tmp_path: Path) -> None:
    """Before Budgets, the manifest's budgets were a plain mapping with these keys (run/launch.budget_record):
    such a manifest reads, every key as the field of the same name, and writes the same keys back."""
    budgets = {
        "budget_usd": 20.0,
        "campaign_budget_usd": 1000.0,
        "budget_reserve_usd": 100.0,
        "prior_spend_usd": 0.0,
        "per_task_cost_usd": 25.0,
        "min_key_usd": 20.0,
        "meter": {
            "url": "https://openrouter.ai/api/v1",
            "blindness_sec": 30.0,
            "poll_sec": 15.0,
            "read_slice_sec": 5.0,
            "retry_sec": 2.0,
        },
        "min_free_gib": 200.0,
        "min_root_free_gib": 40.0,
        "resource_root": "/data",
        "api_key_env": "OPENROUTER_API_KEY",
    }
    base = json.loads((WRITTEN / "run_manifest.json").read_text(encoding="utf-8"))
    manifest = decode(json.dumps({**base, "budgets": budgets}), RunManifest)
    assert manifest.budgets.budget_usd == 20.0 and manifest.budgets.campaign_budget_usd == 1000.0
    assert manifest.budgets.meter is not None and manifest.budgets.meter.url == "https://openrouter.ai/api/v1"
    assert manifest.budgets.resource_root == "/data" and manifest.budgets.api_key_env == "OPENROUTER_API_KEY"
    # The dump bounds (issue 37) came later: such a manifest has none, and writes them back as null.
    assert json.loads(manifest.to_json())["budgets"] == {
        **budgets,
        "dump_max_gib": None,
        "dump_max_entries": None,
        "dump_max_depth": None,
    }
    # A dry run's bounds were written as null; an older manifest may lack a key: both read as None.
    sparse = decode(
        json.dumps({**base, "budgets": {"budget_usd": None, "meter": {"url": "http://m/api/v1"}}}), RunManifest
    )
    assert sparse.budgets.budget_usd is None and sparse.budgets.api_key_env is None
    assert sparse.budgets.meter is not None and sparse.budgets.meter.poll_sec is None
