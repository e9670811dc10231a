"""The `gradients` pass: gradients as graph outputs, shown in --dump-dir after its own
step, compiled with the rest of the pipeline; bad names are one-line errors."""

import numpy as np
import pytest

import flowc
from flowc.ir import FlowcError, Graph, Tensor, TensorType
from flowc.ir.build import make_node
from flowc.ir.interpret import interpret
from flowc.passes import PIPELINES, PassManager, parse_pipeline


def linear_loss():
    """loss = sum((x @ w + b) ** 2) with x [4, 3], w [3, 2], b [2]."""
    g = Graph("lin")
    x, w, b = (g.add_input(n, TensorType("f32", s)) for n, s in
               (("x", (4, 3)), ("w", (3, 2)), ("b", (2,))))
    y = g.append(make_node("add", [g.append(make_node("matmul", [x, w])).out(), b])).out()
    loss = g.append(make_node("reduce_sum", [g.append(make_node("mul", [y, y])).out()],
                              {"keepdims": 0}, name="loss")).out()
    g.add_output("loss", loss)
    return g


RNG = np.random.default_rng(4)
FEEDS = {"x": RNG.standard_normal((4, 3)).astype(np.float32),
         "w": RNG.standard_normal((3, 2)).astype(np.float32),
         "b": RNG.standard_normal(2).astype(np.float32)}


def test_gradients_are_outputs_and_dumped_after_their_pass(tmp_path):
    pipeline = parse_pipeline("gradients{ys=loss,xs=w;b},cse")
    out = PassManager(pipeline, dump_dir=tmp_path).run(linear_loss())
    assert [name for name, _ in out.outputs] == ["loss", "grad/w", "grad/b"]
    dumped = (tmp_path / "01-gradients.flowc").read_text()
    assert '"grad/w"' in dumped and "gradients/Gemm" in dumped  # matmul by a matrix: gemms
    got = interpret(out, FEEDS)
    y = FEEDS["x"] @ FEEDS["w"] + FEEDS["b"]
    np.testing.assert_allclose(got["grad/w"], FEEDS["x"].T @ (2 * y), rtol=1e-5)
    np.testing.assert_allclose(got["grad/b"], (2 * y).sum(0), rtol=1e-5)


def test_gradients_pass_compiles_with_the_default_pipeline(tmp_path):
    default = ",".join(step for step, _ in PIPELINES["default"])
    flowc.compile(linear_loss(), tmp_path / "art",
                  pipeline=f"gradients{{ys=loss,xs=w;b}},{default}")
    want = interpret(PassManager(parse_pipeline("gradients{ys=loss,xs=w;b}")).run(
        linear_loss()), FEEDS)
    with flowc.load(tmp_path / "art") as model:
        got = model(**FEEDS)
    for value, name in zip(got, ["loss", "grad/w", "grad/b"], strict=True):
        np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(("options", "message"), [
    ("ys=nothing,xs=w", "graph @lin has no output, input or node named 'nothing'"),
    ("ys=loss", "gradients: option xs names no tensor (give xs=a;b)"),
    ("ys=loss,xs=w;z", "gradients: x 'z' reaches none of ys (loss): its gradient is zero"),
])
def test_gradients_pass_errors(options, message):
    g = linear_loss()
    g.add_input("z", TensorType("f32", (2,)))
    with pytest.raises(FlowcError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PassManager(parse_pipeline(f"gradients{{{options}}}")).run(g)


def test_a_constant_y_is_refused():
    g = linear_loss()
    c = g.append(make_node("constant", [], {"value": Tensor(np.array([1, 2]))}, name="c"))
    g.add_output("c", c.out())
    with pytest.raises(FlowcError, match=r"y \(result #0 of 'c' \(constant\)\) is i64\[2\]"):
        PassManager(parse_pipeline("gradients{ys=c,xs=w}")).run(g)


def test_the_pass_leaves_its_input_graph_unchanged():
    """Differentiating a loop holding a cond grows the forward nodes with residual results;
    the pass does that on its own copy, so the graph it was given prints as before."""
    from flowc.frontend import Graph as ApiGraph
    from flowc.frontend import api, cond, placeholder, while_loop
    from flowc.ir.printer import print_graph

    with ApiGraph() as g:
        x = placeholder("f64", (3,), name="x")
        w = placeholder("f64", (3,), name="w")
        _, acc = while_loop(lambda i, acc: i < 4,
                            lambda i, acc: (i + 1, cond(api.reduce_sum(acc, keepdims=0) > 0.0,
                                                        lambda: acc * w, lambda: acc + w)),
                            (0, x), maximum_iterations=4)
        loss = api.reduce_sum(acc * acc, keepdims=0)
    graph = g.ir
    graph.add_output("loss", loss.value)
    before = print_graph(graph)
    out = parse_pipeline("gradients{ys=loss,xs=w}")[0].run(graph)
    assert print_graph(graph) == before
    assert "grad/w" in [name for name, _ in out.outputs]
