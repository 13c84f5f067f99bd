"""Telemetry rules: findings that NVML readings make on their own, whatever the speed, and the
plain-words evidence that speed findings carry.

Readings taken under load (the GEMM probe's NVML evidence) are preferred to idle ones: an idle
GPU lowers its clocks and PCIe generation on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .findings import FAIL, WARN
from .results import device_index

# Clocks-event reasons that mean the hardware slowed the GPU down (a fail under load), and the
# software ones worth a warning; the rest (idle, application clocks, sync boost) are normal.
HARDWARE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
SOFTWARE_REASONS = ("sw_thermal_slowdown",)
REASON_WORDS = {
    "hw_slowdown": "HW slowdown", "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake slowdown", "sw_thermal_slowdown": "SW thermal slowdown",
    "sw_power_cap": "SW power cap",
}

ACTIONS = {
    "slow_gpu": "drain the node and run the vendor diagnostic on this GPU (dcgmi diag -r 3); "
                "replace it if it repeats",
    "throttled": "check this GPU's cooling and power (fans, airflow, inlet temperature, power brake); "
                 "drain if it persists",
    "degraded_pcie": "reseat the GPU or its riser and check the slot trains at full width and generation",
    "nvlink_down": "drain the node; reset the GPU, and replace the NVLink/NVSwitch part if the link stays down",
    "ecc": "drain the node; reset the GPU to apply pending row remaps, replace it if uncorrectable errors persist",
    "slow_node": "check the host: CPU frequency governor, other processes, memory and NUMA placement",
}


@dataclass(frozen=True)
class GpuTelemetry:
    """What NVML said about one GPU: idle readings by metric, and the evidence seen under load."""

    host: str
    gpu_uuid: str
    nvml_index: int | None
    readings: Mapping[str, Mapping[str, Any]]
    under_load: Mapping[str, Any]

    def value(self, metric: str) -> float | None:
        reading = self.readings.get(metric)
        return None if reading is None or reading.get("status") != "ok" else reading.get("value")


@dataclass(frozen=True)
class RuleFinding:
    """A telemetry finding before it is merged with speed findings of the same GPU."""

    kind: str
    severity: str
    host: str
    gpu_uuid: str
    nvml_index: int | None
    evidence: str


class TelemetryCollector:
    """Gathers one host's telemetry records and GEMM load evidence, record by record (so that the
    analysis reads a sweep's records in one pass)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._readings: dict[str, dict[str, Mapping[str, Any]]] = {}
        self._nvml_index: dict[str, int | None] = {}
        self._cuda_index: dict[str, int | None] = {}
        self._load: dict[str, Mapping[str, Any]] = {}

    def add(self, result: Mapping[str, Any]) -> None:
        uuid = result.get("gpu_uuid")
        if not uuid:
            return
        probe = result.get("probe")
        if probe == "telemetry":
            readings = self._readings.get(uuid)
            if readings is None:
                readings = self._readings[uuid] = {}
                self._nvml_index[uuid] = device_index(result.get("device"))
            readings[result["metric"]] = result
        elif probe == "gemm" and result.get("status") == "ok":
            self._load[uuid] = result.get("details") or {}
            self._cuda_index[uuid] = device_index(result.get("device"))

    def gpus(self) -> dict[str, GpuTelemetry]:
        # The CUDA index names the GPU where speed findings do; NVML's where only telemetry exists.
        return {uuid: GpuTelemetry(self.host, uuid, self._cuda_index.get(uuid, self._nvml_index.get(uuid)),
                                   self._readings.get(uuid, {}), self._load.get(uuid, {}))
                for uuid in sorted(set(self._readings) | set(self._load))}


def telemetry_findings(gpu: GpuTelemetry) -> list[RuleFinding]:
    """Every finding the readings of one GPU make by themselves."""
    found = []
    for rule in (_throttled, _degraded_pcie, _nvlink_down, _ecc):
        outcome = rule(gpu)
        if outcome is not None:
            kind, severity, evidence = outcome
            found.append(RuleFinding(kind, severity, gpu.host, gpu.gpu_uuid, gpu.nvml_index, evidence))
    return found


