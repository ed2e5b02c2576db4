"""The agent exec's host-side bounds (issue 37): its output capped, its time bounded, its leftovers ended.

Standard library only: the docker shim loads this file as a sibling copy (install_custody writes it
beside shim.py) and runs under `python3 -I -S`, so no import of the package is possible here.

Why on the host: every process the agent starts inside its container can write to the exec's
stdout and stderr (they are inherited), so a cap inside the container can be bypassed; the docker
CLI's pipes to the shim are the one place all of it passes. Likewise the exec's time: the agent is
root in its container and can stop (SIGSTOP) the runner's `timeout` and the entrypoint, after which
nothing there ends the exec, so its bound is kept here, on the docker CLI, whatever happens inside.

- OutputCap (pure): the first `cap` bytes of the exec's stdout and stderr together pass; the rest
  is counted and dropped, then one line says how much. The runner decides a task's status by
  grepping `Status: success` in its log, and the entrypoint prints its Status line last, so a line
  holding `Status: ` that did not pass whole is kept (the last KEPT_LINES of each stream, each its
  last PROTOCOL_LINE_MAX bytes) and written after the drop line: an honest engine that printed too
  much still gets its status. An agent can forge such a line, as it always could within the cap;
  the host's verdict never rests on the runner's grep (the seal and the held summary do).
- relay (I/O): copies the docker CLI's pipes to the shim's own stdout/stderr through an OutputCap
  until both pipes end, and ends the docker CLI at its deadline (SIGTERM, then SIGKILL after a
  grace); once the CLI has exited, the pipes are read for at most DRAIN_SEC more.
- kill_leftovers_argv: `docker exec --user 0 <container> sh -c 'kill -KILL -1'`. kill(-1) inside
  the container's PID namespace signals every process there but the caller and the namespace's
  init (the runner's `sleep`) in one pass under the kernel's tasklist lock, so a process that forks
  as it goes cannot outrun it the way a walk over /proc can.
"""

import os
import selectors
import signal
import subprocess
import time

DEFAULT_CAP_BYTES = 32 * 1024 * 1024
PROTOCOL_MARK = b"Status: "
PROTOCOL_LINE_MAX = 4096
KEPT_LINES = 4
READ_CHUNK = 64 * 1024
DRAIN_SEC = 5.0
KILL_GRACE_SEC = 5.0
# `timeout -k 30 $TASK_TIMEOUT` in the runner's agent exec: the bound sits above the runner's own.
RUNNER_KILL_AFTER_SEC = 30.0
BOUND_MARGIN_SEC = 60.0
LEFTOVER_KILL_TIMEOUT_SEC = 30.0
DROP_NOTE = "[cowork-adapter] agent exec output capped at %d bytes: %d bytes dropped (stdout %d, stderr %d)\n"


def agent_bound_sec(task_timeout_sec):
    """The host's bound of one agent exec: the runner's timeout and kill grace, plus a margin."""
    return float(task_timeout_sec) + RUNNER_KILL_AFTER_SEC + BOUND_MARGIN_SEC


class _Stream:
    """One stream's bookkeeping: bytes passed and dropped, the line in progress, kept lines."""

    def __init__(self):
        self.passed = 0
        self.dropped = 0
        self.line = b""  # the current line's last PROTOCOL_LINE_MAX bytes
        self.line_whole = True  # every byte of the current line passed
        self.kept = []
        self.ends_line = True  # the last byte passed was a newline (or none passed)


