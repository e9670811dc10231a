"""A layered (Sugiyama-style) layout computed in Python, so no graphviz is needed.

Contract: `layout(view)` returns a `Layout`: every box's centre `(x, y)` (layers top to
bottom, by longest path from the inputs), every edge's polyline, and every cluster's
rectangle `(x0, y0, x1, y1)` enclosing its members with a margin per nesting level.
Sources with users (inputs, constants) sit one layer above their first user. Within
a layer, boxes are ordered by their cluster path first (device, scope, kernel: clusters are
ranked by the mean barycentre of their members; a box in no cluster ranks as its own
barycentre) and then by barycentre (a few down and up
sweeps), so each cluster's members sit side by side in every layer. Each device has its
own column band (boxes on no device first), so device groups never overlap. Deterministic.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import networkx as nx

from flowc.view.model import View

BOX_W, BOX_H = 160.0, 44.0
GAP_X, GAP_Y = 36.0, 70.0
CLUSTER_GAP = 28.0  # extra horizontal space where the cluster path changes
PAD = 12.0  # cluster margin per nesting level


@dataclass
class Layout:
    pos: dict[str, tuple[float, float]]
    edges: list[list[tuple[float, float]]]
    clusters: dict[str, tuple[float, float, float, float]]
    width: float
    height: float


def _layers(view: View) -> dict[str, int]:
    g = nx.DiGraph()
    g.add_nodes_from(b.id for b in view.boxes)
    g.add_edges_from((e.src, e.dst) for e in view.edges if e.src != e.dst)
    layer: dict[str, int] = {}
    for n in nx.topological_sort(g):
        layer[n] = max((layer[p] + 1 for p in g.predecessors(n)), default=0)
    for n in layer:  # sources (weights, constants) sit just above their first user
        if g.in_degree(n) == 0 and g.out_degree(n) > 0:
            layer[n] = min(layer[s] for s in g.successors(n)) - 1
    return layer


def _bands(view: View) -> dict[str, int]:
    """Each box's column band: 0 for boxes on no device, then one per device (sorted)."""
    band = {d: i + 1 for i, d in enumerate(view.devices)}
    return {b.id: band[b.device] if b.device is not None else 0 for b in view.boxes}


def _order(view: View, layer: dict[str, int], bands: dict[str, int]) -> list[list[str]]:
    rows: dict[int, list[str]] = defaultdict(list)
    for b in view.boxes:
        rows[layer[b.id]].append(b.id)
    preds, succs = defaultdict(list), defaultdict(list)
    for e in view.edges:
        preds[e.dst].append(e.src)
        succs[e.src].append(e.dst)
    index = {n: i for row in rows.values() for i, n in enumerate(row)}
    paths = {b.id: b.clusters for b in view.boxes}
    for sweep in range(4):
        neighbours = preds if sweep % 2 == 0 else succs
        centre = {n: (sum(index[m] for m in neighbours[n]) / len(neighbours[n])
                      if neighbours[n] else index[n]) for n in index}
        rank: dict[str, list[float]] = defaultdict(list)
        for n, path in paths.items():
            for c in path:
                rank[c].append(centre[n])
        mean = {c: sum(v) / len(v) for c, v in rank.items()}
        for row in rows.values():
            row.sort(key=lambda n: (bands[n], [(mean[c], c) for c in paths[n]]
                                    or [(centre[n], "")], centre[n], n))
            index.update({n: i for i, n in enumerate(row)})
    return [rows[k] for k in sorted(rows)]


def layout(view: View) -> Layout:
    """Place `view`'s boxes, edges and clusters (see the module contract)."""
    layer = _layers(view)
    bands = _bands(view)
    rows = _order(view, layer, bands)
    paths = {b.id: b.clusters for b in view.boxes}
    depth = max((len(p) for p in paths.values()), default=0)
    local: dict[str, float] = {}  # x of each box within its band
    band_width: dict[int, float] = defaultdict(float)
    for row in rows:
        x, prev = 0.0, None
        for n in row:
            if prev is not None and bands[prev] == bands[n]:
                shared = sum(1 for a, b in zip(paths[prev], paths[n], strict=False) if a == b)
                x += GAP_X + CLUSTER_GAP * (max(len(paths[prev]), len(paths[n])) - shared)
            elif prev is not None:
                x = 0.0
            local[n] = x
            x += BOX_W
            band_width[bands[n]] = max(band_width[bands[n]], x)
            prev = n
    start, base = PAD * depth, {}
    for band in sorted(band_width):
        base[band] = start
        start += band_width[band] + GAP_X + 2 * PAD * depth
    pos: dict[str, tuple[float, float]] = {}
    for r, row in enumerate(rows):
        for n in row:
            pos[n] = (base[bands[n]] + local[n] + BOX_W / 2,
                      PAD * depth + 24 + r * (BOX_H + GAP_Y) + BOX_H / 2)
    clusters: dict[str, tuple[float, float, float, float]] = {}
    for n, path in paths.items():
        cx, cy = pos[n]
        for level, c in enumerate(path):
            m = PAD * (len(path) - level)
            box = (cx - BOX_W / 2 - m, cy - BOX_H / 2 - m - 14, cx + BOX_W / 2 + m,
                   cy + BOX_H / 2 + m)
            old = clusters.get(c, box)
            clusters[c] = (min(old[0], box[0]), min(old[1], box[1]), max(old[2], box[2]),
                           max(old[3], box[3]))
    edges = [[(pos[e.src][0], pos[e.src][1] + BOX_H / 2),
              (pos[e.dst][0], pos[e.dst][1] - BOX_H / 2)] for e in view.edges]
    width = max((x for x, _ in pos.values()), default=0) + BOX_W / 2 + PAD * depth + 20
    height = max((y for _, y in pos.values()), default=0) + BOX_H / 2 + PAD * depth + 20
    return Layout(pos, edges, clusters, width, height)
