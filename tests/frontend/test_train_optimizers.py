"""flowc.frontend.train's optimizers against torch.optim (the users' reference): for each
optimizer and option combination, 10 steps on two variables with fixed gradient sequences
fed as placeholders, in flowc's interpreter; every step's parameters match torch.optim's
single-tensor update (f64: rtol 1e-6, f32: rtol 1e-5), with lr a constant or a scalar fed
each step (a schedule)."""

import numpy as np
import pytest

from flowc.frontend import Graph, Tensor, Variable, api, placeholder, train
from flowc.ir import FlowcError

torch = pytest.importorskip("torch")  # the reference; tests/train's fixtures need none

STEPS = 10
TORCH = {"SGD": torch.optim.SGD, "Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW,
         "RMSProp": torch.optim.RMSprop, "Adagrad": torch.optim.Adagrad}
CASES = [
    ("SGD", {}), ("SGD", {"momentum": 0.9}), ("SGD", {"momentum": 0.9, "nesterov": True}),
    ("SGD", {"weight_decay": 0.1}),
    ("SGD", {"momentum": 0.5, "nesterov": True, "weight_decay": 0.1}),
    ("SGD", {"momentum": 0.9, "weight_decay": 0.01}),
    ("Adam", {}), ("Adam", {"weight_decay": 0.1}), ("Adam", {"amsgrad": True}),
    ("Adam", {"beta1": 0.5, "beta2": 0.9, "eps": 1e-3}),
    ("Adam", {"amsgrad": True, "weight_decay": 0.05}),
    ("AdamW", {}), ("AdamW", {"weight_decay": 0.1, "amsgrad": True}),
    ("RMSProp", {}), ("RMSProp", {"momentum": 0.9}), ("RMSProp", {"centered": True}),
    ("RMSProp", {"centered": True, "momentum": 0.5, "weight_decay": 0.1, "alpha": 0.9}),
    ("Adagrad", {}), ("Adagrad", {"lr_decay": 0.1}),
    ("Adagrad", {"weight_decay": 0.1, "initial_accumulator_value": 0.5, "eps": 1e-3}),
]


def torch_options(options):
    options = dict(options)
    if "beta1" in options or "beta2" in options:
        options["betas"] = (options.pop("beta1", 0.9), options.pop("beta2", 0.999))
    return options


def sequences(dt, seed):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal((3, 4)).astype(dt), rng.standard_normal(5).astype(dt)]
    grads = [[rng.standard_normal(p.shape).astype(dt) for p in init] for _ in range(STEPS)]
    lrs = rng.uniform(0.01, 0.1, STEPS)
    return init, grads, lrs


def flowc_steps(name, options, dt, init, grads, lrs, fed_lr):
    with Graph("train") as g:
        variables = [Variable(p, name=f"w{i}") for i, p in enumerate(init)]
        feeds = [placeholder(str(np.dtype(dt)).replace("float", "f"), p.shape, name=f"g{i}")
                 for i, p in enumerate(init)]
        lr = placeholder("f32", (), name="lr") if fed_lr else 0.05
        opt = getattr(train, name)(lr=lr, **options)
        step = opt.apply_gradients(list(zip(feeds, variables, strict=True)))
        reads = [v.read() for v in variables]
    history = []
    for k in range(STEPS):
        feed = {f"g{i}": grads[k][i] for i in range(len(init))}
        if fed_lr:
            feed["lr"] = np.float32(lrs[k])
        g.run([step], feed)
        history.append(g.run(reads))
    return history


def torch_steps(name, options, init, grads, lrs, fed_lr):
    params = [torch.tensor(p.copy()) for p in init]
    opt = TORCH[name](params, lr=0.05, foreach=False, **torch_options(options))
    history = []
    for k in range(STEPS):
        for p, grad in zip(params, grads[k], strict=True):
            p.grad = torch.tensor(grad)
        if fed_lr:
            opt.param_groups[0]["lr"] = float(np.float32(lrs[k]))
        opt.step()
        history.append([p.detach().numpy().copy() for p in params])
    return history


@pytest.mark.parametrize(("dt", "rtol"), [(np.float64, 1e-6), (np.float32, 1e-5)])
@pytest.mark.parametrize(("name", "options"), CASES,
                         ids=[f"{n}-{'-'.join(o) or 'defaults'}" for n, o in CASES])
def test_matches_torch_optim_every_step(name, options, dt, rtol):
    init, grads, lrs = sequences(dt, 1)
    got = flowc_steps(name, options, dt, init, grads, lrs, fed_lr=False)
    want = torch_steps(name, options, init, grads, lrs, fed_lr=False)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * 1e-2,
                                       err_msg=f"{name} {options}: w{i} after step {k + 1}")


