"""`flowc bench DIR`: a timing report of any artifact, made with the runtime only."""

from __future__ import annotations

import json
import subprocess
import sys

from flowc.cli import main


def test_bench_reports_sane_figures(built_mlp, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", str(built_mlp), "--runs", "5", "--warmup", "1", "--threads", "1",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"bench mlp ({built_mlp}): 5 runs after 1 warm-up, threads 1, "
                           "seed 0\n")
    assert "  latency ms: min " in text and "  throughput: " in text and "peak memory" in text
    r = json.loads(out.read_text())
    assert set(r) == {"model", "path", "threads", "runs", "warmup", "seed", "load_ms",
                      "first_call_ms", "latency_ms", "throughput_per_s", "peak_rss_bytes"}
    assert (r["model"], r["runs"], r["warmup"], r["threads"], r["seed"]) == ("mlp", 5, 1, 1, 0)
    lat = r["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert lat["min"] <= lat["mean"] <= lat["max"]
    assert abs(r["throughput_per_s"] * lat["mean"] / 1e3 - 1) < 1e-6  # runs per second
    assert r["load_ms"] > 0 and r["first_call_ms"] > 0
    assert 10 * 2**20 < r["peak_rss_bytes"] < 64 * 2**30


def test_bench_imports_no_compiler(built_mlp):
    code = ("import sys\nfrom flowc.cli import main\n"
            f"assert main(['bench', {str(built_mlp)!r}, '--runs', '2']) == 0\n"
            "print('LOADED:' + ','.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('mlir', 'llvmlite', 'onnx') or m.startswith(('flowc.ir', 'flowc.codegen', "
            "'flowc.passes', 'flowc.frontend')))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    # the CLI's error class lives in flowc.ir.errors, and `flowc compile`'s parser is built
    # from flowc.codegen.options (a leaf: a dataclass of options); nothing else of the
    # compiler loads
    assert done.stdout.splitlines()[-1] == ("LOADED:flowc.codegen,flowc.codegen.options,"
                                            "flowc.ir,flowc.ir.errors")


def test_bench_of_a_model_file_is_one_error_line(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"\x08\x07")
    assert main(["bench", str(model)]) == 1
    err = capsys.readouterr().err
    assert err == (f"flowc: error: {model}: a model, not an artifact directory; compile it "
                   f"first (flowc.compile('{model}', DIR), or flowc compile {model} -o DIR) and "
                   "load DIR\n")
