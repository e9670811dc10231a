"""Optimizer specs written like pass options: `adam{lr=1e-3,beta1=0.9,weight_decay=0}`,
`sgd{lr=0.05,momentum=0.9,nesterov=true}`, `adamw` (all defaults).

Grammar: an optimizer name (`train.OPTIMIZERS`: sgd, adam, adamw, rmsprop, adagrad; any
case), optionally followed by `{option=value,...}`; the options are the optimizer's
hyperparameters (its dataclass fields, as `Optimizer.options` lists them), each at most
once; bool options take `true` or `false`, the others a number. `print_optimizer_spec`
writes the canonical form (every option spelled out), which parses back to an equal
optimizer. Every mistake is a one-line FlowcError naming the known optimizers or options.
"""

from __future__ import annotations

import re

from flowc.frontend.train import OPTIMIZERS, Optimizer
from flowc.ir.errors import FlowcError
from flowc.ir.option_text import parse_option_list

_SPEC_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\{([^{}]*)\})?\s*")


def _known() -> str:
    return ", ".join(sorted(OPTIMIZERS))


def _value(spec_name: str, key: str, default: object, text: str) -> bool | float:
    if isinstance(default, bool):
        if text not in ("true", "false"):
            raise FlowcError(f"optimizer '{spec_name}': option '{key}' takes true or false, "
                             f"found '{text}'")
        return text == "true"
    try:
        return float(text)
    except ValueError:
        raise FlowcError(f"optimizer '{spec_name}': option '{key}' takes a number, found "
                         f"'{text}'") from None


def parse_optimizer_spec(text: str) -> Optimizer:
    """The optimizer `text` names, with its options set (see the module docstring)."""
    m = _SPEC_RE.fullmatch(text)
    if not m:
        raise FlowcError(f"malformed optimizer spec '{text}': expected a name and options "
                         f"like adam{{lr=1e-3,beta1=0.9}} (optimizers: {_known()})")
    name = m.group(1).lower()
    cls = OPTIMIZERS.get(name)
    if cls is None:
        raise FlowcError(f"unknown optimizer '{m.group(1)}' (known optimizers: {_known()})")
    defaults = cls().options
    values: dict[str, bool | float] = {}
    for key, value in parse_option_list(f"optimizer '{name}'", m.group(2)).items():
        if key not in defaults:
            raise FlowcError(f"optimizer '{name}' has no option '{key}' (its options: "
                             f"{', '.join(defaults)})")
        values[key] = _value(name, key, defaults[key], value)
    return cls(**values)


def print_optimizer_spec(optimizer: Optimizer) -> str:
    """The canonical spec of `optimizer` (a fed lr cannot be written: FlowcError)."""
    items = []
    for key, value in optimizer.options.items():
        if not isinstance(value, bool | int | float):
            raise FlowcError(f"{optimizer.name}: option '{key}' is {value!r}, which a spec "
                             "cannot hold")
        text = ("true" if value else "false") if isinstance(value, bool) else repr(float(value))
        items.append(f"{key}={text}")
    return f"{optimizer.name.lower()}{{{','.join(items)}}}"
