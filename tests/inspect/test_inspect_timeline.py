"""`flowc view TRACE.json`: a runtime profile drawn as a timeline, one lane per thread."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flowc.cli import main
from flowc.ir.errors import FlowcError
from flowc.view.style import TRANSFER_COLOUR
from flowc.view.timeline import LEFT, PLOT_W, one_run, timeline_svg

TRACE = json.loads(Path(__file__).with_name("timeline_trace.json").read_text())


def test_timeline_draws_a_lane_per_thread_and_a_box_per_event():
    svg = timeline_svg(one_run(TRACE, 0))
    lanes = re.findall(r'<g class="lane" data-tid="(\d+)">.*?>([^<>]+)</text></g>', svg)
    assert lanes == [("1", "partition 0 (cpu:0)"), ("2", "partition 1 (cpu:1)")]
    events = re.findall(r'<g class="event" (.*?)</g>', svg)
    assert len(events) == 4
    scale = PLOT_W / 100.0  # run 0 spans 0..100 us
    for g, (x, w) in zip(events, [(0, 40), (0, 50), (40, 10), (50, 50)], strict=True):
        assert float(re.search(r' x="([0-9.]+)"', g)[1]) == pytest.approx(LEFT + x * scale)
        assert float(re.search(r' width="([0-9.]+)"', g)[1]) == pytest.approx(w * scale)
    send = next(g for g in events if 'data-name="send cpu:0;bn:0;cpu:1"' in g)
    assert f'fill="{TRANSFER_COLOUR}"' in send and 'data-cat="transfer"' in send
    assert "<title>m_k0: 40.00 us, run 0; nodes: bn, conv</title>" in svg
    assert "4 events, 100.0 us" in svg


def test_all_runs_and_run_errors():
    assert timeline_svg(TRACE).count('<g class="event"') == 5
    with pytest.raises(FlowcError, match=r"--run 7: the trace has no such run \(its runs: 0, 1\)"):
        one_run(TRACE, 7)


def test_view_of_a_trace_file(tmp_path, capsys):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(TRACE))
    assert main(["view", str(trace), "-o", str(tmp_path / "t.html"), "--run", "1"]) == 0
    page = (tmp_path / "t.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count('<g class="event"') == 1
    assert main(["view", str(trace), "-o", str(tmp_path / "t.svg")]) == 0
    assert (tmp_path / "t.svg").read_text().startswith(
        '<svg xmlns="http://www.w3.org/2000/svg" class="flowc-timeline"')
    assert main(["view", str(trace), "-o", str(tmp_path / "t.dot")]) == 1
    assert ("must end in .html, .svg (the format of a profile's timeline)"
            in capsys.readouterr().err)
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "k"}]}')
    assert main(["view", str(bad), "-o", str(tmp_path / "b.svg")]) == 1
    assert (f"flowc: error: '{bad}': not a trace (expected Chrome trace-event JSON"
            in capsys.readouterr().err)
    assert main(["view", str(trace), "--run", "3", "-o", str(tmp_path / "c.svg")]) == 1
    assert "--run 3: the trace has no such run (its runs: 0, 1)" in capsys.readouterr().err
