"""One training step of a bench/train_models.py workload in each engine, as `step() -> loss`.

Contract: `make_step(engine, name)` builds the workload's model in `engine` ("torch" eager,
"torch_compile": the same with the forward and loss, and the optimizer step, each compiled
by `torch.compile` (inductor), "jax" with jax.jit + optax) from
`train_models.parameters(name)` and its fixed batch, and returns a function that runs one
full step (forward, loss, backward, optimizer update, the loss read back to the host as a
float) each time it is called. Thread limits are the caller's job (bench/train.py sets them
before the engine is imported). "flowc" exports the torch model to ONNX and compiles it
with `--train` in a child process (`build_flowc`; not timed), so that the process that
trains has loaded the artifact only (neither torch nor the compiler: its memory is the
runtime's).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from train_models import BERT, CNN, WORKLOADS, data, parameters


def make_step(engine: str, name: str) -> Callable[[], float]:
    makers = {"torch": _torch_step, "torch_compile": _torch_compile_step, "jax": _jax_step,
              "flowc": _flowc_step}
    return makers[engine](name)


# ---- torch --------------------------------------------------------------------------------
def _torch_forward(name: str):
    import torch
    from torch.nn import functional as F

    if name == "mlp":
        def forward(p, x):
            x = torch.relu(F.linear(x, p["fc1.weight"], p["fc1.bias"]))
            x = torch.relu(F.linear(x, p["fc2.weight"], p["fc2.bias"]))
            return F.linear(x, p["fc3.weight"], p["fc3.bias"])
        return forward
    if name == "cnn":
        def forward(p, x):
            def conv(t, n):
                return F.conv2d(t, p[f"{n}.weight"], p[f"{n}.bias"], stride=CNN[n][2],
                                padding=1)
            x = torch.relu(conv(x, "stem"))
            x = torch.relu(x + conv(torch.relu(conv(x, "b1c1")), "b1c2"))
            x = torch.relu(conv(x, "down"))
            x = torch.relu(x + conv(torch.relu(conv(x, "b2c1")), "b2c2"))
            return F.linear(x.mean((2, 3)), p["fc.weight"], p["fc.bias"])
        return forward

    heads, hidden = BERT["heads"], BERT["hidden"]

    def forward(p, x):
        b, s, _ = x.shape

        def split(t):
            return t.view(b, s, heads, hidden // heads).transpose(1, 2)
        q, k, v = (split(F.linear(x, p[f"{n}.weight"], p[f"{n}.bias"])) for n in "qkv")
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hidden // heads), dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(b, s, hidden)
        h = F.layer_norm(x + F.linear(ctx, p["o.weight"], p["o.bias"]), (hidden,),
                         p["norm1.weight"], p["norm1.bias"], eps=1e-12)
        ff = F.linear(F.gelu(F.linear(h, p["up.weight"], p["up.bias"])), p["down.weight"],
                      p["down.bias"])
        return F.layer_norm(h + ff, (hidden,), p["norm2.weight"], p["norm2.bias"], eps=1e-12)
    return forward


def _torch_optimizer(spec: str, params):
    import torch

    opts = _spec(spec)
    kind = opts.pop("name")
    if kind == "sgd":
        return torch.optim.SGD(params, lr=opts["lr"], momentum=opts.get("momentum", 0.0))
    adam = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
    return adam(params, lr=opts["lr"], betas=(opts["beta1"], opts["beta2"]), eps=opts["eps"],
                weight_decay=opts.get("weight_decay", 0.0))


def _torch_step(name: str, compiled: bool = False) -> Callable[[], float]:
    import torch

    w = WORKLOADS[name]
    params = {k: torch.tensor(v, requires_grad=True) for k, v in parameters(name).items()}
    x, y = (torch.from_numpy(a) for a in data(name))
    forward = _torch_forward(name)
    loss_fn = torch.nn.CrossEntropyLoss() if w.loss == "cross-entropy" else torch.nn.MSELoss()
    optimizer = _torch_optimizer(w.optimizer, list(params.values()))

    def loss_of() -> torch.Tensor:
        return loss_fn(forward(params, x), y)

    update = optimizer.step
    if compiled:  # torch.compile's documented recipe: the model and the optimizer step
        loss_of, update = torch.compile(loss_of), torch.compile(optimizer.step)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        update()
        return loss.item()
    return step


def _torch_compile_step(name: str) -> Callable[[], float]:
    """torch with inductor; an ImportError when its C++ compiler cannot be found."""
    import shutil

    if not any(shutil.which(c) for c in ("cc", "gcc", "g++", "clang")):
        raise ImportError("torch.compile (inductor) needs a C++ compiler; none on PATH")
    return _torch_step(name, compiled=True)


# ---- jax ----------------------------------------------------------------------------------
def _jax_forward(name: str):
    import jax
    import jax.numpy as jnp

    def linear(x, p, n):
        return x @ p[f"{n}.weight"].T + p[f"{n}.bias"]

    if name == "mlp":
        def forward(p, x):
            x = jax.nn.relu(linear(x, p, "fc1"))
            return linear(jax.nn.relu(linear(x, p, "fc2")), p, "fc3")
        return forward
    if name == "cnn":
        def conv(t, p, n):
            s = CNN[n][2]
            out = jax.lax.conv_general_dilated(t, p[f"{n}.weight"], (s, s), ((1, 1), (1, 1)),
                                               dimension_numbers=("NCHW", "OIHW", "NCHW"))
            return out + p[f"{n}.bias"][None, :, None, None]

        def forward(p, x):
            x = jax.nn.relu(conv(x, p, "stem"))
            x = jax.nn.relu(x + conv(jax.nn.relu(conv(x, p, "b1c1")), p, "b1c2"))
            x = jax.nn.relu(conv(x, p, "down"))
            x = jax.nn.relu(x + conv(jax.nn.relu(conv(x, p, "b2c1")), p, "b2c2"))
            return linear(x.mean((2, 3)), p, "fc")
        return forward

    heads, hidden = BERT["heads"], BERT["hidden"]

    def norm(x, p, n):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-12) * p[f"{n}.weight"] + p[f"{n}.bias"]

    def forward(p, x):
        b, s, _ = x.shape

        def split(t):
            return t.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)
        q, k, v = (split(linear(x, p, n)) for n in "qkv")
        att = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(hidden // heads), axis=-1)
        ctx = (att @ v).transpose(0, 2, 1, 3).reshape(b, s, hidden)
        h = norm(x + linear(ctx, p, "o"), p, "norm1")
        ff = linear(jax.nn.gelu(linear(h, p, "up"), approximate=False), p, "down")
        return norm(h + ff, p, "norm2")
    return forward


def _jax_step(name: str) -> Callable[[], float]:
    import jax
    import jax.numpy as jnp
    import optax

    w = WORKLOADS[name]
    params = {k: jnp.asarray(v) for k, v in parameters(name).items()}
    x, y = (jnp.asarray(a) for a in data(name))
    forward = _jax_forward(name)
    opts = _spec(w.optimizer)
    if opts["name"] == "sgd":
        optimizer = optax.sgd(opts["lr"], momentum=opts.get("momentum"))
    elif opts["name"] == "adam":
        optimizer = optax.adam(opts["lr"], b1=opts["beta1"], b2=opts["beta2"], eps=opts["eps"])
    else:
        optimizer = optax.adamw(opts["lr"], b1=opts["beta1"], b2=opts["beta2"], eps=opts["eps"],
                                weight_decay=opts["weight_decay"])

    def loss_fn(p):
        out = forward(p, x)
        if w.loss == "mse":
            return jnp.mean((out - y) ** 2)
        return optax.softmax_cross_entropy_with_integer_labels(out, y).mean()

    @jax.jit
    def update(p, state):
        loss, grads = jax.value_and_grad(loss_fn)(p)
        updates, state = optimizer.update(grads, state, p)
        return optax.apply_updates(p, updates), state, loss

    state = [params, optimizer.init(params)]

    def step() -> float:
        state[0], state[1], loss = update(state[0], state[1])
        return float(loss)
    return step


# ---- flowc --------------------------------------------------------------------------------
def build_flowc(name: str, folder: str) -> None:
    """The torch model exported to ONNX (parameters as initializers) and compiled with
    `flowc.compile(..., train=True)` into FOLDER/art."""
    import os

    import flowc

    w = WORKLOADS[name]
    flowc.compile(export_onnx(name, folder), os.path.join(folder, "art"), train=True,
                  loss=w.loss, optimizer=w.optimizer)


def export_onnx(name: str, folder: str) -> str:
    """The workload's torch model exported to FOLDER/NAME.onnx (parameters as
    initializers); its path."""
    import os

    import torch

    params = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in parameters(name).items()}
    x, _ = data(name)
    forward = _torch_forward(name)

    class Exported(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for key, value in params.items():
                self.register_parameter(key.replace(".", "__"), value)

        def forward(self, inp):
            return forward({k: getattr(self, k.replace(".", "__")) for k in params}, inp)

    path = os.path.join(folder, f"{name}.onnx")
    torch.onnx.export(Exported(), (torch.from_numpy(x),), path, dynamo=False,
                      input_names=["x"], output_names=["out"], do_constant_folding=False,
                      opset_version=17)
    return path


def _flowc_step(name: str) -> Callable[[], float]:
    """`build_flowc` in a child process, the artifact loaded here with the thread count
    OMP_NUM_THREADS says; the step is `Model.train_step`."""
    import os
    import subprocess
    import sys
    import tempfile

    import flowc

    folder = tempfile.mkdtemp(prefix="flowc-train-bench-")
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                           "from train_engines import build_flowc; build_flowc(*sys.argv[2:])",
                           here, name, folder], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building the flowc artifact failed: {done.stderr[-2000:]}")
    model = flowc.load(os.path.join(folder, "art"), threads=int(os.environ["OMP_NUM_THREADS"]))
    x, y = data(name)
    feeds = model.empty_inputs()  # 64-byte aligned: read in place, not copied each step
    feeds["x"][...] = x

    def step() -> float:
        return model.train_step(feeds["x"], y)
    return step


def _spec(spec: str) -> dict:
    """`adamw{lr=1e-4,beta1=0.9}` -> {"name": "adamw", "lr": 1e-4, "beta1": 0.9}."""
    head, _, body = spec.partition("{")
    out: dict = {"name": head}
    for item in filter(None, body.rstrip("}").split(",")):
        key, _, value = item.partition("=")
        out[key] = float(value)
    return out


