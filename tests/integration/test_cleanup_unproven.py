"""A cleanup that cannot prove the run's resources gone keeps the campaign's custody (issue 21 item 8).

On the shared test bed, with a healthy daemon: while a paid demo run's agent works, the test makes
a volume carrying the run's exact label and mounts it in a holder container of its own (labelled
only with this test's label, so the run's cleanup never removes the holder). The run's exact-label
cleanup then cannot remove the volume (it is in use), its relist still finds it, and custody is
unproven. The run must not settle: the campaign keeps it as its active_run (for `clear`), the
manifest says the settlement is unconfirmed, the cleanup event says proven=false, and the launcher
exits 1. The test removes its holder and the volume afterwards, by their own ids.
"""

from __future__ import annotations

import json
import time

import docker
import pytest

from cowork_adapter.custody.docker_ops import label_is_empty
from cowork_adapter.custody.labels import RUN_LABEL_KEY, run_label
from cowork_adapter.demo.env import BYSTANDER_IMAGE, agent_started, prepare, read_json, wait_for
from cowork_adapter.vocab import ExitCode

HOLDER_LABEL = "org.cowork-adapter.test-holder"


@pytest.fixture(scope="module")
def demo(docker_host, tmp_path_factory):
    env = prepare(tmp_path_factory.mktemp("unproven") / "root", docker_host)
    yield env
    env.meter.stop()


def test_an_unprovable_cleanup_keeps_the_campaigns_active_run(demo):
    name = "unproven"
    run_root = demo.run_root(name)
    campaign = demo.root / f"campaign-{name}.json"
    client = docker.DockerClient(base_url=demo.docker_host, timeout=60)
    holder = volume = None
    try:
        proc = demo.launch(demo.run_args(name, ["demo-csv-totals"], campaign=campaign.name), name)
        try:
            started = wait_for(lambda: agent_started(run_root) or proc.poll() is not None, 900, 0.5)
            log = (demo.root / f"{name}.log").read_text(errors="replace")
            assert started and proc.poll() is None, f"the run did not reach its agent; log tail:\n{log[-3000:]}"
            label = run_label(run_root)  # drawn at the run's start, recorded in its manifest
            volume = client.volumes.create(name=f"unproven-{label[:12]}", labels={RUN_LABEL_KEY: label})
            holder = client.containers.run(
                BYSTANDER_IMAGE,
                ["sleep", "3600"],
                detach=True,
                labels={HOLDER_LABEL: label},
                volumes={volume.name: {"bind": "/held", "mode": "rw"}},
            )
            code = proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=60)
        log = (demo.root / f"{name}.log").read_text(errors="replace")
        assert "Traceback" not in log, log[-3000:]
        assert code == ExitCode.FAILED, f"exit {code}; log tail:\n{log[-3000:]}"
        assert "custody NOT proven" in log
        cleanups = [
            json.loads(line)
            for line in (run_root / "events.jsonl").read_text().splitlines()
            if line.strip() and json.loads(line).get("kind") == "cleanup"
        ]
        assert cleanups and cleanups[-1]["proven"] is False
        assert read_json(run_root / "run_manifest.json").get("campaign_settlement") == "unconfirmed"
        monitor = read_json(run_root / "monitor.json")
        assert monitor.get("finished") is False and monitor.get("campaign_settlement") == "unconfirmed"
        record = json.loads(campaign.read_text())
        assert record["active_run"] is not None and record["active_run"]["run_root"] == str(run_root)
        assert not any(r.get("run_root") == str(run_root) for r in record.get("runs", [])), "the run was settled"
    finally:
        if holder is not None:
            holder.remove(force=True, v=True)
        if volume is not None:
            deadline = time.monotonic() + 30
            while True:
                try:
                    volume.remove()
                    break
                except docker.errors.NotFound:
                    break
                except docker.errors.APIError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        client.close()
    assert label_is_empty(demo.docker_host, label)
