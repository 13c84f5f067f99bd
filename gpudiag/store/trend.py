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
times its uncertainty (the noise / √Σ(x − x̄)², as a least-squares slope's, times how much
wider Theil–Sen's slope scatters: 5-8 % from 4 sweeps on, trendfit.THEIL_SEN_SPREAD) below 0 — where
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
itself at least ``LATEST_SHARE`` of ``warn_pct`` below that first figure. A GPU is also watched
when it slides away from its siblings (gpudiag.store.trendfit.SiblingSlope: its figure over the
median of the host's other GPUs', its start held to their level within what the host's GPUs differ
by themselves; a GPU off its siblings from its first sweep is not held): a bar
``SIBLING_WATCH_MARGIN`` higher (a host has one such test for every GPU and figure), the noise of
GPUs against their siblings pooled over the fleet's hosts where the host's own is not far wider
(``fleet_noise``, trendseries.fleet_ratio_noise: hundreds of degrees of freedom, where a host's own
16 raise a 3.5-sigma bar to 4.4), its latest sweep ``LATEST_SHARE`` of ``warn_pct`` under them, its
line ``warn_pct`` under them by ``WATCH_HORIZON`` sweeps (its words say "against the median of its
siblings"). Its own line cannot tell where a GPU started, and at 2 % noise lost a GPU sliding 2 % a
sweep over four sweeps 12 times in 20; a GPU with siblings is watched against them only (its own
line still judges the slow degradation, where its slope against its siblings is real at their bar
too: a flat GPU's own line past 3 sigma was mostly one whose first sweep was high by chance, and a
whole node's slide is its median's). The median of the host's GPUs is judged with the noise of a
median of them (trendfit.median_noise), not one GPU's: the GPUs' noise around their own lines
pooled over the fleet (FleetNoise.own) where the host's own is not far wider, its watch's bar
MEDIAN_WATCH_MARGIN higher. Its ``Projection`` says where the line crosses ``warn_pct`` and where
it will be one and two sweeps on. Every trend's ``verdict``: ``fail`` (a slow degradation),
``watch``, ``none`` (judged: neither), or ``too_short`` (fewer than ``min_sweeps`` sweeps, or no
line). What the watch's bar costs and buys is measured by bench/detection.py's history rows
(docs/sweep.md, "History and trends"): a lower bar finds a slide sooner and watches more flat
parts; the noise, the sweeps and the slope alone decide how soon a slide can be told from noise at
all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..analysis.collector import collector_paused
from ..analysis.tails import student_bar
from ..analysis.thresholds import default_thresholds
from .repairs import Repair
from .trendfit import (
    MIN_FIT_SWEEPS,
    Noise,
    SiblingSlope,
    TrendFit,
    TrendPoint,
    fit_trend,
    fleet_or_own,
    median_noise,
    sibling_slopes,
)
from .trendseries import NO_FLEET_NOISE, FigureSeries, FleetNoise, Window, sampled_fleet_noise, windowed

# The share of the threshold the latest sweep's own figure must fall below the fitted first: a
# figure back at its level is no degradation, however its earlier sweeps fell (a healthy GPU's
# memory bandwidth 1.5, 3.6 and 4.7 % low over three sweeps, then 1.3 %, fitted a 5.2 % fall).
LATEST_SHARE = 0.5
# A watch's slope bar (sigma, raised as the slow degradation's for a noise estimated from few degrees
# of freedom): below history_slope_z, since a watch is an early word and no verdict, yet high enough
# that a flat part is rarely watched (bench/detection.py --scenarios history: the rates at CV 0.5,
# 1 and 2 % over 3 to 6 sweeps, docs/sweep.md).
WATCH_SLOPE_Z = 2.5
# How much higher (sigma) the bar of a GPU's slide against its siblings is than ``watch_z``. A host
# has one such test for every GPU and figure (16 on 8 GPUs with GEMM and memory bandwidth), judged
# with the fleet's noise (fleet_ratio_noise): at the watch's own 2.5, 0.5-1 % of flat GPUs were
# watched, a flat GPU in every other 8-node sweep of 4-6 sweeps; at 3.5 about 0.05 %, while a GPU
# losing 2 % a sweep over 4 sweeps at 1 % noise (a slope 6.8 times its error) is still found
# (bench/detection.py --scenarios history).
SIBLING_WATCH_MARGIN = 1.0
# How much higher (sigma) the bar of a node's median's watch is than ``watch_z``, its noise the
# fleet's GPUs' own scatter pooled (FleetNoise.own) where the host's own is not far wider. At the
# watch's own 2.5, with the host's own noise (16 degrees of freedom over 4 sweeps), 0.3-0.4 % of
# flat medians were watched: a flat node in 6 of 20 32-node sweeps at 2 % noise, 2 at 3.0. A node
# losing 2 % a sweep over 4 sweeps at 2 % noise is a slope 5.1 times its error on first runs
# (watched in 40 of 40 fleets at 3.0, 38 at 3.5), its latest sweep re-tested where the sweep can
# (gpudiag.run.trendretest).
MEDIAN_WATCH_MARGIN = 0.5
# How many sweeps after the latest a watched part's fitted line reaches the warn deficit by.
WATCH_HORIZON = 2
# The verdicts of a trend, worst first.
VERDICTS = ("fail", "watch", "none", "too_short")
# _Rules.verdict's word for a watch its slope against its siblings made (a ``watch`` on the Trend).
SIBLINGS_WATCH = "watch:siblings"


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
    # The GPU's slope against its siblings (None: a node's median, or too few siblings), and
    # whether it, not the GPU's own line, made the watch.
    siblings: SiblingSlope | None = None
    by_siblings: bool = False

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
                "projection": None if self.projection is None else self.projection.to_dict(),
                "siblings": None if self.siblings is None else self.siblings.to_dict()}


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


def host_trends(host: str, rows: Sequence[Mapping[str, Any]], repairs: Iterable[Repair], threshold_pct: float,
                min_sweeps: int, slope_z: float = 3.0, *, warn_pct: float | None = None,
                watch_z: float = WATCH_SLOPE_Z, fleet_noise: FleetNoise | None = None) -> HostTrends:
    """The trends of ``host``'s figures over ``rows`` (Store.host_history, newest first) given
    its ``repairs``; a trend is a slow degradation or a watch as the module says (``slope_z``,
    ``watch_z``: sigma; ``warn_pct``: the warn deficit, None: the shipped ``deficit_warn``;
    ``fleet_noise``: per GPU model and figure, its GPUs' noise against their siblings and around
    their own lines pooled over the fleet, fleet_noise, None: the host's own alone)."""
    if warn_pct is None:
        warn_pct = default_thresholds().deficit_warn_pct
    rules = _Rules(threshold_pct, min_sweeps, slope_z, warn_pct, watch_z)
    return _judged(host, windowed(rows, list(repairs)), rules, fleet_noise or NO_FLEET_NOISE)


@collector_paused
def fleet_trends(histories: Mapping[str, Sequence[Mapping[str, Any]]], repairs: Mapping[str, Sequence[Repair]],
                 threshold_pct: float, min_sweeps: int, slope_z: float = 3.0, *, warn_pct: float | None = None,
                 watch_z: float = WATCH_SLOPE_Z) -> dict[str, HostTrends]:
    """host_trends of every host of ``histories`` (each its Store.host_history rows, newest
    first), their GPUs' noise pooled over the fleet (gpudiag.store.trendseries.fleet_noise)."""
    if warn_pct is None:
        warn_pct = default_thresholds().deficit_warn_pct
    rules = _Rules(threshold_pct, min_sweeps, slope_z, warn_pct, watch_z)
    fleet, sampled = sampled_fleet_noise(histories, repairs)
    return {host: _judged(host, sampled.get(host) or windowed(rows, repairs.get(host, ())), rules, fleet)
            for host, rows in histories.items()}


def _judged(host: str, figures: Mapping[str, FigureSeries], rules: _Rules, fleet: FleetNoise) -> HostTrends:
    """The HostTrends of ``host``'s windowed ``figures`` by ``rules``, with the ``fleet``'s noise."""
    trends = []
    for name, figure in figures.items():
        judge = _Judge(name, figure.unit, rules)
        # The GPUs' scatter around their own lines, pooled: the noise of one GPU's sweeps.
        pooled = figure.own_noise
        siblings = sibling_slopes(figure.ratios, fleet.ratios.get((figure.model, name)), figure.runs())
        # The median's: the fleet's where it rests on more and the host's own is not far wider.
        medians = median_noise(fleet_or_own(pooled, fleet.own.get((figure.model, name))), figure.counts)
        trends.append(FigureTrend(name, figure.unit, judge.trend(figure.median, medians),
                                  tuple(judge.trend(window, pooled, siblings.get(cast(int, window.gpu)))
                                        for window in figure.gpus)))
    return HostTrends(host, rules.threshold_pct, rules.min_sweeps, rules.slope_z, tuple(trends), rules.warn_pct,
                      rules.watch_z)


@dataclass(frozen=True)
class _Rules:
    """What judges a trend: the slow degradation's fall, sweeps and slope bar; the watch's warn
    deficit and slope bar."""

    threshold_pct: float
    min_sweeps: int
    slope_z: float
    warn_pct: float
    watch_z: float

    def verdict(self, fit: TrendFit | None, latest: float | None, siblings: SiblingSlope | None,
                gpu: int | None) -> str:
        """``fail``, ``watch``, ``none`` or ``too_short`` (see the module) of ``gpu``'s trend (None:
        the node's median)."""
        if fit is None or latest is None or fit.sweeps < self.min_sweeps:
            return "too_short"
        falling = fit.change_pct is not None and fit.slope < 0
        if falling and latest_below_first(fit, latest, self.threshold_pct) \
                and -fit.change_pct >= self.threshold_pct and fit.slope_z <= -student_bar(self.slope_z, fit.dof) \
                and (siblings is None or self.real_against_siblings(siblings)):
            return "fail"
        if siblings is not None:
            # A GPU with siblings is watched against them only, whichever way its own line runs:
            # its own line, which cannot tell where it started, found almost no slide its siblings
            # missed (2 of 40 at 2 % noise), and watched as many flat GPUs again (0.9 % of them,
            # where 0.5 % without it); and a GPU whose first sweep drew low has its own line flat
            # or rising while it falls 4.7 of its errors away from its siblings.
            return SIBLINGS_WATCH if self.sliding_from_siblings(siblings) else "none"
        if not falling:
            return "none"
        projection = project(fit, self.warn_pct)
        if latest_below_first(fit, latest, self.warn_pct) and projection is not None \
                and projection.in_2_pct <= -self.warn_pct \
                and fit.slope_z <= -student_bar(own_watch_z(self.watch_z, gpu), fit.dof):
            return "watch"
        return "none"

    def real_against_siblings(self, siblings: SiblingSlope) -> bool:
        """Whether a GPU's slope against its siblings is real at ``watch_z`` + SIBLING_WATCH_MARGIN
        (the Student bar of its noise's degrees of freedom)."""
        return siblings.z <= -student_bar(self.watch_z + SIBLING_WATCH_MARGIN, siblings.dof)

    def sliding_from_siblings(self, siblings: SiblingSlope) -> bool:
        """A GPU sliding away from its siblings (``SiblingSlope``): over ``min_sweeps`` or more,
        its slope real at ``watch_z`` + SIBLING_WATCH_MARGIN (the Student bar of its noise's degrees
        of freedom), its latest sweep at least ``LATEST_SHARE`` of ``warn_pct`` under its siblings,
        and its line ``warn_pct`` under theirs by ``WATCH_HORIZON`` sweeps after the latest."""
        horizon = siblings.ratios[-1][0] + WATCH_HORIZON
        return (siblings.sweeps >= self.min_sweeps and self.real_against_siblings(siblings)
                and siblings.latest <= -LATEST_SHARE * self.warn_pct / 100
                and siblings.at(horizon) <= -self.warn_pct / 100)


def latest_below_first(fit: TrendFit, latest: float, pct: float) -> bool:
    """Whether a trend's ``latest`` figure is at least LATEST_SHARE of ``pct`` percent under its
    fitted first."""
    return latest <= fit.first * (1 - LATEST_SHARE * pct / 100)


def own_watch_z(watch_z: float, gpu: int | None) -> float:
    """The bar (sigma) of a watch on a trend's own line: ``watch_z``, MEDIAN_WATCH_MARGIN higher
    for a node's median (``gpu`` None)."""
    return watch_z + (MEDIAN_WATCH_MARGIN if gpu is None else 0.0)


class _Judge:
    """Judges the trends of one figure: the line and the verdict."""

    def __init__(self, figure: str, unit: str | None, rules: _Rules) -> None:
        self.figure, self.unit, self.rules = figure, unit, rules

    def trend(self, window: Window, pooled: Noise, siblings: SiblingSlope | None = None) -> Trend:
        """The trend of ``window``, its noise ``pooled`` unless its own is far larger (fit_trend),
        and a GPU's slope against its ``siblings``."""
        fit = fit_trend([point.value for point in window.points], pooled, [point.runs for point in window.points])
        latest = window.points[-1].value if window.points else None
        verdict = self.rules.verdict(fit, latest, siblings, window.gpu)
        return Trend(self.figure, self.unit, window.gpu, window.points, window.repair, fit,
                     "watch" if verdict == SIBLINGS_WATCH else verdict,
                     None if fit is None else project(fit, self.rules.warn_pct), siblings,
                     by_siblings=verdict == SIBLINGS_WATCH)


def _change_pct(first: TrendPoint, other: TrendPoint) -> float | None:
    """``other`` against ``first`` in percent of it (None for a first figure of 0)."""
    return None if first.value == 0 else (other.value - first.value) / first.value * 100


def _point(point: TrendPoint) -> dict[str, Any]:
    return {"sweep_id": point.sweep_id, "started_at": point.started_at, "value": point.value}