class OutputCap:
    """Pure: which bytes of the exec's streams reach the runner's log. feed() returns what passes."""

    def __init__(self, cap_bytes, stream_names=("stdout", "stderr")):
        self.cap = max(0, int(cap_bytes))
        self.streams = {name: _Stream() for name in stream_names}
        self.total_passed = 0

    def feed(self, name, data):
        s = self.streams[name]
        room = max(0, self.cap - self.total_passed)
        passed, dropped = data[:room], data[room:]
        self.total_passed += len(passed)
        s.passed += len(passed)
        s.dropped += len(dropped)
        if passed:
            s.ends_line = passed.endswith(b"\n")
        self._scan(s, passed, True)
        self._scan(s, dropped, False)
        return passed

    def _scan(self, s, data, passing):
        """Follow line ends through `data`, keeping each complete protocol line that did not pass whole."""
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            piece = data[start:] if end < 0 else data[start : end + 1]
            if not passing:
                s.line_whole = False
            # Only a line's tail is kept: a Status line printed after output with no newline of its
            # own (an engine's last flood) ends the same line, and the runner's grep matches it there.
            s.line = (s.line + piece)[-PROTOCOL_LINE_MAX:]
            if end < 0:
                return
            if not s.line_whole and PROTOCOL_MARK in s.line:
                s.kept = (s.kept + [s.line])[-KEPT_LINES:]
            s.line, s.line_whole = b"", True
            start = end + 1

    @property
    def dropped(self):
        return sum(s.dropped for s in self.streams.values())

    def finish(self, name):
        """What to write to stream `name` at the end: nothing when nothing was dropped; else (on
        the first stream only) the drop line, then the kept protocol lines of that stream."""
        s = self.streams[name]
        if self.dropped == 0:
            return b""
        out = b""
        if name == next(iter(self.streams)):
            facts = self.facts()
            out = (b"" if s.ends_line else b"\n") + (
                DROP_NOTE % (self.cap, self.dropped, facts["dropped_stdout_bytes"], facts["dropped_stderr_bytes"])
            ).encode("ascii")
        # A protocol line still open at the end (no newline came) is kept too, with its newline.
        tail = [s.line + b"\n"] if s.line and not s.line_whole and PROTOCOL_MARK in s.line else []
        for line in (s.kept + tail)[-KEPT_LINES:]:
            out += line if line.endswith(b"\n") else line + b"\n"
        return out

    def facts(self):
        return {
            "cap_bytes": self.cap,
            "passed_bytes": self.total_passed,
            "dropped_bytes": self.dropped,
            "dropped_stdout_bytes": self.streams["stdout"].dropped if "stdout" in self.streams else 0,
            "dropped_stderr_bytes": self.streams["stderr"].dropped if "stderr" in self.streams else 0,
        }


def write_all(fd, data):
    """Write every byte to `fd`; False once the reader is gone (the relay then only counts and drops)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except OSError:
            return False
        view = view[n:]
    return True


def end_child(child, grace=KILL_GRACE_SEC):
    """SIGTERM the docker CLI, SIGKILL it after `grace`; its raw return code."""
    try:
        child.terminate()
        return child.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()


def relay(child, sources, cap, deadline):
    """Copy the child's pipes ({name: (pipe file, destination fd)}) through `cap` until both end,
    ending the child at `deadline` (time.monotonic(), or None). Returns (raw return code, hung)."""
    selector = selectors.DefaultSelector()
    open_fds = {}
    for name, (pipe, dest) in sources.items():
        fd = pipe.fileno()
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ, name)
        open_fds[fd] = (name, dest)
    hung, code, drain_until = False, None, None
    writable = {dest: True for _, dest in sources.values()}
    try:
        while open_fds:
            now = time.monotonic()
            if code is None:
                code = child.poll()
                if code is not None:
                    drain_until = now + DRAIN_SEC
            if code is None and deadline is not None and now >= deadline:
                hung = True
                code = end_child(child)
                drain_until = time.monotonic() + DRAIN_SEC
            if drain_until is not None and time.monotonic() >= drain_until:
                break
            limits = [t for t in (deadline if code is None else None, drain_until) if t is not None]
            wait = min([1.0] + [max(0.0, t - time.monotonic()) for t in limits])
            for key, _ in selector.select(timeout=wait):
                name, dest = open_fds[key.fd]
                try:
                    data = os.read(key.fd, READ_CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    selector.unregister(key.fd)
                    del open_fds[key.fd]
                    continue
                passed = cap.feed(name, data)
                if passed and writable[dest]:
                    writable[dest] = write_all(dest, passed)
    finally:
        selector.close()
    for name, (pipe, dest) in sources.items():
        tail = cap.finish(name)
        if tail and writable[dest]:
            write_all(dest, tail)
        pipe.close()
    if code is None:
        try:
            code = child.wait(timeout=DRAIN_SEC)
        except subprocess.TimeoutExpired:
            hung = True
            code = end_child(child)
    return code, hung


def kill_leftovers_argv(container):
    """The docker arguments that end every process of `container` but its init, in one kill(-1)."""
    return ["exec", "--user", "0", container, "sh", "-c", "kill -KILL -1 2>/dev/null; exit 0"]


def run_kill_leftovers(real_docker, env, container, timeout=LEFTOVER_KILL_TIMEOUT_SEC):
    """Run kill_leftovers_argv against the daemon; its exit code, or a cause word. Never raises."""
    try:
        done = subprocess.run(
            [real_docker] + kill_leftovers_argv(container),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    except (OSError, ValueError):
        return "not_run"
    return done.returncode


def ignore_sigpipe():
    """A runner whose log reader went away must not kill the shim mid-relay (the exec still ends)."""
    try:
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    except (OSError, ValueError):
        pass
