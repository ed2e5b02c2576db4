"""score/taskdb.py: the pure comparison of the task database's two snapshots (issue 36).

Generated catalogs and rows (hypothesis, fixed seed): whatever the agent changes, code and
settings are always named, never hidden behind data; rows added / changed / removed add up to
the counts; an unchanged database is never flagged. The real server is tests/integration/test_taskdb_attacks.py.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from cowork_adapter.schemas.taskdb import (
    ResetReport,
    Snapshot,
    TableState,
    TaskDbBaseline,
    TaskDbEval,
)
from cowork_adapter.score.taskdb import CODE_KINDS, compare, findings, table_changes
from cowork_adapter.vocab import TamperKind

SEED = settings(max_examples=300, derandomize=True, deadline=None)
names = st.text(st.characters(codec="utf-8", exclude_characters="\x00:"), min_size=1, max_size=12)
digests = st.text("0123456789abcdef", min_size=4, max_size=4)
object_keys = st.tuples(st.sampled_from((*CODE_KINDS, "relation", "schema", "role")), names).map(
    lambda kv: f"{kv[0]}:s.{kv[1]}"
)
objects = st.dictionaries(object_keys, st.one_of(st.none(), digests), max_size=8)
settings_maps = st.dictionaries(st.text(min_size=1, max_size=10).map(lambda n: "db_role:" + n), digests, max_size=4)


def snap(objects=None, settings=None, tables=None, error=None) -> Snapshot:
    return Snapshot(
        taken_at=1.0,
        error=error,
        database="cowork_gym",
        objects=objects or {},
        settings=settings or {},
        tables=tables or {},
        builtin={"pg_proc": "x"},
    )


def run(before: Snapshot, after: Snapshot, left: dict | None = None):
    base = TaskDbBaseline(runner_id="1-a", when="after_preprocess", snapshot=before)
    ev = TaskDbEval(
        runner_id="1-a",
        reset=ResetReport(started_at=1.0, settings_before=left if left is not None else after.settings),
        after=after,
    )
    return compare(base, ev)


@SEED
@given(objects, settings_maps)
def test_an_unchanged_database_is_never_flagged(objs, sets):
    diff = run(snap(objs, sets), snap(objs, sets))
    assert findings(diff) == [] and diff.tables == [] and diff.code == []


@SEED
@given(objects, objects)
def test_every_code_object_added_removed_or_redefined_is_named(before, after):
    diff = run(snap(before), snap(after))
    changed = {
        k for k in set(before) | set(after) if before.get(k, "∅") != after.get(k, "∅") and k.split(":")[0] in CODE_KINDS
    }
    named = "\n".join(diff.code)
    assert all(k in named for k in changed)
    kinds = {f.kind for f in findings(diff)}
    assert (TamperKind.TASK_DB_CODE in kinds) == bool(diff.code or diff.settings)
    assert TamperKind.TASK_DB_UNCHECKED not in kinds


@SEED
@given(settings_maps, settings_maps)
def test_settings_the_agent_left_are_named_even_when_the_reset_undid_them(baseline, left):
    diff = run(snap(settings=baseline), snap(settings=baseline), left=left)
    differing = {k for k in set(baseline) | set(left) if baseline.get(k) != left.get(k)}
    assert {s.removeprefix("left by the agent: ") for s in diff.settings} == differing
    assert (TamperKind.TASK_DB_CODE in {f.kind for f in findings(diff)}) == bool(differing)


rows = st.dictionaries(digests, digests, max_size=30)


@SEED
@given(rows, rows)
def test_keyed_rows_added_changed_removed_add_up(before, after):
    [diff] = table_changes(
        {"s.t": TableState(rows=len(before), digest=str(sorted(before.items())), keyed=True, row_hashes=before)},
        {"s.t": TableState(rows=len(after), digest=str(sorted(after.items())), keyed=True, row_hashes=after)},
    ) or [None]
    if before == after:
        assert diff is None
        return
    assert diff.basis == "keyed"
    assert diff.rows_before - diff.removed + diff.added == diff.rows_after
    assert diff.changed == sum(1 for k in before.keys() & after.keys() if before[k] != after[k])


@SEED
@given(st.lists(digests, max_size=30), st.lists(digests, max_size=30))
def test_unkeyed_rows_are_a_multiset_in_any_order(before, after):
    def state(hs):
        return TableState(rows=len(hs), digest=str(sorted(hs)), row_hashes=sorted(hs))

    out = table_changes({"s.t": state(before)}, {"s.t": state(list(reversed(after)))})
    if Counter(before) == Counter(after):
        assert out == []
        return
    [diff] = out
    assert diff.rows_before - diff.removed + diff.added == diff.rows_after and diff.changed is None


def test_past_the_row_bound_only_counts_and_the_digest_are_compared():
    [diff] = table_changes({"s.t": TableState(rows=5000, digest="a")}, {"s.t": TableState(rows=5000, digest="b")})
    assert (diff.basis, diff.added, diff.removed) == ("digest", None, None)


def test_a_view_where_a_table_stood_and_a_shadowing_table_are_code():
    before = snap({"relation:crm.notes": "r|false|false", "role:eigent": "true"})
    after = snap(
        {
            "relation:crm.notes": "v|false|false",
            "relation:eigent.notes": "r|false|false",
            "relation:public.notes": "r|false|false",
            "relation:hr.notes": "r|false|false",
            "role:eigent": "true",
        }
    )
    diff = run(before, after)
    # eigent (the "$user" of the default search_path) and public come before crm on it; hr does not.
    assert diff.code == [
        "relation:crm.notes kind r -> v",
        "added relation:eigent.notes shadowing a relation of the same name",
        "added relation:public.notes shadowing a relation of the same name",
    ]


def test_what_cannot_be_cleared_is_unchecked_never_clean():
    ok = snap()
    cases = [
        (None, TaskDbEval(runner_id="1-a", after=ok)),
        (TaskDbBaseline(runner_id="1-a", when="no_marker"), TaskDbEval(runner_id="1-a", after=ok)),
        (
            TaskDbBaseline(runner_id="1-a", when="after_preprocess", late=True, snapshot=ok),
            TaskDbEval(runner_id="1-a", after=ok),
        ),
        (
            TaskDbBaseline(runner_id="1-a", when="after_preprocess", snapshot=snap(error="psql: timed out")),
            TaskDbEval(runner_id="1-a", after=ok),
        ),
        (
            TaskDbBaseline(runner_id="1-a", when="after_preprocess", snapshot=ok),
            TaskDbEval(runner_id="1-a", after=snap(error="x")),
        ),
        (
            TaskDbBaseline(runner_id="1-a", when="after_preprocess", snapshot=ok),
            TaskDbEval(
                runner_id="1-a", reset=ResetReport(started_at=1.0, errors=["process sweep: timed out"]), after=ok
            ),
        ),
        (
            TaskDbBaseline(runner_id="1-a", when="after_preprocess", snapshot=ok),
            TaskDbEval(runner_id="1-a", absent=True),
        ),
    ]
    for baseline, evaluated in cases:
        assert TamperKind.TASK_DB_UNCHECKED in {f.kind for f in findings(compare(baseline, evaluated))}, (
            baseline,
            evaluated,
        )
    # No database at either moment: nothing to check, nothing flagged.
    assert (
        compare(
            TaskDbBaseline(runner_id="1-a", when="after_preprocess", absent=True),
            TaskDbEval(runner_id="1-a", absent=True),
        )
        is None
    )


def test_the_audit_accounts_changed_tables_by_pg_tool_calls_or_flags_them_for_review():
    from pathlib import Path

    from cowork_adapter import demo
    from cowork_adapter.audit.taskdb import account, pg_servers
    from cowork_adapter.schemas.audit import McpServerActivity
    from cowork_adapter.schemas.taskdb import TableDiff, TaskDbDiff

    pg = pg_servers(Path(demo.__file__).parent / "bench")
    assert pg == ["crm"]  # the demo's one PostgreSQL-backed server; files, deck, quotes, terminal are not
    diff = TaskDbDiff(when="after_preprocess", tables=[TableDiff(table="crm.customers", change="changed", changed=3)])
    by_tools = account(diff, {"crm": McpServerActivity(calls=2, errors=1)}, {}, pg)
    assert (by_tools.for_review, by_tools.pg_tool_calls, by_tools.tables[0].accounted_by) == (False, 1, "pg_mcp_call")
    sql_alone = account(
        diff, {"files": McpServerActivity(calls=5), "crm": McpServerActivity(calls=1, errors=1)}, {}, pg
    )
    assert (sql_alone.for_review, sql_alone.tables[0].accounted_by) == (True, None)
    shell = account(diff, {}, {"direct_database_access": 1}, pg)
    assert (shell.for_review, shell.tables[0].accounted_by) == (False, "shell_database_client")
    assert account(TaskDbDiff(), {}, {}, pg).for_review is False  # nothing changed: nothing to account for


def test_a_sealed_pass_with_the_agents_code_in_its_database_is_not_scored_passed():
    from cowork_adapter.score.verdict import OfficialVerdict, taskdb_verdict
    from cowork_adapter.vocab import OfficialEvalStatus

    passed = OfficialVerdict(OfficialEvalStatus.COMPLETED, "evaluated", True)
    failed = OfficialVerdict(OfficialEvalStatus.COMPLETED, "evaluated", False)
    code = findings(run(snap({"relation:crm.notes": "r"}), snap({"relation:crm.notes": "v"})))
    unchecked = findings(compare(None, TaskDbEval(runner_id="1-a", after=snap())))
    assert taskdb_verdict(passed, code) == OfficialVerdict(OfficialEvalStatus.COMPLETED, "task_db_code", False)
    assert taskdb_verdict(passed, unchecked) == OfficialVerdict(
        OfficialEvalStatus.COMPLETED, "task_db_unchecked", False
    )
    assert taskdb_verdict(passed, []) == passed and taskdb_verdict(failed, code) == failed


def test_the_agent_phase_waits_for_the_host_only_when_the_shim_asks(tmp_path):
    import threading

    from cowork_adapter.container import taskdb_marker as marker
    from cowork_adapter.custody import taskdb_probe as probe

    # The two halves spell the protocol alike (the container package cannot import the shim's).
    assert (marker.MARKER_NAME, marker.ACK_NAME, marker.ACK_ENV) == (probe.MARKER_NAME, probe.ACK_NAME, probe.ACK_ENV)
    assert marker.prepared(str(tmp_path), "after_preprocess", {}) == "not_asked"
    assert not (tmp_path / marker.MARKER_NAME).exists()
    assert marker.prepared(str(tmp_path), "after_preprocess", {marker.ACK_ENV: "1"}, wait_sec=0.3) == "timeout"
    assert (tmp_path / marker.MARKER_NAME).read_text() == "after_preprocess"
    seen = threading.Event()

    def host():  # the shim's half: the marker seen, then the acknowledgement
        while not (tmp_path / "b" / marker.MARKER_NAME).exists():
            seen.wait(0.01)
        (tmp_path / "b" / marker.ACK_NAME).touch()

    (tmp_path / "b").mkdir()
    thread = threading.Thread(target=host)
    thread.start()
    assert (
        marker.prepared(str(tmp_path / "b"), "before_preprocess", {marker.ACK_ENV: "1"}, wait_sec=60) == "acknowledged"
    )
    thread.join()


def test_the_benchmark_servers_own_function_is_disclosed_but_the_same_name_with_another_body_is_code():
    from cowork_adapter.score.taskdb import SANCTIONED

    [(key, value)] = SANCTIONED.items()
    ok = run(snap(), snap({key: value}))
    assert ok.code == [] and findings(ok) == [] and ok.catalog == [f"added {key} (by the benchmark's own MCP server)"]
    forged = run(snap(), snap({key: value.replace("|false", "|true")}))
    assert forged.code == [f"added {key}"]
