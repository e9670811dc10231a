"""flowc.view: the view model, layout, SVG, DOT and HTML of a graph with a fused kernel,
two devices, a send/recv pair and name scopes (tests/inspect/view_sample.flowc)."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from flowc.ir.parser import parse
from flowc.view import build_view, layout, to_dot, to_html, to_svg
from flowc.view.layout import BOX_H, BOX_W
from flowc.view.style import TRANSFER_COLOUR, device_colours

SAMPLE = Path(__file__).with_name("view_sample.flowc")
NS = {"s": "http://www.w3.org/2000/svg"}


@pytest.fixture
def view():
    return build_view(parse(SAMPLE.read_text(), str(SAMPLE)))


def test_model_nests_device_scope_and_kernel(view):
    boxes = {b.name: b for b in view.boxes}
    assert set(boxes) == {"x", "y", "blk/a", "blk/t", "blk/t:0/send/cpu:1",
                          "blk/t:0/recv/cpu:1", "head/relu"}
    kinds = [view.clusters[c].kind for c in boxes["blk/a"].clusters]
    assert kinds == ["device", "scope", "fused"]
    assert boxes["blk/a"].device == "cpu:0" and boxes["blk/a"].kernel == "blk/t"
    assert [view.clusters[c].label for c in boxes["head/relu"].clusters] == ["cpu:1", "head"]
    assert [view.clusters[c].label for c in boxes["blk/t:0/recv/cpu:1"].clusters] == ["cpu:1"]
    assert view.devices == ["cpu:0", "cpu:1"]


def test_edges_lead_through_fused_bodies(view):
    name = {b.id: b.name for b in view.boxes}
    edges = {(name[e.src], name[e.dst], e.kind, e.label) for e in view.edges}
    assert edges == {
        ("x", "blk/a", "data", "f32[4,8]"), ("y", "blk/a", "data", "f32[4,8]"),
        ("blk/a", "blk/t", "data", "f32[4,8]"),
        ("blk/t", "blk/t:0/send/cpu:1", "data", "f32[4,8]"),  # from the fused result's maker
        ("blk/t:0/send/cpu:1", "blk/t:0/recv/cpu:1", "transfer", "blk/t:0"),
        ("blk/t:0/recv/cpu:1", "head/relu", "data", "f32[4,8]")}


def test_layout_clusters_enclose_members_and_do_not_overlap_boxes(view):
    lay = layout(view)
    for box in view.boxes:
        cx, cy = lay.pos[box.id]
        for c in box.clusters:
            x0, y0, x1, y1 = lay.clusters[c]
            assert x0 < cx - BOX_W / 2 and x1 > cx + BOX_W / 2
            assert y0 < cy - BOX_H / 2 and y1 > cy + BOX_H / 2
    for (ax, ay), (bx, by) in itertools.combinations(lay.pos.values(), 2):
        assert abs(ax - bx) >= BOX_W or abs(ay - by) >= BOX_H
    ys = {b.name: lay.pos[b.id][1] for b in view.boxes}
    assert ys["x"] < ys["blk/a"] < ys["blk/t"] < ys["blk/t:0/send/cpu:1"] \
        < ys["blk/t:0/recv/cpu:1"] < ys["head/relu"]
    assert layout(view) == lay  # deterministic


def test_svg_has_clusters_device_colours_and_edge_labels(view):
    root = ET.fromstring(to_svg(view))
    colours = device_colours(view.devices)
    groups = root.findall("s:g", NS)
    devices = {g.get("data-device"): g for g in groups if "cluster-device" in g.get("class")}
    assert set(devices) == {"cpu:0", "cpu:1"}
    for dev, g in devices.items():
        assert g.find("s:rect", NS).get("stroke") == colours[dev]
    fused = [g for g in groups if "cluster-fused" in g.get("class", "")]
    assert [g.find("s:text", NS).text for g in fused] == ["elementwise: blk/t"]
    nodes = {g.get("data-node"): g for g in groups if g.get("class", "").split()[:1] == ["node"]}
    assert nodes["blk/a"].get("data-kernel") == "blk/t"
    assert nodes["blk/a"].get("data-in").split()[-1] == fused[0].get("id")
    assert nodes["head/relu"].find("s:rect", NS).get("stroke") == colours["cpu:1"]
    edges = [g for g in groups if "edge" in g.get("class", "").split()]
    labels = [e.find("s:text", NS).text for e in edges if e.find("s:text", NS) is not None]
    assert labels.count("f32[4,8]") == 5
    transfer = [e for e in edges if "edge-transfer" in e.get("class")]
    assert len(transfer) == 1
    path = transfer[0].find("s:path", NS)
    assert path.get("stroke") == TRANSFER_COLOUR and path.get("stroke-dasharray")
    assert transfer[0].find("s:text", NS).text == "blk/t:0"


def test_dot_nests_clusters_and_marks_transfers(view):
    dot = to_dot(view)
    assert dot.startswith('digraph "two" {') and dot.rstrip().endswith("}")
    nest = [line.strip() for line in dot.splitlines() if "subgraph" in line]
    assert nest[:3] == ['subgraph "cluster_device:cpu:0" {',
                        'subgraph "cluster_scope:cpu:0|blk" {',
                        'subgraph "cluster_fused:2|blk/t" {']
    assert f'color="{device_colours(view.devices)["cpu:1"]}"' in dot
    assert re.search(r'n\d+ -> n\d+ \[label="blk/t:0", style=dashed, color="#d62728"', dot)
    assert dot.count('[label="f32[4,8]"]') == 5
    assert dot.count("{") == dot.count("}")


def test_html_is_self_contained(view):
    page = to_html(view)
    assert page.startswith("<!DOCTYPE html>")
    assert "<script>" in page and "<svg" in page
    without_ns = page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert not re.search(r"https?://|\ssrc=|<link|@import", without_ns)
    assert "7 nodes, 6 edges, 1 fused kernels, 2 devices" in page


def test_text_is_escaped():
    g = parse('graph @g(%x: f32[2]) -> (y: f32[2]) {\n'
              '  %0 = relu %x : (f32[2]) -> f32[2] loc("a<b>/r&\\"q")\n  return %0\n}\n')
    view = build_view(g)
    ET.fromstring(to_svg(view))  # well-formed XML
    assert '\\"q' in to_dot(view)
