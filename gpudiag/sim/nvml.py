"""What NVML shows of a simulated GPU: the telemetry probe's readings of an idle GPU
(probes/telemetry.py) and the sampler's evidence while a probe loads it (probes/nvml.py)."""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..analysis.sku import Sku
from .printed import not_ok, record
from .state import GpuState, NodeState, Throttle

# NVML clocks-event reason bits (probes/nvml.py), lowest first.
REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"), (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"))
GPU_IDLE_BIT = 0x1
THERMAL_BITS = 0x20 | 0x40
TELEMETRY_COUNTS = ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "remapped_rows_correctable",
                    "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure")
NVML_INTERVAL_S = 0.1
# What probes/telemetry.py prints for a GPU NVML reports lost: NVML_ERROR_GPU_IS_LOST as its
# error name and pynvml's description of it (nvmlDeviceGetHandleByIndex fails with it).
GPU_LOST_REASON = "NVML_ERROR_GPU_IS_LOST: GPU is lost"


def reason_names(mask: int) -> list[str]:
    """The names of the clocks-event reason bits set in ``mask``, lowest bit first."""
    return [name for bit, name in REASON_BITS if mask & bit]


def gpu_telemetry(node: NodeState, gpu: GpuState, rng: random.Random) -> list[dict[str, Any]]:
    """The telemetry probe's records of one GPU NVML lists (``gpu:<NVML index>``), idle."""
    device = f"gpu:{gpu.nvml_index}"
    if gpu.lost:
        return [not_ok("error", "telemetry", device, "identity", GPU_LOST_REASON, details={"source": "nvml"})]
    records = [record("telemetry", device, "identity", 1, None, gpu_uuid=gpu.gpu_uuid, details={
        "name": node.sku.gpu_model, "gpu_uuid": gpu.gpu_uuid, "serial": gpu.serial,
        "pci_bus_id": gpu.pci_bus_id, "driver_version": node.driver, "cuda_driver_version": node.cuda,
        "nvml_index": gpu.nvml_index, "source": "nvml"})]
    reason = node.failure("telemetry", gpu)
    for metric, unit, value, details in _idle_readings(node, gpu, rng):
        if reason is not None:
            records.append(not_ok("error", "telemetry", device, metric, reason, gpu_uuid=gpu.gpu_uuid,
                                  details={"source": "nvml"}))
            continue
        records.append(record("telemetry", device, metric, value, unit, gpu_uuid=gpu.gpu_uuid, samples=1,
                              details={**details, "source": "nvml"}))
    return records


def _idle_readings(node: NodeState, gpu: GpuState,
                   rng: random.Random) -> Iterator[tuple[str, str, float | int, Mapping[str, Any]]]:
    sku = node.sku
    mask = GPU_IDLE_BIT | gpu.idle_throttle_bits
    temperature_c = rng.randint(80, 86) if gpu.idle_throttle_bits & THERMAL_BITS else rng.randint(29, 36)
    yield "sm_clock", "MHz", sku.sm_clock_idle_mhz, {}
    yield "sm_clock_max", "MHz", sku.sm_clock_max_mhz, {}
    yield "memory_clock", "MHz", sku.memory_clock_max_mhz, {}
    yield "memory_clock_max", "MHz", sku.memory_clock_max_mhz, {}
    yield "clocks_event_reasons", "bitmask", mask, {"active": reason_names(mask)}
    yield "gpu_temperature", "C", temperature_c, {}
    yield "memory_temperature", "C", temperature_c + rng.randint(4, 9), {}
    yield "power_draw", "W", round(sku.power_idle_w + rng.uniform(-3.0, 6.0), 3), {}
    yield "power_limit", "W", sku.power_limit_w, {}
    memory = gpu.memory_errors.readings()
    for metric in TELEMETRY_COUNTS:
        yield metric, "bool" if metric.endswith(("pending", "failure")) else "count", memory[metric], {}
    yield "pcie_generation", "gen", sku.pcie_generation_max, {}
    yield "pcie_generation_max", "gen", sku.pcie_generation_max, {}
    yield "pcie_width", "lanes", gpu.pcie_width, {}
    yield "pcie_width_max", "lanes", sku.pcie_width_max, {}
    yield "pcie_replay_count", "count", gpu.pcie_replays, {}
    links = [_nvlink(sku, link, link < sku.nvlinks and link not in gpu.nvlinks_down, gpu.nvlink_errors)
             for link in range(max(sku.nvlinks, node.nvml_link_slots))]
    yield "nvlink_links_up", "count", sum(link["state"] == "up" for link in links), {"links": links}


