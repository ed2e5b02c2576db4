"""The pure rules of issue 27: which verdict a sealing run scores, what is flagged, and how the eval
phase takes its grading inputs from the task tree and sets planted records aside."""

from __future__ import annotations

import os

import pytest

from cowork_adapter.container import evalphase, gradinglog, protocol, safefile
from cowork_adapter.schemas.ledger import RunnerRow
from cowork_adapter.schemas.seal import EvalSeal, PreEntry, SealedFile, SealedVerdict
from cowork_adapter.score.verdict import DumpDigests, OfficialVerdict, runner_disagreement, seal_verdict, unsafe_entries
from cowork_adapter.vocab import OfficialEvalStatus

PASSED = OfficialVerdict(OfficialEvalStatus.COMPLETED, "evaluated", True)
FAILED = OfficialVerdict(OfficialEvalStatus.COMPLETED, "evaluated", False)
NOW = DumpDigests(claim="c" * 64, receipt="r" * 64, eval_res="e" * 64, summary="s" * 64)


def seal(**changes) -> EvalSeal:
    fields = dict(
        runner_id="1-abcdef12",
        task="t",
        entry="first",
        agent_container_state="absent",
        agent_summary_sha256="s" * 64,
        started_at=1.0,
        ended_at=2.0,
        exit_code=0,
        attempt_id="a" * 32,
        claim=SealedFile(kind="regular", sha256="c" * 64),
        receipt=SealedFile(kind="regular", sha256="r" * 64),
        eval_res=SealedFile(kind="regular", sha256="e" * 64),
        verdict=SealedVerdict(official_run=True, cause="evaluated", pass_=True),
    )
    fields.update(changes)
    return EvalSeal(**fields)


def kinds(found) -> list[str]:
    return [f.kind.value for f in found]


def test_a_sealed_verdict_with_unchanged_files_stands_and_flags_nothing():
    assert seal_verdict(PASSED, seal(), NOW, records_present=True) == (PASSED, [])


def test_records_without_a_seal_are_never_scored():
    # The agent wrote a claim, a receipt and eval_res.json with pass true, all bindings right.
    verdict, found = seal_verdict(PASSED, None, NOW, records_present=True)
    assert verdict.passed is None and verdict.cause == "unsealed_verdict"
    assert kinds(found) == ["unsealed_verdict"]
    assert (
        seal_verdict(
            OfficialVerdict(OfficialEvalStatus.UNREPORTED, "file_absent", None),
            None,
            DumpDigests(None, None, None, None),
            records_present=False,
        )[1]
        == []
    )


@pytest.mark.parametrize(
    "now, changed",
    [
        (NOW._replace(eval_res="x" * 64), "eval_res.json"),  # a sibling rewrote the verdict afterwards
        (NOW._replace(receipt="x" * 64), "receipt"),
        (NOW._replace(claim=None), "claim"),
    ],
)
def test_a_sealed_file_changed_afterwards_unscores_the_task_and_is_flagged(now, changed):
    verdict, found = seal_verdict(PASSED, seal(), now, records_present=True)
    assert verdict.passed is None and verdict.cause == "sealed_file_changed"
    assert kinds(found) == ["sealed_file_changed"] and changed in found[0].detail


def test_what_the_seal_saw_is_flagged_and_the_verdict_stands():
    held = seal(
        pre=[PreEntry(name="ouroboros_eval_claim.json", kind="regular")],
        grading_inputs_differ=["agent_workspace", "evaluation.evaluation_command"],
        hung=True,
        grading_log_rewritten=["status", "config.launch_time"],
    )
    verdict, found = seal_verdict(FAILED, held, NOW._replace(summary="y" * 64), records_present=True)
    assert verdict == FAILED
    assert kinds(found) == [
        "planted_before_eval",
        "grading_inputs_differ",
        "grading_log_rewritten",
        "eval_hung",
        "summary_changed",
    ]
    assert "ouroboros_eval_claim.json:regular" in found[0].detail and "evaluation.evaluation_command" in found[1].detail
    assert found[2].detail == "status, config.launch_time"


