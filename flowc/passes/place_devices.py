"""The devices of a compile and their figures, for the placer's cost model (`place`).

Contract: `Cluster.build(names, profiles_file="")` takes full device names (`cpu:0`,
`gpu:0`, `/job:worker/task:1/cpu:0`) and returns them with a `DeviceProfile` each (flop/s
by dtype, memory bandwidth and capacity, per-kernel launch latency) and a `Link` for every
pair (bandwidth, latency). Figures start from the built-in profile of the device's type
(`BUILTIN`) and the built-in link of the pair's kind; a JSON file overrides them:

    {"devices": {"gpu": {"flops": {"f32": 6.7e13}, "memory_bandwidth": 4.8e12},
                 "gpu:1": {"memory_bytes": 8e10}},
     "links": [{"between": ["cpu", "gpu"], "bandwidth": 5e10, "latency": 1e-5}]}

A `devices` key is a device spec, partial ones (`gpu`) applying to every device they match;
more specific keys apply later. Each `links` entry sets the figures for every pair whose
devices match its two specs (either way round). Every problem in the file raises a
FlowcError naming the file and the key. `Cluster.host` is the first CPU device (the first
device when there is none): graph inputs arrive there and outputs are fetched from there.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

from flowc.ir.devices import DeviceSpec
from flowc.ir.errors import FlowcError


@dataclass(frozen=True)
class DeviceProfile:
    """What one device sustains. `flops` maps a dtype name (`f32`) or `default` to flop/s."""

    flops: tuple[tuple[str, float], ...]
    memory_bandwidth: float  # bytes/s
    memory_bytes: float
    launch_latency: float  # seconds of overhead per kernel

    def rate(self, dtype: str) -> float:
        table = dict(self.flops)
        return table.get(dtype, table["default"])


@dataclass(frozen=True)
class Link:
    bandwidth: float  # bytes/s
    latency: float  # seconds per transfer


# Built-in figures. "cpu": a 2-core Zen 4 VM like the build machines (about 95 GFLOP/s per
# core in f32 sgemm; narrow floats go through f32); "gpu": an H200 (datasheet peaks: 67
# TFLOP/s f32 on CUDA cores, 989 TFLOP/s dense f16/bf16 on tensor cores, 4.8 TB/s, 141 GB).
BUILTIN: dict[str, DeviceProfile] = {
    "cpu": DeviceProfile(
        flops=(("default", 9.5e10), ("f32", 1.9e11), ("f64", 9.5e10), ("f16", 4.75e10),
               ("bf16", 4.75e10)),
        memory_bandwidth=4.0e10, memory_bytes=24e9, launch_latency=1e-6),
    "gpu": DeviceProfile(
        flops=(("default", 6.7e13), ("f32", 6.7e13), ("f64", 3.4e13), ("f16", 9.89e14),
               ("bf16", 9.89e14)),
        memory_bandwidth=4.8e12, memory_bytes=141e9, launch_latency=5e-6),
}
# Built-in links by kind: two CPUs of one host copy through memory; a CPU and a GPU talk
# over PCIe 5 x16; two GPUs over NVLink; devices of different tasks over a 100 Gb/s network.
LINKS: dict[str, Link] = {
    "cpu-cpu": Link(bandwidth=2.0e10, latency=2e-6),
    "cpu-gpu": Link(bandwidth=5.0e10, latency=1e-5),
    "gpu-gpu": Link(bandwidth=4.5e11, latency=5e-6),
    "network": Link(bandwidth=1.25e10, latency=5e-5),
}
PROFILE_KEYS = ("flops", "memory_bandwidth", "memory_bytes", "launch_latency")
LINK_KEYS = ("between", "bandwidth", "latency")


@dataclass(frozen=True)
class Device:
    name: str  # the canonical full name
    spec: DeviceSpec
    profile: DeviceProfile

    @property
    def type(self) -> str:
        return self.spec.type


def parse_device_list(text: str, where: str = "devices") -> list[DeviceSpec]:
    """The full device names of a `cpu:0;gpu:0` (or comma-separated) list, each once."""
    specs: list[DeviceSpec] = []
    for item in filter(None, (s.strip() for s in text.replace(",", ";").split(";"))):
        try:
            spec = DeviceSpec.parse(item)
        except ValueError as exc:
            raise FlowcError(f"{where}: {exc}") from None
        if not spec.full:
            raise FlowcError(f"{where}: '{item}' is a partial device name; list devices by "
                             "full name, like cpu:0 or gpu:1")
        if spec in specs:
            raise FlowcError(f"{where}: device '{spec}' is listed twice")
        specs.append(spec)
    if not specs:
        raise FlowcError(f"{where}: no devices listed (expected e.g. cpu:0;gpu:0)")
    return specs


class Cluster:
    """The devices of one compile, their profiles and the links between them."""

    def __init__(self, devices: list[Device], links: dict[tuple[str, str], Link]):
        self.devices = devices
        self.links = links
        self.by_name = {d.name: d for d in devices}
        self.host = next((d for d in devices if d.type == "cpu"), devices[0])

    @classmethod
    def build(cls, specs: list[DeviceSpec], profiles_file: str = "") -> Cluster:
        config = _read_json(profiles_file) if profiles_file else {}
        overrides = _device_overrides(config, profiles_file)
        devices = []
        for spec in specs:
            profile = BUILTIN[spec.type]
            for key_spec, fields in overrides:  # least specific first
                if key_spec.matches(spec):
                    profile = _merged(profile, fields)
            devices.append(Device(str(spec), spec, profile))
        link_rules = _link_overrides(config, profiles_file)
        links = {}
        for a in devices:
            for b in devices:
                if a is not b:
                    link = LINKS[_link_kind(a.spec, b.spec)]
                    for (sa, sb), fields in link_rules:
                        if (sa.matches(a.spec) and sb.matches(b.spec)) or (
                                sa.matches(b.spec) and sb.matches(a.spec)):
                            link = replace(link, **fields)
                    links[(a.name, b.name)] = link
        return cls(devices, links)

    def link(self, src: str, dst: str) -> Link | None:
        """The link from `src` to `dst`; None when they are the same device."""
        return None if src == dst else self.links[(src, dst)]


def _link_kind(a: DeviceSpec, b: DeviceSpec) -> str:
    if (a.job, a.task) != (b.job, b.task):
        return "network"
    return "-".join(sorted((a.type, b.type)))


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        raise FlowcError(f"cannot read device profiles '{path}': {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise FlowcError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column "
                         f"{exc.colno}") from None
    except UnicodeDecodeError as exc:
        raise FlowcError(f"{path}: not valid JSON: not UTF-8 text ({exc.reason} at byte "
                         f"{exc.start})") from None
    if not isinstance(data, dict):
        raise FlowcError(f"{path}: expected a JSON object with 'devices' and/or 'links'")
    unknown = sorted(set(data) - {"devices", "links"})
    if unknown:
        raise FlowcError(f"{path}: unknown key '{unknown[0]}' (known: devices, links)")
    return data


def _number(path: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value > 0):
        raise FlowcError(f"{path}: {key}: expected a positive number, found {json.dumps(value)}")
    return float(value)


def _spec(path: str, key: str, text: Any) -> DeviceSpec:
    try:
        return DeviceSpec.parse(text if isinstance(text, str) else "")
    except ValueError as exc:
        raise FlowcError(f"{path}: {key}: {exc}") from None


def _device_overrides(config: dict, path: str) -> list[tuple[DeviceSpec, dict[str, Any]]]:
    devices = config.get("devices", {})
    if not isinstance(devices, dict):
        raise FlowcError(f"{path}: devices: expected an object keyed by device (cpu, gpu:0)")
    result = []
    for key, entry in devices.items():
        where = f"devices.{key}"
        spec = _spec(path, where, key)
        if not isinstance(entry, dict):
            raise FlowcError(f"{path}: {where}: expected an object with "
                             f"{', '.join(PROFILE_KEYS)}")
        fields: dict[str, Any] = {}
        for name, value in entry.items():
            if name not in PROFILE_KEYS:
                raise FlowcError(f"{path}: {where}: unknown key '{name}' (known: "
                                 f"{', '.join(PROFILE_KEYS)})")
            if name == "flops":
                if not isinstance(value, dict) or not value:
                    raise FlowcError(f"{path}: {where}.flops: expected an object of flop/s "
                                     'by dtype, like {"f32": 1.9e11}')
                fields[name] = {k: _number(path, f"{where}.flops.{k}", v)
                                for k, v in value.items()}
            else:
                fields[name] = _number(path, f"{where}.{name}", value)
        result.append((spec, fields))
    return sorted(result, key=lambda item: sum(x is not None for x in item[0].astuple()))


def _merged(profile: DeviceProfile, fields: dict[str, Any]) -> DeviceProfile:
    changes = dict(fields)
    if "flops" in changes:
        changes["flops"] = tuple(sorted({**dict(profile.flops), **changes["flops"]}.items()))
    return replace(profile, **changes)


def _link_overrides(config: dict, path: str) -> list[tuple[tuple[DeviceSpec, DeviceSpec], dict]]:
    links = config.get("links", [])
    if not isinstance(links, list):
        raise FlowcError(f"{path}: links: expected a list of "
                         '{"between": [A, B], "bandwidth": ..., "latency": ...}')
    result = []
    for i, entry in enumerate(links):
        where = f"links[{i}]"
        if not isinstance(entry, dict):
            raise FlowcError(f"{path}: {where}: expected an object with between, bandwidth, "
                             "latency")
        for name in entry:
            if name not in LINK_KEYS:
                raise FlowcError(f"{path}: {where}: unknown key '{name}' (known: "
                                 f"{', '.join(LINK_KEYS)})")
        pair = entry.get("between")
        if not isinstance(pair, list) or len(pair) != 2:
            raise FlowcError(f"{path}: {where}.between: expected two device names, like "
                             '["cpu:0", "gpu:0"]')
        specs = (_spec(path, f"{where}.between", pair[0]),
                 _spec(path, f"{where}.between", pair[1]))
        fields = {k: _number(path, f"{where}.{k}", entry[k]) for k in ("bandwidth", "latency")
                  if k in entry}
        result.append((specs, fields))
    return result
