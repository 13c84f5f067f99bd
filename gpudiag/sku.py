"""Per-SKU figures (gpudiag/data/sku.json): what a healthy GPU of a model measures, so a lone
node with no peers and no stored baseline is still judged against something.

The floor of a figure is the figure times the ``sku_floor`` threshold (gpudiag.thresholds).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .errors import InstallationError

FloorKey = tuple[str, str, str]


def floor_key(probe: str, metric: str, params: Mapping[str, Any]) -> FloorKey:
    """What a SKU figure is for: probe, metric, and the one parameter that changes the figure
    (GEMM dtype, copy direction)."""
    qualifier = params.get("dtype") if probe == "gemm" else params.get("direction", "")
    return probe, metric, str(qualifier or "")


def floors_for(gpu_model: str | None) -> dict[FloorKey, float]:
    """The SKU figures of ``gpu_model`` by floor key; empty for a model the table lacks."""
    sku = load_skus().skus.get(gpu_model or "")
    if sku is None:
        return {}
    figures: dict[FloorKey, float] = {("gemm", "tflops", dtype): v for dtype, v in sku.gemm_tflops.items()}
    figures[("membw", "bandwidth", "")] = sku.membw_gbps
    figures[("p2p", "bandwidth", "unidirectional")] = sku.p2p_unidirectional_gbps
    figures[("p2p", "bandwidth", "bidirectional")] = sku.p2p_bidirectional_gbps
    figures[("pcie", "bandwidth", "h2d")] = sku.pcie_h2d_gbps
    figures[("pcie", "bandwidth", "d2h")] = sku.pcie_d2h_gbps
    figures[("smclock", "sm_clock", "")] = float(sku.sm_clock_max_mhz)
    return figures


@dataclass(frozen=True)
class HostSku:
    """The host of a typical node of the SKU (for the facts record and host-side figures)."""

    cpu_model: str
    cpu_count: int
    memory_total_mib: int
    cpu_gemm_tflops: float
    membw_gbps: float


@dataclass(frozen=True)
class NetworkSku:
    """The node's scale-out network: rails, line rate and what a pair test achieves (Gbit/s)."""

    rails: int
    rail_line_rate_gbps: float
    rail_gbps: float


@dataclass(frozen=True)
class Sku:
    """What a healthy GPU of one model measures with the probes (units in the field names)."""

    gpu_model: str
    gpu_memory_mib: int
    cuda_arch: str
    sm_count: int
    fp32_lanes_per_sm: int
    shared_memory_per_sm_bytes: int
    sm_clock_max_mhz: int
    sm_clock_idle_mhz: int
    memory_clock_max_mhz: int
    power_limit_w: float
    power_idle_w: float
    nvlinks: int
    nvlink_version_code: int
    nvlink_speed_mbyte_per_s: int
    pcie_generation_max: int
    pcie_width_max: int
    gemm_tflops: Mapping[str, float]
    membw_gbps: float
    p2p_unidirectional_gbps: float
    p2p_bidirectional_gbps: float
    pcie_h2d_gbps: float
    pcie_d2h_gbps: float
    host: HostSku
    network: NetworkSku


@dataclass(frozen=True)
class SkuTable:
    """The SKU figures by GPU model; ``floor_fraction`` × a figure is that metric's per-SKU floor."""

    floor_fraction: float
    skus: Mapping[str, Sku]


@functools.lru_cache(maxsize=1)
def load_skus() -> SkuTable:
    """The packaged ``gpudiag/data/sku.json``. Raises InstallationError when it is unusable."""
    try:
        data = json.loads(resources.files("gpudiag").joinpath("data/sku.json").read_text(encoding="utf-8"))
        skus = {entry["gpu_model"]: _sku(entry) for entry in data["skus"]}
        return SkuTable(floor_fraction=float(data["floor_fraction"]), skus=skus)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InstallationError(f"gpudiag/data/sku.json is unusable ({type(error).__name__}: {error}); "
                                "reinstall gpudiag") from error


def _sku(entry: Mapping[str, Any]) -> Sku:
    return Sku(**{**entry, "gemm_tflops": dict(entry["gemm_tflops"]), "host": HostSku(**entry["host"]),
                  "network": NetworkSku(**entry["network"])})
