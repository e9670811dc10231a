"""Hostile and non-ASCII names (issue [20]; docs/robustness.md "Hostile names"): a model's
tensor, node and graph names reach the generated C (NAME.h, NAME_model.c) only escaped by
codegen/emit/c_text.py, so a name that tries to close a comment and inject code compiles into an
artifact that runs nothing but the model, in Python and in a C program including the
header; non-ASCII names round-trip as UTF-8 (the C API's name bytes, the loader's names).
The payloads would create a canary file; it must not exist after compile, load and run.
Each compile uses the real backend (~1 s; the MLIR locations carry the node names)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import flowc
from flowc.codegen.emit.c_text import c_comment
from flowc.frontend import api
from flowc.ir.errors import FlowcError

CC = os.environ.get("CC", "cc")
pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="needs a C compiler")
X = np.array([[-1.5, 0.25, 2.0], [3.0, -0.5, 0.0]], np.float32)


def constructor_payload(canary: Path, tag: str) -> str:
    """A tensor name that, copied into a C comment, defines a constructor (guarded: the
    header repeats a name) that creates `canary`_`tag`."""
    return (f"x */\n#ifndef PWN_{tag}\n#define PWN_{tag}\nint system(const char *); "
            f"__attribute__((constructor)) static void pwn_{tag}(void) {{ "
            f"system(\"touch {canary}_{tag}\"); }}\n#endif\n/* ")


def statement_payload(canary: Path, tag: str) -> str:
    """A node name that, copied into a comment in a function, runs a command."""
    return f'relu */ {{ int system(const char *); system("touch {canary}_{tag}"); }} /*'


def relu_onnx(inp: str, out: str, node: str, graph: str = "g"):
    n = helper.make_node("Relu", [inp], [out], name=node)
    g = helper.make_graph([n], graph, [helper.make_tensor_value_info(inp, TensorProto.FLOAT,
                                                                     [2, 3])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def c_program(work: Path, art: Path, name: str) -> str:
    """Build and run a C program that includes NAME.h, links libNAME.a, prints the input
    and output names as hex UTF-8 bytes and the output of one run on X; its stdout."""
    src = work / "prog.c"
    src.write_text(f"""#include <stdio.h>
