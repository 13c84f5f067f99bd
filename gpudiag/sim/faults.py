"""The faults planted in a fleet file, checked: each against its own node's GPU count, NVLinks
and rails, none twice, and every node left a GPU that torch can use. What each kind does to the
records is gpudiag/sim/fleet.py's business (its docstring lists them)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.sku import Sku, SkuTable
from ..fabric.model import Topology
from ..records import PROBE_NAMES
from .fabric import FABRIC_FAULT_FIELDS, FabricFault, check_fabric_fault
from .memerrors import ECC_FIELDS, MemoryErrors, ecc_fields
from .nicports import nic_port_fields
from .nodespecs import NodeSpec
from .reader import FieldReader, json_type, one_of

# Fleet-file throttle reason -> NVML clocks-event reason bit (probes/nvml.py).
THROTTLE_REASON_BITS = {"hw_slowdown": 0x8, "hw_thermal": 0x40, "hw_power_brake": 0x80, "sw_thermal": 0x20,
                        "sw_power_cap": 0x4}
PCIE_WIDTHS = (1, 2, 4, 8)
# Fleet-file NVLink error counter -> the key of a link's counter in the telemetry probe's records.
NVLINK_COUNTER_KEYS = {"crc": "crc_errors", "replay": "replay_errors", "recovery": "recovery_errors"}
DEFAULT_THROTTLE_FACTOR = 0.7
DEFAULT_PROBE_ERROR = "CUDA error: an illegal memory access was encountered (Xid 13)"
# What dmesg says on a node with kernel.dmesg_restrict=1 (and no readable journal).
DEFAULT_KERNEL_LOG_REASON = "dmesg: read kernel buffer failed: Operation not permitted"
# NVML's GPU recovery actions (nvmlDeviceGpuRecoveryAction_t): 0 none .. 7 system reboot.
RECOVERY_ACTIONS = range(0, 8)
# kind -> (required fields, optional fields); every fault also has "kind".
FAULT_FIELDS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "slow_gpu": (("host", "gpu", "factor"), ()),
    "throttled": (("host", "gpu", "reason"), ("factor", "share", "full_load_only")),
    "degraded_pcie": (("host", "gpu", "width"), ()), "nvlink_down": (("host", "gpu", "link"), ()),
    "slow_p2p": (("host", "gpu", "peer_gpu", "factor"), ()),
    "pcie_replays": (("host", "gpu", "count"), ()), "nvlink_errors": (("host", "gpu", "link", "counter", "count"), ()),
    "gpu_lost": (("host", "gpu"), ()), "gpu_missing": (("host", "gpu"), ()),
    "probe_error": (("host", "probe"), ("gpu", "reason", "from_call")),
    "slow_node": (("host", "factor"), ()), "slow_nic": (("host", "factor"), ("rail",)),
    "slow_link": (("a", "b", "factor"), ("rail",)), "unreachable": (("host",), ()), "hang": (("host",), ()),
    "xid": (("host", "gpu", "code"), ("count", "message", "recovery_action")),
    "kernel_log_unreadable": (("host",), ("reason",)),
    "ecc": (("host", "gpu"), ECC_FIELDS),
    "paused_job": (("host", "used_mib"), ("gpu", "exclusive")),
    "nic_port": (("host", "rail"), ("state", "width", "rate_gbps", "counter", "count")),
    # a node that says it is another: that host's hostname and GPU UUIDs in its facts and records
    "impostor": (("host", "as"), ()),
    # a cloned image: its own hostname, but that host's GPU UUIDs
    "cloned_gpus": (("host", "as"), ())}
# GPUs that torch cannot use: a node needs at least one left.
GONE_KINDS = ("gpu_lost", "gpu_missing")


@dataclass(frozen=True)
class Fault:
    """One planted fault. ``host`` is the node (for ``slow_link``: end ``a``, ``peer`` is end ``b``);
    ``factor`` scales the speed it affects (0 < factor ≤ 1); ``width`` is PCIe lanes; ``reason``
    is the throttle reason (``throttled``) or the error text (``probe_error``); ``count`` the
    reading of an error counter (``pcie_replays``, ``nvlink_errors``), or how many times an Xid was
    logged (``xid``), and ``counter`` which NVLink counter (a key of NVLINK_COUNTER_KEYS); ``code``,
    ``message`` and ``recovery_action`` the Xid, its driver text and the GPU's pending NVML recovery
    action (``xid``); ``reason`` also why the kernel log cannot be read (``kernel_log_unreadable``);
    ``used_mib`` the GPU memory a paused job holds on the GPU (every GPU of the host without ``gpu``)
    and ``exclusive`` whether the GPU is in exclusive-process compute mode with the job's process on it
    (``paused_job``); ``state``, ``width``, ``rate_gbps``, ``counter`` and ``count`` of a ``nic_port`` as
    gpudiag/sim/nicports.py says; ``share``, ``full_load_only``, ``probe`` and ``from_call`` as
    gpudiag/sim/fleet.py's docstring says."""

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
    count: int = 0
    counter: str | None = None
    code: int | None = None
    message: str | None = None
    recovery_action: int | None = None
    used_mib: int = 0
    exclusive: bool = False
    memory_errors: MemoryErrors | None = None  # ``ecc``: gpudiag/sim/memerrors.py
    state: str | None = None
    rate_gbps: float | None = None
    peer_gpu: int | None = None  # ``slow_p2p``: the pair's other GPU


