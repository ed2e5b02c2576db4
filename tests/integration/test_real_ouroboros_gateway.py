"""The REAL Ouroboros server (6.97.2) completes a demo task with --llm-gateway.

Same setup as test_real_ouroboros.py (the seed from COWORK_REAL_OUROBOROS_SEED or the test bed),
but the chat stand-in, the provider, listens on the host's loopback only: the server reaches it
solely through the launcher's gateway, with its task's token, routed as
`openai-compatible::<model>`. Checked: the task passes; every request the provider served is one
gateway row of that task with the provider's usage; the ledger row carries the same spend; the
manifest discloses the routing; the key is in no file of the run root.
"""

from __future__ import annotations

import json
import time

from test_real_ouroboros import TASK, evidence, real_seed, real_server_args  # noqa: F401 - real_seed is a fixture

from cowork_adapter.demo.chat_standin import DEFAULT_MODEL_ID, ChatStandin
from cowork_adapter.demo.env import key_leaks, prepare, read_json, read_rows
from cowork_adapter.schemas.gateway import read_requests

COST = 0.002


def test_real_server_completes_a_demo_task_through_the_gateway(real_seed, docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("real-ouroboros-gateway") / "root", docker_host)
    standin = ChatStandin(host="127.0.0.1", port=0, model_id=DEFAULT_MODEL_ID, cost_per_request=COST).start()
    try:
        args = real_server_args(
            env, "real-gw", real_seed, ["--llm-gateway", "--openai-compatible-base-url", standin.base_url]
        )
        started = time.monotonic()
        proc = env.launch(args, "real-gw")
        code = proc.wait(timeout=3600)
        run_root = env.run_root("real-gw")
        rows = read_rows(run_root)
        detail = evidence(run_root, standin, env.root / "real-gw.log")
        print(f"real Ouroboros through the gateway: exit {code} in {time.monotonic() - started:.0f}s")
        assert rows.get(TASK, {}).get("status") == "passed", f"row {rows.get(TASK)}; exit {code}\n{detail}"
        assert code == 0, f"launcher exit {code}\n{detail}"
        served = standin.chat_requests()
        assert standin.counts.get("tool_call", 0) >= 3 and served, detail
        # Every provider request came through the gateway, under this task's token, with the provider's usage.
        log = read_requests(run_root)
        chats = [r for r in log if r.path.endswith("/chat/completions") and r.refused is None]
        assert len(chats) == len(served) and not [r for r in log if r.refused == "auth"], log
        assert len({r.task for r in chats}) == 1
        assert [(r.prompt_tokens, r.completion_tokens) for r in chats] == [
            (s["prompt_tokens"], s["completion_tokens"]) for s in served
        ]
        assert all(r.model == DEFAULT_MODEL_ID and r.cost_usd == COST for r in chats)
        gateway = rows[TASK]["gateway"]
        assert gateway["forwarded"] >= len(served) and gateway["unknown_cost_requests"] == 0
        assert abs(gateway["cost_usd"] - COST * len(served)) < 1e-9
        manifest = read_json(run_root / "run_manifest.json")
        record = manifest["llm_gateway"]
        assert record["routed_model"] == f"openai-compatible::{DEFAULT_MODEL_ID}"
        assert any("OpenRouter pricing" in d for d in record["disclosures"])
        assert key_leaks(run_root, env.key) == []
        # The server was given the gateway's URL, and its settings (the dump's copy, credential dropped) no key.
        applied = json.loads(
            next(run_root.glob(f"bench/dumps/*/SingleUserTurn-{TASK}/applied_settings.json")).read_text()
        )
        assert applied["OPENAI_COMPATIBLE_BASE_URL"] == record["container_url"]
    finally:
        standin.stop()
        env.meter.stop()
