"""Colours shared by the SVG and DOT writers: one per device, one per op family, one per
training phase."""

from __future__ import annotations

DEVICE_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
                  "#8c564b", "#e377c2")
TRANSFER_COLOUR = "#d62728"
OP_FILLS = {"input": "#fff3c4", "constant": "#eeeeee", "variable": "#f8d9c0",
            "send": "#ffd6d6", "recv": "#ffd6d6", "matmul": "#d7e8fb", "gemm": "#d7e8fb",
            "packed_matmul": "#d7e8fb", "winograd_conv": "#d7e8fb",
            "conv": "#d7e8fb"}
DEFAULT_FILL = "#ffffff"
# a training step's backward and update nodes (ir/phases.py) are tinted over any op fill, so
# the three phases read apart at a glance; forward nodes keep their op's fill
PHASE_FILLS = {"backward": "#e3f4e1", "update": "#fbe3ef"}


def box_fill(op: str, phase: str) -> str:
    """The fill of a node box: its phase's tint in a training step, else its op's."""
    return PHASE_FILLS.get(phase) or OP_FILLS.get(op, DEFAULT_FILL)


def device_colours(devices: list[str]) -> dict[str, str]:
    """A stable colour per device name (in sorted order, cycling the palette)."""
    return {d: DEVICE_COLOURS[i % len(DEVICE_COLOURS)] for i, d in enumerate(sorted(devices))}
