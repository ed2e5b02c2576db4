"""forked_map: results in order from forked workers, and every failure loud, no process left."""

from __future__ import annotations

import os
import time

import pytest

from cowork_adapter.audit.forked import MAX_ITEMS, WorkerFailed, forked_map


def _no_children_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def _square_with_pid(n: int) -> tuple[int, int]:
    time.sleep(0.001 * (n % 3))  # uneven work, so results arrive out of order
    return n * n, os.getpid()


@pytest.mark.parametrize("count,workers", [(0, 2), (1, 2), (5, 1), (200, 2), (64, 3)])
def test_results_come_in_item_order_from_worker_processes(count, workers):
    got = list(forked_map(_square_with_pid, list(range(count)), workers))
    assert [value for value, _ in got] == [n * n for n in range(count)]
    pids = {pid for _, pid in got}
    assert os.getpid() not in pids and len(pids) <= workers
    assert _no_children_left()


def test_large_results_cross_the_pipe_whole():
    items = [n for n in range(6)]
    got = list(forked_map(lambda n: bytes([n]) * (3 << 20), items, 2))  # larger than a pipe's buffer
    assert got == [bytes([n]) * (3 << 20) for n in items]


def _raise_on_seven(n: int) -> int:
    if n == 7:
        raise KeyError("seven")
    return n


def test_a_worker_that_raises_fails_the_map_with_its_traceback():
    with pytest.raises(WorkerFailed) as failure:
        list(forked_map(_raise_on_seven, list(range(20)), 2))
    assert "KeyError: 'seven'" in str(failure.value)
    assert _no_children_left()


def _die_on_three(n: int) -> int:
    if n == 3:
        os._exit(9)  # as a killed worker would: no traceback, no result
    return n


def test_a_worker_that_dies_fails_the_map():
    with pytest.raises(WorkerFailed, match="not sent"):
        list(forked_map(_die_on_three, list(range(4)), 1))
    assert _no_children_left()


def test_leaving_early_kills_and_reaps_the_workers():
    results = forked_map(lambda n: time.sleep(0.01) or n, list(range(200)), 2)
    assert next(results) == 0
    results.close()
    assert _no_children_left()


def test_too_many_items_are_refused_before_any_fork():
    with pytest.raises(ValueError, match=str(MAX_ITEMS)):
        list(forked_map(abs, list(range(MAX_ITEMS + 1)), 2))
    assert _no_children_left()
