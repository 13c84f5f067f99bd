"""Per-SKU figures (gpudiag/data/sku.json): what a healthy GPU of a model measures, so a lone
node with no peers and no stored baseline is still judged against something.

The floor of a figure is the figure times the ``sku_floor`` threshold (gpudiag.analysis.thresholds).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ..errors import InstallationError

FloorKey = tuple[str, str, str]
# The buffer (MiB) each copy probe's SKU figure describes: the probes' largest (probes/membw.py,
# p2p.py, pcie.py). A smaller buffer (a tight --max-gpu-mem) copies slower and has no figure.
FIGURE_BUFFER_MIB = {"membw": 1024, "p2p": 256, "pcie": 256}
# The slowest SM's FMA rate over the median SM's: 1.0 on a healthy GPU.
SM_FMA_RATIO = 1.0


def floor_key(probe: str, metric: str, params: Mapping[str, Any]) -> FloorKey:
    """What a SKU figure is for: probe, metric, and the parameters that change the figure.

    GEMM: ``"<dtype>:<m>"`` for a square product (m = n = k, e.g. ``"bf16:8192"``), else
    ``"<dtype>:<m>x<n>x<k>"``; just ``"<dtype>"`` when the params carry no shape. Copies: the
    direction (``"h2d"``, ``"unidirectional"``, ...) or ``""``, then ``@<buffer MiB>``.
    """
    if probe == "gemm":
        return probe, metric, gemm_qualifier(params)
    qualifier = str(params.get("direction") or "")
    if probe in FIGURE_BUFFER_MIB:
        qualifier += f"@{params.get('buffer_mib')}"
    return probe, metric, qualifier


def gemm_qualifier(params: Mapping[str, Any]) -> str:
    """``dtype:m`` (square) or ``dtype:mxnxk`` from GEMM params; ``dtype`` alone without a shape."""
    dtype = str(params.get("dtype") or "")
    m, n, k = (params.get(name) for name in ("m", "n", "k"))
    if m is None or n is None or k is None:
        return dtype
    return f"{dtype}:{m}" if m == n == k else f"{dtype}:{m}x{n}x{k}"


def floors_for(gpu_model: str | None) -> dict[FloorKey, float]:
    """The SKU figures of ``gpu_model`` by floor key (GEMM: one per dtype and square size);
    empty for a model the table lacks."""
    sku = load_skus().skus.get(gpu_model or "")
    if sku is None:
        return {}
    figures: dict[FloorKey, float] = {
        floor_key("gemm", "tflops", {"dtype": dtype, "m": size, "n": size, "k": size}): tflops
        for dtype, by_size in sku.gemm_tflops.items() for size, tflops in by_size.items()}
    copies = {("membw", ""): sku.membw_gbps, ("p2p", "unidirectional"): sku.p2p_unidirectional_gbps,
              ("p2p", "bidirectional"): sku.p2p_bidirectional_gbps, ("pcie", "h2d"): sku.pcie_h2d_gbps,
              ("pcie", "d2h"): sku.pcie_d2h_gbps}
    for (probe, direction), gbps in copies.items():
        figures[floor_key(probe, "bandwidth", {"direction": direction, "buffer_mib": FIGURE_BUFFER_MIB[probe]})] = gbps
    figures[("smclock", "sm_clock", "")] = float(sku.sm_clock_max_mhz)
    figures[("smclock", "sm_fma_rate_min_ratio", "")] = SM_FMA_RATIO
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
    gemm_tflops: Mapping[str, Mapping[int, float]]  # dtype -> square size (m = n = k) -> TFLOP/s
    membw_gbps: float
    p2p_unidirectional_gbps: float
    p2p_bidirectional_gbps: float
    pcie_h2d_gbps: float
    pcie_d2h_gbps: float
    host: HostSku
    network: NetworkSku


@dataclass(frozen=True)
class SkuTable:
    """The SKU figures by GPU model; ``floor_fraction`` × a figure is that metric's per-SKU floor.
    ``nvlinks_wired``: the NVLinks of models the table has no figures for (0: no NVLink at all)."""

    floor_fraction: float
    skus: Mapping[str, Sku]
    nvlinks_wired: Mapping[str, int] = field(default_factory=dict)

    def wired_nvlinks(self, gpu_model: str | None) -> int | None:
        """How many NVLinks ``gpu_model`` wires (links 0..n-1), or None for a model the table lacks."""
        sku = self.skus.get(gpu_model or "")
        return sku.nvlinks if sku is not None else self.nvlinks_wired.get(gpu_model or "")


@functools.lru_cache(maxsize=1)
def load_skus() -> SkuTable:
    """The packaged ``gpudiag/data/sku.json``. Raises InstallationError when it is unusable."""
    try:
        data = json.loads(resources.files("gpudiag").joinpath("data/sku.json").read_text(encoding="utf-8"))
        skus = {entry["gpu_model"]: _sku(entry) for entry in data["skus"]}
        return SkuTable(floor_fraction=float(data["floor_fraction"]), skus=skus,
                        nvlinks_wired=_nvlinks_wired(data.get("nvlinks_wired", {}), skus))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InstallationError(f"gpudiag/data/sku.json is unusable ({type(error).__name__}: {error}); "
                                "reinstall gpudiag") from error


def wired_nvlinks(gpu_model: str | None) -> int | None:
    """How many NVLinks the packaged table says ``gpu_model`` wires; None for a model it lacks."""
    return load_skus().wired_nvlinks(gpu_model)


def _nvlinks_wired(table: Mapping[str, Any], skus: Mapping[str, Sku]) -> dict[str, int]:
    """Model -> wired NVLinks, each a whole number of at least 0, none of a model with figures
    (its ``nvlinks`` says it). Raises ValueError, TypeError."""
    if not isinstance(table, Mapping):
        raise TypeError("nvlinks_wired must map each GPU model to its number of NVLinks")
    wired = {}
    for model, links in table.items():
        if isinstance(links, bool) or not isinstance(links, int) or links < 0:
            raise ValueError(f"nvlinks_wired: {model}: expected a whole number of at least 0, got {links!r}")
        if model in skus:
            raise ValueError(f"nvlinks_wired: {model} has figures; its entry's nvlinks says how many it wires")
        wired[model] = links
    return wired


def _sku(entry: Mapping[str, Any]) -> Sku:
    return Sku(**{**entry, "gemm_tflops": _gemm_tflops(entry["gemm_tflops"]), "host": HostSku(**entry["host"]),
                  "network": NetworkSku(**entry["network"])})


def _gemm_tflops(table: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[int, float]]:
    """dtype -> size -> TFLOP/s, the JSON's string sizes read as ints. Raises ValueError, TypeError."""
    if not isinstance(table, Mapping) or not all(isinstance(by_size, Mapping) for by_size in table.values()):
        raise TypeError("gemm_tflops must map each dtype to {size: TFLOP/s}")
    return {dtype: {int(size): float(tflops) for size, tflops in by_size.items()} for dtype, by_size in table.items()}
