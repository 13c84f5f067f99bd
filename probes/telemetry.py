"""The telemetry probe: identity, clocks, throttling, temperatures, power, ECC, PCIe and NVLink.

Reads every GPU NVML sees on the node (NVML ignores CUDA_VISIBLE_DEVICES) while the GPUs are
idle. Records are labelled ``gpu:<NVML index>`` and always carry ``gpu_uuid``: NVML's order
may differ from torch's ``cuda:<n>`` order, so the controller joins the two on the UUID.

Per GPU the first record is metric ``identity``, value 1, no unit, with the name, UUID, serial,
PCI bus id, driver and CUDA driver versions in ``details``; then one record per metric of
:data:`METRICS`, each with ``details.source`` ``"nvml"`` or ``"nvidia-smi"``. A reading the GPU
does not offer is ``skipped`` with a reason starting ``n/a: ``; a failed read is ``error``, and
after NVML_ERROR_GPU_IS_LOST nothing more is read from that GPU. Without NVML the probe falls
back to ``nvidia-smi -q``; without both it yields exactly one ``skipped`` record
(device ``host``, metric ``nvml``) saying why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from . import nicports
from .context import ProbeContext
from .nvml import Nvml, NvmlUnavailable, decode_clocks_event_reasons, open_nvml
from .records import Record, failed, skipped
from .smi import SmiGpu, SmiMissing, SmiUnavailable, parse_query, query_nvidia_smi, read_gpu

PROBE = "telemetry"
HOST_METRIC = "nvml"
SMI_TIMEOUT_S = 30.0

# Every metric the probe reports per GPU, with its unit, in report order.
METRICS: tuple[tuple[str, str], ...] = (
    ("sm_clock", "MHz"),
    ("sm_clock_max", "MHz"),
    ("memory_clock", "MHz"),
    ("memory_clock_max", "MHz"),
    ("clocks_event_reasons", "bitmask"),
    ("gpu_temperature", "C"),
    ("memory_temperature", "C"),
    ("power_draw", "W"),
    ("power_limit", "W"),
    ("ecc_uncorrected_volatile", "count"),
    ("ecc_uncorrected_aggregate", "count"),
    ("remapped_rows_correctable", "count"),
    ("remapped_rows_uncorrectable", "count"),
    ("remapped_rows_pending", "bool"),
    ("remapped_rows_failure", "bool"),
    ("pcie_generation", "gen"),
    ("pcie_generation_max", "gen"),
    ("pcie_width", "lanes"),
    ("pcie_width_max", "lanes"),
    ("pcie_replay_count", "count"),
    ("nvlink_links_up", "count"),
)
UNITS: Mapping[str, str] = dict(METRICS)

# NVLink error counters reported per link: details key -> pynvml counter constant.
_NVLINK_COUNTERS = (("crc_errors", "NVML_NVLINK_ERROR_DL_CRC_FLIT"), ("replay_errors", "NVML_NVLINK_ERROR_DL_REPLAY"),
                    ("recovery_errors", "NVML_NVLINK_ERROR_DL_RECOVERY"))

SmiQuery = Callable[[float], str]
# What one NVML read produces (metric names, in order) and the read itself.
ReadSpec = tuple[tuple[str, ...], Callable[[Nvml, Any], list["Reading"]]]


class NotApplicable(Exception):
    """A reading this GPU does not have; the message follows ``n/a: `` in the record's reason."""


@dataclass(frozen=True)
class Reading:
    """One metric's value as read, before it becomes a record."""

    metric: str
    value: int | float
    details: Mapping[str, Any] = field(default_factory=dict)


def run_node(ctx: ProbeContext, *, sysfs_root: str = "/") -> Iterator[Record]:
    """The probe as the runner runs it: the GPUs' records (:func:`run`), then the ``nic_port``
    records of the node's NIC ports (probes/nicports.py), read from ``sysfs_root``."""
    yield from run(ctx)
    yield from nicports.run(sysfs_root)


