"""--campaign-db / --campaign-name: the campaign in PostgreSQL, checked as flags before anything starts."""

from __future__ import annotations

import pytest

from cowork_adapter.campaign.store import JsonFileCampaignStore
from cowork_adapter.config import RunConfig
from cowork_adapter.errors import Refusal
from cowork_adapter.run.spending import campaign_store


@pytest.fixture
def base(tmp_path) -> dict:
    return {
        "repo_dir": tmp_path / "seed",
        "bench_root": tmp_path / "bench",
        "run_root": tmp_path / "storage" / "run-1",
        "docker_host": "unix:///var/run/docker.sock",
    }


def refused(flags: dict) -> str:
    with pytest.raises(Refusal) as info:
        RunConfig.from_flags(**flags)
    return info.value.sentence


def test_a_paid_run_may_name_its_campaign_in_postgres_instead_of_a_file(base) -> None:
    cfg = RunConfig.from_flags(
        **base,
        campaign_db="postgresql://db.example:5432/campaigns",
        campaign_name="q4",
        new_campaign=True,
        prior_spend_usd=1.0,
    )
    assert cfg.money.campaign_file is None and cfg.money.campaign_db.endswith("/campaigns")
    assert cfg.money.campaign_location() == "postgresql://db.example:5432/campaigns campaign 'q4'"
    store = campaign_store(cfg.money)  # no connection is made until the store is used
    assert type(store).__name__ == "PostgresCampaignStore" and store.name == "q4"


def test_the_file_store_stays_the_default(base, tmp_path) -> None:
    cfg = RunConfig.from_flags(**base, campaign_file=tmp_path / "storage" / "campaign.json")
    assert isinstance(campaign_store(cfg.money), JsonFileCampaignStore)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"campaign_db": "postgresql://u:hunter2@db/c"}, "must not carry a password"),
        ({"campaign_db": "mysql://db/c"}, "must be a postgresql:// URL"),
        ({"campaign_db": "postgresql://db"}, "must name a database"),
        ({"campaign_db": "postgresql://db/c", "campaign_file": "/tmp/c.json"}, "not both"),
        ({"campaign_file": "/tmp/c.json", "campaign_name": "q4"}, "only meaningful with --campaign-db"),
        ({"campaign_db": "postgresql://db/c", "engine": "oracle"}, "oracle"),
        ({"campaign_db": "postgresql://db/c", "campaign_name": " "}, "1 to 200 characters"),
        ({"campaign_db": "postgresql://db/c", "campaign_name": "x" * 201}, "1 to 200 characters"),
    ],
)
def test_bad_campaign_db_flags_are_one_sentence(base, extra: dict, words: str) -> None:
    sentence = refused({**base, **extra})
    assert words in sentence and "hunter2" not in sentence
