"""Per-node settings of a fleet file: the top-level defaults, then each override in order.

Top-level ``gpu_model``, ``gpu_memory_mib``, ``driver``, ``cuda``, ``torch``, ``gpus_per_node``,
``nvml_link_slots`` and ``platform`` apply to every node; ``overrides`` (a list, applied in order) changes
them for some nodes: ``{"hosts": "node[001-016]" (a ClusterShell node set) or ["node001", ...], "gpu_model": ...}``
with any of those eight fields. An override that changes ``gpu_model`` without ``gpu_memory_mib``
gives its nodes the new model's memory. ``platform`` is the board's DMI product name the facts
report (null: unreadable); by default ``Simulated HGX <gpus_per_node>-GPU``, and an override that
changes ``gpus_per_node`` without ``platform`` gives its nodes the board of that count (a 4-GPU
board is another product than an 8-GPU one). ``nvml_link_slots`` (default 0): NVML lists at least this
many NVLink slots per GPU, and reads the slots past the ones the model wires as inactive, as a
driver that answers for every slot up to NVML_NVLINK_MAX_LINKS does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError

from ..analysis.sku import SkuTable
from .reader import ABSENT, FieldReader, join_path, json_type

MAX_NODES = 100_000
MAX_GPUS_PER_NODE = 64
# What an override may change, per node.
OVERRIDE_FIELDS = ("gpu_model", "gpu_memory_mib", "gpus_per_node", "driver", "cuda", "torch", "nvml_link_slots",
                   "platform")
PLATFORM_CHARS = 128
# NVML_NVLINK_MAX_LINKS is 18 today; a later NVML may list more link slots.
MAX_NVML_LINK_SLOTS = 64
DEFAULT_GPU_MODEL = "NVIDIA H100 80GB HBM3"
_RANGE = re.compile(r"(\d+)\s*-\s*(\d+)")


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
    nvml_link_slots: int = 0
    platform: str | None = None


def board_name(gpus_per_node: int) -> str:
    """The simulated DMI product name of a board with ``gpus_per_node`` GPUs."""
    return f"Simulated HGX {gpus_per_node}-GPU"


def default_spec(read: FieldReader, table: SkuTable, data: dict[str, Any]) -> NodeSpec:
    """The top-level settings (host left empty): what every node has unless an override says otherwise."""
    gpus = read.integer(data, "gpus_per_node", 8, low=1, high=MAX_GPUS_PER_NODE)
    model = _model(read, table, data, DEFAULT_GPU_MODEL, "")
    return NodeSpec(host="", gpu_model=model, gpus_per_node=gpus,
                    gpu_memory_mib=read.integer(data, "gpu_memory_mib", table.skus[model].gpu_memory_mib, low=1),
                    driver=read.text(data, "driver", "550.54.15"), cuda=read.text(data, "cuda", "12.4"),
                    torch=read.text(data, "torch", "2.4.0"), nvml_link_slots=_link_slots(read, data, 0, ""),
                    platform=_platform(read, data, board_name(gpus), ""))


def _platform(read: FieldReader, data: dict[str, Any], default: Any, path: str) -> str | None:
    if data.get("platform", default) is None:
        return None  # the DMI product name is unreadable on these nodes
    name = read.text(data, "platform", default, path)
    if not name.strip() or len(name) > PLATFORM_CHARS or not name.isprintable():
        raise read.error(join_path(path, "platform"), f"{json.dumps(name)} is not a product name: "
                         f"give 1 to {PLATFORM_CHARS} printable characters, or null")
    return name


def _link_slots(read: FieldReader, data: dict[str, Any], default: Any, path: str) -> int:
    return read.integer(data, "nvml_link_slots", default, path, low=0, high=MAX_NVML_LINK_SLOTS)


def _model(read: FieldReader, table: SkuTable, data: dict[str, Any], default: Any, path: str) -> str:
    model = read.text(data, "gpu_model", default, path)
    if model not in table.skus:
        raise read.error(join_path(path, "gpu_model"), f"{json.dumps(model)} is not in the SKU table; choose from "
                         f"{', '.join(table.skus)}")
    return model


def node_specs(read: FieldReader, table: SkuTable, hosts: tuple[str, ...], default: NodeSpec,
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


def _override_changes(read: FieldReader, table: SkuTable, entry: dict[str, Any], path: str) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if "gpu_model" in entry:
        model = _model(read, table, entry, ABSENT, path)
        # Memory is the model's unless the override names it too.
        changes.update(gpu_model=model, gpu_memory_mib=table.skus[model].gpu_memory_mib)
    if "gpu_memory_mib" in entry:
        changes["gpu_memory_mib"] = read.integer(entry, "gpu_memory_mib", path=path, low=1)
    if "gpus_per_node" in entry:
        changes["gpus_per_node"] = read.integer(entry, "gpus_per_node", path=path, low=1, high=MAX_GPUS_PER_NODE)
        changes["platform"] = board_name(changes["gpus_per_node"])  # unless the override names it too
    if "platform" in entry:
        changes["platform"] = _platform(read, entry, ABSENT, path)
    for key in ("driver", "cuda", "torch"):
        if key in entry:
            changes[key] = read.text(entry, key, path=path)
    if "nvml_link_slots" in entry:
        changes["nvml_link_slots"] = _link_slots(read, entry, ABSENT, path)
    return changes


def _override_hosts(read: FieldReader, entry: dict[str, Any], path: str, hosts: tuple[str, ...]) -> list[str]:
    """The nodes an override names: a node set string or a list of names, each a node of the fleet."""
    value = entry["hosts"]
    if isinstance(value, str):
        named = [(path, name) for name in _expand_node_set(read, value, path)]
    elif isinstance(value, list) and value:
        named = [(f"{path}[{index}]", _node_name(read, item, f"{path}[{index}]")) for index, item in enumerate(value)]
    else:
        raise read.error(path, "expected a ClusterShell node set such as \"node[001-016]\" or a non-empty list "
                         f"of node names, got {json_type(value)} {json.dumps(value)}")
    known = set(hosts)
    for where, name in named:
        if name not in known:
            raise read.error(where, f"{json.dumps(name)} is not a node of this fleet ({hosts[0]}..{hosts[-1]})")
    return [name for _, name in named]


def _node_name(read: FieldReader, item: Any, path: str) -> str:
    if not isinstance(item, str):
        raise read.error(path, f"expected a node name (a string), got {json_type(item)} {json.dumps(item)}")
    return item


def _expand_node_set(read: FieldReader, text: str, path: str) -> list[str]:
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
