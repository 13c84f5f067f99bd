"""A host's figures across its stored sweeps: their trend, and slow degradation.

A GPU that loses a little speed every week never looks slow against its fleet in one sweep
(it stays within the noise), yet costs the job more each week. ``host_trends`` follows each
figure of a host (a metric with the parameters that name it, e.g. ``gemm.tflops bf16``; GPU
pairs and buffer sizes folded) over its sweeps, oldest to newest: the median of its GPUs, and
each GPU on its own. A trend starts after the latest repair that covers it (gpudiag.store.repairs):
a whole-host repair restarts every trend, a GPU's repair that GPU's.

A trend rests on every sweep of its window, not on its first and latest alone (one noisy end
sweep decided that, and a GPU losing 2 % a sweep over 4 sweeps was flagged in 1 of 3 seeds):
a robust straight line through them (``TrendFit``), x the sweep's place in the window. Its
slope is Theil–Sen's, the median of the slopes between every two sweeps, so one odd sweep moves
it little. Its **fitted change** is the slope × the sweeps it spans, in percent of the fitted
first figure. The per-sweep noise is a standard deviation around a least-squares line, from the
residuals' squares over their degrees of freedom (sweeps − 2: unbiased, where a MAD of three or
four residual steps came out a tenth too tight on average). Three or four sweeps alone are a
poor estimate either way: by luck they look tight (and a flat GPU's noise seems a slope) or
loose (a GPU losing 2 % a sweep at 1 % noise seemed 2.4 % noisy, its slope not real, in 2 of 10
series). So the noise is that of the host's GPUs on the same figure, pooled (each GPU's degrees
of freedom summed), unless the trend's own is more than ``OWN_NOISE_TOLERANCE`` times it (a GPU
that truly scatters more than its siblings is judged by its own scatter and its own degrees of
freedom); and at least ``NOISE_FLOOR_PCT`` of the level.

A trend is a **slow degradation** when it rests on at least ``min_sweeps`` sweeps, its fitted
change is a fall of ``threshold_pct`` or more, its latest sweep is itself at least half that
(``LATEST_SHARE``) below the fitted first figure (one back at its level is no degradation now),
and its slope is real: at least ``slope_z``
times its uncertainty (the noise / √Σ(x − x̄)², as a least-squares slope's) below 0 — where
the noise is itself an estimate from few degrees of freedom, the bar is raised to the Student t
quantile of the same tail (``student_bar``, gpudiag.analysis.noisy: 3 sigma becomes 4.3 with 8
degrees of freedom, 3.5 with 16), so a healthy GPU's flat series crosses it as rarely as a known
noise would allow. A flat series with noisy sweeps, or one dip in its latest sweep, has a small
slope against a large scatter and is no degradation; a steady decline is. A trend of fewer than
``MIN_FIT_SWEEPS`` sweeps has no line (two points fit any line exactly): it is said to be too short, never passed.
Every compared figure is better higher (TFLOP/s, GB/s, MHz, ratios), so a fall is a loss.

A part sliding toward the line is a **watch** before it crosses it: a trend (of at least
``min_sweeps`` sweeps) that is no slow degradation, whose slope is real at ``watch_z`` (the same
test as above, Student-t bar and all, at a lower z: ``WATCH_SLOPE_Z``), whose fitted line reaches
``warn_pct`` (the sweep's ``deficit_warn``) below its fitted first figure by two sweeps after the
latest at the latest (``WATCH_HORIZON``; one already past it counts), and whose latest sweep is
itself at least ``LATEST_SHARE`` of ``warn_pct`` below that first figure. Its ``Projection``
says where the line crosses ``warn_pct`` and where it will be one and two sweeps on. Every
trend's ``verdict``: ``fail`` (a slow degradation), ``watch``, ``none`` (judged: neither), or
``too_short`` (fewer than ``min_sweeps`` sweeps, or no line). What the watch's bar costs and buys
is measured by bench/detection.py's history rows (docs/sweep.md, "History and trends"): a lower
bar finds a slide sooner and watches more flat parts; the noise, the sweeps and the slope alone
decide how soon a slide can be told from noise at all.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.noisy import student_bar
from ..analysis.thresholds import default_thresholds
from ..findings import Action, Basis, Finding, Kind, Severity
from ..words import plural
from .repairs import Repair

# Parameters that name what a figure is (the rest, GPU pair or buffer size, are folded together).
HISTORY_PARAMS = ("dtype", "direction", "memory")
# A line needs three sweeps: two fit any line exactly and say nothing of the noise.
MIN_FIT_SWEEPS = 3
# The least per-sweep noise a trend is judged with (percent of its level): a series that repeats
# itself exactly (a figure the hardware pins) still has a slope that is finitely sure.
NOISE_FLOOR_PCT = 0.1
# How far a trend's own scatter may exceed its host's pooled one and still be the luck of a few
# sweeps (an estimate from 1 or 2 degrees of freedom, 3 or 4 sweeps, exceeds 2.5 times the truth
# about once in 80 or 500 series).
OWN_NOISE_TOLERANCE = 2.5
# The share of the threshold the latest sweep's own figure must fall below the fitted first: a
# figure back at its level is no degradation, however its earlier sweeps fell (a healthy GPU's
# memory bandwidth 1.5, 3.6 and 4.7 % low over three sweeps, then 1.3 %, fitted a 5.2 % fall).
LATEST_SHARE = 0.5
# A watch's slope bar (sigma, raised as the slow degradation's for a noise estimated from few degrees
# of freedom): below history_slope_z, since a watch is an early word and no verdict, yet high enough
# that a flat part is rarely watched (bench/detection.py --scenarios history: the rates at CV 0.5,
# 1 and 2 % over 3 to 6 sweeps, docs/sweep.md).
WATCH_SLOPE_Z = 2.5
# How many sweeps after the latest a watched part's fitted line reaches the warn deficit by.
WATCH_HORIZON = 2
# The verdicts of a trend, worst first.
VERDICTS = ("fail", "watch", "none", "too_short")


@dataclass(frozen=True)
class TrendPoint:
    """One sweep's figure (in the trend's unit)."""

    sweep_id: str
    started_at: str
    value: float


@dataclass(frozen=True)
class TrendFit:
    """A robust straight line through a trend's sweeps, x the sweep's place (0: the first):
    ``slope`` in the trend's unit a sweep (Theil–Sen), ``first`` and ``latest`` the line at the
    first and the latest sweep, ``noise`` the per-sweep scatter around it (the unit; see the
    module), ``sweeps`` the sweeps it rests on (3 or more)."""

    slope: float
    first: float
    latest: float
    noise: float
    sweeps: int
    # The degrees of freedom the noise was estimated with (0: none, a floor).
    dof: int = 0

    @property
    def change_pct(self) -> float | None:
        """The fitted change from the first to the latest sweep, in percent of the fitted first
        (negative: a fall); None where the fitted first is not above 0."""
        return None if self.first <= 0 else (self.latest - self.first) / self.first * 100

    @property
    def slope_pct(self) -> float | None:
        """The slope in percent of the fitted first figure, a sweep (None as ``change_pct``)."""
        return None if self.first <= 0 else self.slope / self.first * 100

    @property
    def noise_pct(self) -> float | None:
        """The per-sweep noise in percent of the fitted first figure (None as ``change_pct``)."""
        return None if self.first <= 0 else self.noise / self.first * 100

    @property
    def slope_z(self) -> float:
        """The slope over its uncertainty (noise / √Σ(x − x̄)²): below -3, a fall that noise
        alone makes about once in 700 lines."""
        spread = math.sqrt(sum((x - (self.sweeps - 1) / 2) ** 2 for x in range(self.sweeps)))
        return self.slope / (self.noise / spread)

    def to_dict(self) -> dict[str, Any]:
        return {"sweeps": self.sweeps, "slope_per_sweep": self.slope, "slope_pct_per_sweep": self.slope_pct,
                "fitted_first": self.first, "fitted_latest": self.latest, "fitted_change_pct": self.change_pct,
                "noise": self.noise, "noise_pct": self.noise_pct, "noise_dof": self.dof, "slope_z": self.slope_z}


@dataclass(frozen=True)
class Projection:
    """Where a trend's fitted line goes (x: the sweep's place in its window, 0 the first): where
    it crosses ``warn_pct`` below its fitted first figure (``crosses_at``; None where it does not
    fall), and its figure one and two sweeps after the latest (``in_1``, ``in_2``)."""

    warn_pct: float
    crosses_at: float | None
    sweeps: int
    first: float
    in_1: float
    in_2: float

    @property
    def sweeps_to_warn(self) -> float | None:
        """Sweeps after the latest until the line crosses ``warn_pct`` (0 or less: crossed already)."""
        return None if self.crosses_at is None else self.crosses_at - (self.sweeps - 1)

    @property
    def in_1_pct(self) -> float:
        """The line one sweep after the latest, in percent of the fitted first (negative: a fall)."""
        return (self.in_1 - self.first) / self.first * 100

    @property
    def in_2_pct(self) -> float:
        """The line two sweeps after the latest, in percent of the fitted first."""
        return (self.in_2 - self.first) / self.first * 100

    def to_dict(self) -> dict[str, Any]:
        """``crosses_warn_at_sweep``: the sweep of the window (1: the first) where the line crosses
        the warn deficit, fractional; ``sweeps_to_warn``: how many after the latest (0 or less:
        past it already)."""
        return {"warn_pct": self.warn_pct,
                "crosses_warn_at_sweep": None if self.crosses_at is None else self.crosses_at + 1,
                "sweeps_to_warn": self.sweeps_to_warn, "in_1_sweep": self.in_1, "in_1_sweep_pct": self.in_1_pct,
                "in_2_sweeps": self.in_2, "in_2_sweeps_pct": self.in_2_pct}


def project(fit: TrendFit, warn_pct: float) -> Projection | None:
    """``fit``'s projection (None where its fitted first figure is not above 0)."""
    if fit.first <= 0 or fit.slope_pct is None:
        return None
    crosses = warn_pct / -fit.slope_pct if fit.slope_pct < 0 else None
    return Projection(warn_pct, crosses, fit.sweeps, fit.first, fit.latest + fit.slope, fit.latest + 2 * fit.slope)


