"""The infra rule (score/infra.py, issue 36): infra_failed only with a cause the host saw.

A table of settle() over claims and host facts; a property over everything the agent can write
(its summary, a missing or unreadable one, tamper findings, the exec's exit it can cause) with no
host cause: never infra_failed from an agent-side claim; then the same from real run-root files
(the shim's exec record and OOM reading, the gateway log), and recovery reruns only host causes.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import synthetic_run as synth  # tests/synthetic_run.py: tests/ is on sys.path (its conftest)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowork_adapter.run.recovery import resolve_ancestry
from cowork_adapter.schemas.gateway import GatewayRequest, encode_row
from cowork_adapter.schemas.ledger import TamperFinding
from cowork_adapter.schemas.manifest import GatewayRecord
from cowork_adapter.score import infra
from cowork_adapter.score.ledger import build_index
from cowork_adapter.score.row import TaskFacts, classify
from cowork_adapter.vocab import InfraCause as C
from cowork_adapter.vocab import OfficialEvalStatus as E
from cowork_adapter.vocab import TamperKind as K
from cowork_adapter.vocab import TaskStatus as S

NOTHING = infra.HostFacts(
    recorded=True,
    exec_started=True,
    exec_ended=True,
    exec_exit=0,
    gateway=True,
    model_answers=3,
    engine_acts_only_by_model=True,
)
PROVIDER = {"bench_status": "failed", "infra_failed": True, "reason_code": "llm_api_error"}
OK = {"bench_status": "success", "infra_failed": False, "reason_code": None}
PLANTED = TamperFinding(kind=K.PLANTED_BEFORE_EVAL, detail="eval_res.json:fifo")


def settle(
    status=S.INFRA_FAILED,
    reason="llm_api_error",
    provisional=False,
    *,
    host=NOTHING,
    state="present",
    summary=PROVIDER,
    findings=(),
):
    return infra.settle(status, reason, provisional, host=host, summary_state=state, summary=summary, findings=findings)


# (id, settle kwargs, expected (status, reason prefix, cause), flagged unverified_infra_claim)
TABLE = [
    ("provider claim, no host cause", {}, (S.AGENT_FAILED, "unverified_infra:llm_api_error", None), True),
    (
        "provider claim, gateway saw a 503",
        {"host": replace(NOTHING, provider_errors=1)},
        (S.INFRA_FAILED, "llm_api_error", C.PROVIDER_ERRORS),
        False,
    ),
    (
        "provider claim, key in agent (no gateway)",
        {"host": replace(NOTHING, gateway=False)},
        (S.AGENT_FAILED, "unverified_infra:llm_api_error", None),
        True,
    ),
    (
        "dead entrypoint: no summary after the exec ended",
        {
            "reason": "interrupted:runner_exited",
            "state": "absent",
            "summary": None,
            "host": replace(NOTHING, exec_exit=137),
        },
        (S.AGENT_FAILED, "unverified_infra:interrupted:runner_exited", None),
        True,
    ),
    (
        "dead server claimed",
        {"reason": "server_died", "summary": {**PROVIDER, "reason_code": "server_died"}},
        (S.AGENT_FAILED, "unverified_infra:server_died", None),
        True,
    ),
    (
        "upstream engine without traj_log.json",
        {"reason": "upstream_exit_1", "host": replace(NOTHING, engine_acts_only_by_model=False, model_answers=0)},
        (S.AGENT_FAILED, "unverified_infra:upstream_exit_1", None),
        True,
    ),
    (
        "unreadable summary",
        {"reason": "adapter_summary_unreadable", "state": "unreadable", "summary": None},
        (S.AGENT_FAILED, "unverified_infra:adapter_summary_unreadable", None),
        True,
    ),
    (
        "OOM kill read before removal",
        {"host": replace(NOTHING, oom_killed=True), "state": "absent", "summary": None},
        (S.INFRA_FAILED, "llm_api_error", C.OOM_KILLED),
        False,
    ),
    (
        "the run was stopped",
        {"host": replace(NOTHING, stop="signal_15"), "state": "absent", "summary": None},
        (S.INFRA_FAILED, "llm_api_error", C.RUN_STOPPED),
        False,
    ),
    (
        "the daemon was lost",
        {"host": replace(NOTHING, stop="docker_daemon_lost")},
        (S.INFRA_FAILED, "llm_api_error", C.DAEMON_LOST),
        False,
    ),
    (
        "docker could not run the exec",
        {"host": replace(NOTHING, exec_exit=126)},
        (S.INFRA_FAILED, "llm_api_error", C.EXEC_LOST),
        False,
    ),
    (
        "the shim never saw the exec end (our death)",
        {"host": replace(NOTHING, exec_ended=False, exec_exit=None), "state": "absent", "summary": None},
        (S.INFRA_FAILED, "llm_api_error", C.EXEC_CUT),
        False,
    ),
    (
        "pg_fail before any agent exec",
        {
            "reason": "pg_fail",
            "host": replace(NOTHING, runner_pg_fail=True, exec_started=False, exec_ended=False, exec_exit=None),
        },
        (S.INFRA_FAILED, "pg_fail", C.PG_FAIL),
        False,
    ),
    (
        "pg_fail row after an agent exec is not the runner's alone",
        {"reason": "pg_fail", "host": replace(NOTHING, runner_pg_fail=True)},
        (S.AGENT_FAILED, "unverified_infra:pg_fail", None),
        True,
    ),
    (
        "Ouroboros with no model answer at all",
        {"reason": "mcp_start_failed", "host": replace(NOTHING, model_answers=0)},
        (S.INFRA_FAILED, "mcp_start_failed", C.NO_MODEL_ANSWER),
        False,
    ),
    (
        "oracle / nop: no agent ran",
        {"reason": "preprocess_failed", "host": replace(NOTHING, gateway=False, reference_engine=True)},
        (S.INFRA_FAILED, "preprocess_failed", C.NO_AGENT),
        False,
    ),
    (
        "eval gave no verdict, nothing tampered",
        {"reason": "official_eval_unknown", "summary": OK},
        (S.INFRA_FAILED, "official_eval_unknown", C.EVAL_NO_VERDICT),
        False,
    ),
    (
        "eval gave no verdict after tampering",
        {"reason": "official_eval_unknown", "summary": OK, "findings": (PLANTED,)},
        (S.AGENT_FAILED, "no_verdict_after_tampering:official_eval_unknown", None),
        False,
    ),
    (
        "a refused mount is not the agent's",
        {"reason": "official_eval_unknown", "summary": OK, "findings": (TamperFinding(kind=K.OUTSIDE_OWN_DUMP),)},
        (S.INFRA_FAILED, "official_eval_unknown", C.EVAL_NO_VERDICT),
        False,
    ),
    (
        "a run from before the host facts",
        {"host": infra.HostFacts()},
        (S.INFRA_FAILED, "llm_api_error", C.LEGACY_UNVERIFIED),
        False,
    ),
    ("live and provisional: unchanged", {"provisional": True}, (S.INFRA_FAILED, "llm_api_error", None), False),
    (
        "live, a claim while the exec still runs: not judged yet",
        {"host": replace(NOTHING, exec_ended=False, final=False)},
        (S.INFRA_FAILED, "llm_api_error", None),
        False,
    ),
    (
        "not infra: unchanged",
        {"status": S.FAILED, "reason": "verifier_failed"},
        (S.FAILED, "verifier_failed", None),
        False,
    ),
]


@pytest.mark.parametrize("kw,want,flagged", [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_settle_table(kw, want, flagged):
    got = settle(**kw)
    assert (got.status, got.reason, got.cause) == want
    assert [f.kind for f in got.found] == ([K.UNVERIFIED_INFRA_CLAIM] if flagged else [])


# ---------------------------------------------------------------- what the agent can write, alone

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
SUMMARY_KEYS = st.sampled_from(["bench_status", "infra_failed", "reason_code", "truncated", "task_submission_started"])
SUMMARIES = st.dictionaries(
    SUMMARY_KEYS,
    JSON
    | st.sampled_from(
        ["success", "failed", "llm_api_error", "provider_unavailable", "server_died", "upstream_exit_1", True, False]
    ),
    max_size=5,
)
# Exit codes the agent can give its own exec: its entrypoint's 0, or a signal it sends it (128+n).
AGENT_EXITS = st.sampled_from([None, 0, 1, 2]) | st.integers(min_value=129, max_value=159)
KINDS = st.sampled_from(list(K))


@settings(max_examples=400, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    state=st.sampled_from(["absent", "unreadable", "present"]),
    summary=SUMMARIES,
    exit_=AGENT_EXITS,
    gateway=st.booleans(),
    answers=st.integers(min_value=1, max_value=5),
    by_model=st.booleans(),
    runner=st.none() | st.sampled_from(["agent_fail", "eval_fail", "pass", "pg_fail", ""]),
    evidence=st.booleans(),
    official=st.sampled_from(list(E)),
    kinds=st.lists(KINDS, max_size=3),
)
def test_no_agent_written_input_alone_yields_infra_failed(
    state, summary, exit_, gateway, answers, by_model, runner, evidence, official, kinds
):
    facts = TaskFacts(
        instance_id="t",
        runner_status=runner,
        summary_state=state,
        summary=summary if state == "present" else None,
        start_evidence=("ouroboros",) if evidence else (),
        official_status=official,
        official_pass=None,
    )
    status, reason, provisional = classify(facts, live=False, interruption_cause="runner_exited")
    # The host saw nothing: no stop, no OOM kill, no provider error, a model that answered, an exec
    # that began and ended (the shim records its end first, apart from anything the agent left).
    host = infra.HostFacts(
        recorded=True,
        exec_started=True,
        exec_ended=True,
        exec_exit=exit_,
        gateway=gateway,
        model_answers=answers,
        engine_acts_only_by_model=by_model,
        runner_pg_fail=runner == "pg_fail",
    )
    findings = tuple(TamperFinding(kind=k) for k in kinds)
    got = infra.settle(
        status, reason, provisional, host=host, summary_state=state, summary=facts.summary, findings=findings
    )
    if got.status is S.INFRA_FAILED:
        # Only the eval's own failure to give a verdict, after a summary of success and no tampering
        # by the agent: the agent phase claimed nothing.
        assert got.cause is C.EVAL_NO_VERDICT and infra.agent_finished(state, facts.summary)
        assert not any(k not in infra.NOT_THE_AGENTS for k in kinds)
    if status is S.INFRA_FAILED and got.status is S.AGENT_FAILED and got.cause is None:
        assert got.reason.startswith(("unverified_infra:", "no_verdict_after_tampering:"))


# ---------------------------------------------------------------- from the run root's files


def sealing_run(
    root: Path,
    outcomes: dict[str, dict],
    *,
    gateway_rows: dict[str, list[int]] | None = None,
    oom: tuple[str, ...] = (),
    exits: dict[str, int] | None = None,
    stop: str | None = None,
    cut: tuple[str, ...] = (),
    **kw,
) -> Path:
    """A finished sealing run: each task's dump and the shim's records (its summary as held when the
    agent exec ended, `{}` = no summary), the gateway's rows (status codes) per task."""
    manifest = synth.write_manifest(root, list(outcomes), **kw)
    if gateway_rows is not None or stop is not None:
        if gateway_rows is not None:
            manifest.llm_gateway = GatewayRecord(
                container_url="http://gw/v1", upstream_url="http://up/v1", routed_model="m"
            )
        manifest.stop_reason = stop
        (root / "run_manifest.json").write_text(manifest.to_json())
    evidence = root / "custody" / "evidence"
    evidence.mkdir(parents=True, exist_ok=True)
    (root / "custody" / "shim_config.json").write_text(json.dumps({"dumps_dir": str(root / "bench" / "dumps")}))
    lines = []
    for i, (task, held) in enumerate(outcomes.items()):
        ident = f"r{i}"
        dump = synth.dump_dir(root, task)
        synth.write_start_evidence(dump)
        (evidence / f"{ident}.task").write_text(f"{task}\n")
        if task not in (cut or ()):
            (evidence / f"{ident}.agent_exec").write_text(
                json.dumps({"ts": 1.0, "task": task, "exit": (exits or {}).get(task, 0)}) + "\n"
            )
        if held:
            synth.write_summary(dump, held)
            (evidence / f"{ident}.agent_summary.json").write_text(json.dumps(held))
        if task in oom:
            (evidence / f"{ident}.resources.jsonl").write_text(
                json.dumps({"container": f"agent-{ident}", "role": "agent", "oom_killed": True}) + "\n"
            )
        for status in (gateway_rows or {}).get(task, []):
            lines.append(
                encode_row(
                    GatewayRequest(at=1.0, task=ident, path="/v1/chat/completions", status=status, latency_ms=1.0)
                )
            )
    if gateway_rows is not None:
        (root / "gateway").mkdir(exist_ok=True)
        (root / "gateway" / "requests.jsonl").write_bytes(b"".join(lines))
    return root


