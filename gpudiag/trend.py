"""A host's figures across its stored sweeps: their trend, and slow degradation.

A GPU that loses a little speed every week never looks slow against its fleet in one sweep
(it stays within the noise), yet costs the job more each week. ``host_trends`` follows each
figure of a host (a metric with the parameters that name it, e.g. ``gemm.tflops bf16``; GPU
pairs and buffer sizes folded) over its sweeps, oldest to newest: the median of its GPUs, and
each GPU on its own. A trend starts after the latest repair that covers it (gpudiag.repairs):
a whole-host repair restarts every trend, a GPU's repair that GPU's.

A trend is a **slow degradation** when it has at least ``min_sweeps`` sweeps, its latest figure
is ``threshold_pct`` or more below its first, and the sweep before the latest was already at
least half as far below: a fall that held over two sweeps, not one noisy sweep. Every compared
figure is better higher (TFLOP/s, GB/s, MHz, ratios), so a fall is a loss.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .repairs import Repair

# Parameters that name what a figure is (the rest, GPU pair or buffer size, are folded together).
HISTORY_PARAMS = ("dtype", "direction", "memory")


@dataclass(frozen=True)
class TrendPoint:
    """One sweep's figure (in the trend's unit)."""

    sweep_id: str
    started_at: str
    value: float


@dataclass(frozen=True)
class Trend:
    """One figure of one host over its sweeps since ``repair`` (None: no repair covers it),
    oldest first (none yet when it was repaired after its newest sweep). ``gpu``: the GPU's
    index, or None for the median of the host's GPUs. ``degraded``: a slow degradation (see the
    module)."""

    figure: str
    unit: str | None
    gpu: int | None
    points: tuple[TrendPoint, ...]
    repair: Repair | None
    degraded: bool

    @property
    def change_pct(self) -> float | None:
        """How far the latest figure is from the first, in percent of the first (negative: a
        fall); None with fewer than two sweeps or a first figure of 0."""
        return _change_pct(self.points[0], self.points[-1]) if len(self.points) > 1 else None

    @property
    def previous_change_pct(self) -> float | None:
        """The same for the sweep before the latest (None with fewer than three sweeps)."""
        return _change_pct(self.points[0], self.points[-2]) if len(self.points) > 2 else None

    def to_dict(self) -> dict[str, Any]:
        """The trend as JSON: its first and latest sweep (None without any), change and verdict."""
        return {"figure": self.figure, "unit": self.unit, "gpu": self.gpu, "sweeps": len(self.points),
                "first": _point(self.points[0]) if self.points else None,
                "latest": _point(self.points[-1]) if self.points else None,
                "change_pct": self.change_pct, "previous_change_pct": self.previous_change_pct,
                "since_repair": None if self.repair is None else self.repair.to_dict(), "degraded": self.degraded}


@dataclass(frozen=True)
class FigureTrend:
    """One figure's trends on a host: the median of its GPUs and each GPU's."""

    figure: str
    unit: str | None
    median: Trend
    gpus: tuple[Trend, ...]

    @property
    def worst_gpu(self) -> Trend | None:
        """The GPU whose figure fell the most (the lowest index of equals); None without GPUs
        measured in two sweeps."""
        changed = [trend for trend in self.gpus if trend.change_pct is not None]
        return min(changed, key=lambda trend: (trend.change_pct, trend.gpu)) if changed else None

    @property
    def degraded(self) -> tuple[Trend, ...]:
        """The median's trend and the GPUs' that are slow degradations."""
        return tuple(trend for trend in (self.median, *self.gpus) if trend.degraded)


@dataclass(frozen=True)
class HostTrends:
    """Every figure's trends on ``host``, judged with ``threshold_pct`` and ``min_sweeps``."""

    host: str
    threshold_pct: float
    min_sweeps: int
    figures: tuple[FigureTrend, ...]

    @property
    def degradations(self) -> tuple[Trend, ...]:
        """Every slow degradation, figure by figure (the median first, then GPUs by index)."""
        return tuple(trend for figure in self.figures for trend in figure.degraded)

    def to_dict(self) -> dict[str, Any]:
        """The trends as JSON (``history --json``'s ``trend``): ``degraded``, each degradation, each figure."""
        return {"threshold_pct": self.threshold_pct, "min_sweeps": self.min_sweeps,
                "degraded": bool(self.degradations),
                "degradations": [trend.to_dict() for trend in self.degradations],
                "figures": [{"figure": figure.figure, "unit": figure.unit, "median": figure.median.to_dict(),
                             "worst_gpu": None if figure.worst_gpu is None else figure.worst_gpu.to_dict(),
                             "gpus": [trend.to_dict() for trend in figure.gpus]} for figure in self.figures]}


def figure_name(figure: Mapping[str, Any]) -> str:
    """``gemm.tflops bf16``: a stored figure's metric and the parameters that name it."""
    params = figure.get("params") or {}
    return " ".join([figure["metric"], *(str(params[name]) for name in HISTORY_PARAMS if name in params)])