def theil_sen(values: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of the robust line through ``values`` at x = 0, 1, ...: the median of
    the pairwise slopes, and the median of value − slope × x. Raises ValueError for fewer than 2."""
    if len(values) < 2:
        raise ValueError("a line needs two values")
    slope = statistics.median((values[j] - values[i]) / (j - i)
                              for i in range(len(values)) for j in range(i + 1, len(values)))
    return slope, statistics.median(value - slope * x for x, value in enumerate(values))


def residual_squares(values: Sequence[float]) -> float:
    """The sum of squared distances of ``values`` (x = 0, 1, ...) from their least-squares line."""
    count = len(values)
    middle, mean = (count - 1) / 2, math.fsum(values) / count
    spread = math.fsum((x - middle) ** 2 for x in range(count))
    slope = math.fsum((x - middle) * (value - mean) for x, value in enumerate(values)) / spread if spread else 0.0
    return math.fsum((value - mean - slope * (x - middle)) ** 2 for x, value in enumerate(values))


@dataclass(frozen=True)
class Noise:
    """A per-sweep noise (a standard deviation, the unit) and the degrees of freedom it rests on."""

    sigma: float
    dof: int


def pooled_noise(series: Iterable[Sequence[float]]) -> Noise:
    """The per-sweep noise of every series of at least MIN_FIT_SWEEPS values around its own
    least-squares line, pooled (squares over degrees of freedom); 0 with none."""
    squares, dof = 0.0, 0
    for values in series:
        if len(values) >= MIN_FIT_SWEEPS:
            squares += residual_squares(values)
            dof += len(values) - 2
    return Noise(math.sqrt(squares / dof) if dof else 0.0, dof)


def fit_trend(values: Sequence[float], pooled: Noise | None = None) -> TrendFit | None:
    """The TrendFit of ``values`` (oldest first); None with fewer than MIN_FIT_SWEEPS values. Its
    noise is ``pooled`` (the host's GPUs': see the module), or its own where there is no pool
    or its own is more than OWN_NOISE_TOLERANCE times the pool's."""
    if len(values) < MIN_FIT_SWEEPS:
        return None
    slope, intercept = theil_sen(values)
    own = Noise(math.sqrt(residual_squares(values) / (len(values) - 2)), len(values) - 2)
    noise = own if pooled is None or pooled.dof == 0 or own.sigma > OWN_NOISE_TOLERANCE * pooled.sigma else pooled
    floor = abs(intercept) * NOISE_FLOOR_PCT / 100
    return TrendFit(slope, intercept, intercept + slope * (len(values) - 1), max(noise.sigma, floor, 1e-12),
                    len(values), noise.dof if noise.sigma >= floor else 0)


@dataclass(frozen=True)
class Trend:
    """One figure of one host over its sweeps since ``repair`` (None: no repair covers it),
    oldest first (none yet when it was repaired after its newest sweep). ``gpu``: the GPU's
    index, or None for the median of the host's GPUs. ``fit``: its line (None: fewer than
    MIN_FIT_SWEEPS sweeps, not judged). ``verdict``: ``fail`` (a slow degradation), ``watch``,
    ``none`` or ``too_short`` (see the module); ``projection``: where its line goes (None
    without a line)."""

    figure: str
    unit: str | None
    gpu: int | None
    points: tuple[TrendPoint, ...]
    repair: Repair | None
    fit: TrendFit | None
    verdict: str
    projection: Projection | None = None

    @property
    def degraded(self) -> bool:
        """A slow degradation: the ``fail`` verdict."""
        return self.verdict == "fail"

    @property
    def watched(self) -> bool:
        """Sliding toward the warn deficit: the ``watch`` verdict."""
        return self.verdict == "watch"

    def describe(self) -> str:
        """``GPU 3's gemm.tflops bf16`` or ``the median of its GPUs' gemm.tflops bf16``."""
        return f"the median of its GPUs' {self.figure}" if self.gpu is None else f"GPU {self.gpu}'s {self.figure}"

    @property
    def change_pct(self) -> float | None:
        """How far the latest figure is from the first, in percent of the first (negative: a
        fall); None with fewer than two sweeps or a first figure of 0."""
        return _change_pct(self.points[0], self.points[-1]) if len(self.points) > 1 else None

    def to_dict(self) -> dict[str, Any]:
        """The trend as JSON: its first and latest sweep (None without any), their change, its
        line (``fit``, None: too few sweeps to fit) and verdict."""
        return {"figure": self.figure, "unit": self.unit, "gpu": self.gpu, "sweeps": len(self.points),
                "first": _point(self.points[0]) if self.points else None,
                "latest": _point(self.points[-1]) if self.points else None, "change_pct": self.change_pct,
                "fit": None if self.fit is None else self.fit.to_dict(),
                "since_repair": None if self.repair is None else self.repair.to_dict(), "verdict": self.verdict,
                "degraded": self.degraded,
                "projection": None if self.projection is None else self.projection.to_dict()}


@dataclass(frozen=True)
class FigureTrend:
    """One figure's trends on a host: the median of its GPUs and each GPU's."""

    figure: str
    unit: str | None
    median: Trend
    gpus: tuple[Trend, ...]

    @property
    def worst_gpu(self) -> Trend | None:
        """The GPU whose fitted figure fell the most (the lowest index of equals); None without a
        GPU fitted (MIN_FIT_SWEEPS sweeps)."""
        fitted = [(trend.fit.change_pct, trend.gpu, trend) for trend in self.gpus
                  if trend.fit is not None and trend.fit.change_pct is not None]
        return min(fitted, key=lambda entry: entry[:2])[2] if fitted else None

    @property
    def unfitted(self) -> tuple[Trend, ...]:
        """The median's trend and the GPUs' with too few sweeps to fit, yet at least one."""
        return tuple(trend for trend in (self.median, *self.gpus) if trend.fit is None and trend.points)

    @property
    def degraded(self) -> tuple[Trend, ...]:
        """The median's trend and the GPUs' that are slow degradations."""
        return tuple(trend for trend in (self.median, *self.gpus) if trend.degraded)

    @property
    def watched(self) -> tuple[Trend, ...]:
        """The median's trend and the GPUs' that are watches."""
        return tuple(trend for trend in (self.median, *self.gpus) if trend.watched)


@dataclass(frozen=True)
class HostTrends:
    """Every figure's trends on ``host``, judged with ``threshold_pct``, ``min_sweeps`` and
    ``slope_z``, watched with ``warn_pct`` and ``watch_z`` (see the module)."""

    host: str
    threshold_pct: float
    min_sweeps: int
    slope_z: float
    figures: tuple[FigureTrend, ...]
    warn_pct: float = 3.0
    watch_z: float = WATCH_SLOPE_Z

    @property
    def degradations(self) -> tuple[Trend, ...]:
        """Every slow degradation, figure by figure (the median first, then GPUs by index)."""
        return tuple(trend for figure in self.figures for trend in figure.degraded)

    @property
    def watches(self) -> tuple[Trend, ...]:
        """Every watch, figure by figure (the median first, then GPUs by index)."""
        return tuple(trend for figure in self.figures for trend in figure.watched)

    @property
    def verdict(self) -> str:
        """The worst verdict of any trend (``too_short`` where none was judged)."""
        found = {trend.verdict for figure in self.figures for trend in (figure.median, *figure.gpus)}
        return next((verdict for verdict in VERDICTS if verdict in found), "too_short")

    def to_dict(self) -> dict[str, Any]:
        """The trends as JSON (``history --json``'s ``trend``): the worst ``verdict``, ``degraded``,
        each degradation, ``watched``, each watch, the trends too short to fit (``unfitted``:
        figure, GPU, sweeps), each figure."""
        return {"threshold_pct": self.threshold_pct, "min_sweeps": self.min_sweeps, "slope_z": self.slope_z,
                "warn_pct": self.warn_pct, "watch_slope_z": self.watch_z, "watch_horizon_sweeps": WATCH_HORIZON,
                "min_fit_sweeps": MIN_FIT_SWEEPS, "verdict": self.verdict, "degraded": bool(self.degradations),
                "degradations": [trend.to_dict() for trend in self.degradations],
                "watched": bool(self.watches), "watches": [trend.to_dict() for trend in self.watches],
                "unfitted": [{"figure": trend.figure, "gpu": trend.gpu, "sweeps": len(trend.points)}
                             for figure in self.figures for trend in figure.unfitted],
                "figures": [{"figure": figure.figure, "unit": figure.unit, "median": figure.median.to_dict(),
                             "worst_gpu": None if figure.worst_gpu is None else figure.worst_gpu.to_dict(),
                             "gpus": [trend.to_dict() for trend in figure.gpus]} for figure in self.figures]}


def figure_name(figure: Mapping[str, Any]) -> str:
    """``gemm.tflops bf16``: a stored figure's metric and the parameters that name it."""
    params = figure.get("params") or {}
    return " ".join([figure["metric"], *(str(params[name]) for name in HISTORY_PARAMS if name in params)])


def host_trends(host: str, rows: Sequence[Mapping[str, Any]], repairs: Iterable[Repair], threshold_pct: float,
                min_sweeps: int, slope_z: float = 3.0, *, warn_pct: float | None = None,
                watch_z: float = WATCH_SLOPE_Z) -> HostTrends:
    """The trends of ``host``'s figures over ``rows`` (Store.host_history, newest first) given
    its ``repairs``; a trend is a slow degradation or a watch as the module says (``slope_z``,
    ``watch_z``: sigma; ``warn_pct``: the warn deficit, None: the shipped ``deficit_warn``)."""
    if warn_pct is None:
        warn_pct = default_thresholds().deficit_warn_pct
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
        judge = _Judge(name, units[name], known, _Rules(threshold_pct, min_sweeps, slope_z, warn_pct, watch_z))
        gpus = [judge.window(gpu, points) for gpu, points in sorted(series.get(name, {}).items())]
        # The GPUs' scatter around their own lines, pooled: the noise of one GPU's sweeps.
        pooled = pooled_noise([point.value for point in window.points] for window in gpus)
        figures.append(FigureTrend(name, units[name], judge.trend(judge.window(None, medians[name]), pooled),
                                   tuple(judge.trend(window, pooled) for window in gpus)))
    return HostTrends(host, threshold_pct, min_sweeps, slope_z, tuple(figures), warn_pct, watch_z)


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


@dataclass(frozen=True)
class _Window:
    """One trend's sweeps after the repair that covers it (None: no repair does)."""

    gpu: int | None
    points: tuple[TrendPoint, ...]
    repair: Repair | None


@dataclass(frozen=True)
class _Rules:
    """What judges a trend: the slow degradation's fall, sweeps and slope bar; the watch's warn
    deficit and slope bar."""

    threshold_pct: float
    min_sweeps: int
    slope_z: float
    warn_pct: float
    watch_z: float

    def verdict(self, fit: TrendFit | None, latest: float | None) -> str:
        """``fail``, ``watch``, ``none`` or ``too_short`` (see the module)."""
        if fit is None or latest is None or fit.sweeps < self.min_sweeps:
            return "too_short"
        if fit.change_pct is None or fit.slope >= 0:
            return "none"
        fallen = latest <= fit.first * (1 - LATEST_SHARE * self.threshold_pct / 100)
        if fallen and -fit.change_pct >= self.threshold_pct and fit.slope_z <= -student_bar(self.slope_z, fit.dof):
            return "fail"
        projection = project(fit, self.warn_pct)
        sliding = latest <= fit.first * (1 - LATEST_SHARE * self.warn_pct / 100)
        if sliding and projection is not None and projection.in_2_pct <= -self.warn_pct \
                and fit.slope_z <= -student_bar(self.watch_z, fit.dof):
            return "watch"
        return "none"


class _Judge:
    """Builds the trends of one figure: the window after the covering repair, the line and the verdict."""

    def __init__(self, figure: str, unit: str | None, repairs: Sequence[Repair], rules: _Rules) -> None:
        self.figure, self.unit, self.repairs, self.rules = figure, unit, repairs, rules

    def window(self, gpu: int | None, points: Sequence[TrendPoint]) -> _Window:
        covering = [repair for repair in self.repairs if repair.covers(gpu)]
        latest = max(covering, key=lambda r: (r.after_started_at, r.after_sweep_id, r.recorded_at), default=None)
        return _Window(gpu, tuple(p for p in points if latest is None or latest.precedes(p.sweep_id, p.started_at)),
                       latest)

    def trend(self, window: _Window, pooled: Noise) -> Trend:
        """The trend of ``window``, its noise ``pooled`` unless its own is far larger (fit_trend)."""
        fit = fit_trend([point.value for point in window.points], pooled)
        latest = window.points[-1].value if window.points else None
        return Trend(self.figure, self.unit, window.gpu, window.points, window.repair, fit,
                     self.rules.verdict(fit, latest), None if fit is None else project(fit, self.rules.warn_pct))


def degradation_words(host: str, trend: Trend, threshold_pct: float, slope_z: float) -> str:
    """The slow degradation in plain words, its verdict (``fail``) first: its slope a sweep, the
    fitted change and the sweeps it rests on, the noise that makes the slope real, the first and
    latest sweep."""
    fit = trend.fit
    assert fit is not None and fit.change_pct is not None  # a degradation has a line
    first, latest = trend.points[0], trend.points[-1]
    unit = f" {trend.unit}" if trend.unit else ""
    since = "" if trend.repair is None else f", since the repair of {trend.repair.describe()}"
    return (f"fail: slow degradation: {host}: {trend.describe()} falls {-(fit.slope_pct or 0.0):.1f} % a sweep "
            f"({-fit.slope:.4g}{unit}), a fitted {-fit.change_pct:.1f} % over the {fit.sweeps} sweeps it rests on "
            f"(threshold {threshold_pct:g} %), from {fit.first:.4g}{unit} (sweep {first.sweep_id}) to "
            f"{fit.latest:.4g}{unit} (sweep {latest.sweep_id}) on the fitted line; per-sweep noise "
            f"{fit.noise_pct or 0.0:.1f} %, so the slope is {-fit.slope_z:.1f} times its uncertainty "
            f"(real from {_bar_words(slope_z, fit.dof)}){since}")


def watch_words(host: str, trend: Trend, watch_z: float) -> str:
    """The watch in plain words: its slope a sweep and why it is real, where its fitted line is
    at the latest sweep, where it crosses the warn deficit, and where it will be one and two
    sweeps on."""
    fit, projection = trend.fit, trend.projection
    assert fit is not None and fit.change_pct is not None and projection is not None  # a watch has a line
    assert projection.crosses_at is not None and projection.sweeps_to_warn is not None  # and it falls
    first, latest = trend.points[0], trend.points[-1]
    unit = f" {trend.unit}" if trend.unit else ""
    since = "" if trend.repair is None else f", since the repair of {trend.repair.describe()}"
    ahead = projection.sweeps_to_warn
    crossing = (f"it crossed the warn line ({projection.warn_pct:g} % below) at sweep {projection.crosses_at + 1:.1f}"
                f" of {fit.sweeps}" if ahead <= 0 else
                f"it reaches the warn line ({projection.warn_pct:g} % below) {ahead:.1f} sweeps after the latest")
    return (f"watch: {host}: {trend.describe()} falls {-(fit.slope_pct or 0.0):.1f} % a sweep "
            f"({-fit.slope:.4g}{unit}) over {fit.sweeps} sweeps, {-fit.slope_z:.1f} times its uncertainty "
            f"(per-sweep noise {fit.noise_pct or 0.0:.1f} %; real from {_bar_words(watch_z, fit.dof)}); "
            f"on its fitted line from {fit.first:.4g}{unit} (sweep {first.sweep_id}) to {fit.latest:.4g}{unit} "
            f"(sweep {latest.sweep_id}), {-fit.change_pct:.1f} % below; {crossing}; in 1 sweep "
            f"{projection.in_1:.4g}{unit} ({-projection.in_1_pct:.1f} % below), in 2 sweeps "
            f"{projection.in_2:.4g}{unit} ({-projection.in_2_pct:.1f} % below){since}")


def _bar_words(slope_z: float, dof: int) -> str:
    """``3`` for a noise known (its floor), else the raised bar and why."""
    if dof <= 0:  # any estimated noise raises the bar (student_bar)
        return f"{slope_z:g}"
    return (f"{student_bar(slope_z, dof):.2f}: {slope_z:g} sigma, raised for a noise estimated from "
            f"{plural(dof, 'degree')} of freedom")


def unfitted_words(host: str, trends: HostTrends) -> list[str]:
    """A line naming the trends too short to fit where others of the host were fitted: they are
    not judged, and not passed."""
    short = [trend for figure in trends.figures for trend in figure.unfitted]
    if not short or not any(t.fit for figure in trends.figures for t in (figure.median, *figure.gpus)):
        return []
    named = "; ".join(f"{trend.describe()}: {len(trend.points)} sweep{'' if len(trend.points) == 1 else 's'}"
                      + ("" if trend.repair is None else f" since the repair of {trend.repair.describe()}")
                      for trend in short)
    return [f"not judged, too few sweeps to fit a trend (fewer than {MIN_FIT_SWEEPS}): {host}: {named}"]


def _change_pct(first: TrendPoint, other: TrendPoint) -> float | None:
    """``other`` against ``first`` in percent of it (None for a first figure of 0)."""
    return None if first.value == 0 else (other.value - first.value) / first.value * 100


def _point(point: TrendPoint) -> dict[str, Any]:
    return {"sweep_id": point.sweep_id, "started_at": point.started_at, "value": point.value}


# How many of the store's latest sweeps (the one being written among them) a sweep's own trends
# rest on: the windows bench/detection.py's history rows measure (3 to 6 sweeps).
SWEEP_TREND_SWEEPS = 6


def trend_findings(trends: HostTrends) -> list[Finding]:
    """The sweep's ``slow_degradation`` findings of one host: one per part (the host where the
    median of its GPUs slides, its GPUs then folded into it; else each sliding GPU), every one a
    ``watch`` — information, never a drain and never an exit status: a part past the line on its
    fitted trend (``fail`` in ``gpudiag history``) says so in its evidence, and this sweep's own
    measurement is what fails it. Its figures are the worst figure's fitted line: ``value`` the
    line at the latest sweep, ``reference`` at the first, ``deficit_pct`` the fitted fall."""
    flagged = [trend for figure in trends.figures for trend in (figure.median, *figure.gpus)
               if trend.verdict in ("fail", "watch")]
    node_wide = any(trend.gpu is None for trend in flagged)
    parts: dict[int | None, list[Trend]] = {}
    for trend in flagged:
        parts.setdefault(None if node_wide else trend.gpu, []).append(trend)
    return [_trend_finding(trends, gpu, found) for gpu, found in sorted(parts.items(), key=lambda item: item[0] or -1)]


def _trend_finding(trends: HostTrends, gpu: int | None, found: Sequence[Trend]) -> Finding:
    ordered = sorted(found, key=lambda trend: (trend.verdict != "fail", trend.gpu is not None,
                                               (trend.fit.change_pct or 0.0) if trend.fit else 0.0))
    worst = ordered[0]
    fit = worst.fit
    assert fit is not None and fit.change_pct is not None  # a flagged trend has a line
    words = [degradation_words(trends.host, trend, trends.threshold_pct, trends.slope_z) if trend.degraded
             else watch_words(trends.host, trend, trends.watch_z) for trend in ordered]
    part = f"{trends.host}:{gpu}" if gpu is not None else trends.host
    return Finding(kind=Kind.SLOW_DEGRADATION, severity=Severity.WATCH, host=trends.host, gpu=gpu,
                   evidence="; ".join(words), action=Action.WATCH,
                   action_detail=(f"re-check {part} at the next sweep (gpudiag history {trends.host} shows its "
                                  "trend) and act if it keeps falling; a watch drains nothing"),
                   basis=Basis.HISTORY, metric=worst.figure.split(" ")[0], value=round(fit.latest, 3),
                   reference=round(fit.first, 3), unit=worst.unit, reference_source="history",
                   deficit_pct=round(-fit.change_pct, 2))