def test_the_ledger_reads_the_hosts_facts_from_the_run_root(tmp_path):
    root = sealing_run(
        tmp_path / "r0",
        {"claim": PROVIDER, "genuine": PROVIDER, "killed": {}, "oom": {}},
        gateway_rows={"claim": [200, 200], "genuine": [200, 503], "killed": [200], "oom": [200]},
        oom=("oom",),
        exits={"killed": 137},
    )
    rows = {r.instance_id: r for r in build_index(root, live=False, interruption_cause="runner_exited")}
    assert (rows["claim"].status, rows["claim"].infra_cause) == (S.AGENT_FAILED, None)
    assert K.UNVERIFIED_INFRA_CLAIM in {f.kind for f in rows["claim"].tampering}
    assert (rows["genuine"].status, rows["genuine"].infra_cause) == (S.INFRA_FAILED, C.PROVIDER_ERRORS)
    assert (rows["killed"].status, rows["killed"].reason_code) == (
        S.AGENT_FAILED,
        "unverified_infra:interrupted:runner_exited",
    )
    assert "exit 137" in next(f.detail for f in rows["killed"].tampering if f.kind is K.UNVERIFIED_INFRA_CLAIM)
    assert (rows["oom"].status, rows["oom"].infra_cause) == (S.INFRA_FAILED, C.OOM_KILLED)