#include <string.h>
#include "{name}.h"
static void hex(const char *s) {{
  for (; *s; s++) printf("%02x", (unsigned char)*s);
  printf("\\n");
}}
int main(void) {{
  static const float x[6] = {{{", ".join(f"{v}f" for v in X.ravel())}}};
  {name}_ctx *ctx;
  if ({name}_create(&ctx) != FLOWC_OK) return 1;
  memcpy({name}_input(ctx, 0), x, sizeof x);
  if ({name}_run(ctx) != FLOWC_OK) return 2;
  hex({name}_input_name(0));
  hex({name}_output_name(0));
  const float *y = {name}_output(ctx, 0);
  for (int i = 0; i < 6; i++) printf("%.9g\\n", y[i]);
  {name}_destroy(ctx);
  return 0;
}}
""")
    exe = work / "prog"
    subprocess.run([CC, "-std=c11", "-Wall", "-Werror", f"-I{art}", str(src),
                    str(art / f"lib{name}.a"), "-lm", "-lpthread", "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout


def check_runs(art: Path, work: Path, inp: str, out: str) -> None:
    """The artifact loads and runs by name in Python and from C, with the right output and
    the names as UTF-8 bytes."""
    model = flowc.load(art)
    assert [n for n, _, _ in model.inputs] == [inp]
    assert [n for n, _, _ in model.outputs] == [out]
    got = model.run(**{inp: X})
    np.testing.assert_array_equal(got[out], np.maximum(X, 0))
    name = model.manifest["name"]
    lines = c_program(work, art, name).splitlines()
    assert lines[:2] == [inp.encode().hex(), out.encode().hex()]
    np.testing.assert_array_equal(np.array(lines[2:], np.float32).reshape(2, 3),
                                  np.maximum(X, 0))
    model.close()


def test_injection_payloads_stay_comments(tmp_path):
    canary = tmp_path / "CANARY"
    inp, out = constructor_payload(canary, "in"), constructor_payload(canary, "out")
    node = statement_payload(canary, "node")
    art, dump = tmp_path / "art", tmp_path / "dump"
    flowc.compile(relu_onnx(inp, out, node), art, dump_dir=dump)
    check_runs(art, tmp_path, inp, out)  # in Python and in a C program
    assert not list(tmp_path.glob("CANARY*"))
    header = (art / "g.h").read_text()
    model_c = (dump / "g_model.c").read_text()
    for text in (header, model_c):
        assert text.isascii() and inp not in text and node not in text and out not in text
    assert c_comment(inp) in header and c_comment(out) in header
    assert f"  /* {c_comment(node)} */\n" in model_c
    # without its comments the header holds nothing of the payloads (but identifiers
    # derived from the names: g_input_x_____ifndef_PWN...)
    bare = subprocess.run([CC, "-E", "-P", "-trigraphs", "-x", "c", "-"], input=header,
                          capture_output=True, text=True, check=True).stdout
    assert "system(" not in bare and "pwn_in(" not in bare and '"' not in bare


def test_non_ascii_names_round_trip(tmp_path):
    inp, out = "entrée", "输入 😀"
    art = tmp_path / "art"
    manifest = flowc.compile(relu_onnx(inp, out, "nœud/Relu", graph="modèle"), art)
    assert manifest["name"] == "mod_le"
    check_runs(art, tmp_path, inp, out)


def test_names_of_the_api_getters_get_accessors_of_their_own(tmp_path):
    """A tensor named like a descriptor getter (NAME_output_shape(int) ...) keeps that
    function and gets an accessor with a suffix: the artifact links and runs."""
    art = tmp_path / "art"
    flowc.compile(relu_onnx("bytes", "shape", "Relu"), art)
    header = next(art.glob("*.h")).read_text()
    assert "g_input_bytes_2(g_ctx *ctx)" in header and "g_output_shape_2(" in header
    assert "const int64_t *g_output_shape(int i)" in header
    check_runs(art, tmp_path, "bytes", "shape")


def test_gpu_tables_and_comments_escape_names(tmp_path):
    """A node placed on a GPU: its name reaches the launch table (a C string), the transfer
    steps' comments and the rendezvous keys of a mixed CPU+GPU artifact (compiled and
    linked, not run: that needs a GPU)."""
    node, other = 'relu */ \n# "é??/ \\ /*', "neg */ x /*"
    inp = constructor_payload(tmp_path / "CANARY", "in")
    nodes = [helper.make_node("Relu", [inp], ["h"], name=node),
             helper.make_node("Neg", ["h"], ["y"], name=other)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(inp, TensorProto.FLOAT,
                                                                     [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    flowc.compile(model, tmp_path / "art", dump_dir=tmp_path / "dump", devices="cpu:0,gpu:0",
                  place=[f"{node}=gpu:0"])
    model_c = (tmp_path / "dump" / "g_model.c").read_text()
    assert model_c.isascii() and node not in model_c and other not in model_c
    assert "static const flowc_gpu_program gpu_partition" in model_c
    assert f"{c_comment(node)}:0/send/cpu:0 */" in model_c
    assert f"  /* {c_comment(other)} */\n" in model_c
    assert not list(tmp_path.glob("CANARY*"))


def test_nul_in_an_input_name_is_a_one_line_error(tmp_path):
    with pytest.raises(FlowcError, match=r"^graph input 0 'a\\x00b' holds a NUL character; "
                                         r"input and output names cannot"):
        flowc.compile(relu_onnx("a\0b", "y", "n"), tmp_path)


# Names drawn from C metacharacters and Unicode (NUL only where names may hold it: node and
# graph names); input and output names differ and are not empty.
META = ["*/", "/*", "//", "\n#", "\n#define relu\n", '"', "\\", "\\\n", "??/", "??=", "\r",
        "\u2028", "é", "输入", "😀", "%s", "1", "\\0"]
NAME = st.lists(st.one_of(st.sampled_from(META),
                          st.text(st.characters(exclude_categories=["Cs"],
                                                exclude_characters="\0"), max_size=4)),
                min_size=1, max_size=5).map("".join).filter(bool)
WITH_NUL = st.one_of(NAME, NAME.map(lambda s: s + "\0" + s))
EXAMPLES = int(os.environ.get("FLOWC_FUZZ_EXAMPLES", "4"))
# FLOWC_FUZZ_RANDOM=1: fresh random examples; by default the same ones each run
FEW = settings(max_examples=EXAMPLES, deadline=None,
               derandomize=not os.environ.get("FLOWC_FUZZ_RANDOM"),
               suppress_health_check=[HealthCheck.function_scoped_fixture,
                                      HealthCheck.too_slow, HealthCheck.filter_too_much])


def check_names(names, work: Path) -> None:
    """Compile, load and run in a fresh directory per example (a process that loaded a
    library keeps it under its path: a rebuilt one there would be a graph hash mismatch)."""
    inp, out, node, graph = names
    work = Path(tempfile.mkdtemp(dir=work))
    art = work / "art"
    flowc.compile(relu_onnx(inp, out, node, graph), art)
    check_runs(art, work, inp, out)


@FEW
@given(names=st.tuples(NAME, NAME, WITH_NUL, WITH_NUL).filter(lambda n: n[0] != n[1]))
def test_random_names_compile_and_run(names, tmp_path):
    check_names(names, tmp_path)


@pytest.mark.slow
@settings(FEW, max_examples=60)
@given(names=st.tuples(NAME, NAME, WITH_NUL, WITH_NUL).filter(lambda n: n[0] != n[1]))
def test_random_names_many(names, tmp_path):
    check_names(names, tmp_path)


@pytest.mark.slow
@settings(FEW, max_examples=10)
@given(names=st.tuples(NAME, NAME, WITH_NUL, WITH_NUL, WITH_NUL)
       .filter(lambda n: n[0] != n[1]))
def test_random_names_partitioned(names, tmp_path):
    """The same over two CPU partitions: node names also reach the rendezvous keys (a C
    string table) and the partition functions' comments."""
    inp, out, first, second, graph = names
    with api.Graph(graph) as g:
        x = api.placeholder("f32", (2, 3), name=inp)
        with api.device("cpu:0"):
            h = api.op("neg", x, node_name=first)
        with api.device("cpu:1"):
            y = api.op("neg", api.op("relu", h, node_name=second), node_name=second + "2")
        g.output(out, y)
    art = Path(tempfile.mkdtemp(dir=tmp_path)) / "art"
    flowc.compile(g.ir, art)
    got = flowc.load(art).run(**{inp: X})[out]
    np.testing.assert_array_equal(got, -np.maximum(-X, 0))
