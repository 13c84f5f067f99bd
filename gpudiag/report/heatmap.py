"""The colour scale of the HTML report and its GEMM grid: TFLOP/s per host and GPU against the fleet
median of the GPU model. Colours are computed here and written inline; the link section
(``linkmap``) uses the same scale."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ..analysis.identity import HostGpus
from ..records import device_index
from .console import format_value
from .markup import _e, _html_table
from .phrasing import OK, Document, _fixed, _hosts

# Heat-map colour scale: green at or above the reference, through yellow, red at this share of it.
HEAT_RED_RATIO = 0.80


def heat_colour(ratio: float) -> str:
    """CSS colour of a value at ``ratio`` of its reference: green at or above it, yellow at 10 %
    below, red at HEAT_RED_RATIO and below."""
    share = min(1.0, max(0.0, (ratio - HEAT_RED_RATIO) / (1.0 - HEAT_RED_RATIO)))
    return f"hsl({round(120 * share)},70%,{round(68 + 12 * share)}%)"


def gemm_cells(document: Document) -> dict[str, dict[int, float]]:
    """GEMM TFLOP/s by host and GPU index (NVML's, as findings name GPUs: a lost GPU's column stays
    empty rather than take the next GPU's ``cuda:N``), from ok results; several results of one GPU
    give their median."""
    gathered: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for host in _hosts(document):
        gpus = HostGpus(host.get("facts") or {})
        for result in host.get("results") or []:
            index = _gemm_gpu_index(result)
            if index is not None:
                index = gpus.of(result.get("device"), result.get("gpu_uuid")).nvml_index
            if index is not None:
                gathered[str(host.get("host"))][index].append(float(result["value"]))
    return {host: {gpu: statistics.median(values) for gpu, values in gpus.items()}
            for host, gpus in gathered.items()}


def gemm_references(document: Document, cells: Mapping[str, Mapping[int, float]]) -> dict[str, float]:
    """The median GEMM TFLOP/s of each GPU model over the fleet: a GPU is coloured against GPUs of
    its own model, never against another SKU (DESIGN.md: never pool different baseline keys)."""
    pooled: dict[str, list[float]] = defaultdict(list)
    for host in _hosts(document):
        pooled[_gpu_model(host)].extend(cells.get(str(host.get("host")), {}).values())
    return {model: statistics.median(values) for model, values in pooled.items() if values}


def html_heatmap(document: Document) -> str:
    """GEMM TFLOP/s per host (rows) and GPU (columns), coloured against the fleet median of the
    GPU model; hosts without GEMM results are a greyed row with their status."""
    cells = gemm_cells(document)
    if not cells:
        return '<p class="muted">No GEMM results in this sweep.</p>'
    gpus = sorted({gpu for row in cells.values() for gpu in row})
    references = gemm_references(document, cells)
    headers = ["host", *(f"GPU {gpu}" for gpu in gpus), "worst"]
    rows = []
    for host in _hosts(document):
        label = str(host.get("host"))
        if label in cells:
            rows.append(_heat_row(label, cells[label], gpus, references.get(_gpu_model(host))))
        else:
            rows.append(_greyed_row(host, len(gpus) + 1))
    legend = _heat_legend(references)
    return legend + _html_table("gemm-heatmap", headers, rows, css_class="heatmap")


def _heat_row(host: str, values: Mapping[int, float], gpus: Sequence[int], reference: float | None) -> str:
    cells = [f"<th>{_e(host)}</th>"]
    ratios = []
    for gpu in gpus:
        value = values.get(gpu)
        if value is None:
            cells.append(f'<td class="missing" title="{_e(f"{host} GPU {gpu}: no GEMM result")}">-</td>')
            continue
        ratio = value / reference if reference else 1.0
        ratios.append(ratio)
        title = f"{host} GPU {gpu}: {_fixed(value)} TFLOP/s ({100 * ratio:.1f} % of median)"
        cells.append(f'<td style="background:{heat_colour(ratio)}" title="{_e(title)}">{_fixed(value)}</td>')
    worst = min(ratios)
    cells.append(f'<td class="worst" style="background:{heat_colour(worst)}">{100 * worst:.1f} %</td>')
    return "<tr>" + "".join(cells) + "</tr>"


def _greyed_row(host: Mapping[str, Any], span: int) -> str:
    status = str(host.get("status"))
    text = f"{status}: {host.get('error')}" if host.get("error") else f"{status}: no GEMM result"
    return (f'<tr class="nodata"><th>{_e(host.get("host"))}</th>'
            f'<td colspan="{span}">{_e(text)}</td></tr>')


def heat_swatches() -> str:
    """Swatches of the colour scale, 100 % down to HEAT_RED_RATIO, as inline HTML."""
    steps = [1.0, 0.95, 0.9, 0.85, HEAT_RED_RATIO]
    return "".join(f'<span class="swatch" style="background:{heat_colour(r)}">{100 * r:.0f} %</span>'
                   for r in steps)


def _heat_legend(references: Mapping[str, float]) -> str:
    swatches = heat_swatches()
    medians = "; ".join(f"{model}: {format_value(value, 'TFLOP/s')}" for model, value in sorted(references.items()))
    return f'<p class="legend">Share of the fleet median of the GPU model ({_e(medians)}): {swatches}</p>'


def _gpu_model(host: Mapping[str, Any]) -> str:
    return str((host.get("facts") or {}).get("gpu_model") or "unknown GPU")


def _gemm_gpu_index(result: Mapping[str, Any]) -> int | None:
    """The GPU index of an ok GEMM TFLOP/s result on ``cuda:N``, else None."""
    if result.get("probe") != "gemm" or result.get("metric") != "tflops" or result.get("value") is None:
        return None
    if result.get("status", OK) != OK:
        return None
    return device_index(result.get("device", "")) if str(result.get("device", "")).startswith("cuda:") else None
