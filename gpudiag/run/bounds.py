"""The physical ceiling of a measurement (gpudiag/data/bounds.json): what a GPU of a known model
can measure at most (its SKU figure times a margin), or, for a model the SKU table lacks and for
a CPU, a generic ceiling per metric. A value above it, or below zero, is no measurement.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..analysis.sku import SM_FMA_RATIO, Sku, load_skus
from ..errors import InstallationError

HOST_DEVICES = ("cpu", "host")


@dataclass(frozen=True)
class Ceiling:
    """The most a measurement can be (``value``, in ``unit``) and where that comes from (``source``:
    ``NVIDIA H100 80GB HBM3 figure 686.1 x 1.5``, or ``generic ceiling``)."""

    value: float
    unit: str
    source: str


@dataclass(frozen=True)
class BoundsTable:
    """The margin over a SKU figure, and the generic and CPU ceilings by ``probe.metric``."""

    sku_margin: float
    generic: Mapping[str, tuple[float, str]]
    cpu: Mapping[str, tuple[float, str]]


@functools.lru_cache(maxsize=1)
def load_bounds() -> BoundsTable:
    """The packaged ``gpudiag/data/bounds.json``. Raises InstallationError when it is unusable."""
    try:
        data = json.loads(resources.files("gpudiag").joinpath("data/bounds.json").read_text(encoding="utf-8"))
        margin = float(data["sku_margin"])
        if not margin >= 1.0:
            raise ValueError(f"sku_margin {margin} is below 1: it would refuse healthy figures")
        return BoundsTable(margin, _ceilings(data["generic_ceilings"]), _ceilings(data["cpu_ceilings"]))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InstallationError(f"gpudiag/data/bounds.json is unusable ({type(error).__name__}: {error}); "
                                "reinstall gpudiag") from error


def _ceilings(table: Mapping[str, Any]) -> dict[str, tuple[float, str]]:
    ceilings = {}
    for name, entry in table.items():
        value = float(entry["value"])
        if not value > 0:
            raise ValueError(f"{name}: a ceiling must be above 0, got {value}")
        ceilings[name] = (value, str(entry["unit"]))
    return ceilings


def ceiling(gpu_model: str | None, probe: str, metric: str, params: Mapping[str, Any],
            device: str) -> Ceiling | None:
    """The ceiling of one measurement (None: the metric has none here). ``params`` pick the
    figure (GEMM dtype, P2P direction); a ``cpu``/``host`` device, or host memory, is judged
    against the CPU ceilings."""
    bounds = load_bounds()
    name = f"{probe}.{metric}"
    if device in HOST_DEVICES or params.get("memory") not in (None, "device"):
        found = bounds.cpu.get(name)
        return Ceiling(found[0], found[1], "generic ceiling of a host") if found else None
    sku = load_skus().skus.get(gpu_model or "")
    figure = _figure(sku, probe, metric, params) if sku is not None else None
    if figure is not None:
        unit = bounds.generic.get(name, (0.0, ""))[1]
        return Ceiling(figure * bounds.sku_margin, unit, f"{sku.gpu_model} figure {figure:g} x {bounds.sku_margin:g}")
    found = bounds.generic.get(name)
    return Ceiling(found[0], found[1], "generic ceiling") if found else None


def _figure(sku: Sku, probe: str, metric: str, params: Mapping[str, Any]) -> float | None:
    """The SKU's highest figure for the probe and metric (see gpudiag/data/bounds.json)."""
    if (probe, metric) == ("gemm", "tflops"):
        by_size = sku.gemm_tflops.get(str(params.get("dtype")))
        figures = list(by_size.values()) if by_size else \
            [figure for sizes in sku.gemm_tflops.values() for figure in sizes.values()]
        return max(figures, default=None)
    if (probe, metric) == ("p2p", "bandwidth"):
        return sku.p2p_bidirectional_gbps if params.get("direction") == "bidirectional" \
            else sku.p2p_unidirectional_gbps
    figures = {("membw", "bandwidth"): sku.membw_gbps, ("pcie", "bandwidth"): max(sku.pcie_h2d_gbps, sku.pcie_d2h_gbps),
               ("smclock", "sm_clock"): float(sku.sm_clock_max_mhz), ("smclock", "sm_fma_rate_min_ratio"): SM_FMA_RATIO}
    return figures.get((probe, metric))