def host_trends(host: str, rows: Sequence[Mapping[str, Any]], repairs: Iterable[Repair], threshold_pct: float,
                min_sweeps: int) -> HostTrends:
    """The trends of ``host``'s figures over ``rows`` (Store.host_history, newest first) given
    its ``repairs``; a trend is a slow degradation as the module says."""
    known = list(repairs)
    series: dict[str, dict[int | None, list[TrendPoint]]] = {}
    medians: dict[str, list[TrendPoint]] = {}
    units: dict[str, str | None] = {}
    for row in reversed(rows):
        for name, (unit, per_gpu) in sweep_figures(row.get("figures") or ()).items():
            units.setdefault(name, unit)
            medians.setdefault(name, []).append(
                TrendPoint(row["sweep_id"], row["started_at"], statistics.median(per_gpu.values())))
            for gpu, value in per_gpu.items():
                if gpu is not None:
                    series.setdefault(name, {}).setdefault(gpu, []).append(
                        TrendPoint(row["sweep_id"], row["started_at"], value))
    figures = []
    for name in sorted(medians):
        judge = _Judge(name, units[name], known, threshold_pct, min_sweeps)
        figures.append(FigureTrend(name, units[name], judge.trend(None, medians[name]),
                                   tuple(judge.trend(gpu, points) for gpu, points in
                                         sorted(series.get(name, {}).items()))))
    return HostTrends(host, threshold_pct, min_sweeps, tuple(figures))


def sweep_figures(figures: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str | None, dict[int | None, float]]]:
    """One sweep's figures by name: the unit, and per GPU (None: no GPU) the median of its
    values over the folded keys (for P2P, its pairs as the source)."""
    values: dict[str, dict[int | None, list[float]]] = {}
    units: dict[str, str | None] = {}
    for figure in figures:
        name = figure_name(figure)
        units.setdefault(name, figure.get("unit"))
        per_gpu = values.setdefault(name, {})
        for gpu, value in figure.get("per_gpu") or ():
            per_gpu.setdefault(gpu, []).append(float(value))
    return {name: (units[name], {gpu: statistics.median(found) for gpu, found in per_gpu.items()})
            for name, per_gpu in values.items() if per_gpu}


class _Judge:
    """Builds the trends of one figure: the window after the covering repair, and the verdict."""

    def __init__(self, figure: str, unit: str | None, repairs: Sequence[Repair], threshold_pct: float,
                 min_sweeps: int) -> None:
        self.figure, self.unit, self.repairs = figure, unit, repairs
        self.threshold_pct, self.min_sweeps = threshold_pct, min_sweeps

    def trend(self, gpu: int | None, points: Sequence[TrendPoint]) -> Trend:
        covering = [repair for repair in self.repairs if repair.covers(gpu)]
        latest = max(covering, key=lambda r: (r.after_started_at, r.after_sweep_id, r.recorded_at), default=None)
        kept = tuple(p for p in points if latest is None or latest.precedes(p.sweep_id, p.started_at))
        return Trend(self.figure, self.unit, gpu, kept, latest, self._degraded(kept))

    def _degraded(self, points: Sequence[TrendPoint]) -> bool:
        if len(points) < self.min_sweeps:
            return False
        latest, previous = _change_pct(points[0], points[-1]), _change_pct(points[0], points[-2])
        return (latest is not None and previous is not None and -latest >= self.threshold_pct
                and -previous >= self.threshold_pct / 2)


def degradation_words(host: str, trend: Trend, threshold_pct: float) -> str:
    """The slow degradation in plain words, with its figures and sweeps."""
    first, latest, previous = trend.points[0], trend.points[-1], trend.points[-2]
    unit = f" {trend.unit}" if trend.unit else ""
    what = f"the median of its GPUs' {trend.figure}" if trend.gpu is None else f"GPU {trend.gpu}'s {trend.figure}"
    since = "" if trend.repair is None else f", since the repair of {trend.repair.describe()}"
    return (f"slow degradation: {host}: {what} fell {-(trend.change_pct or 0.0):.1f} % over "
            f"{len(trend.points)} sweeps, from {first.value:.4g}{unit} (sweep {first.sweep_id}) to "
            f"{latest.value:.4g}{unit} (sweep {latest.sweep_id}); the sweep before, {previous.sweep_id}, was already "
            f"{-(trend.previous_change_pct or 0.0):.1f} % below the first (threshold {threshold_pct:g} %){since}")


def _change_pct(first: TrendPoint, other: TrendPoint) -> float | None:
    """``other`` against ``first`` in percent of it (None for a first figure of 0)."""
    return None if first.value == 0 else (other.value - first.value) / first.value * 100


def _point(point: TrendPoint) -> dict[str, Any]:
    return {"sweep_id": point.sweep_id, "started_at": point.started_at, "value": point.value}
