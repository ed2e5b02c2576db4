"""The default route with the REAL Ouroboros 6.97.2 on the real Cowork Bench: the seed's OpenRouter
route, unchanged, with the provider key in no container.

Two runs of the same first task, the engine on its own OpenRouter route (no OpenAI-compatible
endpoint), each against a fresh chat stand-in playing OpenRouter:

- the baseline, the seed's path (--key-in-agent): the stand-in itself serves `https://openrouter.ai`
  (TLS on port 443 of the daemon's bridge address, a certificate of a test CA; the hidden test-bed
  flags make agent containers resolve the name to it and trust that CA). The key is in the agent
  container, as the seed has it: the scanner must find it there (so it can find it at all);
- the default route (no route flag): the run's gateway serves `https://openrouter.ai` and forwards to
  the stand-in (--provider-upstream-url, on loopback). While the task runs, every running container
  of the run is scanned for the key (its `docker inspect` configuration, every process's environ
  and cmdline, every file it wrote, the engine's settings file among them).

Then the stand-ins' logs are compared request by request: the same requests (method, path, the
credential's digest, header names, every body field but the conversation, the number of messages,
the tools offered), in the same order. Needs the real-benchmark test bed; under CI=true its absence fails.
"""

from __future__ import annotations

import hashlib
import json
import time

import docker
import pytest
from realbench_env import RealRun, key_leaks, labelled_left, read_rows, real_testbed
from test_realbench_upstream_gateway import _scan_running

from cowork_adapter.custody.labels import run_label
from cowork_adapter.demo.chat_standin import ChatStandin
from cowork_adapter.gateway.run import bridge_address
from cowork_adapter.gateway.tls import make_run_tls
from cowork_adapter.schemas.gateway import read_requests
from cowork_adapter.vocab import ExitCode

SETTLED = {"passed", "failed", "agent_failed"}
COST = 0.002
SEED_MAX_TOKENS = 65536  # what Ouroboros 6.97.2 asks for in every chat request
# Body fields that name one conversation rather than the request's shape: OpenRouter's sticky-routing
# id is a digest of the conversation (ouroboros/llm.py _openrouter_session_identity), whose prompt
# carries the run's own paths and times.
PER_CONVERSATION = frozenset({"session_id"})


def comparable(row: dict) -> dict:
    out = {k: v for k, v in row.items() if k != "fields"}
    if "fields" in row:
        out["fields"] = {k: v for k, v in row["fields"].items() if k not in PER_CONVERSATION}
        out["fields_named"] = sorted(row["fields"])
    return out


def _run(real: RealRun, name: str, task: str, extra: list[str], client, scan: bool) -> dict:
    run_root = real.run_root(name)
    scanned: dict[str, dict] = {}
    started = time.monotonic()
    proc = real.launch(real.args(name, [task], extra=extra, openrouter_route=True), name)
    while proc.poll() is None and time.monotonic() - started < 3000:
        if (run_root / "run_manifest.json").is_file():
            _scan_running(client, run_label(run_root), real.key, scanned)
        time.sleep(2)
    code = proc.wait(timeout=60)
    return {
        "exit": code,
        "root": run_root,
        "rows": read_rows(run_root),
        "scanned": scanned,
        "manifest": json.loads((run_root / "run_manifest.json").read_text()),
        "left": labelled_left(real.docker_host, run_label(run_root)),
        "seconds": time.monotonic() - started,
        "log": real.log_tail(name),
    }


@pytest.fixture(scope="module")
def both(docker_host, tmp_path_factory):
    bed = real_testbed()
    (task,) = bed.tasks(1)
    root = tmp_path_factory.mktemp("realbench-provider-tls")
    real = RealRun(bed, root / "root", docker_host).start()
    real.chat.stop()  # each run gets its own stand-in below
    real.chat = None
    client = docker.DockerClient(base_url=docker_host, timeout=120)
    address = bridge_address(docker_host)
    test_ca = make_run_tls(root / "test-ca", "baseline")  # the baseline stand-in's openrouter.ai certificate
    out: dict = {"real": real, "task": task}
    try:
        seed = ChatStandin(host=address, port=443, cost_per_request=COST, tls=test_ca.server_context()).start()
        try:
            out["baseline"] = _run(
                real,
                "baseline",
                task,
                [
                    "--key-in-agent",
                    "--provider-standin-address",
                    address,
                    "--provider-standin-bundle",
                    str(test_ca.bundle),
                ],
                client,
                scan=True,
            )
        finally:
            seed.stop()
        out["baseline"]["requests"] = seed.all_requests()
        standin = ChatStandin(host="127.0.0.1", cost_per_request=COST).start()
        try:
            # The gateway's output cap at the seed's own ask: its default (32768, disclosed in the run's
            # record) clamps Ouroboros 6.97.2's max_tokens 65536, the one field it would change.
            out["default"] = _run(
                real,
                "default",
                task,
                [
                    "--provider-upstream-url",
                    f"http://127.0.0.1:{standin.port}/api/v1",
                    "--llm-gateway-max-tokens",
                    str(SEED_MAX_TOKENS),
                ],
                client,
                scan=True,
            )
        finally:
            standin.stop()
        out["default"]["requests"] = standin.all_requests()
        out["default"]["gateway"] = read_requests(out["default"]["root"])
    finally:
        client.close()
        real.stop()
    for name in ("baseline", "default"):
        run = out[name]
        print(
            f"realbench provider-tls {name}: {run['seconds']:.0f} s, exit {run['exit']}, "
            f"requests {len(run['requests'])}, scanned {sorted(run['scanned'])}"
        )
    return out


