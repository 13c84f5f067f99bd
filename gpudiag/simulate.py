"""A simulated GPU fleet (``gpudiag sweep --simulate FLEET.json``, ``gpudiag demo``).

A fleet file names the nodes, their GPU model and the faults planted in them. The
``SimulatedConnector`` stands in for SSH: each simulated node answers the probe bundle's command
line with the JSON lines the real bundle would print (gpudiag/simulate_records.py), at once and
without sleeping, so a 64-node sweep takes seconds. Nothing outside this module sees the fault
list: the sweep and the analysis see only the records, and must find the faults from them.

Top-level ``gpu_model``, ``gpu_memory_mib``, ``driver``, ``cuda``, ``torch`` and ``gpus_per_node``
apply to every node; ``overrides`` (a list, applied in order) changes them for some nodes:
``{"hosts": "node[001-016]" (a ClusterShell node set) or ["node001", ...], "gpu_model": ...}``
with any of those six fields. An override that changes ``gpu_model`` without ``gpu_memory_mib``
gives its nodes the new model's memory. Faults are checked against their own node's GPU count,
NVLinks and rails.

The model, per record (healthy figures from gpudiag/data/sku.json, scaled by the faults):

- ``slow_gpu`` (factor): that GPU's GEMM TFLOP/s × factor. No telemetry shows why: clocks,
  throttle reasons and every other figure stay healthy.
- ``throttled`` (reason, factor, optional share, optional full_load_only): the NVML clocks-event
  bit of ``reason`` is active in ``share`` (default 1) of the loaded NVML samples (GEMM and PCIe
  evidence, counted in ``clocks_event_reason_samples``), which run at the SM clock × factor; with
  share 1 it is active at idle (telemetry) too. GEMM, the smclock probe's clock and power scale
  by the mean clock factor 1 − share × (1 − factor), memory copies by its square root; thermal
  reasons run hot. A brief blip is e.g. share 0.07 with factor 1.0. ``full_load_only``: it acts
  only while every GPU is loaded at once (GEMM and memory copies without ``--sequential``); at
  idle, in a sequential run and in the one-GPU-at-a-time PCIe and smclock probes the GPU is healthy.
- ``degraded_pcie`` (width): telemetry and loaded evidence show that width (lanes) of 16;
  PCIe h2d/d2h × width/16.
- ``nvlink_down`` (link): that link's state is ``down`` and ``nvlink_links_up`` is one less;
  every p2p pair with that GPU at either end × links_up/links_total (NVSwitch spreads a pair
  over all of a GPU's links).
- ``gpu_lost`` (gpu): NVML still counts the GPU but reports it lost: telemetry prints the one
  ``error`` identity record probes/telemetry.py prints when nvmlDeviceGetHandleByIndex fails with
  NVML_ERROR_GPU_IS_LOST. Torch cannot see it: the facts' ``gpu_count`` is one less, ``gpu_uuids``
  leave it out, and the torch probes number the other GPUs ``cuda:0..`` in order (CUDA
  renumbers), each keeping its UUID. ``pci_gpu_count`` and ``nvml_gpu_count`` still count it.
- ``gpu_missing`` (gpu): gone from the PCI bus: absent from NVML (telemetry lists the others as
  ``gpu:0..``), from torch and from ``pci_gpu_count`` and ``nvml_gpu_count``.
- ``probe_error`` (probe, optional gpu, reason, from_call): on the node's calls numbered from
  ``from_call`` on (0: the first pass, 1: the re-test; default 0), that probe's records for that
  GPU (every GPU without ``gpu``) are ``error`` records saying ``reason`` (default: an illegal
  memory access, Xid 13), shaped as the real probe prints a failure. p2p: the pairs with that GPU
  at either end, or without ``gpu`` the probe's one host-level record.
- ``slow_node`` (factor: a host starved of CPU and memory bandwidth): PCIe h2d/d2h × factor
  (pinned copies are bound by host memory), GEMM on every GPU × factor ** 0.25 (kernel launches
  come late), facts show fewer usable CPUs, a high load average and less available memory.
- ``slow_nic`` (factor, optional rail) and ``slow_link`` (a, b, factor, optional rail): only the
  pairwise network measurements, through :meth:`SimulatedFleet.link_gbps`.
- ``unreachable``: connecting raises ``Unreachable``. ``hang``: the bundle never finishes; ``run``
  reports a timeout at once.

Noise: each measurement's run level is drawn around the true figure with the fleet file's CV
(``gemm_cv`` for GEMM, ``membw_cv`` for memory, PCIe and NVLink copies, ``link_cv`` for the
network); the samples of one run scatter a third as much. Every record draws from its own
``random.Random`` seeded by fleet seed, host, call number on that host and the record's label,
so the same fleet file gives byte-identical output whatever the thread scheduling, and a re-test
(the next call on that host) gets fresh noise on the same persistent faults.
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError

from .bundle import Bundle
from .errors import InputError
from .hosts import HostSpec
from .simulate_records import (
    PROBE_NAMES,
    BundleUsage,
    Draw,
    GpuState,
    NodeState,
    Noise,
    ProbeFailure,
    Throttle,
    gpu_identity,
    number_gpus,
    parse_bundle_argv,
    run_bundle,
)
from .sku import Sku, SkuTable, load_skus
from .transport import CommandResult, Unreachable

__all__ = ["Fault", "Fleet", "NodeSpec", "Noise", "SimulatedConnector", "SimulatedFleet", "SimulatedSession",
           "Sku", "SkuTable", "demo_fleet_path", "load_fleet", "load_skus", "parse_fleet"]

# Fleet-file throttle reason -> NVML clocks-event reason bit (probes/nvml.py).
THROTTLE_REASON_BITS = {"hw_slowdown": 0x8, "hw_thermal": 0x40, "hw_power_brake": 0x80, "sw_thermal": 0x20,
                        "sw_power_cap": 0x4}
PCIE_WIDTHS = (1, 2, 4, 8)
DEFAULT_THROTTLE_FACTOR = 0.7
DEFAULT_PROBE_ERROR = "CUDA error: an illegal memory access was encountered (Xid 13)"
MAX_NODES = 100_000
MAX_GPUS_PER_NODE = 64
MAX_CV = 0.5
# kind -> (required fields, optional fields); every fault also has "kind".
FAULT_FIELDS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "slow_gpu": (("host", "gpu", "factor"), ()),
    "throttled": (("host", "gpu", "reason"), ("factor", "share", "full_load_only")),
    "degraded_pcie": (("host", "gpu", "width"), ()), "nvlink_down": (("host", "gpu", "link"), ()),
    "gpu_lost": (("host", "gpu"), ()), "gpu_missing": (("host", "gpu"), ()),
    "probe_error": (("host", "probe"), ("gpu", "reason", "from_call")),
    "slow_node": (("host", "factor"), ()), "slow_nic": (("host", "factor"), ("rail",)),
    "slow_link": (("a", "b", "factor"), ("rail",)), "unreachable": (("host",), ()), "hang": (("host",), ())}
# GPUs that torch cannot use: a node needs at least one left.
GONE_KINDS = ("gpu_lost", "gpu_missing")
# What an override may change, per node.
OVERRIDE_FIELDS = ("gpu_model", "gpu_memory_mib", "gpus_per_node", "driver", "cuda", "torch")
TOP_LEVEL_FIELDS = ("nodes", "name_format", "gpus_per_node", "gpu_model", "gpu_memory_mib", "driver", "cuda",
                    "torch", "seed", "noise", "overrides", "faults")
DEFAULT_GPU_MODEL = "NVIDIA H100 80GB HBM3"
_ABSENT = object()
_RANGE = re.compile(r"(\d+)\s*-\s*(\d+)")


@dataclass(frozen=True)
class Fault:
    """One planted fault. ``host`` is the node (for ``slow_link``: end ``a``, ``peer`` is end ``b``);
    ``factor`` scales the speed it affects (0 < factor ≤ 1); ``width`` is PCIe lanes; ``reason``
    is the throttle reason (``throttled``) or the error text (``probe_error``); ``share``,
    ``full_load_only``, ``probe`` and ``from_call`` as the module docstring says."""

    kind: str
    host: str
    gpu: int | None = None
    factor: float = 1.0
    reason: str | None = None
    width: int | None = None
    link: int | None = None
    peer: str | None = None
    rail: int | None = None
    probe: str | None = None
    share: float = 1.0
    full_load_only: bool = False
    from_call: int = 0


@dataclass(frozen=True)
class NodeSpec:
    """One node as the fleet file makes it: the top-level settings with its overrides applied."""

    host: str
    gpu_model: str
    gpu_memory_mib: int
    gpus_per_node: int
    driver: str
    cuda: str
    torch: str


@dataclass(frozen=True)
class Fleet:
    """A fleet file, checked. ``hosts`` are the generated node names, in order; the top-level
    settings are the defaults, ``node_specs`` every node (in ``hosts`` order) with its overrides."""

    source: str
    hosts: tuple[str, ...]
    gpus_per_node: int
    gpu_model: str
    gpu_memory_mib: int
    driver: str
    cuda: str
    torch: str
    seed: int
    noise: Noise
    faults: tuple[Fault, ...]
    node_specs: tuple[NodeSpec, ...]

    def host_specs(self) -> list[HostSpec]:
        """Every node as a sweep host."""
        return [HostSpec(host) for host in self.hosts]


def demo_fleet_path() -> Path:
    """The packaged 64-node demo fleet (gpudiag/data/demo_fleet.json)."""
    return Path(str(resources.files("gpudiag").joinpath("data/demo_fleet.json")))


def load_fleet(path: str | Path, skus: SkuTable | None = None) -> Fleet:
    """Read and check a fleet file. Raises InputError (one line: file, field path, problem)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"{source}: cannot read the fleet file ({error.strerror or error})") from error
    except UnicodeDecodeError as error:
        raise InputError(f"{source}: not UTF-8 text") from error
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"{source}: invalid JSON at line {error.lineno}, column {error.colno}: "
                         f"{error.msg}") from error
    return parse_fleet(data, source, skus)


