"""The runner's environment carries what each of the benchmark's engines reads (issue 16 b)."""

from __future__ import annotations

from types import SimpleNamespace

from run_flags import config_for  # tests/run_flags.py: tests/ is on sys.path (its conftest)

from cowork_adapter.run.runner_env import runner_env
from cowork_adapter.schemas.run_config import OPENROUTER_CHAT_URL, agent_short_name


class PassThrough:
    def environment(self, base):
        return dict(base)


def _env(**fields) -> dict:
    cfg = config_for(
        **{"model": "vendor/m-1", "max_steps": 9, "task_timeout": 600, "api_key_env": "COWORK_TEST_KEY", **fields}
    )
    manifest = SimpleNamespace(image=SimpleNamespace(id="sha256:abc"))
    return runner_env(cfg, manifest, PassThrough())


def test_a_compatible_endpoint_reaches_both_engines_variables():
    env = _env(engine="upstream:main_strands.py", openai_compatible_base_url="http://10.0.0.1:8000/v1")
    assert env["LLM_BASE_URL"] == env["MODEL_API_URL"] == "http://10.0.0.1:8000/v1"
    assert env["LLM_MODEL"] == env["MODEL_NAME"] == "vendor/m-1"
    assert env["MODEL_PROVIDER"] == "openai"


def test_without_a_compatible_endpoint_the_engines_get_openrouter():
    env = _env(engine="upstream:main.py", openai_compatible_base_url="")
    assert env["LLM_BASE_URL"] == env["MODEL_API_URL"] == OPENROUTER_CHAT_URL
    assert env["MODEL_PROVIDER"] == "openrouter"


def test_each_engine_dump_folder_is_the_one_it_writes():
    def short(engine: str) -> str:
        return agent_short_name(config_for(engine=engine, model="m", openai_compatible_base_url=""))

    assert short("upstream:main_strands.py") == "strands/m"  # main_strands.py: dumps/strands_<model>/
    assert short("upstream:main.py") == "openrouter/m"  # main.py: dumps/<MODEL_PROVIDER>_<MODEL_NAME>/
    assert short("ouroboros") == "ouroboros/m"
