"""Refusals decided in preflight without writing anything: a campaign lock held by another process
(tested, never created), and the recovery checks that need no image built yet."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py

from cowork_adapter.campaign.store import JsonFileCampaignStore
from cowork_adapter.errors import Refusal
from cowork_adapter.run.recovery import resolve_ancestry

DATASET = ["a", "b", "c"]


def test_a_missing_lock_file_is_a_free_lock_and_is_not_created(tmp_path):
    store = JsonFileCampaignStore(tmp_path / "campaign.json")
    store.refuse_if_locked()
    assert list(tmp_path.iterdir()) == []


def test_a_held_lock_is_refused_and_a_free_one_left_as_it_was(tmp_path):
    store = JsonFileCampaignStore(tmp_path / "campaign.json")
    store.lock_path.write_text("")
    before = store.lock_path.stat()
    holder = os.open(store.lock_path, os.O_RDWR)  # another open file description: as another launcher
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(Refusal) as refused:
            store.refuse_if_locked()
        assert "is locked by another launcher or command" in refused.value.sentence
        fcntl.flock(holder, fcntl.LOCK_UN)
        store.refuse_if_locked()  # released: admitted, and the probe let go of it again
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(holder)
    after = store.lock_path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["campaign.json.lock"]


def _ancestor(root: Path, **manifest_kw) -> Path:
    synth.write_manifest(root, ["a", "b", "c"], **manifest_kw)
    synth.dump_dir(root, "a")  # its working copy with the dumps exists (dump_dir creates it)
    return root


def _preflight(roots, **kw):
    args = dict(
        current_applied_config=synth.CONFIG,
        seed_head=synth.SEED_HEAD,
        bench_commit=synth.BENCH_COMMIT,
        image_id=None,
        image_pending=True,
        explicit_selection=None,
        dataset_ids=DATASET,
    )
    args.update(kw)
    return resolve_ancestry(list(roots), **args)


def test_recovery_in_preflight_checks_all_but_an_image_still_to_be_built(tmp_path):
    same = _ancestor(tmp_path / "same")
    assert _preflight([same]).remaining == ["a", "b", "c"]  # any recorded image may match the one built later
    other_seed = _ancestor(tmp_path / "seed", seed_head="0" * 40)
    with pytest.raises(Refusal, match="seed head"):
        _preflight([other_seed])
    no_image = _ancestor(tmp_path / "no-image", image_id=None)
    with pytest.raises(Refusal, match="none recorded there"):
        _preflight([no_image])
    with pytest.raises(Refusal, match="manifest"):
        _preflight([tmp_path / "absent"])


def test_without_image_pending_the_image_id_is_still_required(tmp_path):
    same = _ancestor(tmp_path / "same")
    with pytest.raises(Refusal, match="immutable image ID"):
        _preflight([same], image_pending=False)
    with pytest.raises(Refusal, match="image ID"):
        _preflight([same], image_pending=False, image_id="sha256:" + "9" * 64)