@dataclass(frozen=True)
class _FaultContext:
    read: FieldReader
    hosts: tuple[str, ...]
    specs: Mapping[str, NodeSpec]
    table: SkuTable

    def sku(self, host: str) -> Sku:
        return self.table.skus[self.specs[host].gpu_model]


def check_faults(read: FieldReader, entries: list[Any], hosts: tuple[str, ...], specs: Mapping[str, NodeSpec],
                 table: SkuTable, topology: Topology | None = None
                 ) -> tuple[tuple[Fault, ...], tuple[FabricFault, ...]]:
    """The fleet file's ``faults`` list, each checked against its node (``specs``, every node of
    ``hosts``) or, for a fabric fault, against the fabric's ``topology`` (gpudiag/sim/fabric.py):
    (node faults, fabric faults). Raises InputError."""
    context = _FaultContext(read, hosts, specs, table)
    faults: list[Fault] = []
    fabric: list[FabricFault] = []
    seen: dict[tuple[Any, ...], int] = {}
    gone: Counter[str] = Counter()
    for index, entry in enumerate(entries):
        path = f"faults[{index}]"
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if kind in FABRIC_FAULT_FIELDS:
            found = check_fabric_fault(read, entry, path, str(kind), topology)
            identity = ("fabric", found.kind, found.link, found.switch)
            if identity in seen:
                raise context.read.error(path, f"duplicates faults[{seen[identity]}]")
            seen[identity] = index
            fabric.append(found)
            continue
        fault = _fault(context, entry, path)
        identity = (fault.kind, *sorted((fault.gpu or 0, fault.peer_gpu or 0)), fault.link, fault.rail, fault.probe,
                    fault.counter, fault.code, *sorted((fault.host, fault.peer or "")))
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
    return tuple(faults), tuple(fabric)


