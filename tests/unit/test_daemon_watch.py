"""The daemon watch's judgement as a pure function, its thread logic with a scripted prober, and
the peer identity read from a real unix socket (this test process listens, so its pid must come back)."""

from __future__ import annotations

import os
import socket
import threading

from cowork_adapter.custody.daemon_watch import (
    EXITED,
    RESTARTED,
    UNANSWERED,
    DaemonIdentity,
    DaemonWatch,
    Probe,
    judge,
    peer_identity,
    process_start_ticks,
)

A = DaemonIdentity(pid=100, start_ticks=5000)
B = DaemonIdentity(pid=200, start_ticks=9000)
A_REUSED_PID = DaemonIdentity(pid=100, start_ticks=9100)  # same pid, a later process


def test_same_identity_answering_is_not_lost():
    assert judge(A, 0.0, Probe(at=50.0, answered=True, identity=A, known_alive=True), 10.0) is None


def test_identity_a_then_b_is_a_restart():
    loss = judge(A, 0.0, Probe(at=1.0, answered=True, identity=B, known_alive=False), 10.0)
    assert loss is not None and loss.reason == RESTARTED
    assert loss.before == A and loss.after == B


def test_same_pid_new_start_time_is_a_restart():
    loss = judge(A, 0.0, Probe(at=1.0, answered=True, identity=A_REUSED_PID, known_alive=False), 10.0)
    assert loss is not None and loss.reason == RESTARTED


def test_silence_within_the_bound_is_not_yet_lost():
    assert judge(A, 0.0, Probe(at=9.5, answered=False, known_alive=True, error="timeout"), 10.0) is None


def test_silence_longer_than_the_bound_is_lost():
    loss = judge(A, 0.0, Probe(at=10.5, answered=False, known_alive=True, error="timeout"), 10.0)
    assert loss is not None and loss.reason == UNANSWERED
    assert loss.silent_sec == 10.5
    assert "timeout" in loss.detail


def test_silence_with_the_known_process_gone_is_lost_at_once():
    loss = judge(A, 0.0, Probe(at=1.0, answered=False, known_alive=False, error="refused"), 10.0)
    assert loss is not None and loss.reason == EXITED


def test_without_a_baseline_only_silence_counts():
    # tcp:// daemons have no peer pid: an answer is all there is.
    assert judge(None, 0.0, Probe(at=5.0, answered=True), 10.0) is None
    assert judge(None, 0.0, Probe(at=11.0, answered=False), 10.0).reason == UNANSWERED


class ScriptedProber:
    """Returns scripted (answered, identity, known_alive) probes at scripted times."""

    timeout = 1.0

    def __init__(self, script: list[tuple[float, bool, DaemonIdentity | None]]) -> None:
        self.script = list(script)
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def probe(self, baseline):
        at, answered, identity = self.script.pop(0)
        self.now = at
        alive = None if baseline is None else identity == baseline
        return Probe(at=at, answered=answered, identity=identity, known_alive=alive)

    def close(self) -> None:
        pass


def test_watch_takes_the_first_answer_as_baseline_and_sees_a_restart():
    prober = ScriptedProber([(0.0, True, A), (2.0, True, A), (4.0, True, B)])
    watch = DaemonWatch("unix:///unused", prober=prober, bound_sec=10.0)
    watch.baseline = prober.probe(None).identity
    assert watch.step() is None
    loss = watch.step()
    assert loss is not None and loss.reason == RESTARTED


def test_watch_counts_silence_from_the_last_answer():
    # Answers at 2, then silent (the old process still alive): lost only past 2 + 10.
    prober = ScriptedProber([(2.0, True, A), (6.0, False, A), (11.0, False, A), (12.5, False, A)])
    watch = DaemonWatch("unix:///unused", prober=prober, bound_sec=10.0)
    watch.baseline = A
    assert watch.step() is None
    assert watch.step() is None
    assert watch.step() is None
    loss = watch.step()
    assert loss is not None and loss.reason == UNANSWERED and loss.silent_sec == 10.5


def test_final_check_counts_any_silence_as_lost():
    # The runner may end before the bound passes: at the end the daemon is needed now.
    prober = ScriptedProber([(2.0, True, A), (3.0, False, A)])
    watch = DaemonWatch("unix:///unused", prober=prober, bound_sec=10.0)
    watch.baseline = A
    assert watch.step() is None
    loss = watch.final_check()
    assert loss is not None and loss.reason == UNANSWERED and watch.lost is loss


def test_final_check_keeps_a_loss_already_seen_and_passes_a_healthy_daemon():
    healthy = DaemonWatch("unix:///unused", prober=ScriptedProber([(1.0, True, A)]), bound_sec=10.0)
    healthy.baseline = A
    assert healthy.final_check() is None
    seen = DaemonWatch("unix:///unused", prober=ScriptedProber([]), bound_sec=10.0)
    seen.lost = judge(A, 0.0, Probe(at=1.0, answered=True, identity=B), 10.0)
    assert seen.final_check() is seen.lost  # no new probe taken


def test_watch_thread_reports_the_loss_once(tmp_path):
    prober = ScriptedProber([(0.0, True, A), (1.0, True, A), (2.0, True, B)])
    seen = []
    done = threading.Event()
    watch = DaemonWatch(
        "unix:///unused", lambda loss: (seen.append(loss), done.set()), prober=prober, interval=0.01, bound_sec=10.0
    )
    watch.start()
    assert done.wait(5)
    watch.stop()
    assert len(seen) == 1 and watch.lost is seen[0] and seen[0].reason == RESTARTED


def test_peer_identity_names_the_listening_process(tmp_path):
    path = str(tmp_path / "s.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    try:
        ident = peer_identity(path, timeout=2.0)
    finally:
        server.close()
    assert ident == DaemonIdentity(os.getpid(), process_start_ticks(os.getpid()))
    assert peer_identity(path, timeout=2.0) is None  # nobody listens any more


def test_start_ticks_of_a_missing_process_is_none():
    assert process_start_ticks(2**22 + 12345) is None
