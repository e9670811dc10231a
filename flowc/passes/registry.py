"""The pass registry: `PASSES` maps each pass name to its class; `@register` adds one."""

from __future__ import annotations

import dataclasses

PASSES: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: add a pass class (a frozen dataclass with `name` and `run`)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"pass class {cls.__name__} needs a class attribute `name`")
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:
        raise ValueError(f"pass {name}: {cls.__name__} must be a frozen dataclass")
    if name in PASSES:
        raise ValueError(f"pass {name} is registered twice")
    PASSES[name] = cls
    return cls
