"""Map a function over a list in forked worker processes, results in list order.

Why not multiprocessing.Pool: the audit's workers share nothing but a list the parent already
holds, and on two cores the Pool's import, start-up and handler threads (about a millisecond of the
parent's CPU per message) came out of the time left for scanning.

How it works:
- Before forking, the parent writes every item's index, 4 bytes each, into one pipe and closes its
  write end. Workers take the next index with one 4-byte read: the pipe holds whole 4-byte records
  and Linux serialises readers of a pipe, so each index goes to exactly one worker. An empty pipe
  at end of file means no work is left.
- Items are not sent: each worker has the list, as forked. Each result goes back pickled, after a
  header (item index, length), over the worker's own pipe; the parent reads all pipes as they fill
  and yields results in item order.
- A worker that raises sends its traceback and the parent raises WorkerFailed; a worker that dies
  without its results is found at end of file on its pipe. On any exit the parent kills and reaps
  the workers still running.

Fork only from a single-threaded process (a thread holding a lock would leave it held in the
child); the caller checks.
"""

from __future__ import annotations

import os
import pickle
import selectors
import signal
import struct
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

_INDEX = struct.Struct("<I")
_HEADER = struct.Struct("<IQ")  # item index, pickled length
MAX_ITEMS = 16384  # indexes fill at most 64 KiB, a pipe's capacity, so writing them never blocks


class WorkerFailed(RuntimeError):
    """A worker raised, or ended without sending the results it had taken."""


def forked_map(function: Callable[[Any], Any], items: Sequence[Any], workers: int) -> Iterator[Any]:
    """function(item) for each item, computed in `workers` forked processes, yielded in order."""
    if len(items) > MAX_ITEMS:
        raise ValueError(f"forked_map takes at most {MAX_ITEMS} items, not {len(items)}")
    tasks_read, tasks_write = os.pipe()
    os.write(tasks_write, b"".join(_INDEX.pack(i) for i in range(len(items))))
    os.close(tasks_write)
    children: dict[int, int] = {}  # result pipe -> worker pid
    try:
        for _ in range(min(workers, len(items))):
            result_read, result_write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                os.close(result_read)
                _work(function, items, tasks_read, result_write)
            os.close(result_write)
            children[result_read] = pid
        os.close(tasks_read)
        tasks_read = -1
        yield from _collect(children, len(items))
    finally:
        if tasks_read >= 0:
            os.close(tasks_read)
        _stop(children)


def _work(function: Callable[[Any], Any], items: Sequence[Any], tasks: int, results: int) -> None:
    code = 0
    try:
        while index_bytes := os.read(tasks, _INDEX.size):
            (index,) = _INDEX.unpack(index_bytes)
            _send(results, index, (True, function(items[index])))
    except BaseException:  # noqa: BLE001 - the parent gets the traceback, whatever was raised
        code = 1
        try:
            _send(results, 0, (False, traceback.format_exc()))
        except BaseException:  # noqa: BLE001 - the parent is gone: nothing left to tell
            pass
    finally:
        os._exit(code)  # no atexit handlers, no unflushed parent buffers written twice


def _send(fd: int, index: int, message: tuple[bool, Any]) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(index, len(payload)) + payload)
    while view:
        view = view[os.write(fd, view) :]


def _collect(children: dict[int, int], count: int) -> Iterator[Any]:
    buffers = {fd: bytearray() for fd in children}
    done: dict[int, Any] = {}
    next_index = 0
    with selectors.DefaultSelector() as selector:
        for fd in children:
            selector.register(fd, selectors.EVENT_READ)
        while next_index < count:
            if not selector.get_map():
                raise WorkerFailed(f"workers ended with {count - next_index} results not sent")
            for key, _ in selector.select():
                chunk = os.read(key.fd, 1 << 20)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                buffer = buffers[key.fd]
                buffer += chunk
                while len(buffer) >= _HEADER.size:
                    index, size = _HEADER.unpack_from(buffer)
                    if len(buffer) < _HEADER.size + size:
                        break
                    ok, value = pickle.loads(buffer[_HEADER.size : _HEADER.size + size])
                    del buffer[: _HEADER.size + size]
                    if not ok:
                        raise WorkerFailed(f"a worker raised:\n{value}")
                    done[index] = value
            while next_index in done:
                yield done.pop(next_index)
                next_index += 1


def _stop(children: dict[int, int]) -> None:
    """Close the result pipes, kill workers still running (an early exit), reap them all."""
    for fd, pid in children.items():
        os.close(fd)
        try:
            os.kill(pid, signal.SIGKILL)  # a finished worker is a zombie until reaped: no harm
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
