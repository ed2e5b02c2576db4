"""Stub Ouroboros server: a stand-in for the real agent server (see README.md).

Run as `python server.py --host 127.0.0.1 --port 8765` with cwd = this checkout. It reads the
OUROBOROS_* process variables and settings.json, writes the port (and pid) files, serves the task
API and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from stub_ouroboros.http_api import bind
from stub_ouroboros.settings import load_config, resolve_paths
from stub_ouroboros.supervisor import Supervisor
from stub_ouroboros.tasklife import say


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Stub Ouroboros server (a stand-in)")
    parser.add_argument("--host", default=os.environ.get("OUROBOROS_SERVER_HOST") or "127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("OUROBOROS_SERVER_PORT") or 8765))
    return parser.parse_args(argv)


def write_small_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    paths = resolve_paths(os.environ, Path(__file__).resolve().parent)
    for directory in (paths.logs_dir, paths.state_dir, paths.results_dir):
        directory.mkdir(parents=True, exist_ok=True)
    try:
        config = load_config(paths, os.environ)
    except ValueError as exc:
        say(f"refusing to start: bad settings: {exc}")
        return 2
    if paths.pid_file is not None:
        write_small_file(paths.pid_file, f"{os.getpid()}\n")
    sup = Supervisor(config, paths)
    httpd = bind(sup, args.host, args.port)
    port = httpd.server_address[1]
    for port_file in {paths.port_file, paths.default_port_file}:
        write_small_file(port_file, f"{port}\n")
    say(f"stand-in server listening on http://{args.host}:{port} (data {paths.data_dir})")

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()
    threading.Thread(target=sup.boot, name="boot", daemon=True).start()
    while not stopping.wait(0.5):
        pass
    say("SIGTERM received; shutting down")
    sup.logs.append("supervisor", {"type": "server_shutdown", "pid": os.getpid()})
    httpd.shutdown()
    httpd.server_close()
    sys.stdout.flush()
    sys.stderr.flush()
    # Worker threads may sit in a tool call; daemon threads must not delay the exit.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
