"""Recovery ancestry (reference-adapter §5.9, §7 items 48-53): refusals, selection, settled work."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)

from cowork_adapter.errors import Refusal
from cowork_adapter.run.recovery import resolve_ancestry
from cowork_adapter.schemas.ledger import read_index
from cowork_adapter.score.ledger import build_index, write_index
from cowork_adapter.vocab import TaskStatus

DATASET = ["a", "b", "c", "d", "e", "f"]


def make_run(
    root: Path,
    selection: list[str],
    outcomes: dict[str, str],
    *,
    task_ids=None,
    resume_from=(),
    generation=0,
    **manifest_kw,
) -> Path:
    """A finished run whose tasks end as `outcomes` (pass/fail/agent/infra; others not attempted)."""
    return synth.ledger_run(
        root,
        selection,
        outcomes,
        task_ids=task_ids,
        resume_from=tuple(resume_from),
        generation=generation,
        **manifest_kw,
    )


def resolve(roots, explicit=None, **kw):
    args = dict(
        current_applied_config=synth.CONFIG,
        seed_head=synth.SEED_HEAD,
        bench_commit=synth.BENCH_COMMIT,
        image_id=synth.IMAGE_ID,
        explicit_selection=explicit,
        dataset_ids=DATASET,
    )
    args.update(kw)
    return resolve_ancestry(list(roots), **args)


@pytest.fixture
def chain(tmp_path):
    """run0 (a pass, b fail, c agent, d infra) → run1 (d pass, ran d only)."""
    r0 = make_run(tmp_path / "r0", ["a", "b", "c", "d"], {"a": "pass", "b": "fail", "c": "agent", "d": "infra"})
    r1 = make_run(tmp_path / "r1", ["a", "b", "c", "d"], {"d": "infra"}, task_ids=["d"], resume_from=[r0], generation=1)
    return r0, r1


def test_first_recovery_keeps_selection_and_skips_settled_including_genuine_failures(chain):
    r0, _ = chain
    plan = resolve([r0])
    assert plan.selection_task_ids == ["a", "b", "c", "d"]
    assert plan.remaining == ["d"]
    assert plan.settled == {
        "a": (TaskStatus.PASSED, str(r0)),
        "b": (TaskStatus.FAILED, str(r0)),
        "c": (TaskStatus.AGENT_FAILED, str(r0)),
    }
    assert plan.generation == 1 and plan.ancestors == [str(r0)]


def test_second_pass_allowed_third_refused(chain, tmp_path):
    r0, r1 = chain
    plan = resolve([r1])
    assert plan.generation == 2 and plan.remaining == ["d"] and set(plan.ancestors) == {str(r0), str(r1)}
    r2 = make_run(
        tmp_path / "r2", ["a", "b", "c", "d"], {"d": "infra"}, task_ids=["d"], resume_from=[r1, r0], generation=2
    )
    with pytest.raises(Refusal, match="at most two recovery passes") as err:
        resolve([r2])
    assert err.value.stage == "recovery"


def test_all_settled_third_pass_is_a_noop_keeping_the_parent_generation(chain, tmp_path):
    r0, r1 = chain
    r2 = make_run(
        tmp_path / "r2", ["a", "b", "c", "d"], {"d": "pass"}, task_ids=["d"], resume_from=[r1, r0], generation=2
    )
    plan = resolve([r2])
    assert plan.remaining == [] and plan.generation == 2
    assert plan.settled["d"] == (TaskStatus.PASSED, str(r2))


def test_explicit_selection_widens_without_repeating_settled(chain):
    r0, _ = chain
    plan = resolve([r0], explicit=["a", "d", "e", "f"])
    assert plan.selection_task_ids == ["a", "d", "e", "f"]
    assert plan.remaining == ["d", "e", "f"]
    assert set(plan.settled) == {"a"}


def test_explicit_selection_unknown_or_duplicate_refused(chain):
    r0, _ = chain
    with pytest.raises(Refusal, match="not in the pinned dataset"):
        resolve([r0], explicit=["a", "zzz"])
    with pytest.raises(Refusal, match="more than once"):
        resolve([r0], explicit=["a", "a"])


def test_multiple_parents_union_their_selections_never_the_full_dataset(tmp_path):
    p1 = make_run(tmp_path / "p1", ["a", "b"], {"a": "pass", "b": "infra"})
    p2 = make_run(tmp_path / "p2", ["c"], {"c": "infra"})
    plan = resolve([p1, p2])
    assert plan.selection_task_ids == ["a", "b", "c"]
    assert plan.remaining == ["b", "c"]
    assert "d" not in plan.selection_task_ids


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("applied_config", {**synth.CONFIG, "model": "other/model"}, "applied_config key 'model'"),
        ("seed_head", "f" * 40, "seed head"),
        ("bench_commit", "e" * 40, "benchmark commit"),
        ("image_id", "sha256:" + "9" * 64, "image ID"),
    ],
)
def test_identity_change_in_a_grand_ancestor_is_refused(tmp_path, field, value, needle):
    r0 = make_run(tmp_path / "r0", ["a", "b"], {"a": "pass", "b": "infra"}, **{field: value})
    r1 = make_run(tmp_path / "r1", ["a", "b"], {"b": "infra"}, task_ids=["b"], resume_from=[r0], generation=1)
    with pytest.raises(Refusal) as err:
        resolve([r1])
    assert needle in err.value.sentence and str(r0) in err.value.sentence
    assert err.value.sentence.count(". ") == 0  # one sentence


def test_missing_diagnostic_flag_counts_as_false(tmp_path):
    config = {k: v for k, v in synth.CONFIG.items() if k != "diagnostic_eval_on_truncation"}
    r0 = make_run(tmp_path / "r0", ["a"], {"a": "infra"}, applied_config=config)
    assert resolve([r0]).remaining == ["a"]
    with pytest.raises(Refusal, match="diagnostic_eval_on_truncation"):
        resolve([r0], current_applied_config={**synth.CONFIG, "diagnostic_eval_on_truncation": True})


def test_cycle_refused(tmp_path):
    a, b = tmp_path / "ra", tmp_path / "rb"
    make_run(a, ["a"], {"a": "infra"}, resume_from=[b], generation=1)
    make_run(b, ["a"], {"a": "infra"}, resume_from=[a], generation=1)
    with pytest.raises(Refusal, match="cycle"):
        resolve([a])


def test_missing_ancestor_ledger_is_recoverable_from_manifest_and_dumps(chain):
    r0, r1 = chain
    (r0 / "result_index.jsonl").unlink()
    (r1 / "result_index.jsonl").unlink()
    plan = resolve([r1])
    assert plan.remaining == ["d"]
    assert plan.settled == {
        "a": (TaskStatus.PASSED, str(r0)),
        "b": (TaskStatus.FAILED, str(r0)),
        "c": (TaskStatus.AGENT_FAILED, str(r0)),
    }


def test_unreadable_ledger_is_ignored(chain):
    r0, _ = chain
    (r0 / "result_index.jsonl").write_text("{not json\n")
    assert resolve([r0]).remaining == ["d"]


def test_ledger_rows_never_settle_a_task_the_dumps_do_not(tmp_path):
    # The ledger is a view, not an authority: a row claiming "passed" without a receipt behind it
    # (edited, or left from another build) does not stop the task from running.
    r0 = make_run(tmp_path / "r0", ["a", "b"], {"a": "pass", "b": "infra"})
    rows = read_index(r0 / "result_index.jsonl")
    write_index(r0, [r.replace(status=TaskStatus.PASSED) for r in rows])
    assert resolve([r0]).remaining == ["b"]


def _killed_with_stale_ledger(tmp_path: Path) -> Path:
    """A run killed mid-way: its last live ledger predates receipts that its eval containers wrote."""
    r0 = tmp_path / "r0"
    synth.write_manifest(r0, ["a", "b", "c", "d"], outcome="running")
    for task in ("a", "b", "c"):
        synth.write_start_evidence(synth.dump_dir(r0, task))
    write_index(r0, build_index(r0, live=True, interruption_cause="in_progress"))
    assert all(r.provisional for r in read_index(r0 / "result_index.jsonl"))
    for task, verdict in (("a", True), ("b", False)):
        dump = synth.dump_dir(r0, task)
        synth.write_traj_log(dump, "success")  # no summary: the launcher died before anything else
        synth.write_eval(dump, {"pass": verdict})
    return r0


def test_receipts_in_an_ancestor_with_a_stale_ledger_are_settled_and_not_rerun(tmp_path):
    r0 = _killed_with_stale_ledger(tmp_path)
    plan = resolve([r0])
    assert plan.remaining == ["c", "d"]
    assert plan.settled == {"a": (TaskStatus.PASSED, str(r0)), "b": (TaskStatus.FAILED, str(r0))}


def test_receipts_in_a_grand_ancestor_with_a_stale_ledger_are_never_rerun(tmp_path):
    r0 = _killed_with_stale_ledger(tmp_path)
    r1 = make_run(
        tmp_path / "r1",
        ["a", "b", "c", "d"],
        {"c": "pass"},
        task_ids=["a", "b", "c", "d"],
        resume_from=[r0],
        generation=1,
    )
    (r1 / "result_index.jsonl").unlink()
    plan = resolve([r1])
    assert plan.remaining == ["d"] and plan.generation == 2
    assert plan.settled["a"] == (TaskStatus.PASSED, str(r0)) and plan.settled["c"] == (TaskStatus.PASSED, str(r1))


def test_killed_run_without_any_ledger_is_recoverable(tmp_path):
    r0 = _killed_with_stale_ledger(tmp_path)
    (r0 / "result_index.jsonl").unlink()
    plan = resolve([r0])
    assert plan.remaining == ["c", "d"] and set(plan.settled) == {"a", "b"}


def test_an_ancestor_whose_dumps_are_gone_is_refused(chain):
    r0, r1 = chain
    shutil.rmtree(r0 / "bench")
    with pytest.raises(Refusal, match="working copy with the task dumps is gone") as err:
        resolve([r1])
    assert str(r0) in err.value.sentence and err.value.sentence.count(". ") == 0


@pytest.mark.parametrize("damage", ["missing", "unreadable"])
def test_missing_or_unreadable_ancestor_manifest_refused_in_one_sentence(chain, damage):
    r0, r1 = chain
    if damage == "missing":
        (r0 / "run_manifest.json").unlink()
    else:
        (r0 / "run_manifest.json").write_text('{"run_root": ')
    with pytest.raises(Refusal, match="manifest .* missing or unreadable") as err:
        resolve([r1])
    assert err.value.stage == "recovery" and str(r0) in err.value.sentence
    assert err.value.sentence.count(". ") == 0 and err.value.sentence.endswith(".")


def test_recorded_generation_must_match(tmp_path):
    r0 = make_run(tmp_path / "r0", ["a"], {"a": "infra"})
    r1 = make_run(tmp_path / "r1", ["a"], {"a": "infra"}, resume_from=[r0], generation=5)
    with pytest.raises(Refusal, match="generation"):
        resolve([r1])


def test_empty_image_id_refused(chain):
    r0, _ = chain
    with pytest.raises(Refusal, match="image"):
        resolve([r0], image_id="")


# ---- a resume continues its ancestors' campaign (issue 28) ----------------------------------------

from cowork_adapter.run.recovery import CampaignPlace, campaign_refusal  # noqa: E402
from cowork_adapter.schemas.manifest import RunManifest  # noqa: E402
from cowork_adapter.schemas.record import decode  # noqa: E402


def _with_campaign(root: Path, *, file=None, db=None, name=None, custody=True) -> Path:
    path = root / "run_manifest.json"
    manifest = decode(path.read_bytes(), RunManifest).replace(campaign_file=file, campaign_db=db, campaign_name=name)
    path.write_text(manifest.to_json())
    if custody:  # written after the run registered in its campaign
        (root / "custody").mkdir(exist_ok=True)
        (root / "custody" / "processes.json").write_text("{}")
    return root


def test_a_resume_under_its_ancestors_campaign_file_is_admitted(chain, tmp_path):
    r0, r1 = (_with_campaign(r, file=str(tmp_path / "c.json")) for r in chain)
    assert campaign_refusal([str(r1), str(r0)], CampaignPlace.of(tmp_path / "c.json", None, None), True) is None


def test_a_resume_naming_another_campaign_is_refused(chain, tmp_path):
    r0, r1 = chain
    _with_campaign(r0, file=str(tmp_path / "c.json"))
    _with_campaign(r1, file=str(tmp_path / "c.json"))
    other = campaign_refusal([str(r1), str(r0)], CampaignPlace.of(tmp_path / "other.json", None, None), True)
    assert other == (
        f"Ancestor {r1} ran under the campaign file {tmp_path / 'c.json'}, but this resume names the "
        f"campaign file {tmp_path / 'other.json'}; a resume must use its ancestors' campaign."
    )
    none = campaign_refusal([str(r1), str(r0)], CampaignPlace(), True)
    assert none is not None and "names no campaign" in none
    in_db = campaign_refusal([str(r1)], CampaignPlace.of(None, "postgresql://db/c", "q4"), True)
    assert in_db is not None and "the campaign 'q4' in postgresql://db/c" in in_db


def test_an_older_ancestor_under_another_campaign_is_refused(chain, tmp_path):
    r0, r1 = chain
    _with_campaign(r0, file=str(tmp_path / "old.json"))
    _with_campaign(r1, file=str(tmp_path / "c.json"))
    sentence = campaign_refusal([str(r1), str(r0)], CampaignPlace.of(tmp_path / "c.json", None, None), True)
    assert sentence is not None and sentence.startswith(
        f"Ancestor {r0} ran under the campaign file {tmp_path / 'old.json'}"
    )


def test_a_campaign_in_postgres_binds_its_database_and_name(chain):
    r0, _ = chain
    _with_campaign(r0, db="postgresql://db/c", name="q4")
    assert campaign_refusal([str(r0)], CampaignPlace.of(None, "postgresql://db/c", "q4"), True) is None
    assert "'q5'" in campaign_refusal([str(r0)], CampaignPlace.of(None, "postgresql://db/c", "q5"), True)
    assert campaign_refusal([str(r0)], CampaignPlace.of(None, "postgresql://db2/c", "q4"), True) is not None


def test_a_resume_never_starts_a_new_baseline_where_its_ancestors_campaign_was(chain, tmp_path):
    r0, _ = chain
    _with_campaign(r0, file=str(tmp_path / "c.json"))
    sentence = campaign_refusal([str(r0)], CampaignPlace.of(tmp_path / "c.json", None, None), False)
    assert sentence == (
        f"Ancestor {r0} ran under the campaign file {tmp_path / 'c.json'}, which no longer exists; "
        "a resume continues its ancestors' campaign and never starts a new one."
    )


def test_an_ancestor_killed_before_it_registered_lets_its_resume_create_the_campaign(chain, tmp_path):
    r0, _ = chain
    _with_campaign(r0, file=str(tmp_path / "c.json"), custody=False)  # killed before start_run: nothing spent
    assert campaign_refusal([str(r0)], CampaignPlace.of(tmp_path / "c.json", None, None), False) is None
