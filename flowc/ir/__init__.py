"""The flowc IR: types, graphs, the op registry, text form, verifier and interpreter.

This package imports no other part of flowc.
"""

from flowc.ir import ops
from flowc.ir.attrs import Attrs, Tensor
from flowc.ir.errors import FlowcError, InferError, InterpretError, ParseError, VerifyError
from flowc.ir.graph import Graph, Node, Value, rebuild, topological_order
from flowc.ir.types import DTYPES, DType, TensorType, VarType, dtype

__all__ = [
    "DTYPES", "Attrs", "DType", "FlowcError", "Graph", "InferError", "InterpretError", "Node",
    "ParseError", "Tensor", "TensorType", "Value", "VarType", "VerifyError", "dtype", "ops",
    "rebuild", "topological_order",
]