def parse_fleet(data: Any, source: str, skus: SkuTable | None = None) -> Fleet:
    """Check a fleet file's parsed JSON; ``source`` names it in errors. Raises InputError."""
    read = _Reader(source)
    table = skus or load_skus()
    read.keys(data, "", TOP_LEVEL_FIELDS, ("nodes",))
    nodes = read.integer(data, "nodes", low=1, high=MAX_NODES)
    hosts = _host_names(read, read.text(data, "name_format", "node{:03d}"), nodes)
    default = _default_spec(read, table, data)
    specs = _node_specs(read, table, hosts, default, read.value(data, "overrides", [], list))
    context = _FaultContext(read, hosts, specs, table)
    faults = read.value(data, "faults", [], list)
    return Fleet(source=source, hosts=hosts, gpus_per_node=default.gpus_per_node, gpu_model=default.gpu_model,
                 gpu_memory_mib=default.gpu_memory_mib, driver=default.driver, cuda=default.cuda,
                 torch=default.torch, seed=read.integer(data, "seed", 0),
                 noise=_noise(read, read.value(data, "noise", {}, dict)), faults=_faults(context, faults),
                 node_specs=tuple(specs[host] for host in hosts))


class _Reader:
    """Reads typed fields of the fleet file; each error names the file and the field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, path: str, problem: str) -> InputError:
        return InputError(f"{self.source}: {path or '(top level)'}: {problem}")

    def keys(self, data: Any, path: str, allowed: Sequence[str], required: Sequence[str]) -> None:
        if not isinstance(data, dict):
            raise self.error(path, f"expected a JSON object, got {_json_type(data)}")
        for key in data:
            if key not in allowed:
                raise self.error(_join(path, key), f"unknown field; allowed: {', '.join(allowed)}")
        for key in required:
            if key not in data:
                raise self.error(_join(path, key), f"missing (required: {', '.join(required)})")

    def value(self, data: dict[str, Any], key: str, default: Any, kind: type, path: str = "") -> Any:
        value = data.get(key, default)
        if value is _ABSENT:
            raise self.error(_join(path, key), "missing")
        wanted = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}[kind]
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = is_number if kind is float else isinstance(value, kind) and not isinstance(value, bool)
        if not ok:
            raise self.error(_join(path, key), f"expected {wanted}, got {_json_type(value)} {json.dumps(value)}")
        return value

    def integer(self, data: dict[str, Any], key: str, default: Any = _ABSENT, path: str = "",
                low: int | None = None, high: int | None = None) -> int:
        value: int = self.value(data, key, default, int, path)
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"at least {low}" if high is None else f"in {low}..{high}"
            raise self.error(_join(path, key), f"{value} is out of range; it must be {bounds}")
        return value

    def text(self, data: dict[str, Any], key: str, default: Any = _ABSENT, path: str = "") -> str:
        value: str = self.value(data, key, default, str, path)
        if not value.strip():
            raise self.error(_join(path, key), "must not be empty")
        return value

    def factor(self, data: dict[str, Any], key: str, default: Any, path: str) -> float:
        value = float(self.value(data, key, default, float, path))
        if not 0.0 < value <= 1.0:
            raise self.error(_join(path, key), f"{json.dumps(data[key])} is not in (0, 1]")
        return value

    def flag(self, data: dict[str, Any], key: str, default: bool, path: str) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            raise self.error(_join(path, key), f"expected true or false, got {_json_type(value)} {json.dumps(value)}")
        return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _host_names(read: _Reader, name_format: str, nodes: int) -> tuple[str, ...]:
    try:
        names = tuple(name_format.format(number) for number in range(1, nodes + 1))
    except (ValueError, IndexError, KeyError) as error:
        raise read.error("name_format", f"{json.dumps(name_format)} cannot format a node number "
                         f"({error}); write e.g. \"node{{:03d}}\"") from error
    if len(set(names)) != len(names):
        raise read.error("name_format", f"{json.dumps(name_format)} gives the same name to several nodes; "
                         "it needs a {} placeholder for the node number")
    bad = next((name for name in names if not name or any(c.isspace() or c in "@:[],/" for c in name)), None)
    if bad is not None:
        raise read.error("name_format", f"{json.dumps(bad)} is not a valid host name")
    return names


def _noise(read: _Reader, data: dict[str, Any]) -> Noise:
    defaults = Noise()
    read.keys(data, "noise", ("gemm_cv", "membw_cv", "link_cv"), ())
    values = {}
    for key in ("gemm_cv", "membw_cv", "link_cv"):
        value = float(read.value(data, key, getattr(defaults, key), float, "noise"))
        if not 0.0 <= value <= MAX_CV:
            raise read.error(f"noise.{key}", f"{value:g} is out of range 0..{MAX_CV:g}")
        values[key] = value
    return Noise(**values)


# ------------------------------------------------------------------------------ per-node settings


def _default_spec(read: _Reader, table: SkuTable, data: dict[str, Any]) -> NodeSpec:
    """The top-level settings (host left empty): what every node has unless an override says otherwise."""
    gpus = read.integer(data, "gpus_per_node", 8, low=1, high=MAX_GPUS_PER_NODE)
    model = _model(read, table, data, DEFAULT_GPU_MODEL, "")
    return NodeSpec(host="", gpu_model=model, gpus_per_node=gpus,
                    gpu_memory_mib=read.integer(data, "gpu_memory_mib", table.skus[model].gpu_memory_mib, low=1),
                    driver=read.text(data, "driver", "550.54.15"), cuda=read.text(data, "cuda", "12.4"),
                    torch=read.text(data, "torch", "2.4.0"))


def _model(read: _Reader, table: SkuTable, data: dict[str, Any], default: Any, path: str) -> str:
    model = read.text(data, "gpu_model", default, path)
    if model not in table.skus:
        raise read.error(_join(path, "gpu_model"), f"{json.dumps(model)} is not in the SKU table; choose from "
                         f"{', '.join(table.skus)}")
    return model


def _node_specs(read: _Reader, table: SkuTable, hosts: tuple[str, ...], default: NodeSpec,
                entries: list[Any]) -> dict[str, NodeSpec]:
    """Every node's settings: ``default``, then each override in order. Raises InputError."""
    specs = {host: replace(default, host=host) for host in hosts}
    for index, entry in enumerate(entries):
        path = f"overrides[{index}]"
        read.keys(entry, path, ("hosts", *OVERRIDE_FIELDS), ("hosts",))
        if not any(key in entry for key in OVERRIDE_FIELDS):
            raise read.error(path, f"overrides nothing; give any of {', '.join(OVERRIDE_FIELDS)}")
        changes = _override_changes(read, table, entry, path)
        for host in _override_hosts(read, entry, f"{path}.hosts", hosts):
            specs[host] = replace(specs[host], **changes)
    return specs


