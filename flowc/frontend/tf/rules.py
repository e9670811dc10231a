"""The TensorFlow importer's op table: TF op name -> converter (context.py's contract).

The ops the driver handles itself (they name graph inputs, have bodies: control.py, or are
state: state.py) are `DRIVER_OPS`; `is_supported(op)` is whether an op is either.
"""

from __future__ import annotations

from flowc.frontend.tf.ops_array import CONVERTERS as ARRAY
from flowc.frontend.tf.ops_math import CONVERTERS as MATH
from flowc.frontend.tf.ops_nn import CONVERTERS as NN
from flowc.frontend.tf.state import STATE_OPS

CONVERTERS = {**MATH, **ARRAY, **NN}
DRIVER_OPS = ("Placeholder", "PlaceholderWithDefault", "_Arg", "If", "StatelessIf", "While",
              "StatelessWhile", *STATE_OPS)


def is_supported(op: str) -> bool:
    return op in CONVERTERS or op in DRIVER_OPS