def _nvlink(sku: Sku, link: int, up: bool, errors: Sequence[tuple[int, str, int]]) -> dict[str, Any]:
    """One link as probes/telemetry.py prints it; a slot the SKU does not wire reads down (inactive)."""
    status: dict[str, Any] = {"link": link, "state": "up" if up else "down"}
    if up:
        status["nvml_version_code"] = sku.nvlink_version_code
        status["speed_mbyte_per_s"] = sku.nvlink_speed_mbyte_per_s
    counters = {"crc_errors": 0, "replay_errors": 0, "recovery_errors": 0}
    counters.update({key: count for index, key, count in errors if index == link})
    return {**status, **counters}


def load_evidence(node: NodeState, gpu: GpuState, rng: random.Random, loaded_s: float,
                  power_share: float, all_loaded: bool) -> dict[str, Any]:
    """What the NVML sampler sees on ``gpu`` during ``loaded_s`` seconds of load (probes/nvml.py).

    ``power_share`` is the healthy load's power draw as a share of the power limit;
    ``all_loaded`` says whether every GPU of the node is loaded at once. Each acting throttle's
    reason is active in its share of the loaded samples (at least one), which run at its clock.
    """
    sku = node.sku
    loaded = max(1, round(loaded_s / NVML_INTERVAL_S))
    acting = gpu.acting_throttles(all_loaded)
    counts = [(throttle, min(loaded, max(1, round(throttle.share * loaded)))) for throttle in acting]
    clocks_mhz = [_sample_clock_mhz(sku.sm_clock_max_mhz, [t.factor for t, count in counts if sample < count])
                  for sample in range(loaded)]
    reason_samples = _reason_sample_counts(counts)
    thermal = any(throttle.bit & THERMAL_BITS for throttle in acting)
    clock_factor = gpu.clock_factor(all_loaded)
    return {"sm_clock_mhz_min": min(clocks_mhz) - 15 * rng.randint(0, 2),
            "sm_clock_mhz_median": statistics.median(clocks_mhz), "sm_clock_mhz_max_seen": max(clocks_mhz),
            "sm_clock_max_mhz": sku.sm_clock_max_mhz, "clocks_event_reasons": list(reason_samples),
            "clocks_event_reason_samples": reason_samples,
            "temperature_c_max": rng.randint(87, 92) if thermal else rng.randint(48, 62),
            "power_w_max": round(sku.power_limit_w * power_share * clock_factor * rng.uniform(0.96, 1.0), 3),
            "power_limit_w": sku.power_limit_w, "pcie_generation_min_loaded": sku.pcie_generation_max,
            "pcie_generation_max": sku.pcie_generation_max, "pcie_width_min_loaded": gpu.pcie_width,
            "pcie_width_max": sku.pcie_width_max, "nvml_samples": loaded + 2, "nvml_samples_idle": 2}


def _sample_clock_mhz(max_mhz: int, factors: Sequence[float]) -> int:
    """The SM clock of one sample under the throttles active in it; clocks step by 15 MHz."""
    clock = float(max_mhz)
    for factor in factors:
        clock *= factor
    return 15 * round(clock / 15)


def _reason_sample_counts(counts: Sequence[tuple[Throttle, int]]) -> dict[str, int]:
    """Reason name -> loaded samples it was active in, lowest bit first (the sampler's order)."""
    by_bit: dict[int, int] = {}
    for throttle, count in counts:
        # Throttles sharing a bit are active in the same first samples, so the larger count holds.
        by_bit[throttle.bit] = max(by_bit.get(throttle.bit, 0), count)
    return {name: by_bit[bit] for bit, name in REASON_BITS if bit in by_bit}