def detail(run: dict) -> str:
    return f"exit {run['exit']}, rows {run['rows']}\n{run['log']}"


def first_difference(ours: list[dict], seed: list[dict]) -> str:
    """Where the two logs part: the first request that differs, field by field (pytest cuts a long diff)."""
    for index, (a, b) in enumerate(zip(ours, seed, strict=True)):
        a, b = comparable(a), comparable(b)
        if a != b:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            parts = []
            for k in keys:
                if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
                    sub = sorted(f for f in set(a[k]) | set(b[k]) if a[k].get(f) != b[k].get(f))
                    parts.append(
                        f"{k}: " + "; ".join(f"{f}: ours {a[k].get(f)!r:.200} seed {b[k].get(f)!r:.200}" for f in sub)
                    )
                else:
                    parts.append(f"{k}: ours {a.get(k)!r:.300} seed {b.get(k)!r:.300}")
            return f"request {index} ({a.get('path')}): " + " | ".join(parts)
    return f"{len(ours)} requests against the seed's {len(seed)}"


def test_both_runs_graded_the_task(both):
    for name in ("baseline", "default"):
        run = both[name]
        row = run["rows"].get(both["task"])
        assert row and row["status"] in SETTLED and row["official_eval_status"] == "completed", detail(run)
        assert run["exit"] == ExitCode.OK, detail(run)
        assert run["left"] == [], run["left"]
    record = both["default"]["manifest"]["llm_gateway"]
    assert record["route"] == "provider_tls" and record["container_url"] == "https://openrouter.ai/api/v1"
    assert both["baseline"]["manifest"].get("llm_gateway") is None


def _model_list(row: dict) -> bool:
    return row.get("method") == "GET" and row["path"].split("?")[0].endswith("/models")


def test_the_requests_equal_the_seeds_path_request_by_request(both):
    seed, ours = both["baseline"]["requests"], both["default"]["requests"]
    assert any(r["path"].endswith("/chat/completions") for r in seed), "the engine never called the model"
    # One known difference, disclosed by the run (gateway/run.py): the gateway answers no path without a
    # token, so the seed's token-less model-list (price) look-ups are refused on the default route, and
    # the gateway reads the model's price itself, with the key, once when it opens. Every other request
    # reaches the provider as the seed's path sends it.
    assert ours and _model_list(ours[0]), "the gateway's own price look-up did not come first"
    ours_rest = [r for r in ours[1:] if not _model_list(r) or r["auth_sha256"] is not None]
    seed_rest = [r for r in seed if not (_model_list(r) and r["auth_sha256"] is None)]
    assert [comparable(r) for r in ours_rest] == [comparable(r) for r in seed_rest], first_difference(
        ours_rest, seed_rest
    )
    assert all(r["auth_sha256"] is not None for r in ours), "a token-less request reached the provider"
    # The provider saw the key on both paths, never a token.
    bearer = hashlib.sha256(f"Bearer {both['real'].key}".encode()).hexdigest()
    assert {r["auth_sha256"] for r in ours if r["path"].endswith("/chat/completions")} == {bearer}
    # The gateway changed no chat body: each went upstream byte for byte.
    chats = [r for r in both["default"]["gateway"] if r.refused is None and r.path.endswith("/chat/completions")]
    assert chats and not any(r.changed for r in chats)


def test_the_key_is_in_no_container_on_the_default_route_and_in_the_agent_on_the_seeds(both):
    ours, seed = both["default"]["scanned"], both["baseline"]["scanned"]
    assert any(n.startswith("agent-") for n in ours), f"no agent container was scanned: {sorted(ours)}"
    hits = {n: s for n, s in ours.items() if s["config"] or s["hits"] or not s["scanned"]}
    assert hits == {}, hits
    # The scanner finds the key where the seed's path puts it (docker inspect, /proc/1/environ, settings).
    seeded = {n: s for n, s in seed.items() if n.startswith("agent-")}
    assert seeded and all(s["config"] and s["hits"] for s in seeded.values()), seeded
    assert not key_leaks(both["real"].root / "runs", both["real"].key)
