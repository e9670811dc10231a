"""Reading a 100 MiB SavedModel's variables costs at most one copy of the weights: a
SavedModel written here without TensorFlow (tf_saved_writer.py: 25 resource variables of
1024x1024 float32 in a checkpoint bundle, restored by RestoreV2) is imported in a child
process, whose peak resident set (VmHWM) may grow by the weights (the memory-mapped
shard's pages, once) plus a small constant: a reader that copied the weights (bytes read
into memory, arrays copied out of the map) would need twice that."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from tf_saved_writer import write_chain_saved_model

from flowc.frontend.tf.bundle import read_string
from flowc.frontend.tf.errors import TfImportError

CHILD = """
import sys
import numpy as np
from flowc.frontend.tf import import_tf

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

before = status("VmRSS")
graph = import_tf(sys.argv[1])
peak = status("VmHWM") - before
weights = {n.name: n.attrs["value"].data for n in graph.nodes if n.op == "constant"}
print(peak, sum(w.nbytes for w in weights.values()), float(np.asarray(weights["w0"])[3, 5]))
"""


def test_importing_a_100mb_saved_model_costs_one_copy_of_the_weights(tmp_path):
    folder = str(tmp_path / "chain_saved")
    size = write_chain_saved_model(folder, width=1024, layers=25, seed=7)
    assert size == 100 * 2**20
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", CHILD, folder], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    peak, imported, value = done.stdout.split()
    assert int(imported) == size   # every weight is a constant of the imported graph
    first = np.fromfile(f"{folder}/variables/variables.data-00000-of-00001", np.float32,
                        count=1024 * 1024).reshape(1024, 1024)
    assert float(value) == float(first[3, 5])
    assert int(peak) <= size + 48 * 2**20, f"peak RSS grew by {int(peak) / 2**20:.0f} MiB"


def test_scalar_strings_of_a_bundle(tmp_path):
    folder = str(tmp_path / "small_saved")
    write_chain_saved_model(folder, width=4, layers=2)
    prefix = f"{folder}/variables/variables"
    assert read_string(prefix, "_CHECKPOINTABLE_OBJECT_GRAPH") is None
    try:
        read_string(prefix, "w000/.ATTRIBUTES/VARIABLE_VALUE")
    except TfImportError as exc:
        assert str(exc) == (f"{prefix}.index: 'w000/.ATTRIBUTES/VARIABLE_VALUE' is not a "
                            "scalar string")
    else:
        raise AssertionError("a float tensor read as a string")
