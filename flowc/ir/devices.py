"""Device names, as the TensorFlow paper writes them.

A full name is `/job:NAME/task:N/TYPE:N` (job and task may be left out: `cpu:0`, `gpu:1`);
a partial name leaves out any part (`gpu`, `/job:worker`) and constrains only what it states.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEVICE_TYPES = ("cpu", "gpu")
_PART_RE = re.compile(r"(job|task|cpu|gpu)(?::([A-Za-z0-9_]+))?\Z")


@dataclass(frozen=True)
class DeviceSpec:
    job: str | None = None
    task: int | None = None
    type: str | None = None
    index: int | None = None

    @classmethod
    def parse(cls, text: str) -> DeviceSpec:
        """The spec `text` names; ValueError saying what part is wrong."""
        fields: dict = {}
        parts = [p for p in text.split("/") if p] if text.startswith("/") else [text]
        if not parts or not text:
            raise ValueError("a device name is empty")
        for part in parts:
            m = _PART_RE.match(part)
            if not m:
                raise ValueError(f"device '{text}': '{part}' is not job:NAME, task:N, cpu:N or "
                                 "gpu:N")
            key, val = m.groups()
            if key in ("job", "task") and val is None:
                raise ValueError(f"device '{text}': '{key}' needs a value")
            if key == "job":
                fields["job"] = val
            elif key == "task" or val is not None:
                if not val.isdigit():
                    raise ValueError(f"device '{text}': '{part}' needs a number")
                fields["task" if key == "task" else "index"] = int(val)
            if key in DEVICE_TYPES:
                if "type" in fields:
                    raise ValueError(f"device '{text}' names two device types")
                fields["type"] = key
        return cls(**fields)

    def matches(self, other: DeviceSpec) -> bool:
        """Whether `other` satisfies every part this spec states."""
        return all(mine is None or mine == theirs
                   for mine, theirs in zip(self.astuple(), other.astuple(), strict=True))

    @property
    def full(self) -> bool:
        """Whether this names one device: a type and an index (job and task are optional)."""
        return self.type is not None and self.index is not None

    def astuple(self) -> tuple:
        return (self.job, self.task, self.type, self.index)

    def __str__(self) -> str:
        local = "" if self.type is None else self.type + (
            "" if self.index is None else f":{self.index}")
        if self.job is None and self.task is None:
            return local
        prefix = "" if self.job is None else f"/job:{self.job}"
        prefix += "" if self.task is None else f"/task:{self.task}"
        return prefix + (f"/{local}" if local else "")


def is_gpu_device(name: str | None) -> bool:
    """Whether the device named `name` (a node's placement; None: not placed) is a GPU."""
    return name is not None and DeviceSpec.parse(name).type == "gpu"