def run(ctx: ProbeContext, *, nvml_module: ModuleType | None = None,
        smi_query: SmiQuery = query_nvidia_smi) -> Iterator[Record]:
    """Yield the telemetry records of every GPU on this node (see the module docstring).

    ``nvml_module`` replaces pynvml (a test double); ``smi_query(timeout_s)`` returns the text
    of ``nvidia-smi -q`` or raises SmiUnavailable. Raises nothing for a missing NVML or GPU.
    """
    with ExitStack() as stack:
        try:
            nvml = stack.enter_context(open_nvml(nvml_module))
        except NvmlUnavailable as error:
            yield from _smi_records(ctx, str(error), smi_query)
            return
        yield from _nvml_records(nvml, ctx)


# ---------------------------------------------------------------------------- record shapes


def identity_record(device: str, gpu_uuid: str | None, facts: Mapping[str, Any]) -> Record:
    """The ``identity`` record: value 1 (the GPU answered), facts in ``details``."""
    return Record(probe=PROBE, device=device, metric="identity", value=1, unit=None,
                  gpu_uuid=gpu_uuid, details=dict(facts))


def reading_record(device: str, gpu_uuid: str | None, reading: Reading, source: str) -> Record:
    """An ``ok`` record of one metric, unit from :data:`UNITS`."""
    return Record(probe=PROBE, device=device, metric=reading.metric, value=reading.value,
                  unit=UNITS[reading.metric], gpu_uuid=gpu_uuid, samples=1,
                  details={**reading.details, "source": source})


def not_applicable_record(device: str, gpu_uuid: str | None, metric: str, why: str, source: str) -> Record:
    """A ``skipped`` record whose reason is ``n/a: <why>``."""
    return skipped(PROBE, device, metric, f"n/a: {why}", gpu_uuid=gpu_uuid, details={"source": source})


def reasons_reading(mask: int) -> Reading:
    """The clocks-event reasons bitmask with the names of its bits in ``details.active``."""
    return Reading("clocks_event_reasons", mask, {"active": list(decode_clocks_event_reasons(mask))})


# ------------------------------------------------------------------------------- NVML path


def _nvml_records(nvml: Nvml, ctx: ProbeContext) -> Iterator[Record]:
    try:
        count = nvml.device_count()
    except nvml.NVMLError as error:
        yield failed(PROBE, "host", HOST_METRIC, f"NVML could not count the GPUs: {_describe(nvml, error)}")
        return
    if count == 0:
        yield skipped(PROBE, "host", HOST_METRIC, "NVML started but lists no GPU on this node")
        return
    versions = _versions(nvml)
    for index in range(count):
        if ctx.deadline.expired():
            yield skipped(PROBE, f"gpu:{index}", "identity", "the probe's deadline passed before this GPU was read")
            continue
        yield from _nvml_gpu_records(nvml, index, versions)


def _versions(nvml: Nvml) -> dict[str, str | None]:
    """Driver and CUDA driver versions; None where NVML cannot say (they are context, not readings)."""
    try:
        return {"driver_version": nvml.driver_version(), "cuda_driver_version": nvml.cuda_driver_version()}
    except nvml.NVMLError:
        return {"driver_version": None, "cuda_driver_version": None}


def _nvml_gpu_records(nvml: Nvml, index: int, versions: Mapping[str, str | None]) -> Iterator[Record]:
    device = f"gpu:{index}"
    try:
        handle = nvml.handle(None, index)
        gpu_uuid = nvml.uuid(handle)
        facts = {"name": nvml.name(handle), "gpu_uuid": gpu_uuid,
                 "serial": _optional(nvml, lambda: nvml.serial(handle)),
                 "pci_bus_id": _optional(nvml, lambda: nvml.pci_bus_id(handle)),
                 **versions, "nvml_index": index, "source": "nvml"}
    except nvml.NVMLError as error:
        yield failed(PROBE, device, "identity", _describe(nvml, error), details={"source": "nvml"})
        return
    yield identity_record(device, gpu_uuid, facts)
    for metrics, read in _NVML_READS:
        try:
            readings = read(nvml, handle)
        except NotApplicable as absent:
            yield from (not_applicable_record(device, gpu_uuid, metric, str(absent), "nvml") for metric in metrics)
            continue
        except nvml.NVMLError as error:
            yield from _nvml_failure_records(nvml, error, device, gpu_uuid, metrics)
            if nvml.is_gpu_lost(error):
                return  # every further call would fail the same way, some only after a timeout
            continue
        yield from (reading_record(device, gpu_uuid, reading, "nvml") for reading in readings)


