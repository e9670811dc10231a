"""One training step of a bench/train_models.py workload in each engine, as `step() -> loss`.

Contract: `make_step(engine, name)` builds the workload's model in `engine` ("torch" eager,
"jax" with jax.jit + optax) from `train_models.parameters(name)` and its fixed batch, and
returns a function that runs one full step (forward, loss, backward, optimizer update, the
loss read back to the host as a float) each time it is called. Thread limits are the
caller's job (bench/train.py sets them before the engine is imported). "flowc" exports the
torch model to ONNX and compiles it with `--train` (the compile is not timed).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from train_models import BERT, WORKLOADS, data, parameters


def make_step(engine: str, name: str) -> Callable[[], float]:
    makers = {"torch": _torch_step, "jax": _jax_step, "flowc": _flowc_step}
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
    if opts.pop("name") == "sgd":
        return torch.optim.SGD(params, lr=opts["lr"], momentum=opts.get("momentum", 0.0))
    return torch.optim.AdamW(params, lr=opts["lr"], betas=(opts["beta1"], opts["beta2"]),
                             eps=opts["eps"], weight_decay=opts["weight_decay"])


def _torch_step(name: str) -> Callable[[], float]:
    import torch

    w = WORKLOADS[name]
    params = {k: torch.tensor(v, requires_grad=True) for k, v in parameters(name).items()}
    x, y = (torch.from_numpy(a) for a in data(name))
    forward = _torch_forward(name)
    loss_fn = torch.nn.CrossEntropyLoss() if w.loss == "cross-entropy" else torch.nn.MSELoss()
    optimizer = _torch_optimizer(w.optimizer, list(params.values()))

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(forward(params, x), y)
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


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
def _flowc_step(name: str) -> Callable[[], float]:
    """The torch model exported to ONNX (parameters as initializers), compiled with
    `flowc.compile(..., train=True)` into a temporary folder, loaded with the thread count
    OMP_NUM_THREADS says; the step is `Model.train_step`."""
    import os
    import tempfile

    import torch

    import flowc

    w = WORKLOADS[name]
    params = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in parameters(name).items()}
    x, y = data(name)
    forward = _torch_forward(name)

    class Exported(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for key, value in params.items():
                self.register_parameter(key.replace(".", "__"), value)

        def forward(self, inp):
            return forward({k: getattr(self, k.replace(".", "__")) for k in params}, inp)

    folder = tempfile.mkdtemp(prefix="flowc-train-bench-")
    path = os.path.join(folder, f"{name}.onnx")
    torch.onnx.export(Exported(), (torch.from_numpy(x),), path, dynamo=False,
                      input_names=["x"], output_names=["out"], do_constant_folding=False,
                      opset_version=17)
    flowc.compile(path, os.path.join(folder, "art"), train=True, loss=w.loss,
                  optimizer=w.optimizer)
    model = flowc.load(os.path.join(folder, "art"), threads=int(os.environ["OMP_NUM_THREADS"]))
    feeds = model.empty_inputs()  # 64-byte aligned: read in place, not copied each step
    feeds["x"][...] = x
    feeds["labels"][...] = y

    def step() -> float:
        return model.train_step(**feeds)
    return step


def _spec(spec: str) -> dict:
    """`adamw{lr=1e-4,beta1=0.9}` -> {"name": "adamw", "lr": 1e-4, "beta1": 0.9}."""
    head, _, body = spec.partition("{")
    out: dict = {"name": head}
    for item in filter(None, body.rstrip("}").split(",")):
        key, _, value = item.partition("=")
        out[key] = float(value)
    return out


