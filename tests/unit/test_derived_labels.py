"""The derived image's labels bind the base image's ID: a base rebuilt under the same tag is a mismatch."""

from __future__ import annotations

from pathlib import Path

from cowork_adapter.image.derived import (
    LABEL_BASE_ID,
    LABEL_BENCH,
    LABEL_ENTRY,
    LABEL_SEED,
    ImageRequest,
    container_digest,
    label_mismatch,
)

OLD, NEW = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def request(base_id: str | None) -> ImageRequest:
    return ImageRequest(
        tag="derived:t",
        base_image="cowork-pack:d943e75",
        seed_dir=Path("/seed"),
        seed_head="1" * 40,
        bench_commit="2" * 40,
        base_image_id=base_id,
    )


def labels(base_id: str | None) -> dict[str, str]:
    out = {LABEL_SEED: "1" * 40, LABEL_BENCH: "2" * 40, LABEL_ENTRY: container_digest()}
    return {**out, LABEL_BASE_ID: base_id} if base_id else out


def test_an_image_built_on_the_current_base_matches():
    assert label_mismatch("derived:t", labels(OLD), request(OLD)) is None


def test_a_base_rebuilt_under_the_same_tag_is_a_mismatch_naming_both_ids():
    sentence = label_mismatch("derived:t", labels(OLD), request(NEW))
    assert sentence == (
        f"image derived:t was built on {OLD[:19]}, but cowork-pack:d943e75 is now {NEW[:19]}; "
        "pass --build-image to rebuild it"
    )


def test_an_image_without_the_base_label_is_a_mismatch():
    assert "was built on an unrecorded base" in label_mismatch("derived:t", labels(None), request(NEW))


def test_the_seed_is_still_checked_first():
    assert f"label {LABEL_SEED}=" in label_mismatch("derived:t", {**labels(OLD), LABEL_SEED: "9" * 40}, request(NEW))