@pytest.mark.parametrize("name", sorted(TORCH))
def test_fed_learning_rate_follows_a_schedule(name):
    options = {"momentum": 0.9} if name in ("SGD", "RMSProp") else {}
    init, grads, lrs = sequences(np.float64, 2)
    got = flowc_steps(name, options, np.float64, init, grads, lrs, fed_lr=True)
    want = torch_steps(name, options, init, grads, lrs, fed_lr=True)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6, err_msg=f"{name} step {k + 1}")


def test_defaults_are_torch_optims():
    for name, cls in TORCH.items():
        ours = getattr(train, name)().options
        theirs = dict(cls([torch.zeros(1)]).defaults)
        if "betas" in theirs:
            theirs["beta1"], theirs["beta2"] = theirs.pop("betas")
        for key, value in ours.items():
            assert theirs[key] == value, (name, key)


def test_slots_and_step_are_variables():
    with Graph("g") as g:
        w = Variable(np.ones(3, np.float32), name="w")
        op = train.Adam(lr=0.1, amsgrad=True).apply_gradients(
            [(placeholder("f32", (3,), name="dw"), w)])
    names = sorted(n.name for n in g.ir.nodes if n.op == "variable")
    assert names == ["Adam/step", "w", "w/Adam/m", "w/Adam/v", "w/Adam/v_max"]
    g.run([op], {"dw": np.ones(3, np.float32)})
    g.run([op], {"dw": np.ones(3, np.float32)})
    assert g.state.variables["Adam/step"] == 2


def test_a_fetch_in_the_step_sees_the_value_before_it():
    """The parameter's assign waits for every read of it (control edges): fetching
    w * x with the step returns the old w even though the gradient does not read w."""
    with Graph("g") as g:
        w = Variable(np.array([2.0]), name="w")
        y = (w.read() * 3.0)
        loss = train.gradients(y, [w])  # d y / d w = 3, independent of w
        step = train.SGD(lr=1.0).apply_gradients([(loss[0], w)])
    before, _ = g.run([y, step])
    assert before[0] == 6.0 and g.state.variables["w"][0] == -1.0


@pytest.mark.parametrize(("make", "message"), [
    (lambda: train.SGD(lr=-1.0), r"^SGD: lr must be >= 0, found -1.0$"),
    (lambda: train.SGD(nesterov=True), r"^SGD: nesterov needs momentum > 0$"),
    (lambda: train.Adam(beta1=1.0), r"^Adam: beta1 must be in \[0, 1\), found 1.0$"),
    (lambda: train.RMSProp(alpha=-0.1), r"^RMSProp: alpha must be >= 0, found -0.1$"),
])
def test_bad_hyperparameters(make, message):
    with pytest.raises(FlowcError, match=message):
        make()


def test_bad_gradients_and_lr():
    with Graph("g"):
        w = Variable(np.ones(3, np.float32), name="w")
        with pytest.raises(FlowcError, match=r"^SGD: the gradient of 'w' is f32\[4\], "
                           r"expected f32\[3\]$"):
            train.SGD().apply_gradients([(placeholder("f32", (4,), name="g"), w)])
        with pytest.raises(FlowcError, match=r"^Adam: no gradient for any variable \(w\)$"):
            train.Adam().apply_gradients([(None, w)])
        with pytest.raises(FlowcError, match=r"^SGD: lr must be a float or a scalar float "
                           r"tensor, found <Tensor 'lr:0' f32\[2\]>$"):
            train.SGD(lr=placeholder("f32", (2,), name="lr"))


def test_gradients_of_a_variable_sum_over_its_reads():
    with Graph("g") as g:
        w = Variable(np.array([3.0, -2.0]), name="w")
        x = Variable(np.array([1.0, 1.0]), name="x")
        y = api.reduce_sum(w.read() * w.read() + w.read(), keepdims=0)
        dw, dx = train.gradients(y, [w, x])
    assert dx is None
    np.testing.assert_allclose(g.run([dw])[0], [7.0, -3.0])  # 2w + 1


def test_minimize_defaults_to_the_variables_the_loss_reads():
    with Graph("g") as g:
        w = Variable(np.array([1.0, 2.0]), name="w")
        Variable(np.array([5.0]), name="unused")
        loss = api.reduce_sum(w.read() * w.read(), keepdims=0)
        step = train.SGD(lr=0.25).minimize(loss)
        with pytest.raises(FlowcError, match=r"^SGD.minimize: variable 'unused' does not "
                           r"reach the loss <Tensor 'ReduceSum:0' f64\[\]>$"):
            train.SGD().minimize(loss, var_list=[w, handle(g, "unused")])
    g.run([step])
    np.testing.assert_allclose(g.state.variables["w"], [0.5, 1.0])  # w - 0.25 * 2w
    assert "unused" not in g.state.variables  # never read, never initialized


def handle(g, name):
    """A variable's handle tensor (var_list takes handles as well as Variables)."""
    return Tensor(next(n for n in g.ir.nodes if n.name == name).out(), g)