def _override_changes(read: _Reader, table: SkuTable, entry: dict[str, Any], path: str) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if "gpu_model" in entry:
        model = _model(read, table, entry, _ABSENT, path)
        # Memory is the model's unless the override names it too.
        changes.update(gpu_model=model, gpu_memory_mib=table.skus[model].gpu_memory_mib)
    if "gpu_memory_mib" in entry:
        changes["gpu_memory_mib"] = read.integer(entry, "gpu_memory_mib", path=path, low=1)
    if "gpus_per_node" in entry:
        changes["gpus_per_node"] = read.integer(entry, "gpus_per_node", path=path, low=1, high=MAX_GPUS_PER_NODE)
    for key in ("driver", "cuda", "torch"):
        if key in entry:
            changes[key] = read.text(entry, key, path=path)
    return changes


def _override_hosts(read: _Reader, entry: dict[str, Any], path: str, hosts: tuple[str, ...]) -> list[str]:
    """The nodes an override names: a node set string or a list of names, each a node of the fleet."""
    value = entry["hosts"]
    if isinstance(value, str):
        named = [(path, name) for name in _expand_node_set(read, value, path)]
    elif isinstance(value, list) and value:
        named = [(f"{path}[{index}]", _node_name(read, item, f"{path}[{index}]")) for index, item in enumerate(value)]
    else:
        raise read.error(path, "expected a ClusterShell node set such as \"node[001-016]\" or a non-empty list "
                         f"of node names, got {_json_type(value)} {json.dumps(value)}")
    known = set(hosts)
    for where, name in named:
        if name not in known:
            raise read.error(where, f"{json.dumps(name)} is not a node of this fleet ({hosts[0]}..{hosts[-1]})")
    return [name for _, name in named]