def _nvml_failure_records(nvml: Nvml, error: Exception, device: str, gpu_uuid: str,
                          metrics: tuple[str, ...]) -> Iterator[Record]:
    for metric in metrics:
        if nvml.is_not_applicable(error):
            yield not_applicable_record(device, gpu_uuid, metric, nvml.error_name(error), "nvml")
        else:
            yield failed(PROBE, device, metric, _describe(nvml, error), gpu_uuid=gpu_uuid,
                         details={"source": "nvml"})


def _describe(nvml: Nvml, error: Exception) -> str:
    return f"{nvml.error_name(error)}: {error}"


def _optional(nvml: Nvml, read: Callable[[], str]) -> str | None:
    # Identity extras (serial, bus id) that some boards lack must not hide the GPU.
    try:
        return read()
    except nvml.NVMLError as error:
        if nvml.is_not_applicable(error):
            return None
        raise


def _one(metric: str, read: Callable[[Nvml, Any], int | float]) -> ReadSpec:
    return (metric,), lambda nvml, handle: [Reading(metric, read(nvml, handle))]


def _remapped_rows(nvml: Nvml, handle: Any) -> list[Reading]:
    rows = nvml.remapped_rows(handle)
    return [Reading("remapped_rows_correctable", rows.correctable_count),
            Reading("remapped_rows_uncorrectable", rows.uncorrectable_count),
            Reading("remapped_rows_pending", int(rows.pending)),
            Reading("remapped_rows_failure", int(rows.failure))]


def _nvlink(nvml: Nvml, handle: Any) -> list[Reading]:
    """``nvlink_links_up`` with every link NVML knows in ``details.links``.

    Raises NotApplicable when the GPU has no NVLink at all.
    """
    links: list[dict[str, Any]] = []
    why_none = "no NVLink on this GPU"
    for link in range(nvml.module.NVML_NVLINK_MAX_LINKS):
        try:
            up = bool(nvml.module.nvmlDeviceGetNvLinkState(handle, link))
        except nvml.NVMLError as error:
            if nvml.error_name(error) == "NVML_ERROR_INVALID_ARGUMENT":
                break  # past this GPU's last link
            if nvml.is_not_applicable(error):
                why_none = f"{nvml.error_name(error)} (no NVLink on this GPU)"
                continue  # a link slot this GPU does not wire up
            raise
        links.append(_nvlink_status(nvml, handle, link, up))
    if not links:
        raise NotApplicable(why_none)
    return [Reading("nvlink_links_up", sum(1 for link in links if link["state"] == "up"), {"links": links})]


def _nvlink_status(nvml: Nvml, handle: Any, link: int, up: bool) -> dict[str, Any]:
    """One link: state, NVML's version code and speed (MB/s, up links), error counters (None: n/a)."""
    status: dict[str, Any] = {"link": link, "state": "up" if up else "down"}
    if up:
        status["nvml_version_code"] = _link_number(nvml, nvml.module.nvmlDeviceGetNvLinkVersion, handle, link)
        speed_field = getattr(nvml.module, "NVML_FI_DEV_NVLINK_GET_SPEED", None)
        status["speed_mbyte_per_s"] = None if speed_field is None else _link_number(
            nvml, nvml.field_value, handle, speed_field, link)
    for key, counter in _NVLINK_COUNTERS:
        status[key] = _link_number(nvml, nvml.module.nvmlDeviceGetNvLinkErrorCounter, handle, link,
                                   getattr(nvml.module, counter))
    return status


def _link_number(nvml: Nvml, read: Callable[..., int | float], *arguments: Any) -> int | float | None:
    try:
        return read(*arguments)
    except nvml.NVMLError as error:
        if nvml.is_gpu_lost(error):
            raise
        return None  # one counter a link does not keep must not hide the others


