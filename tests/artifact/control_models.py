"""ONNX models with If and Loop for the control-flow artifact tests (test_control_flow.py).

`if_model(heavy)`: `y = If(c, then: (x*2 + 1) [@ w @ w], else: (x - 3) [@ w])` over x f32[4, 8];
heavy branches hold matmuls (several kernels: control steps), light ones elementwise ops
(one scf kernel). `loop_model(heavy, trips)`: `h, hs = Loop(M, "", h0)`, M an initializer
(or the graph input "M" when `trips` is None), body `h' = tanh(h @ w1) @ w2 + b` (heavy) or
`h' = tanh(h) * 0.5 + b` (light), scan output `h'` (unless not `scan`); w1, w2, b come from
the outer scope. With `swap`, a second carried value g (from input g0) trades places with h
each iteration: `(h, g) -> (g, h')`. With `residual`, `h' = h + (the above)`: the last
kernel reads the old h and may write the new one over it.
`torch_cond()`: `torch.cond(x.sum() > 0, relu(a(x)) * 2, b(x) - 1)` (a, b Linear layers)
exported by torch.onnx.export(dynamo=True) (needs onnxscript): an ONNX If of two branches.
`torch_while()`: torch's `while_loop(i < n, (i + 1, tanh(a(h)) + h))` (n an input), the same
exporter: an ONNX Loop with a condition and no trip count.
`scripted_loop()`: a torch.jit.script module exported by torch.onnx.export(dynamo=False):
`for _ in range(int(steps))`, two Linear layers, and inside the loop an `if` on `h.sum() > 0`
whose branches each run a Linear: an ONNX Loop (trip count: input `steps`) holding an If.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(7)
W = (RNG.standard_normal((8, 8)) * 0.3).astype(np.float32)
W2 = (RNG.standard_normal((8, 8)) * 0.3).astype(np.float32)
B = RNG.standard_normal(8).astype(np.float32)


def _const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.asarray(value, np.float32), name))


def _branch(name: str, nodes: list, out: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(
        out, TensorProto.FLOAT, [4, 8])])


def if_model(heavy: bool) -> onnx.ModelProto:
    then_nodes = [_const("two", 2.0), _const("one", 1.0),
                  helper.make_node("Mul", ["x", "two"], ["t0"]),
                  helper.make_node("Add", ["t0", "one"], ["t1"])]
    else_nodes = [_const("three", 3.0), helper.make_node("Sub", ["x", "three"], ["e0"])]
    if heavy:
        then_nodes += [helper.make_node("MatMul", ["t1", "w"], ["t2"]),
                       helper.make_node("Relu", ["t2"], ["t3"]),
                       helper.make_node("MatMul", ["t3", "w"], ["t_out"])]
        else_nodes += [helper.make_node("MatMul", ["e0", "w"], ["e_out"])]
    else:
        then_nodes += [helper.make_node("Exp", ["t1"], ["t_out"])]
        else_nodes += [helper.make_node("Abs", ["e0"], ["e_out"])]
    node = helper.make_node("If", ["c"], ["y"], then_branch=_branch("then", then_nodes, "t_out"),
                            else_branch=_branch("else", else_nodes, "e_out"))
    graph = helper.make_graph(
        [node], "if_model",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(W, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def loop_model(heavy: bool, trips: int | None = 5, scan: bool = True, swap: bool = False,
               residual: bool = False) -> onnx.ModelProto:
    if heavy:
        nodes = [helper.make_node("MatMul", ["h_in", "w1"], ["a"]),
                 helper.make_node("Tanh", ["a"], ["b0"]),
                 helper.make_node("MatMul", ["b0", "w2"], ["b1"])]
    else:
        nodes = [helper.make_node("Tanh", ["h_in"], ["b0"]), _const("half", 0.5),
                 helper.make_node("Mul", ["b0", "half"], ["b1"])]
    h_type = [1, 8]
    nodes += [helper.make_node("Add", ["b1", "b"], ["h_sum" if residual else "h_new"]),
              *([helper.make_node("Add", ["h_sum", "h_in"], ["h_new"])] if residual else []),
              helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    carried_in = [helper.make_tensor_value_info("h_in", TensorProto.FLOAT, h_type)]
    outs = [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, [])]
    if swap:
        carried_in.append(helper.make_tensor_value_info("g_in", TensorProto.FLOAT, h_type))
        nodes.append(helper.make_node("Identity", ["g_in"], ["h_out"]))
        nodes.append(helper.make_node("Identity", ["h_new"], ["g_out"]))
        outs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, h_type)
                 for n in ("h_out", "g_out")]
    else:
        nodes.append(helper.make_node("Identity", ["h_new"], ["h_out"]))
        outs.append(helper.make_tensor_value_info("h_out", TensorProto.FLOAT, h_type))
    if scan:
        nodes.append(helper.make_node("Identity", ["h_new"], ["scan_out"]))
        outs.append(helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, h_type))
    body = helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), *carried_in], outs)
    inits = [numpy_helper.from_array(W, "w1"), numpy_helper.from_array(W2, "w2"),
             numpy_helper.from_array(B, "b")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, h_type)
              for n in (("h0", "g0") if swap else ("h0",))]
    if trips is None:
        inputs.append(helper.make_tensor_value_info("M", TensorProto.INT64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(trips, np.int64), "M"))
    results = [helper.make_tensor_value_info(n, TensorProto.FLOAT, h_type)
               for n in (("h", "g") if swap else ("h",))]
    if scan:
        results.append(helper.make_tensor_value_info("hs", TensorProto.FLOAT, [trips, *h_type]))
    loop = helper.make_node("Loop", ["M", "", *(i.name for i in inputs if i.name != "M")],
                            [r.name for r in results], body=body)
    graph = helper.make_graph([loop], "loop_model", inputs, results, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def scripted_loop() -> onnx.ModelProto:
    import io

    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 8)

        def forward(self, x, steps):
            h = x
            for _ in range(int(steps)):
                h = torch.tanh(self.b(torch.relu(self.a(h)))) + h
                if bool(h.sum() > 0):  # noqa: SIM108 (a statement if, as users write it)
                    h = self.a(h) * 0.5
                else:
                    h = self.b(h) - 1.0
            return h

    torch.manual_seed(0)
    buffer = io.BytesIO()
    torch.onnx.export(torch.jit.script(Net()), (torch.randn(2, 8), torch.tensor(3)), buffer,
                      dynamo=False, input_names=["x", "steps"], output_names=["y"])
    return onnx.load_from_string(buffer.getvalue())


def torch_cond() -> onnx.ModelProto:
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda x: torch.relu(self.a(x)) * 2.0,
                              lambda x: self.b(x) - 1.0, (x,))

    torch.manual_seed(0)
    program = torch.onnx.export(Net().eval(), (torch.randn(2, 8),), dynamo=True,
                                input_names=["x"], output_names=["y"], verbose=False)
    return program.model_proto


def torch_while() -> onnx.ModelProto:
    import torch
    from torch._higher_order_ops.while_loop import while_loop

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)

        def forward(self, x, n):
            return while_loop(lambda i, h: i < n, lambda i, h: (i + 1, torch.tanh(self.a(h)) + h),
                              (torch.zeros((), dtype=torch.int64), x))[1]

    torch.manual_seed(0)
    program = torch.onnx.export(Net().eval(), (torch.randn(2, 8), torch.tensor(3)),
                                dynamo=True, input_names=["x", "n"], output_names=["y"],
                                verbose=False)
    return program.model_proto


def nested_loop_model() -> onnx.ModelProto:
    """`Loop(3, h0)` whose body runs `loop_model(heavy=True, trips=2, scan=False)`'s Loop on
    its carried value, adds the value, and emits the sum as a scan element: a loop nested
    in a loop's body (the inner body reads w1, w2, b two scopes out)."""
    inner = loop_model(heavy=True, trips=2, scan=False)
    inner_loop = helper.make_node("Loop", ["m_inner", "", "h_o"], ["h_inner"],
                                  body=inner.graph.node[0].attribute[0].g)
    h_type = [1, 8]
    body = helper.make_graph(
        [helper.make_node("Constant", [], ["m_inner"], value=numpy_helper.from_array(
            np.array(2, np.int64), "m_inner")), inner_loop,
         helper.make_node("Add", ["h_inner", "h_o"], ["h_next"]),
         helper.make_node("Identity", ["cond_o"], ["cond_next"]),
         helper.make_node("Identity", ["h_next"], ["h_scan"])], "outer",
        [helper.make_tensor_value_info("i_o", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_o", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_o", TensorProto.FLOAT, h_type)],
        [helper.make_tensor_value_info("cond_next", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_next", TensorProto.FLOAT, h_type),
         helper.make_tensor_value_info("h_scan", TensorProto.FLOAT, h_type)])
    inits = [i for i in inner.graph.initializer if i.name != "M"]
    inits.append(numpy_helper.from_array(np.array(3, np.int64), "M"))
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "h0"], ["h", "hs"], body=body)], "nested",
        [helper.make_tensor_value_info("h0", TensorProto.FLOAT, h_type)],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, h_type),
         helper.make_tensor_value_info("hs", TensorProto.FLOAT, [3, *h_type])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def while_model() -> onnx.ModelProto:
    """`h = Loop("", c0, h0)`, no trip count: the heavy body of `loop_model` runs while the
    condition holds; the body's condition is `i + 1 < limit` (limit: an i64 input)."""
    base = loop_model(heavy=True, scan=False)
    body = base.graph.node[0].attribute[0].g
    nodes = [n for n in body.node if n.output[0] != "cond_out"]
    nodes += [helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(
                  np.array(1, np.int64), "one")),
              helper.make_node("Add", ["i", "one"], ["next"]),
              helper.make_node("Less", ["next", "limit"], ["cond_out"])]
    new_body = helper.make_graph(nodes, "body", body.input, body.output)
    inputs = [helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, 8]),
              helper.make_tensor_value_info("c0", TensorProto.BOOL, []),
              helper.make_tensor_value_info("limit", TensorProto.INT64, [])]
    graph = helper.make_graph(
        [helper.make_node("Loop", ["", "c0", "h0"], ["h"], body=new_body)], "while_model",
        inputs, [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 8])],
        [i for i in base.graph.initializer if i.name != "M"])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