def _node_name(read: _Reader, item: Any, path: str) -> str:
    if not isinstance(item, str):
        raise read.error(path, f"expected a node name (a string), got {_json_type(item)} {json.dumps(item)}")
    return item


def _expand_node_set(read: _Reader, text: str, path: str) -> list[str]:
    # ClusterShell builds every range eagerly: refuse a typo such as node[1-10000000] first.
    if any(int(high) - int(low) >= MAX_NODES for low, high in _RANGE.findall(text)):
        raise read.error(path, f"{json.dumps(text)} holds a range of more than {MAX_NODES} nodes")
    try:
        names = list(NodeSet(text, resolver=RESOLVER_NOGROUP))
    except NodeSetParseError as error:
        raise read.error(path, f"{json.dumps(text)} is not a ClusterShell node set ({error}); "
                         "write e.g. \"node[001-016,020]\"") from error
    if not names:
        raise read.error(path, f"{json.dumps(text)} names no node")
    return names


# ------------------------------------------------------------------------------ faults


@dataclass(frozen=True)
class _FaultContext:
    read: _Reader
    hosts: tuple[str, ...]
    specs: Mapping[str, NodeSpec]
    table: SkuTable

    def sku(self, host: str) -> Sku:
        return self.table.skus[self.specs[host].gpu_model]


