"""Demo scenario `environment`: environment qualification before paying, end to end.

The demo pack image ships `quotes`, a server whose own environment resolves the mcp 2.x SDK and
crashes at start. On a derived image built WITHOUT repairs (as the benchmark gives it): the
inventory probe finds it failed; a paid run selecting demo-broken-sdk is refused naming that
task; with --accept-environment-blocked the task is environment_blocked in the ledger (still in
the denominator). On the normal derived image the detected repair fixes it and the task passes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import docker

from ..custody.labels import path_label
from ..host.daemon import docker_client
from ..image.derived import ImageRequest, build_derived_image
from ..vocab import ExitCode, TaskStatus
from .env import Check, DemoEnv, custody_checks, read_json, read_rows

BROKEN_TASK = "demo-broken-sdk"
HEALTHY_TASK = "demo-csv-totals"
CAMPAIGN = "campaign-environment.json"


def _git_head(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()


def unrepaired_image(env: DemoEnv) -> str:
    """A derived image built as the benchmark gives it (repairs off), tagged for this demo root."""
    tag = f"cowork-demo-unrepaired:{path_label(env.root)[:12]}"
    req = ImageRequest(
        tag=tag,
        base_image=env.pack_tag,
        seed_dir=env.seed,
        seed_head=_git_head(env.seed),
        bench_commit=env.bench_commit,
    )
    context = env.root / "unrepaired-image"
    build_derived_image(
        env.docker_host,
        req,
        context,
        env.root / "unrepaired-image.log",
        path_label(context),
        lambda: None,
        repair=False,
    )
    return tag


def remove_image(docker_host: str, tag: str) -> None:
    client = docker_client(docker_host, 120)
    try:
        client.images.remove(tag, force=True)
    except docker.errors.ImageNotFound:
        pass
    finally:
        client.close()


def _probe_args(env: DemoEnv, name: str, image: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "cowork_adapter",
        "run",
        "--repo-dir",
        str(env.seed),
        "--bench-root",
        str(env.bench),
        "--bench-commit",
        env.bench_commit,
        "--docker-host",
        env.docker_host,
        "--resource-root",
        str(env.storage),
        "--run-root",
        str(env.run_root(name)),
        "--base-image",
        env.pack_tag,
        "--image",
        image,
        "--probe",
        "inventory",
        "--task",
        BROKEN_TASK,
        "--task",
        HEALTHY_TASK,
        "--cpus",
        "1",
        "--memory",
        "2g",
        "--min-free-gib",
        "1",
        "--min-root-free-gib",
        "1",
    ]


def _inventory(run_root: Path) -> dict:
    return read_json(run_root / "run_manifest.json").get("inventory") or {}


def scenario_environment(env: DemoEnv) -> list[Check]:
    checks: list[Check] = []
    image = unrepaired_image(env)
    try:
        code = env.launch(_probe_args(env, "env-probe", image), "env-probe").wait(timeout=900)
        inv = _inventory(env.run_root("env-probe"))
        quotes = (inv.get("servers") or {}).get("quotes") or {}
        checks += [
            Check("the inventory probe exits 1 on the unrepaired image", code == ExitCode.FAILED, f"exit {code}"),
            Check(
                "the inventory finds quotes failed, with its crash in the error",
                quotes.get("health") == "failed" and "no attribute" in str(quotes.get("error")),
                str(quotes)[:200],
            ),
            Check(
                "the inventory blocks exactly demo-broken-sdk",
                inv.get("blocked_tasks") == {BROKEN_TASK: "mcp_server_failed:quotes"},
                str(inv.get("blocked_tasks")),
            ),
        ]
        checks += custody_checks(env, env.run_root("env-probe"))[:1]

        tasks = [BROKEN_TASK, HEALTHY_TASK]
        code = env.launch(
            env.run_args("env-refused", tasks, campaign=CAMPAIGN, extra=["--image", image]), "env-refused"
        ).wait(timeout=900)
        refusal = read_json(env.run_root("env-refused") / "run_manifest.json").get("refusal") or {}
        campaign = read_json(env.root / CAMPAIGN)
        checks += [
            Check("a paid run needing the failed server is refused (exit 2)", code == ExitCode.REFUSED, f"exit {code}"),
            Check(
                "the refusal names demo-broken-sdk and the flag",
                refusal.get("stage") == "inventory"
                and BROKEN_TASK in refusal.get("sentence", "")
                and "--accept-environment-blocked" in refusal.get("sentence", ""),
                str(refusal)[:200],
            ),
            Check(
                "the refused run charged no campaign",
                str(env.run_root("env-refused")) not in [r.get("run_root") for r in campaign.get("runs", [])],
            ),
        ]

        code = env.launch(
            env.run_args(
                "env-accepted", tasks, campaign=CAMPAIGN, extra=["--image", image, "--accept-environment-blocked"]
            ),
            "env-accepted",
        ).wait(timeout=1800)
        rows = read_rows(env.run_root("env-accepted"))
        broken = rows.get(BROKEN_TASK, {})
        checks += [
            Check(
                "with --accept-environment-blocked the run proceeds",
                code in (ExitCode.OK, ExitCode.FAILED),
                f"exit {code}",
            ),
            Check(
                "demo-broken-sdk is environment_blocked in the ledger",
                broken.get("status") == TaskStatus.ENVIRONMENT_BLOCKED.value,
                json.dumps(broken)[:200],
            ),
            Check("demo-csv-totals still passes", rows.get(HEALTHY_TASK, {}).get("status") == TaskStatus.PASSED.value),
            Check("both tasks stay in the ledger (the denominator)", set(rows) == set(tasks), str(sorted(rows))),
        ]
        checks += custody_checks(env, env.run_root("env-accepted"))
    finally:
        remove_image(env.docker_host, image)

    code = env.launch(env.run_args("env-repaired", [BROKEN_TASK], campaign=CAMPAIGN), "env-repaired").wait(timeout=1800)
    inv = _inventory(env.run_root("env-repaired"))
    quotes = (inv.get("servers") or {}).get("quotes") or {}
    repairs = inv.get("repairs") or []
    checks += [
        Check("on the repaired image quotes is `repaired`", quotes.get("health") == "repaired", str(quotes)[:200]),
        Check(
            "the repair is recorded with measured before and after",
            [(r.get("server"), r.get("before"), r.get("after"), r.get("took")) for r in repairs]
            == [("quotes", "2.3.0", "1.26.0", True)],
            str(repairs)[:200],
        ),
        Check(
            "demo-broken-sdk passes once repaired",
            read_rows(env.run_root("env-repaired")).get(BROKEN_TASK, {}).get("status") == TaskStatus.PASSED.value,
            f"exit {code}",
        ),
    ]
    return checks