@pytest.mark.parametrize(
    "said, verdict, flagged",
    [
        ("True", FAILED, True),  # the agent printed `Pass: True` into the log the runner greps
        ("True", OfficialVerdict(OfficialEvalStatus.UNKNOWN, "unsealed_verdict", None), True),
        ("False", PASSED, True),
        ("True", PASSED, False),
        ("False", FAILED, False),
        (None, FAILED, False),
    ],
)
def test_the_runner_disagreeing_with_the_scored_verdict_is_flagged(said, verdict, flagged):
    row = RunnerRow(status="success", eval_pass=said)
    assert kinds(runner_disagreement(verdict, row)) == (["verdict_disagrees_runner"] if flagged else [])


def test_record_names_that_are_not_regular_files_are_flagged():
    found = unsafe_entries(
        {
            "eval_res.json": safefile.FIFO,
            "traj_log.json": safefile.SYMLINK,
            "ouroboros": safefile.SYMLINK,
            "ouroboros_summary.json": safefile.REGULAR,
            "workspace": safefile.SYMLINK,
            "ouroboros_eval_receipt-x.json": safefile.DEVICE,
        }
    )
    assert kinds(found) == ["unsafe_entry"]
    assert found[0].detail == (
        "eval_res.json:fifo, ouroboros_eval_receipt-x.json:device, traj_log.json:symlink, ouroboros:symlink"
    )
    assert unsafe_entries({"eval_res.json": safefile.REGULAR, "ouroboros": safefile.DIRECTORY}) == []


# ---------------------------------------------------------------- the eval phase's inputs

CANONICAL = {
    "task_dir": "t",
    "id": "t",
    "task_root": "/workspace/dumps/s_m/SingleUserTurn-t",
    "log_file": "/workspace/dumps/s_m/SingleUserTurn-t/traj_log.json",
    "agent_workspace": "/workspace/dumps/s_m/SingleUserTurn-t/workspace",
    "evaluation": {
        "evaluation_command": "python3 -m tasks.finalpool.t.evaluation.main",
        "groundtruth_workspace": "tasks/finalpool/t/groundtruth_workspace",
    },
    "launch_time": "2026-12-03 10:00:00 Thursday",
}


def honest() -> dict:
    # The agent container's tree is sanitized: its TaskConfig has no evaluation command or ground truth.
    return dict(
        CANONICAL,
        evaluation={"evaluation_command": None, "groundtruth_workspace": None},
        launch_time="2026-12-03 09:58:00 Thursday",
    )


def test_an_honest_config_differs_in_nothing_that_grades():
    assert gradinglog.grading_differences(honest(), CANONICAL) == []
    assert gradinglog.grading_differences(dict(CANONICAL), CANONICAL) == []


@pytest.mark.parametrize(
    "change, names",
    [
        (
            {"evaluation": {"evaluation_command": "sh -c 'exit 0'", "groundtruth_workspace": None}},
            ["evaluation.evaluation_command"],
        ),
        ({"agent_workspace": "tasks/finalpool/t/groundtruth_workspace"}, ["agent_workspace"]),
        ({"task_dir": "other-task", "id": "other-task"}, ["task_dir", "id"]),
        ({"evaluation": "sh -c 'exit 0'"}, ["evaluation"]),
    ],
)
def test_a_grading_input_the_agent_changed_is_named(change, names):
    assert gradinglog.grading_differences(dict(honest(), **change), CANONICAL) == names


def test_planted_records_are_set_aside_never_opened(tmp_path):
    os.mkfifo(tmp_path / protocol.EVAL_RES_NAME)
    os.symlink("/etc/hostname", tmp_path / protocol.CLAIM_NAME)
    (tmp_path / f"{protocol.RECEIPT_PREFIX}{'a' * 32}.json").write_text("{}")
    (tmp_path / "planted-eval_res.json").write_text("an earlier one")
    (tmp_path / "traj_log.json").write_text("{}")
    moved = evalphase.set_aside_planted(str(tmp_path))
    assert sorted(moved) == sorted(
        ["eval_res.json:fifo", "ouroboros_eval_claim.json:symlink", f"{protocol.RECEIPT_PREFIX}{'a' * 32}.json:regular"]
    )
    names = sorted(os.listdir(tmp_path))
    assert names == sorted(
        [
            "planted-2-eval_res.json",
            "planted-eval_res.json",
            "planted-ouroboros_eval_claim.json",
            f"planted-{protocol.RECEIPT_PREFIX}{'a' * 32}.json",
            "traj_log.json",
        ]
    )
    assert os.path.islink(tmp_path / "planted-ouroboros_eval_claim.json")  # moved as a link, not read


