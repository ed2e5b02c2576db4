"""The shim's I/O at its edges: evidence lines and write-once files, the real docker run (replacing
the shim, or as its child under a bound), and the sibling copies it loads. Standard library only.

Every evidence write is best effort and never raises: a failure to write evidence never changes an
exit code.
"""

import json
import os
import signal
import subprocess
import sys

try:  # inside the package (tests, the host's readers); beside the installed shim, its siblings are top-level
    from .shim_words import EXIT_CANNOT_EXECUTE
except ImportError:
    from shim_words import EXIT_CANNOT_EXECUTE  # type: ignore[no-redef,import-not-found]


KILL_GRACE_SEC = 5.0


def write_once(path, text):
    """Create `path` with `text` unless it exists (the first cause is kept). Never raises."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return
    try:
        os.write(fd, text.encode("utf-8"))
    except OSError:
        pass
    finally:
        os.close(fd)


def append_line(path, record):
    """Append one JSON line (a single write of a short line, so lines never interleave). Never raises."""
    try:
        data = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except (OSError, TypeError, ValueError):
        return
    try:
        os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)


def evidence_path(config, file_name):
    directory = config.get("evidence_dir")
    return os.path.join(directory, file_name) if directory else None


def record(config, file_name, record_or_text, once=False):
    path = evidence_path(config, file_name)
    if path is None:
        return
    if once:
        write_once(path, record_or_text)
    else:
        append_line(path, record_or_text)


def docker_env(config):
    """The environment for the real docker: the run's daemon, no context that could override it."""
    env = dict(os.environ)
    env.pop("DOCKER_CONTEXT", None)
    env["DOCKER_HOST"] = config["docker_host"]
    return env


def run_real(config, argv):
    """Replace this process with the real docker (exact argv tail, output and exit code)."""
    try:
        os.execve(config["real_docker"], [config["real_docker"]] + argv, docker_env(config))
    except OSError:
        sys.stderr.write("docker shim: cannot execute the real docker\n")
        return EXIT_CANNOT_EXECUTE


FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def load_safefile():
    """container/safefile.py, copied beside this program (install_custody); None if it is missing."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    try:  # a sibling copy, found only once sys.path holds this folder
        import safefile  # type: ignore[import-not-found]  # noqa: PLC0415
    except ImportError:
        return None
    return safefile


def load_sibling(name):
    """A module copied beside this program (install_custody: agent_exec, container_caps); None if missing."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        return __import__(name)
    except ImportError:
        return None


def run_child(config, argv, env_extra, bound):
    """Run the real docker with `argv` as this shim's child (same process group, so a stop of the
    runner's group reaches it too); SIGTERM/SIGINT/SIGHUP sent to the shim alone are passed on.
    Returns (exit code as a shell reports it, hung): past `bound` seconds the child gets SIGTERM,
    then SIGKILL after a grace, and `hung` is True."""
    env = docker_env(config)
    env.update(env_extra)
    try:
        child = subprocess.Popen([config["real_docker"]] + argv, env=env)
    except OSError:
        sys.stderr.write("docker shim: cannot execute the real docker\n")
        return EXIT_CANNOT_EXECUTE, False
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, lambda sig, _frame: child.send_signal(sig))
    hung = False
    try:
        code = child.wait(timeout=bound)
    except subprocess.TimeoutExpired:
        hung = True
        child.terminate()
        try:
            code = child.wait(timeout=KILL_GRACE_SEC)
        except subprocess.TimeoutExpired:
            child.kill()
            code = child.wait()
    return (128 - code if code < 0 else code), hung