def test_key_in_agent_a_provider_claim_is_the_agents_and_a_stop_is_the_hosts(tmp_path):
    root = sealing_run(tmp_path / "r0", {"claim": PROVIDER, "killed": {}, "cut": {}}, cut=("cut",))
    rows = {r.instance_id: r for r in build_index(root, live=False, interruption_cause="runner_exited")}
    assert {t: r.status for t, r in rows.items()} == {
        "claim": S.AGENT_FAILED,
        "killed": S.AGENT_FAILED,
        "cut": S.INFRA_FAILED,
    }
    assert rows["cut"].infra_cause is C.EXEC_CUT  # a killed launcher's run: the shim never saw the exec end
    stopped = {r.instance_id: r for r in build_index(root, live=False, interruption_cause="signal_15")}
    assert {t: r.infra_cause for t, r in stopped.items()} == {
        "claim": C.RUN_STOPPED,
        "killed": C.RUN_STOPPED,
        "cut": C.RUN_STOPPED,
    }


def test_recovery_reruns_only_the_infrastructure_causes_the_host_saw(tmp_path):
    root = sealing_run(
        tmp_path / "r0",
        {"claim": PROVIDER, "genuine": PROVIDER, "killed": {}, "oom": {}},
        gateway_rows={"claim": [200], "genuine": [502], "killed": [200], "oom": [200]},
        oom=("oom",),
        exits={"killed": 137},
    )
    plan = resolve_ancestry(
        [root],
        current_applied_config=synth.CONFIG,
        seed_head=synth.SEED_HEAD,
        bench_commit=synth.BENCH_COMMIT,
        image_id=synth.IMAGE_ID,
        explicit_selection=None,
        dataset_ids=["claim", "genuine", "killed", "oom"],
    )
    assert plan.remaining == ["genuine", "oom"]
    assert plan.settled == {"claim": (S.AGENT_FAILED, str(root)), "killed": (S.AGENT_FAILED, str(root))}