def _faults(context: _FaultContext, entries: list[Any]) -> tuple[Fault, ...]:
    faults: list[Fault] = []
    seen: dict[tuple[Any, ...], int] = {}
    gone: Counter[str] = Counter()
    for index, entry in enumerate(entries):
        path = f"faults[{index}]"
        fault = _fault(context, entry, path)
        identity = (fault.kind, fault.gpu, fault.link, fault.rail, fault.probe, *sorted((fault.host, fault.peer or "")))
        if fault.kind in GONE_KINDS:
            identity = ("gone", fault.gpu, fault.host)  # a GPU is lost or missing, not both
        if identity in seen:
            raise context.read.error(path, f"duplicates faults[{seen[identity]}]")
        seen[identity] = index
        if fault.kind in GONE_KINDS:
            gone[fault.host] += 1
            if gone[fault.host] >= context.specs[fault.host].gpus_per_node:
                raise context.read.error(path, f"leaves {fault.host} no GPU that torch can use; the simulator "
                                         "does not model a node without GPUs")
        faults.append(fault)
    return tuple(faults)


def _fault(context: _FaultContext, entry: Any, path: str) -> Fault:
    read = context.read
    if not isinstance(entry, dict):
        raise read.error(path, f"expected a JSON object, got {_json_type(entry)}")
    kind = read.text(entry, "kind", path=path)
    if kind not in FAULT_FIELDS:
        raise read.error(f"{path}.kind", f"{json.dumps(kind)} is not a fault kind; "
                         f"choose from {', '.join(FAULT_FIELDS)}")
    required, optional = FAULT_FIELDS[kind]
    read.keys(entry, path, ("kind", *required, *optional), required)
    fields: dict[str, Any] = {"kind": kind}
    for key in ("host", "a", "b"):
        if key in entry:
            fields["peer" if key == "b" else "host"] = _host(context, entry, key, path)
    if kind == "slow_link" and fields["host"] == fields["peer"]:
        raise read.error(f"{path}.b", "a link needs two different nodes")
    fields.update(_gpu_fields(context, entry, path, fields["host"]))
    if "rail" in entry:
        fields["rail"] = _rail(context, entry, path, [fields["host"], *([fields["peer"]] if "peer" in fields else [])])
    if "factor" in required or "factor" in optional:
        fields["factor"] = read.factor(entry, "factor", DEFAULT_THROTTLE_FACTOR, path)
    if kind == "throttled":
        fields.update(_throttle_fields(read, entry, path))
    if kind == "probe_error":
        fields.update(_probe_error_fields(read, entry, path, fields.get("gpu")))
    if "width" in entry:
        fields["width"] = _choice(read, entry, "width", path, PCIE_WIDTHS, "a degraded PCIe width (lanes)")
    return Fault(**fields)


