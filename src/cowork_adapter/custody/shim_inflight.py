"""In-flight creations: an admitted creation holds an exclusive flock on a fresh file under the run's
creations_dir from before its admission check until the real docker has its answer (custody/creations.py
waits for every such lock before cleanup's proof). Standard library only.

Why the order matters: the lock is taken BEFORE admission is checked, and the real docker inherits it in
a process group of its own, so SIGKILL of this shim at any line leaves either no lock (no creation) or a
lock that lasts while the daemon's request does.
"""

import fcntl
import os
import signal
import subprocess
import sys

try:  # inside the package (tests, the host's readers); beside the installed shim, its siblings are top-level
    from .shim_io import FORWARDED_SIGNALS, docker_env, run_real
    from .shim_words import EXIT_CANNOT_EXECUTE, RUN_MARKER_ENV
except ImportError:
    from shim_io import FORWARDED_SIGNALS, docker_env, run_real  # type: ignore[no-redef,import-not-found]
    from shim_words import EXIT_CANNOT_EXECUTE, RUN_MARKER_ENV  # type: ignore[no-redef,import-not-found]


def hold_creation_lock(config):
    """(fd, path) of a fresh lock file under creations_dir, flocked by this process; None when the
    config names no creations_dir (a config from before in-flight tracking); False when the lock
    cannot be made. Blocking: a cleanup that opened the file first holds it only while it unlinks
    it, and by then the run is fenced, so the admission check that follows refuses."""
    directory = config.get("creations_dir")
    if not directory:
        return None
    path = os.path.join(directory, f"{os.getpid()}-{os.urandom(6).hex()}.lock")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        release_creation_lock((None, path))
        return False
    return fd, path


def release_creation_lock(lock):
    if not lock:
        return
    fd, path = lock
    try:
        os.unlink(path)
    except OSError:
        pass
    if fd is not None:
        os.close(fd)


def run_creation(config, argv, lock):
    """Run the real docker for an admitted creation in a process group of its own, holding `lock`
    until it ends; its exit code as a shell reports it.

    The docker is neither in the runner's group nor marked as the run's (RUN_MARKER_ENV removed),
    so neither the supervisor's stop of the runner group nor the watchdog's sweep of marked
    processes cuts the request short: it keeps the inherited lock until the daemon has answered,
    and the cleanup then sees what it made. This shim may die meanwhile; the lock does not."""
    if not lock:
        return run_real(config, argv)
    fd, _ = lock
    env = docker_env(config)
    env.pop(RUN_MARKER_ENV, None)
    # A signal sent to this process itself (a `timeout` around the docker command) is the
    # caller's to the docker it runs, as it was when the shim replaced itself by docker. The
    # handlers are set before the docker starts, so a signal in between is not the shim's death
    # (the caller would see -15, not 143): it is kept and forwarded once the docker runs.
    child = None
    early = []

    def forward(sig, _frame):
        if child is None:
            early.append(sig)
        else:
            child.send_signal(sig)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    try:
        child = subprocess.Popen([config["real_docker"]] + argv, env=env, pass_fds=(fd,), process_group=0)
    except OSError:
        release_creation_lock(lock)
        sys.stderr.write("docker shim: cannot execute the real docker\n")
        return EXIT_CANNOT_EXECUTE
    for sig in early:
        child.send_signal(sig)
    code = child.wait()
    release_creation_lock(lock)
    return 128 - code if code < 0 else code