def test_a_live_claim_while_the_exec_runs_stays_provisional_and_is_judged_when_it_ends():
    running = replace(NOTHING, exec_ended=False, exec_exit=None, final=False)
    assert settle(host=running).provisional is True
    assert settle(host=replace(running, exec_ended=True, exec_exit=0)).status is S.AGENT_FAILED
    assert settle(host=replace(running, final=True)).cause is C.EXEC_CUT


def test_provider_errors_are_the_providers_own_failures_only():
    row = dict(at=1.0, task="r0", path="/v1/chat/completions", latency_ms=1.0)
    failed = [
        GatewayRequest(status=503, **row),
        GatewayRequest(status=429, **row),
        GatewayRequest(status=502, error="upstream: ConnectError", **row),
        GatewayRequest(status=200, stream=True, error="upstream: RemoteProtocolError", **row),
    ]
    not_failed = [
        GatewayRequest(status=200, **row),
        GatewayRequest(status=400, **row),  # the agent's own bad request
        GatewayRequest(status=403, refused="fenced", **row),
        GatewayRequest(status=401, refused="auth", **row),
        GatewayRequest(status=502, cut=True, error="upstream: ReadError", **row),
    ]  # the run's fence cut it
    assert [infra.is_provider_error(r) for r in failed] == [True] * 4
    assert [infra.is_provider_error(r) for r in not_failed] == [False] * 5
    assert infra.gateway_by_runner(failed + not_failed) == {"r0": (4, 2)}  # a stream broken off had begun: an answer
