"""`inspect view` on a folder of logs, opened in headless Chromium through the DevTools protocol.

Test support: the viewer is a web page that loads the log with scripts after the first paint, so a
one-shot `--dump-dom` catches it half-loaded. Here Chromium stays up with a DevTools port; each page
is navigated to, its text read (document.body.innerText) until the expected words appear or the time
is up, and a screenshot saved. Everything listens on 127.0.0.1 only and is stopped by its own pid.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import aiohttp  # an inspect_ai dependency (the test extra pins inspect_ai)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
]

PAGE_TEXT = "document.body ? document.body.innerText : ''"
# The page's text, then each element's tooltip (`title`) on a line of its own: the viewer's log list shows a
# log's status as an icon whose tooltip is the status word.
PAGE_TEXT_AND_TITLES = (
    "(document.body ? document.body.innerText : '') + '\\n' + "
    "Array.from(document.querySelectorAll('[title]')).map(e => 'title: ' + e.title).join('\\n')"
)
# One line per row of the page's tables (role=row): the tooltips of its cells joined by " | ".
ROW_TITLES = (
    "Array.from(document.querySelectorAll('[role=row]')).map(r => "
    "Array.from(r.querySelectorAll('[title]')).map(e => e.title).join(' | ')).join('\\n')"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _devtools_port(profile: Path, chromium: subprocess.Popen, timeout: float) -> int:
    """The DevTools port Chromium chose itself (`--remote-debugging-port=0`), from the DevToolsActivePort
    file it writes once listening: no port picked here and freed before Chromium binds it (another test
    could take it in between)."""
    deadline = time.monotonic() + timeout
    path = profile / "DevToolsActivePort"
    while True:
        try:
            first = path.read_text().splitlines()[0]
            return int(first)
        except (OSError, IndexError, ValueError):
            if chromium.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Chromium wrote no DevTools port (exit {chromium.poll()})") from None
            time.sleep(0.2)


def _first_page(devtools: int, timeout: float) -> dict:
    """Chromium's first page target: the DevTools endpoint can answer before its about:blank tab exists."""
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{devtools}/json/list", timeout=10) as answer:
            pages = [p for p in json.loads(answer.read()) if p.get("type") == "page" and p.get("webSocketDebuggerUrl")]
        if pages or time.monotonic() > deadline:
            return pages[0]
        time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


# A page still missing a wanted word after this long is loaded again (see _page_text).
RELOAD_AFTER_SEC = 45


class Viewer:
    """`inspect view --log-dir DIR` and a headless Chromium on it; use as a context manager."""

    def __init__(self, log_dir: Path, work: Path) -> None:
        self.log_dir, self.work = log_dir, work
        self.port, self.devtools = free_port(), 0  # Chromium's own port, read once it listens
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Viewer:
        inspect = shutil.which("inspect", path=str(Path(sys.executable).parent)) or "inspect"
        self.work.mkdir(parents=True, exist_ok=True)
        with open(self.work / "view.log", "wb") as out:
            self.procs.append(
                subprocess.Popen(
                    [inspect, "view", "--log-dir", str(self.log_dir), "--host", "127.0.0.1", "--port", str(self.port)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        _wait_http(f"http://127.0.0.1:{self.port}/", 120)
        with open(self.work / "chromium.log", "wb") as out:
            self.procs.append(
                subprocess.Popen(
                    [
                        CHROMIUM,
                        *CHROMIUM_FLAGS,
                        f"--user-data-dir={self.work / 'chromium-profile'}",
                        "--remote-debugging-port=0",
                        "--remote-debugging-address=127.0.0.1",
                        "about:blank",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        self.devtools = _devtools_port(self.work / "chromium-profile", self.procs[-1], 120)
        _wait_http(f"http://127.0.0.1:{self.devtools}/json/version", 120)
        return self

    def __exit__(self, *exc) -> None:
        for proc in reversed(self.procs):
            _stop(proc)

    def url(self, fragment: str) -> str:
        return f"http://127.0.0.1:{self.port}/#{fragment}"

    def page_text(
        self,
        fragment: str,
        want: list[str],
        screenshot: Path,
        timeout: float = 240,
        expression: str = PAGE_TEXT,
        ready: Callable[[str], bool] = lambda _text: True,
    ) -> str:
        """The page's text (or what `expression` makes of the page) once every word of `want` shows and
        `ready` holds of it (or at the timeout, a hang guard), a screenshot saved. The viewer fills a page
        in steps (a log's name before its status, a sample's panel before its error): a caller waits for
        everything it will assert, not for the first word of it."""
        return asyncio.run(self._page_text(self.url(fragment), want, screenshot, timeout, expression, ready))

    async def _page_text(
        self, url: str, want: list[str], screenshot: Path, timeout: float, expression: str, ready: Callable[[str], bool]
    ) -> str:
        page = _first_page(self.devtools, 60)
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                counter = iter(range(1, 1 << 30))

                async def call(method: str, **params) -> dict:
                    ident = next(counter)
                    await ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
                    while True:
                        message = json.loads((await ws.receive()).data)
                        if message.get("id") == ident:
                            return message.get("result", {})

                await call("Page.enable")
                await call("Page.navigate", url=url)
                deadline = time.monotonic() + timeout
                reload_at = time.monotonic() + RELOAD_AFTER_SEC
                text = ""
                while time.monotonic() < deadline:
                    if time.monotonic() >= reload_at:
                        # The list asks the viewer's server for each log's header once; on a loaded machine
                        # one answer can fail and that row stays half-filled for good (seen in a CI rehearsal
                        # at load 10: a name and status, no tags, for 120 s). A person would reload: so do we.
                        await call("Page.navigate", url=url)
                        reload_at = time.monotonic() + RELOAD_AFTER_SEC
                    await asyncio.sleep(0.5)  # a poll for the text, not a wait in place of it
                    got = await call(
                        "Runtime.evaluate",
                        expression=expression,
                        returnByValue=True,
                    )
                    text = got.get("result", {}).get("value") or ""
                    if all(w in text for w in want) and ready(text):
                        break
                shot = await call("Page.captureScreenshot", format="png")
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                screenshot.write_bytes(base64.b64decode(shot.get("data", "")))
                return text
