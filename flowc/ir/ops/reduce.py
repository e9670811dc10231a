"""Reductions: sum, mean, max, min, prod (ONNX axes-as-input form), argmax and argmin."""

from __future__ import annotations
