"""Per-SKU figures (gpudiag/data/sku.json): what a healthy GPU of a model measures, so a lone
node with no peers and no stored baseline is still judged against something.

The floor of a figure is the figure times the ``sku_floor`` threshold (gpudiag.thresholds).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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
    if gpu_model is None:
        return {}
    entry = _table().get(gpu_model)
    if entry is None:
        return {}
    figures: dict[FloorKey, float] = {("gemm", "tflops", dtype): float(v) for dtype, v in entry["gemm_tflops"].items()}
    figures[("membw", "bandwidth", "")] = float(entry["membw_gbps"])
    figures[("p2p", "bandwidth", "unidirectional")] = float(entry["p2p_unidirectional_gbps"])
    figures[("p2p", "bandwidth", "bidirectional")] = float(entry["p2p_bidirectional_gbps"])
    figures[("pcie", "bandwidth", "h2d")] = float(entry["pcie_h2d_gbps"])
    figures[("pcie", "bandwidth", "d2h")] = float(entry["pcie_d2h_gbps"])
    figures[("smclock", "sm_clock", "")] = float(entry["sm_clock_max_mhz"])
    return figures


def _table() -> dict[str, Mapping[str, Any]]:
    try:
        data = json.loads(resources.files("gpudiag").joinpath("data/sku.json").read_text(encoding="utf-8"))
        return {entry["gpu_model"]: entry for entry in data["skus"]}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InstallationError(f"gpudiag/data/sku.json is unusable ({error}); reinstall gpudiag") from error
