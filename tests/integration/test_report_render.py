"""The report of a real demo run, opened in headless Chromium, renders its plots.

One short paid demo run (stub engine, stand-in meter, real Docker) on two fast tasks, then the
real `cowork-adapter report` command, then Debian's chromium takes a screenshot of report.html.
The PNG is decoded here (zlib + the five PNG filters, no Pillow) and must show many colours,
including the plots' bar colour, in the region where the plots are drawn.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib
from itertools import pairwise
from pathlib import Path

import pytest

from cowork_adapter.demo.env import prepare, read_rows

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TASKS = ["demo-csv-totals", "demo-wrong-answer"]
WIDTH, HEIGHT = 1200, 2400
BAR_RGB = (0x4A, 0x78, 0xB5)  # svg.BAR: the fill of every bar
RUN_TIMEOUT_S = 1500
# Where the screenshot is kept for a human look (the test's tmp dir is removed by pytest later).
KEEP_DIR = Path(os.environ.get("REPORT_SCREENSHOT_DIR", "/tmp/cowork-report-render"))


# ---- a minimal PNG decoder (8-bit RGB/RGBA, non-interlaced: what Chromium writes) --------------
def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(width, height, bytes per pixel, rows of raw pixel bytes) of an 8-bit RGB(A) PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, f"unsupported PNG {header}"
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = prev[i]
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 0xFF
            elif kind == 4:
                line[i] = (line[i] + _paeth(left, up, prev[i - bpp] if i >= bpp else 0)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def colours(rows: list[bytes], bpp: int, y0: int = 0, y1: int | None = None) -> set[tuple[int, int, int]]:
    out: set[tuple[int, int, int]] = set()
    for row in rows[y0:y1]:
        for i in range(0, len(row), bpp):
            out.add((row[i], row[i + 1], row[i + 2]))
    return out


def rows_with(rows: list[bytes], bpp: int, rgb: tuple[int, int, int]) -> list[int]:
    needle = bytes(rgb)
    hits = []
    for y, row in enumerate(rows):
        for i in range(0, len(row), bpp):
            if row[i : i + 3] == needle:
                hits.append(y)
                break
    return hits


# ---- the test --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_run(docker_host, tmp_path_factory):
    root = Path(tmp_path_factory.mktemp("report-render")) / "demo"
    env = prepare(root, docker_host)
    try:
        proc = env.launch(env.run_args("render", TASKS, campaign="campaign-render.json"), "render")
        code = proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        env.meter.stop()
    run_root = env.run_root("render")
    log = (root / "render.log").read_text(errors="replace")[-4000:]
    assert code in (0, 1), f"run exit {code}\n{log}"
    assert set(read_rows(run_root)) == set(TASKS), log
    return run_root


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")
def test_report_html_renders_its_plots_in_headless_chromium(demo_run, tmp_path):
    out_dir = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "cowork_adapter", "report", str(demo_run), "--output-dir", str(out_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html_path = out_dir / "report.html"
    html = html_path.read_text()

    # Four inline plots, each an <svg> element, and nothing fetched from elsewhere.
    plots = html.split("<div class='plots'>", 1)[1].split("</div>", 1)[0]
    assert plots.count("<svg ") == 4 and plots.count("</svg>") == 4
    assert html.count("<svg ") == 4
    for title in (
        "Pass rate by domain",
        "Cost per attempt (USD)",
        "Duration per attempt (s)",
        "Cumulative key-meter spend (USD)",
    ):
        assert f"<title>{title}</title>" in plots
    assert "no data</text>" not in plots, "a plot of a real run was empty"
    # Every plot's y-axis ticks read as five different numbers (tiny costs once all printed "0.00").
    for chart in re.findall(r"<svg .*?</svg>", plots):
        ticks = [
            t.text
            for t in ET.fromstring(chart).iter("{http://www.w3.org/2000/svg}text")
            if t.get("text-anchor") == "end" and t.get("x") == "52"
        ]
        assert len(ticks) == 5 and len(set(ticks)) == 5, ticks
    # One link is allowed, to METHODOLOGY.md (an anchor a reader follows; nothing is fetched).
    links = re.findall(r"<a href='([^']*)'>METHODOLOGY.md</a>", html)
    assert len(links) == 1 and links[0].endswith("METHODOLOGY.md"), links
    page = html.replace(f"<a href='{links[0]}'>", "<a>")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?!#)""", page, re.I), "an element loads a resource"
    assert not re.search(r"url\(|@import|<link|<script|<img|<iframe", page, re.I)
    # The only http URL allowed is the SVG namespace name (an identifier, never fetched).
    urls = set(re.findall(r"[a-z][a-z0-9+.-]*://[^\s\"'<>)]+", page, re.I))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls

    png = tmp_path / "report.png"
    profile = tmp_path / "chromium-profile"
    shot = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            f"--screenshot={png}",
            f"--window-size={WIDTH},{HEIGHT}",
            html_path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert png.is_file(), f"no screenshot (exit {shot.returncode}): {shot.stderr[-2000:]}"
    KEEP_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(png, KEEP_DIR / "report.png")
    shutil.copyfile(html_path, KEEP_DIR / "report.html")
    shutil.copyfile(out_dir / "report.json", KEEP_DIR / "report.json")

    width, height, bpp, rows = decode_png(png.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    seen = colours(rows, bpp)
    assert len(seen) > 50, f"only {len(seen)} colours: the page looks blank"
    # The plots drew bars: the bar colour appears on many pixel rows, in at least two plots.
    bar_rows = rows_with(rows, bpp, BAR_RGB)
    assert len(bar_rows) > 40, f"bar colour on {len(bar_rows)} rows"
    bands = sum(1 for a, b in pairwise(bar_rows) if b - a > 20) + 1
    assert bands >= 2, f"bars found in {bands} band(s) only"