# (metrics one NVML read produces, the read) in report order; see METRICS for units.
_NVML_READS: tuple[ReadSpec, ...] = (
    _one("sm_clock", Nvml.sm_clock_mhz),
    _one("sm_clock_max", Nvml.sm_clock_max_mhz),
    _one("memory_clock", Nvml.memory_clock_mhz),
    _one("memory_clock_max", Nvml.memory_clock_max_mhz),
    (("clocks_event_reasons",), lambda nvml, handle: [reasons_reading(nvml.clocks_event_reasons(handle))]),
    _one("gpu_temperature", Nvml.gpu_temperature_c),
    _one("memory_temperature", Nvml.memory_temperature_c),
    _one("power_draw", Nvml.power_draw_w),
    _one("power_limit", Nvml.power_limit_w),
    _one("ecc_uncorrected_volatile", lambda nvml, handle: nvml.ecc_uncorrected_count(handle, aggregate=False)),
    _one("ecc_uncorrected_aggregate", lambda nvml, handle: nvml.ecc_uncorrected_count(handle, aggregate=True)),
    (("remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure"),
     _remapped_rows),
    _one("pcie_generation", Nvml.pcie_generation),
    _one("pcie_generation_max", Nvml.pcie_generation_max),
    _one("pcie_width", Nvml.pcie_width),
    _one("pcie_width_max", Nvml.pcie_width_max),
    _one("pcie_replay_count", Nvml.pcie_replay_count),
    (("nvlink_links_up",), _nvlink),
)


# ------------------------------------------------------------------------- nvidia-smi path


def _smi_records(ctx: ProbeContext, nvml_reason: str, smi_query: SmiQuery) -> Iterator[Record]:
    try:
        report = parse_query(smi_query(min(ctx.deadline.left_s(), SMI_TIMEOUT_S)))
    except SmiUnavailable as error:
        yield skipped(PROBE, "host", HOST_METRIC, f"{nvml_reason}; nvidia-smi fallback: {error}")
        return
    for complaint in report.complaints:
        yield failed(PROBE, "host", "identity", f"nvidia-smi: {complaint}", details={"source": "nvidia-smi"})
    if not report.gpus:
        yield skipped(PROBE, "host", HOST_METRIC, f"{nvml_reason}; nvidia-smi -q lists no GPU")
        return
    versions = {"driver_version": report.driver_version, "cuda_driver_version": report.cuda_version}
    for index, section in enumerate(report.gpus):
        yield from smi_gpu_records(read_gpu(section, index), versions, nvml_reason)


def smi_gpu_records(gpu: SmiGpu, versions: Mapping[str, str | None], nvml_reason: str) -> Iterator[Record]:
    """The records of one GPU as ``nvidia-smi -q`` showed it, shaped as the NVML path's."""
    device = f"gpu:{gpu.index}"
    yield identity_record(device, gpu.gpu_uuid, {
        "name": gpu.name, "gpu_uuid": gpu.gpu_uuid, "serial": gpu.serial, "pci_bus_id": gpu.pci_bus_id,
        **versions, "nvml_index": gpu.index, "source": "nvidia-smi", "nvml_unavailable": nvml_reason})
    for metric, _ in METRICS:
        if metric == "nvlink_links_up":
            yield skipped(PROBE, device, metric, "nvidia-smi -q does not report NVLink state; it needs NVML",
                          gpu_uuid=gpu.gpu_uuid, details={"source": "nvidia-smi"})
            continue
        yield _smi_record(device, gpu.gpu_uuid, metric, gpu.readings.get(metric, SmiMissing("")))


def _smi_record(device: str, gpu_uuid: str | None, metric: str, value: int | float | SmiMissing) -> Record:
    if isinstance(value, SmiMissing):
        if value.error:
            return failed(PROBE, device, metric, f"nvidia-smi reported {value.text!r}", gpu_uuid=gpu_uuid,
                          details={"source": "nvidia-smi"})
        why = value.text or "not in this driver's nvidia-smi -q output"
        return not_applicable_record(device, gpu_uuid, metric, why, "nvidia-smi")
    reading = reasons_reading(int(value)) if metric == "clocks_event_reasons" else Reading(metric, value)
    return reading_record(device, gpu_uuid, reading, "nvidia-smi")
