"""`flowc quantize MODEL.onnx --calibration DATA.npz -o Q.onnx`: static QDQ quantization of
an f32 ONNX model from flowc's own calibration (frontend/onnx_quant_static.py).

Contract: `add_parser(subparsers)` registers the command; `run(args)` reads the model and
the calibration arrays (an .npz of one array per graph input, the leading axis the
samples), writes the quantized model to `-o` and returns 0. A model or calibration file
that cannot be read, calibration arrays that do not fit the model, and a bad method or
percentile are one-line FlowcErrors, raised before anything is written.
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path
from typing import Any


def _calibration(path: str) -> dict:
    import numpy as np

    from flowc.ir.errors import FlowcError

    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise FlowcError(f"--calibration '{path}': a single .npy array; expected an .npz "
                             "with one array per model input")
        with data:
            return {name: data[name] for name in data.files}
    except (ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise FlowcError(f"--calibration '{path}': not an .npz archive of arrays ({exc})"
                         ) from None
    except IsADirectoryError:
        raise FlowcError(f"--calibration '{path}': is a directory; expected an .npz file"
                         ) from None


def run(args: argparse.Namespace) -> int:
    from flowc.frontend.onnx_external import load_external, read_model
    from flowc.frontend.onnx_quant_static import quantize_static
    from flowc.ir.errors import FlowcError

    model = read_model(args.model)
    load_external(model, args.model)
    quantized = quantize_static(model, _calibration(args.calibration), args.method,
                                args.per_channel, args.percentile)
    try:
        Path(args.output).write_bytes(quantized.SerializeToString())
    except OSError as exc:
        raise FlowcError(f"cannot write '{args.output}': {exc.strerror or exc}") from None
    return 0


def _percentile(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (50, 100], found '{text}'"
                                         ) from None
    if not 50 < value <= 100:
        raise argparse.ArgumentTypeError(f"expected a number in (50, 100], found '{text}'")
    return value


def add_parser(sub: Any) -> argparse.ArgumentParser:
    q = sub.add_parser(
        "quantize", help="quantize an f32 ONNX model to int8 (QDQ) from calibration data",
        description="Quantize MODEL.onnx statically into the QDQ format onnxruntime's "
                    "quantize_static writes (u8 activations, s8 weights, i32 conv biases), "
                    "the activation ranges calibrated by running MODEL on flowc's reference "
                    "interpreter over the calibration samples.")
    q.add_argument("model", metavar="MODEL", help="the f32 .onnx model (opset 13 or newer)")
    q.add_argument("--calibration", required=True, metavar="FILE",
                   help="an .npz with one array per model input, its leading axis the "
                        "samples")
    q.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="where to write the quantized .onnx model")
    q.add_argument("--method", choices=("minmax", "percentile"), default="minmax",
                   help="activation ranges: the calibration's min and max (default), or "
                        "its --percentile percentiles")
    q.add_argument("--percentile", type=_percentile, default=99.999, metavar="P",
                   help="with --method percentile: the range is the P-th and (100 - P)-th "
                        "percentiles of the values (default 99.999)")
    q.add_argument("--per-channel", action="store_true",
                   help="one weight scale per output channel (conv) or column (matmul)")
    return q
