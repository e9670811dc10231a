"""The option lists of pass and optimizer specs: the `k=v,...` between the braces of
`prune{keep_stateful=false}` or `adam{lr=1e-3,beta1=0.9}`.

Contract: `parse_option_list(owner, body)` returns the options in order as text (keys and
values stripped; values converted by the caller, who knows the types). `body` None or blank
means no options. Every mistake is a one-line FlowcError that starts with `owner` (such as
"pass 'prune'" or "optimizer 'sgd'"): an option without a value, an option given twice, an
empty option (two commas, or a trailing one).
"""

from __future__ import annotations

from flowc.ir.errors import FlowcError


def parse_option_list(owner: str, body: str | None) -> dict[str, str]:
    """The `key=value` options of `body`, in order (see the module docstring)."""
    options: dict[str, str] = {}
    if body is None or not body.strip():
        return options
    for item in (s.strip() for s in body.split(",")):
        if not item:
            raise FlowcError(f"{owner}: an empty option in '{{{body}}}' (two commas, or a "
                             "trailing one)")
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not value:
            raise FlowcError(f"{owner}: option '{item}' needs a value (option=value)")
        if key in options:
            raise FlowcError(f"{owner}: option '{key}' is given twice")
        options[key] = value
    return options