def _gpu_fields(context: _FaultContext, entry: dict[str, Any], path: str, host: str) -> dict[str, Any]:
    """``gpu`` and ``link``, checked against ``host``'s own GPU count and SKU."""
    fields: dict[str, Any] = {}
    spec, sku = context.specs[host], context.sku(host)
    if "gpu" in entry:
        fields["gpu"] = _index(context, entry, "gpu", path, spec.gpus_per_node,
                               f"gpus_per_node {spec.gpus_per_node} of {host}")
    if "link" in entry:
        fields["link"] = _index(context, entry, "link", path, sku.nvlinks,
                                f"the {sku.nvlinks} NVLinks of {sku.gpu_model}")
    return fields


def _rail(context: _FaultContext, entry: dict[str, Any], path: str, hosts: Sequence[str]) -> int:
    """The ``rail`` field, checked against every named node's rails."""
    sku = min((context.sku(host) for host in hosts), key=lambda sku: sku.network.rails)
    rails = sku.network.rails
    return _index(context, entry, "rail", path, rails, f"the {rails} rails of a {sku.gpu_model} node")


def _throttle_fields(read: _Reader, entry: dict[str, Any], path: str) -> dict[str, Any]:
    return {"reason": _choice(read, entry, "reason", path, tuple(THROTTLE_REASON_BITS), "a throttle reason"),
            "share": read.factor(entry, "share", 1.0, path),
            "full_load_only": read.flag(entry, "full_load_only", False, path)}


def _probe_error_fields(read: _Reader, entry: dict[str, Any], path: str, gpu: int | None) -> dict[str, Any]:
    probe = _choice(read, entry, "probe", path, PROBE_NAMES, "a probe")
    if probe == "facts" and gpu is not None:
        raise read.error(f"{path}.gpu", "the facts probe has no per-GPU records; leave gpu out")
    return {"probe": probe, "reason": read.text(entry, "reason", DEFAULT_PROBE_ERROR, path),
            "from_call": read.integer(entry, "from_call", 0, path, low=0)}


def _host(context: _FaultContext, entry: dict[str, Any], key: str, path: str) -> str:
    host = context.read.text(entry, key, path=path)
    if host not in context.specs:
        span = f"{context.hosts[0]}..{context.hosts[-1]}"
        raise context.read.error(f"{path}.{key}", f"{json.dumps(host)} is not a node of this fleet ({span})")
    return host


def _index(context: _FaultContext, entry: dict[str, Any], key: str, path: str, count: int, what: str) -> int:
    value = context.read.integer(entry, key, path=path)
    if not 0 <= value < count:
        raise context.read.error(f"{path}.{key}", f"{value} is out of range 0..{count - 1} for {what}")
    return value