def load_evidence(details: Mapping[str, Any]) -> str:
    """Plain words for what NVML saw under load: ``HW thermal slowdown active; SM clock 1410 of 1980 MHz``."""
    parts = [f"{REASON_WORDS[r]} active" for r in details.get("clocks_event_reasons") or [] if r in REASON_WORDS]
    median, most = details.get("sm_clock_mhz_median"), details.get("sm_clock_max_mhz")
    if median is not None and most:
        parts.append(f"SM clock {median:.0f} of {most:.0f} MHz")
    for name, label in (("width", "x"), ("generation", "Gen")):
        seen, best = details.get(f"pcie_{name}_min_loaded"), details.get(f"pcie_{name}_max")
        if seen is not None and best is not None and seen < best:
            parts.append(f"PCIe {label}{seen} of {label}{best} under load")
    return "; ".join(parts)


def _throttled(gpu: GpuTelemetry) -> tuple[str, str, str] | None:
    reasons = gpu.under_load.get("clocks_event_reasons")
    if reasons is None:  # no load evidence: fall back on the idle reading's hardware reasons only
        reading = gpu.readings.get("clocks_event_reasons") or {}
        reasons = [r for r in (reading.get("details") or {}).get("active", []) if r in HARDWARE_REASONS]
    hardware = [r for r in reasons if r in HARDWARE_REASONS]
    software = [r for r in reasons if r in SOFTWARE_REASONS]
    if not hardware and not software:
        return None
    evidence = load_evidence({**gpu.under_load, "clocks_event_reasons": hardware + software})
    return "throttled", FAIL if hardware else WARN, evidence


def _degraded_pcie(gpu: GpuTelemetry) -> tuple[str, str, str] | None:
    load = gpu.under_load
    width = load.get("pcie_width_min_loaded", gpu.value("pcie_width"))
    width_max = load.get("pcie_width_max", gpu.value("pcie_width_max"))
    generation = load.get("pcie_generation_min_loaded")  # idle links train down: only under load
    generation_max = load.get("pcie_generation_max", gpu.value("pcie_generation_max"))
    problems = []
    if width is not None and width_max is not None and width < width_max:
        problems.append(f"PCIe link x{width:.0f} of x{width_max:.0f}")
    if generation is not None and generation_max is not None and generation < generation_max:
        problems.append(f"PCIe Gen{generation:.0f} of Gen{generation_max:.0f} under load")
    return ("degraded_pcie", FAIL, "; ".join(problems)) if problems else None


def _nvlink_down(gpu: GpuTelemetry) -> tuple[str, str, str] | None:
    reading = gpu.readings.get("nvlink_links_up")
    if reading is None or reading.get("status") != "ok":
        return None
    links = (reading.get("details") or {}).get("links") or []
    down = [link.get("link") for link in links if link.get("state") == "down"]
    if not down:
        return None
    names = ", ".join(str(d) for d in down)
    return "nvlink_down", FAIL, f"NVLink {names} down; {reading.get('value')} of {len(links)} up"


def _ecc(gpu: GpuTelemetry) -> tuple[str, str, str] | None:
    volatile = gpu.value("ecc_uncorrected_volatile") or 0
    failure = gpu.value("remapped_rows_failure") or 0
    pending = gpu.value("remapped_rows_pending") or 0
    uncorrectable_rows = gpu.value("remapped_rows_uncorrectable") or 0
    if volatile or failure:
        return "ecc", FAIL, (f"{volatile:.0f} uncorrectable ECC errors since the last reset"
                             + ("; a row remap failed" if failure else ""))
    if pending:
        return "ecc", WARN, f"row remap pending ({uncorrectable_rows:.0f} rows remapped for uncorrectable errors)"
    return None