def _fault(context: _FaultContext, entry: Any, path: str) -> Fault:
    read = context.read
    if not isinstance(entry, dict):
        raise read.error(path, f"expected a JSON object, got {json_type(entry)}")
    kind = read.text(entry, "kind", path=path)
    if kind not in FAULT_FIELDS:
        raise read.error(f"{path}.kind", f"{json.dumps(kind)} is not a fault kind; "
                         f"choose from {', '.join((*FAULT_FIELDS, *FABRIC_FAULT_FIELDS))}")
    required, optional = FAULT_FIELDS[kind]
    read.keys(entry, path, ("kind", *required, *optional), required)
    fields: dict[str, Any] = {"kind": kind}
    for key in ("host", "a", "b", "as"):
        if key in entry:
            fields["peer" if key in ("b", "as") else "host"] = _host(context, entry, key, path)
    if kind in ("slow_link", "impostor", "cloned_gpus") and fields["host"] == fields["peer"]:
        raise read.error(f"{path}.{'b' if kind == 'slow_link' else 'as'}",
                         "a link needs two different nodes" if kind == "slow_link" else "a node cannot pose as itself")
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
        fields["width"] = one_of(read, entry, "width", path, PCIE_WIDTHS, "a degraded PCIe width (lanes)")
    if "count" in entry:
        fields["count"] = read.integer(entry, "count", path=path, low=1)
    if "counter" in entry and kind != "nic_port":
        fields["counter"] = one_of(read, entry, "counter", path, tuple(NVLINK_COUNTER_KEYS), "an NVLink error counter")
    if kind == "nic_port":
        line_rate = context.sku(fields["host"]).network.rail_line_rate_gbps
        fields.update(nic_port_fields(read, entry, path, line_rate))
    if kind == "xid":
        fields.update(_xid_fields(read, entry, path))
    if kind == "ecc":
        fields.update(ecc_fields(read, entry, path))
    if kind == "kernel_log_unreadable":
        fields["reason"] = read.text(entry, "reason", DEFAULT_KERNEL_LOG_REASON, path)
    if kind == "paused_job":
        memory = context.specs[fields["host"]].gpu_memory_mib
        fields["used_mib"] = read.integer(entry, "used_mib", path=path, low=1, high=memory)
        fields["exclusive"] = read.flag(entry, "exclusive", False, path)
    return Fault(**fields)


def _xid_fields(read: FieldReader, entry: dict[str, Any], path: str) -> dict[str, Any]:
    """An ``xid`` fault's code, count (default 1), driver message and pending recovery action."""
    fields: dict[str, Any] = {"code": read.integer(entry, "code", path=path, low=0, high=65535),
                              "count": read.integer(entry, "count", 1, path, low=1)}
    if "message" in entry:
        fields["message"] = read.text(entry, "message", path=path)
    if "recovery_action" in entry:
        fields["recovery_action"] = read.integer(entry, "recovery_action", path=path, low=min(RECOVERY_ACTIONS),
                                                 high=max(RECOVERY_ACTIONS))
    return fields


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
    if "peer_gpu" in entry:
        fields["peer_gpu"] = _index(context, entry, "peer_gpu", path, spec.gpus_per_node,
                                    f"gpus_per_node {spec.gpus_per_node} of {host}")
        if fields["peer_gpu"] == fields.get("gpu"):
            raise context.read.error(f"{path}.peer_gpu", "a pair needs two different GPUs")
    return fields


def _rail(context: _FaultContext, entry: dict[str, Any], path: str, hosts: Sequence[str]) -> int:
    """The ``rail`` field, checked against every named node's rails."""
    sku = min((context.sku(host) for host in hosts), key=lambda sku: sku.network.rails)
    rails = sku.network.rails
    return _index(context, entry, "rail", path, rails, f"the {rails} rails of a {sku.gpu_model} node")


def _throttle_fields(read: FieldReader, entry: dict[str, Any], path: str) -> dict[str, Any]:
    return {"reason": one_of(read, entry, "reason", path, tuple(THROTTLE_REASON_BITS), "a throttle reason"),
            "share": read.factor(entry, "share", 1.0, path),
            "full_load_only": read.flag(entry, "full_load_only", False, path)}


def _probe_error_fields(read: FieldReader, entry: dict[str, Any], path: str, gpu: int | None) -> dict[str, Any]:
    probe = one_of(read, entry, "probe", path, PROBE_NAMES, "a probe")
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
