"""The HTML graph view in a real browser: headless Chromium loads the page from disk (no
network), its DOM holds the expected clusters and nodes, and a screenshot is not blank.
Skips, saying why, where Chromium is not installed (`.ci/run` installs it when apt works)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from flowc.ir.parser import parse
from flowc.view import build_view, to_html

SAMPLE = Path(__file__).with_name("view_sample.flowc")
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(BROWSER is None, reason="chromium is not installed "
                                "(apt-get install -y chromium)")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True, text=True, timeout=120, check=True)


def _png_pixels(path: Path) -> tuple[int, int, bytes]:
    """Width, height and the raw (filtered) scanlines of an 8-bit RGB/RGBA PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def test_html_view_renders_in_headless_chromium(tmp_path):
    page = tmp_path / "graph.html"
    page.write_text(to_html(build_view(parse(SAMPLE.read_text(), str(SAMPLE)))))
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    for cluster in ('data-cluster="device:cpu:0"', 'data-cluster="device:cpu:1"',
                    'data-cluster="fused:2|blk/t"', 'data-cluster="scope:cpu:1|head"'):
        assert cluster in dom
    assert dom.count('class="node phase-') == 7 and 'class="edge edge-transfer"' in dom

    shot = tmp_path / "graph.png"
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=900,700", page.as_uri())
    width, height, raw = _png_pixels(shot)
    assert (width, height) == (900, 700)
    assert len(set(raw)) > 16  # many distinct byte values: the page is not blank


def test_memory_chart_renders_in_headless_chromium(tmp_path):
    from flowc.codegen.plan.memreport import memory_layout
    from flowc.codegen.plan.program import build_program
    from flowc.view.html import memory_page

    chain = Path(__file__).with_name("memory_chain.flowc")
    layout = memory_layout(build_program(parse(chain.read_text(), str(chain)), "chain"))
    page = tmp_path / "graph.html"
    page.write_text(to_html(build_view(parse(SAMPLE.read_text(), str(SAMPLE))), layout))
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    assert dom.count('class="flowc-memory"') == 1 and dom.count('class="flowc-graph"') == 1
    assert dom.count('<g class="buffer"') == len(layout["buffers"]) == 5
    assert "<title>t (tanh): 128 bytes at offset" in dom  # what hovering shows

    alone = tmp_path / "memory.html"
    alone.write_text(memory_page(layout))
    shot = tmp_path / "memory.png"
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=860,520", alone.as_uri())
    width, height, raw = _png_pixels(shot)
    assert (width, height) == (860, 520) and len(set(raw)) > 16


def test_profile_timeline_renders_in_headless_chromium(tmp_path):
    import json

    from flowc.view.html import timeline_page

    trace = json.loads(Path(__file__).with_name("timeline_trace.json").read_text())
    page = tmp_path / "trace.html"
    page.write_text(timeline_page(trace, "trace.json"))
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    assert dom.count('class="flowc-timeline"') == 1 and dom.count('<g class="lane"') == 2
    assert dom.count('<g class="event"') == 5 and dom.count('data-cat="transfer"') == 2
    assert "<title>m_k0: 40.00 us, run 0; nodes: bn, conv</title>" in dom
