"""Optimizer specs (flowc/frontend/train_spec.py): options like pass options, defaults
filled in, the canonical form round-trips, and every mistake is one line naming the known
optimizers or options."""

import pytest

from flowc.frontend import train
from flowc.frontend.train_spec import parse_optimizer_spec, print_optimizer_spec
from flowc.ir import FlowcError


def test_parses_options_and_fills_defaults():
    opt = parse_optimizer_spec("adam{lr=1e-3,beta1=0.8,beta2=0.99,eps=1e-7,weight_decay=0}")
    assert opt == train.Adam(lr=1e-3, beta1=0.8, beta2=0.99, eps=1e-7)
    assert parse_optimizer_spec("sgd{lr=0.05,momentum=0.9,nesterov=true}") == train.SGD(
        lr=0.05, momentum=0.9, nesterov=True)
    assert parse_optimizer_spec(" AdamW { lr = 0.01 } ") == train.AdamW(lr=0.01)
    assert parse_optimizer_spec("adamw").weight_decay == 0.01
    assert parse_optimizer_spec("rmsprop{centered=false}") == train.RMSProp()
    assert parse_optimizer_spec("adagrad{lr_decay=0.5}") == train.Adagrad(lr_decay=0.5)


@pytest.mark.parametrize("name", sorted(train.OPTIMIZERS))
def test_canonical_form_round_trips(name):
    opt = parse_optimizer_spec(name)
    text = print_optimizer_spec(opt)
    assert text.startswith(f"{name}{{lr=")
    assert parse_optimizer_spec(text) == opt
    assert print_optimizer_spec(parse_optimizer_spec(text)) == text


@pytest.mark.parametrize(("spec", "message"), [
    ("adamax{lr=1}", r"unknown optimizer 'adamax' \(known optimizers: adagrad, adam, adamw, "
                     r"rmsprop, sgd\)"),
    ("adam{momentum=0.9}", r"optimizer 'adam' has no option 'momentum' \(its options: lr, "
                           r"beta1, beta2, eps, weight_decay, amsgrad\)"),
    ("sgd{nesterov=yes}", r"optimizer 'sgd': option 'nesterov' takes true or false, found "
                          r"'yes'"),
    ("sgd{lr=fast}", r"optimizer 'sgd': option 'lr' takes a number, found 'fast'"),
    ("sgd{lr}", r"optimizer 'sgd': option 'lr' needs a value \(option=value\)"),
    ("sgd{lr=1,lr=2}", r"optimizer 'sgd': option 'lr' is given twice"),
    ("sgd{lr=1,}", r"optimizer 'sgd': an empty option in '\{lr=1,\}' \(two commas, or a "
                   r"trailing one\)"),
    ("sgd{lr=1", r"malformed optimizer spec 'sgd\{lr=1': expected a name and options like "
                 r"adam\{lr=1e-3,beta1=0.9\} \(optimizers: adagrad, adam, adamw, rmsprop, "
                 r"sgd\)"),
    ("sgd{momentum=-1}", r"SGD: momentum must be >= 0, found -1.0"),
    ("sgd{nesterov=true}", r"SGD: nesterov needs momentum > 0"),
])
def test_mistakes_are_one_line_errors(spec, message):
    with pytest.raises(FlowcError, match=f"^{message}$"):
        parse_optimizer_spec(spec)