def _choice(read: _Reader, entry: dict[str, Any], key: str, path: str, choices: Sequence[Any], what: str) -> Any:
    value = entry[key]
    if isinstance(value, bool) or value not in choices:
        raise read.error(f"{path}.{key}", f"{json.dumps(value)} is not {what}; choose from "
                         f"{', '.join(str(choice) for choice in choices)}")
    return value


# ------------------------------------------------------------------------------ the fleet model


class SimulatedFleet:
    """The fleet's nodes as states (what the records are drawn from) and its network links.

    ``spec`` is the checked fleet file.
    """

    def __init__(self, fleet: Fleet, skus: SkuTable | None = None) -> None:
        self.spec = fleet  # the fleet file; only this module reads its faults
        table = skus or load_skus()
        self._node_specs = {spec.host: spec for spec in fleet.node_specs}
        self._skus = {host: table.skus[spec.gpu_model] for host, spec in self._node_specs.items()}
        self._unreachable = frozenset(f.host for f in fleet.faults if f.kind == "unreachable")
        self._hung = frozenset(f.host for f in fleet.faults if f.kind == "hang")
        self._faults_by_host: dict[str, list[Fault]] = {}
        for fault in fleet.faults:
            self._faults_by_host.setdefault(fault.host, []).append(fault)
        self._states = {host: self._node_state(host) for host in fleet.hosts}

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.spec.hosts

    def __contains__(self, host: object) -> bool:
        return host in self._states

    def is_unreachable(self, host: str) -> bool:
        return host in self._unreachable

    def is_hung(self, host: str) -> bool:
        return host in self._hung

    def sku(self, host: str) -> Sku:
        """The SKU figures of ``host``'s GPU model. Raises KeyError for a host not in the fleet."""
        return self._skus[host]

    def node_state(self, host: str, call: int = 0) -> NodeState:
        """The state of one node on call ``call`` there (0: the first). Raises KeyError for a
        host not in the fleet."""
        state = self._states[host]
        failures = tuple(ProbeFailure(f.probe or "", f.gpu, f.reason or DEFAULT_PROBE_ERROR)
                         for f in self._faults_by_host.get(host, ()) if f.kind == "probe_error" and call >= f.from_call)
        return replace(state, probe_failures=failures) if failures else state

    def draw(self, host: str, call: int) -> Draw:
        """The random sources of call ``call`` on ``host``: one per record label."""
        seed = self.spec.seed
        return lambda label: random.Random(f"{seed}:{host}:{call}:{label}")

    def link_rng(self, a: str, b: str, rail: int, attempt: int) -> random.Random:
        """A random source for one measurement of the pair (either order) on ``rail``."""
        first, second = sorted((a, b))
        return random.Random(f"{self.spec.seed}:link:{first}:{second}:{rail}:{attempt}")

    def link_gbps(self, a: str, b: str, rail: int, rng: random.Random) -> float:
        """One pairwise network measurement between ``a`` and ``b`` on ``rail`` (Gbit/s).

        The slower end's per-rail rate × the slower NIC's factor × the link's factor, with
        ``link_cv`` noise. Raises ValueError for an unknown host, the same host twice, or a rail
        either node lacks.
        """
        for host in (a, b):
            if host not in self._states:
                raise ValueError(f"{host!r} is not a node of the simulated fleet {self.spec.source}")
        if a == b:
            raise ValueError("a link needs two different nodes")
        rails = min(self._skus[a].network.rails, self._skus[b].network.rails)
        if not 0 <= rail < rails:
            raise ValueError(f"rail {rail} is out of range 0..{rails - 1}")
        rail_gbps = min(self._skus[a].network.rail_gbps, self._skus[b].network.rail_gbps)
        factor = min(self._nic_factor(a, rail), self._nic_factor(b, rail)) * self._link_factor(a, b, rail)
        return rail_gbps * factor * rng.gauss(1.0, self.spec.noise.link_cv)

    def _nic_factor(self, host: str, rail: int) -> float:
        factors = [f.factor for f in self._faults_by_host.get(host, ())
                   if f.kind == "slow_nic" and f.rail in (None, rail)]
        return min(factors, default=1.0)

    def _link_factor(self, a: str, b: str, rail: int) -> float:
        factors = [f.factor for f in self.spec.faults
                   if f.kind == "slow_link" and {f.host, f.peer} == {a, b} and f.rail in (None, rail)]
        return min(factors, default=1.0)

    def _node_state(self, host: str) -> NodeState:
        spec = self._node_specs[host]
        faults = self._faults_by_host.get(host, [])
        missing = {f.gpu for f in faults if f.kind == "gpu_missing"}
        on_bus = [_apply_gpu_faults(gpu_identity(self.spec.seed, host, index), [f for f in faults if f.gpu == index])
                  for index in range(spec.gpus_per_node) if index not in missing]
        host_factor = min((f.factor for f in faults if f.kind == "slow_node"), default=1.0)
        return NodeState(host=host, sku=self._skus[host], gpus=number_gpus(on_bus),
                         gpu_memory_mib=spec.gpu_memory_mib, driver=spec.driver, cuda=spec.cuda, torch=spec.torch,
                         noise=self.spec.noise, host_factor=host_factor)


