"""The schema of every record the probe bundle prints, as data: one table for the record's own
fields, and per probe (and metric where they differ) the metrics it may name with the range of
their values, its ``params`` and its ``details``. Every field some reader of the controller reads
is declared here with its kind (grep gpudiag/ for ``details.get(``, ``params.get(``,
``facts.get(``); a field no reader reads is kept as any JSON value, cleaned and bounded.

The ranges here are generic (what no GPU of any model can exceed, never negative); the ceilings
of a known GPU model (its SKU figures times a margin) are gpudiag.run.bounds'.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..bundle.catalog import catalog
from .fields import (
    COUNT,
    JSON,
    NAME,
    OPTIONAL_COUNT,
    TOKEN,
    FieldError,
    Flag,
    Kind,
    ListOf,
    MapOf,
    Number,
    Shape,
    Text,
)
from .text import REASON_CHARS, TOKEN_CHARS

# The record kinds: each probe of the bundle's catalogue (probes/catalog.json), and the pair tests' net.
PROBES = (*catalog().probe_names, "net")
STATUSES = ("ok", "skipped", "error")
# cuda:3, gpu:3, pci:0000:18:00, host, cpu, rail:2: a device as the bundle names it.
DEVICE = Text(limit=64, nullable=False, pattern=r"[A-Za-z0-9][A-Za-z0-9_.:@/+-]*")
# GPU-8a3f…, MIG-…: a UUID as NVML gives it.
UUID = Text(limit=TOKEN_CHARS, pattern=r"[A-Za-z0-9][A-Za-z0-9_.:/+-]*")
METRIC_NAME = Text(limit=64, nullable=False, pattern=r"[a-z][a-z0-9_]*")
UNIT = Text(limit=32, pattern=r"[A-Za-z0-9/%._ -]+")
# A params value: what decides which results compare (a dtype, a size, a direction).
SCALAR = Text(limit=TOKEN_CHARS, nullable=True)
HUGE = float(2**64)


@dataclass(frozen=True)
class Scalar:
    """A params value: a short string, a finite number, true/false or null (never a list or an
    object: params are hashed into baseline keys)."""

    def check(self, value: object, path: str) -> object:
        if isinstance(value, str) or value is None:
            return SCALAR.check(value, path)
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return _ANY_NUMBER.check(value, path)
        raise FieldError(path, self.describe(), value)

    def describe(self) -> str:
        return "a string, a number, true, false or null"


_ANY_NUMBER = Number(low=-math.inf)
PARAM = Scalar()
# In the order they are checked: the first wrong one is named.
RECORD_FIELDS: Mapping[str, Kind] = {
    "probe": Text(limit=16, nullable=False, choices=PROBES),
    "status": Text(limit=16, nullable=False, choices=STATUSES),
    "device": DEVICE,
    "gpu_uuid": UUID,
    "metric": METRIC_NAME,
    "value": Number(low=-math.inf, nullable=True),
    "unit": UNIT,
    "samples": Number(whole=True, high=1e12),
    "cv": Number(high=1e6, nullable=True),
    "reason": Text(limit=REASON_CHARS),
}


@dataclass(frozen=True)
class Measure:
    """What an ``ok`` record of one metric holds: a value (in ``unit``) from ``low`` to ``high``;
    ``value_required``: an ok record without one measured nothing. ``ceiling``: the SKU figure
    that bounds it (gpudiag.run.bounds), None where only ``high`` does."""

    unit: str = ""
    low: float = 0.0
    high: float = HUGE
    ceiling: str | None = None
    value_required: bool = True


CLOCK_MHZ = Measure("MHz", high=20_000)
COUNTER = Measure("count")
FLAG = Measure("bool", high=1)
# probe -> metric -> what its ok records hold. A record (ok or not) of a metric its probe does not
# list is no record of this bundle.
METRICS: Mapping[str, Mapping[str, Measure]] = {
    "facts": {"gpu_count": Measure("GPUs", high=1024)},
    "telemetry": {
        "identity": Measure(high=1), "nvml": Measure(value_required=False),
        "sm_clock": CLOCK_MHZ, "sm_clock_max": CLOCK_MHZ, "memory_clock": CLOCK_MHZ, "memory_clock_max": CLOCK_MHZ,
        "clocks_event_reasons": Measure("bitmask", high=HUGE), "gpu_temperature": Measure("C", high=1000),
        "memory_temperature": Measure("C", high=1000), "power_draw": Measure("W", high=100_000),
        "power_limit": Measure("W", high=100_000), "ecc_uncorrected_volatile": COUNTER,
        "ecc_uncorrected_aggregate": COUNTER, "remapped_rows_correctable": COUNTER,
        "remapped_rows_uncorrectable": COUNTER, "remapped_rows_pending": FLAG, "remapped_rows_failure": FLAG,
        "pcie_generation": Measure("gen", high=64), "pcie_generation_max": Measure("gen", high=64),
        "pcie_width": Measure("lanes", high=64), "pcie_width_max": Measure("lanes", high=64),
        "pcie_replay_count": COUNTER, "nvlink_links_up": Measure("links", high=1024),
        "nic_port": Measure("Gbit/s", high=100_000, ceiling="nic_port", value_required=False)},
    "xid": {"kernel_log": COUNTER, "xid": COUNTER, "recovery_action": Measure(high=1024)},
    "gemm": {"tflops": Measure("TFLOP/s", high=100_000, ceiling="gemm")},
    "membw": {"bandwidth": Measure("GB/s", high=1_000_000, ceiling="membw")},
    "p2p": {"bandwidth": Measure("GB/s", high=100_000, ceiling="p2p")},
    "pcie": {"bandwidth": Measure("GB/s", high=10_000, ceiling="pcie")},
    "smclock": {"sm_clock": Measure("MHz", high=20_000, ceiling="sm_clock"),
                "sm_fma_rate_min_ratio": Measure("ratio", high=1.5, ceiling="sm_fma_ratio")},
    "net": {"bandwidth": Measure("Gbit/s", high=1e6)},
}

# ---------------------------------------------------------------------------------- params

SIZE = Number(low=1, high=1e7, whole=True)
BUFFER_MIB = Number(low=0, high=1e9)
PARAMS: Mapping[str, Mapping[str, Kind]] = {
    "gemm": {"dtype": TOKEN, "m": SIZE, "n": SIZE, "k": SIZE, "mode": TOKEN},
    "membw": {"memory": TOKEN, "buffer_mib": BUFFER_MIB},
    "pcie": {"direction": TOKEN, "buffer_mib": BUFFER_MIB, "host_memory": TOKEN},
    "p2p": {"direction": TOKEN, "src": DEVICE, "dst": DEVICE, "buffer_mib": BUFFER_MIB},
    "smclock": {"threads_per_block": SIZE, "chains_per_thread": SIZE, "blocks_per_sm": SIZE},
    "net": {"backend": TOKEN, "direction": TOKEN, "streams": OPTIONAL_COUNT, "duration_s": Number(nullable=True),
            "rail": Number(high=65_536, whole=True, nullable=True), "hca": TOKEN},
}

# ---------------------------------------------------------------------------------- details

_MHZ = Number(high=1e6, unit="MHz", nullable=True)
_WATTS = Number(high=1e6, unit="W", nullable=True)
_LANES = Number(high=1024, nullable=True)
_REASONS = ListOf(TOKEN, max_items=64)
# The NVML evidence a loaded probe (GEMM, PCIe) carries: what the rules read of it.
LOAD_DETAILS: Mapping[str, Kind] = {
    "clocks_event_reasons": _REASONS,
    "clocks_event_reason_samples": MapOf(Number(high=1e12), max_items=64),
    "nvml_samples": OPTIONAL_COUNT, "nvml_samples_idle": OPTIONAL_COUNT,
    "sm_clock_mhz_median": _MHZ, "sm_clock_max_mhz": _MHZ, "sm_clock_mhz_min": _MHZ, "sm_clock_mhz_max_seen": _MHZ,
    "power_w_max": _WATTS, "power_limit_w": _WATTS,
    "temperature_c_max": Number(low=-273.15, high=10_000, nullable=True),
    "pcie_width_min_loaded": _LANES, "pcie_width_max": _LANES,
    "pcie_generation_min_loaded": _LANES, "pcie_generation_max": _LANES,
    "runs_per_sample": OPTIONAL_COUNT,
}
_NVLINK = Shape({"link": Number(high=1023, whole=True, nullable=True), "state": TOKEN,
                 "nvml_version_code": Number(high=1e6, nullable=True),
                 "speed_mbyte_per_s": Number(high=1e12, nullable=True),
                 "crc_errors": Number(nullable=True), "replay_errors": Number(nullable=True),
                 "recovery_errors": Number(nullable=True)})
_SOURCE = {"source": TOKEN}
# A NIC port as probes/nicports.py reads it: states, rate (Gbit/s), width, link layer, HCA model
# or driver, and its error counters (non-negative integers, at most 64 of them).
NIC_PORT: Mapping[str, Kind] = {
    "kind": Text(limit=16, choices=("ib", "ethernet")), "state": TOKEN, "phys_state": TOKEN,
    "rate_gbps": Number(high=1e5, unit="Gbit/s", nullable=True), "width": TOKEN, "speed": TOKEN, "link_layer": TOKEN,
    "model": TOKEN, "ca": TOKEN, "port": Number(high=65_535, whole=True, nullable=True), "netdev": TOKEN,
    "counters": MapOf(Number(whole=True), max_items=64), **_SOURCE}
_IDENTITY = {"name": NAME, "gpu_uuid": UUID, "serial": TOKEN, "pci_bus_id": TOKEN, "driver_version": TOKEN,
             "cuda_driver_version": TOKEN, "nvml_index": Number(high=1023, whole=True, nullable=True), **_SOURCE}
_LOG_LINES = ListOf(NAME, max_items=1024)
# (probe, metric) -> the declared fields of its details; (probe, None) holds for every metric of
# the probe without an entry of its own. ``pause`` (the --pause figures) may appear in any.
DETAILS: Mapping[tuple[str, str | None], Shape] = {
    ("telemetry", "identity"): Shape(_IDENTITY),
    ("telemetry", "nvlink_links_up"): Shape({"links": ListOf(_NVLINK, max_items=1024), **_SOURCE}),
    ("telemetry", "clocks_event_reasons"): Shape({"active": _REASONS, **_SOURCE}),
    ("telemetry", "nic_port"): Shape(NIC_PORT),
    ("telemetry", None): Shape(_SOURCE),
    ("gemm", None): Shape({**LOAD_DETAILS, "tflops_min": Number(nullable=True), "tflops_max": Number(nullable=True)}),
    ("pcie", None): Shape(LOAD_DETAILS),
    ("membw", None): Shape({"runs_per_sample": OPTIONAL_COUNT}),
    ("p2p", None): Shape({"peer_access": Flag(), "peer_uuid": UUID, "runs_per_sample": OPTIONAL_COUNT}),
    ("smclock", None): Shape({"sms_seen": OPTIONAL_COUNT, "sms_expected": OPTIONAL_COUNT,
                              "fma_min_ratio": Number(high=1e3, nullable=True)}),
    ("xid", "kernel_log"): Shape({"source": TOKEN, "command": NAME, "scope": NAME, "lines_scanned": OPTIONAL_COUNT,
                                  "unparsed_xid_lines": _LOG_LINES, "unparsed_xid_lines_total": OPTIONAL_COUNT}),
    ("xid", "xid"): Shape({"code": Number(high=1e6, whole=True), "pci_bus_id": TOKEN, "first_seen": NAME,
                           "last_seen": NAME, "messages": _LOG_LINES, "last_message": NAME, "last_line": NAME,
                           "gpu_instances": ListOf(JSON, max_items=1024)}, required=("code",)),
    ("xid", "recovery_action"): Shape({"name": TOKEN, "pci_bus_id": TOKEN, **_SOURCE}),
    ("xid", None): Shape(),
    ("net", None): Shape({"line_rate_gbps": Number(high=1e7, nullable=True),
                          "local_line_rate_gbps": Number(high=1e7, nullable=True),
                          "peer_line_rate_gbps": Number(high=1e7, nullable=True),
                          "bytes": Number(nullable=True), "elapsed_s": Number(nullable=True),
                          # each stream's (or QP's) Gbit/s, and the router addresses each stream's
                          # traced path answered from (null: no answer), client to server only
                          "stream_gbps": ListOf(Number(high=1e6), max_items=256),
                          "stream_hops": ListOf(ListOf(Text(limit=64), max_items=16), max_items=256)}),
}
ANY_DETAILS = Shape()

# ---------------------------------------------------------------------------------- facts

_GPUS = Number(high=1024, whole=True, nullable=True)
_GPU_INDEX = Number(high=1023, whole=True, nullable=True)
_MIB = Number(high=float(2**50), unit="MiB", nullable=True)
# The facts record's details: the node's identity (its GPU model and versions key its results),
# its GPU counts (which GPUs it has) and its host (a starved host is a slow_node).
FACTS: Shape = Shape({
    "hostname": NAME, "cpu_model": NAME, "cpu_count": Number(low=1, high=1e7, whole=True, nullable=True),
    "cpu_count_usable": Number(high=1e7, whole=True, nullable=True),
    "load_average_1m": Number(high=1e9, nullable=True), "memory_total_mib": _MIB, "memory_available_mib": _MIB,
    "kernel": NAME, "os": NAME, "python_version": TOKEN, "driver_version": TOKEN, "pci_gpu_count": _GPUS,
    "nvml_gpu_count": _GPUS, "torch_version": TOKEN, "torch_unavailable": Text(limit=REASON_CHARS),
    "cuda_version": TOKEN, "nccl_version": TOKEN, "gpu_count": _GPUS, "gpu_model": NAME,
    "gpu_memory_mib": _MIB, "gpu_uuids": ListOf(UUID, max_items=1024), "platform": NAME,
    # Which GPU each of torch's cuda:N is (probes/hostfacts.py map_gpus): NVML's index names it.
    "gpus": ListOf(Shape({"cuda_index": Number(high=1023, whole=True), "nvml_index": _GPU_INDEX,
                          "gpu_uuid": UUID, "pci_bus_id": TOKEN}), max_items=1024),
    # The switch port at the other end of each link, as lldpd heard it (probes/lldp.py).
    "lldp": ListOf(Shape({"interface": NAME, "switch": NAME, "port": NAME, "mgmt_ip": TOKEN,
                          "rail": Number(high=65_536, whole=True, nullable=True)}), max_items=64),
})


def details_shape(probe: str, metric: str) -> Shape:
    """The declared details of a record of ``probe`` and ``metric``."""
    if probe == "facts":
        return FACTS
    return DETAILS.get((probe, metric)) or DETAILS.get((probe, None)) or ANY_DETAILS


_PARAM_SHAPES = {probe: Shape(PARAMS.get(probe, {}), others=PARAM) for probe in PROBES}


def params_shape(probe: str) -> Shape:
    """The declared params of ``probe``'s records; any other param is a scalar."""
    return _PARAM_SHAPES[probe]


__all__ = ["COUNT", "DETAILS", "FACTS", "METRICS", "PARAMS", "PROBES", "RECORD_FIELDS", "STATUSES", "Measure",
           "details_shape", "params_shape"]
