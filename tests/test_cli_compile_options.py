"""`flowc compile`'s compiler options are CompileOptions' CLI fields (flowc/codegen/options.py):
each field's flag and help text show in `flowc compile --help`, parsing the flags gives the
matching CompileOptions, and the command declares no compiler option of its own."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from flowc.cli import build_parser, main
from flowc.cli.compile import options_from
from flowc.codegen.options import CompileOptions, cli_fields
from flowc.ir.errors import FlowcError

# the command's own arguments: not options of flowc.compile
CLI_ONLY = {"help", "model", "output", "explain_placement", "explain_memory", "no_cache",
            "quiet", "verbose"}


def compile_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    return sub.choices["compile"]


def words(text: str) -> str:
    return " ".join(text.split())


def test_every_cli_field_is_in_compile_help(capsys):
    assert main(["compile", "--help"]) == 0
    help_text = words(capsys.readouterr().out)
    assert cli_fields(), "CompileOptions has no CLI fields"
    for f in cli_fields():
        for flag in f.metadata["flag"]:
            assert f" {flag} " in help_text, f"{f.name}: {flag} missing from compile --help"
        assert words(f.metadata["help"]) in help_text, f"{f.name}: help text missing"


def test_compile_options_are_the_fields_and_the_cli_only_ones():
    dests = {a.dest for a in compile_parser()._actions}
    assert dests == {f.name for f in cli_fields()} | CLI_ONLY


def test_flags_give_the_matching_compile_options():
    args = compile_parser().parse_args([
        "m.onnx", "--target", "x86-64", "--batch", "3", "--dim", "n=4", "--dim", "s=7",
        "--place", "a=gpu:0", "--place", "b=cpu:0", "--gpu-arch", "sm_90", "--name", "net",
        "-p", "cse", "--weights", "file", "--dump-dir", "d", "--print-ir-after-all",
        "--devices", "cpu:0,gpu:0", "--device-profiles", "p.json", "--profile",
        "--gpu-matmul", "tensor-cores"])
    options = options_from(args)
    assert options == CompileOptions(
        target="x86-64", batch=3, dims={"n": 4, "s": 7}, place=("a=gpu:0", "b=cpu:0"),
        gpu_archs=("sm_90",), name="net", pipeline="cse", weights="file", dump_dir="d",
        print_ir_after_all=True, devices="cpu:0,gpu:0", device_profiles="p.json",
        profile=True, gpu_matmul="tensor-cores")


def test_no_flags_give_the_default_options():
    options = options_from(compile_parser().parse_args(["m.onnx"]))
    assert options == CompileOptions()
    assert dataclasses.asdict(options)["gpu_archs"] == ()


def test_api_fields_are_set_beside_the_flags():
    def report(text: str) -> None:
        del text

    options = options_from(compile_parser().parse_args(["m.onnx", "--batch", "2"]),
                           cache=False, explain_memory=report)
    assert (options.batch, options.cache, options.explain_memory) == (2, False, report)


@pytest.mark.parametrize("binding", ["n", "n=", "n=x", "=4"])
def test_a_bad_dim_names_the_flag(binding):
    args = compile_parser().parse_args(["m.onnx", "--dim", binding])
    with pytest.raises(FlowcError, match=rf"--dim '{binding}' must look like NAME=SIZE"):
        options_from(args)