def _apply_gpu_faults(gpu: GpuState, faults: Sequence[Fault]) -> GpuState:
    for fault in faults:
        if fault.kind == "slow_gpu":
            gpu = replace(gpu, compute_factor=gpu.compute_factor * fault.factor)
        elif fault.kind == "throttled":
            throttle = Throttle(bit=THROTTLE_REASON_BITS[fault.reason or ""], factor=fault.factor,
                                share=fault.share, full_load_only=fault.full_load_only)
            gpu = replace(gpu, throttles=(*gpu.throttles, throttle))
        elif fault.kind == "degraded_pcie":
            gpu = replace(gpu, pcie_width=fault.width or gpu.pcie_width)
        elif fault.kind == "nvlink_down":
            gpu = replace(gpu, nvlinks_down=gpu.nvlinks_down | {fault.link})
        elif fault.kind == "gpu_lost":
            gpu = replace(gpu, lost=True)
    return gpu


# ------------------------------------------------------------------------------ the transport


class SimulatedConnector:
    """The Connector of gpudiag/sweep.py for a simulated fleet. Counts calls per host, so each
    connector replays the same sequence of values from the start."""

    def __init__(self, fleet: Fleet | SimulatedFleet) -> None:
        self.fleet = fleet if isinstance(fleet, SimulatedFleet) else SimulatedFleet(fleet)
        self._lock = threading.Lock()
        self._calls: dict[str, int] = {}

    def connect(self, host: HostSpec) -> SimulatedSession:
        """A session on ``host``. Raises Unreachable for an unreachable node or one not in the fleet."""
        if host.host not in self.fleet:
            raise Unreachable(f"{host.label}: not a node of the simulated fleet {self.fleet.spec.source}")
        if self.fleet.is_unreachable(host.host):
            raise Unreachable(f"{host.label}:22: no answer within 10 s (simulated)")
        return SimulatedSession(self, host.host)

    def next_call(self, host: str) -> int:
        """The number of this run on ``host`` (0 for the first), counted across sessions."""
        with self._lock:
            call = self._calls.get(host, 0)
            self._calls[host] = call + 1
            return call

    def close(self) -> None:
        return None


class SimulatedSession:
    """One simulated node: answers the bundle's command line with its records, at once."""

    def __init__(self, connector: SimulatedConnector, host: str) -> None:
        self._connector = connector
        self._host = host
        self._cancelled = threading.Event()

    def prepare(self, bundle: Bundle) -> None:
        """Nothing to copy: the simulated node needs no bundle."""
        return None

    def run(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        """The bundle's output for ``argv`` on this node; ``duration_s`` is simulated (no sleep)."""
        fleet = self._connector.fleet
        if self._cancelled.is_set():
            return CommandResult(exit_status=None, stdout="", stderr="killed", timed_out=False, duration_s=0.0)
        if fleet.is_hung(self._host):
            return CommandResult(exit_status=None, stdout="", stderr="", timed_out=True, duration_s=timeout_s)
        try:
            call = parse_bundle_argv(argv)
        except BundleUsage as usage:
            return CommandResult(exit_status=2, stdout="", stderr=f"python -m probes: error: {usage}\n",
                                 timed_out=False, duration_s=0.5)
        number = self._connector.next_call(self._host)
        node = fleet.node_state(self._host, number)
        return run_bundle(call, node, fleet.draw(self._host, number)).command_result(timeout_s)

    def cancel(self) -> None:
        self._cancelled.set()

    def close(self) -> None:
        return None