def test_a_workspace_link_to_what_the_agent_could_not_see_is_found(tmp_path):
    tasks = tmp_path / "tasks"
    own = tasks / "finalpool" / "t"
    (own / "groundtruth_workspace").mkdir(parents=True)
    (own / "files").mkdir()
    (tasks / "finalpool" / "other" / "evaluation").mkdir(parents=True)
    root = tmp_path / "dumps" / "s_m" / "SingleUserTurn-t"
    (root / "workspace" / "sub").mkdir(parents=True)
    (root / "workspace" / "answer.txt").write_text("42")
    os.symlink(own / "files", root / "workspace" / "inputs")  # its own task's inputs: seen where it ran
    os.symlink("answer.txt", root / "workspace" / "same")  # inside the dump
    assert evalphase.link_to_hidden(str(root), "t", str(tasks)) is None
    os.symlink(tasks / "finalpool" / "other" / "evaluation", root / "workspace" / "sub" / "theirs")
    assert evalphase.link_to_hidden(str(root), "t", str(tasks)) == "workspace/sub/theirs"
    os.unlink(root / "workspace" / "sub" / "theirs")
    (root / "workspace").rename(root / "workspace.real")
    os.symlink(own / "groundtruth_workspace", root / "workspace")  # graded against itself
    assert evalphase.link_to_hidden(str(root), "t", str(tasks)) == "workspace"


def test_a_refused_evaluation_of_an_unsafe_dump_is_flagged():
    held = seal(verdict=SealedVerdict(official_run=False, cause="workspace_link_outside_dump:workspace"))
    verdict, found = seal_verdict(
        OfficialVerdict(OfficialEvalStatus.NOT_RUN, "workspace_link_outside_dump", None),
        held,
        NOW,
        records_present=True,
    )
    assert verdict.passed is None and kinds(found) == ["unsafe_entry"]


def test_a_hung_eval_in_a_late_seal_without_an_end_is_flagged_not_a_crash():
    # A late seal (the host's, after the shim died) has no ended_at; the hang finding used to subtract from it.
    held = seal(
        entry="late",
        ended_at=None,
        exit_code=None,
        hung=True,
        verdict=SealedVerdict(official_run=False, cause="eval_hung"),
    )
    verdict, found = seal_verdict(
        OfficialVerdict(OfficialEvalStatus.NOT_RUN, "eval_hung", None), held, NOW, records_present=True
    )
    assert kinds(found) == ["eval_hung"] and found[0].detail == "eval exec end not seen"
    assert kinds(seal_verdict(FAILED, seal(hung=True, ended_at=31.0), NOW, records_present=True)[1]) == ["eval_hung"]


def test_an_eval_cut_short_by_a_stop_is_not_scored_and_not_flagged():
    # The shim saw the eval exec begin (its head) and was killed with the runner's group before sealing:
    # the claim without a receipt is the eval phase's own, never the agent's.
    from cowork_adapter.schemas.seal import SealHead

    head = SealHead(runner_id="1-abcdef12", task="t", entry="first", agent_container_state="absent", started_at=1.0)
    cut = OfficialVerdict(OfficialEvalStatus.UNKNOWN, "claim_without_terminal_receipt", None)
    assert seal_verdict(cut, None, NOW, records_present=True, head=head) == (cut, [])
    # A receipt with a verdict the host could not seal is still not scored.
    verdict, found = seal_verdict(PASSED, None, NOW, records_present=True, head=head)
    assert verdict.passed is None and found == []
