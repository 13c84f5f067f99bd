"""The straight lines under gpudiag.store.trend: a figure's sweeps as points, a robust line through
them (Theil–Sen) with its per-sweep noise pooled over a host's GPUs, the noise of a median of them,
and a GPU's slope against its siblings with its start held to their level. gpudiag.store.trend
judges these lines (slow degradation, watch) and says them in words."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.noisy import MEDIAN_EFFICIENCY

# A line needs three sweeps: two fit any line exactly and say nothing of the noise.
MIN_FIT_SWEEPS = 3
# The least per-sweep noise a trend is judged with (percent of its level): a series that repeats
# itself exactly (a figure the hardware pins) still has a slope that is finitely sure.
NOISE_FLOOR_PCT = 0.1
# How far a trend's own scatter may exceed its host's pooled one and still be the luck of a few
# sweeps (an estimate from 1 or 2 degrees of freedom, 3 or 4 sweeps, exceeds 2.5 times the truth
# about once in 80 or 500 series).
OWN_NOISE_TOLERANCE = 2.5
# The fewest siblings (the host's other GPUs measured in the same sweep) a GPU's figure is set
# against in every sweep of its window for a sibling slope (``SiblingSlope``).
MIN_SIBLINGS = 3
# How far a host's GPUs may scatter against their siblings beyond the fleet's (pooled over its hosts,
# the same figure) and still be judged with the fleet's scatter: from 16 degrees of freedom (8 GPUs,
# 4 sweeps) a host's own estimate exceeds 1.5 times the truth about once in 350 hosts. A host past
# it is judged by its own; one below the fleet's by the fleet's, which rests on far more sweeps.
HOST_NOISE_TOLERANCE = 1.5
# How many of its standard errors a GPU's freely fitted first level may sit from its siblings'
# (and their own spread) and still be held to it: one already off its siblings when its window
# began is judged on its own line alone.
START_Z = 2.0


# How much wider Theil–Sen's slope scatters than the least-squares slope over the same normal
# noise, by sweeps (60,000 simulated flat series each; from 9 sweeps on, about 1.065, tending to
# 1.047, the square root of its 0.912 efficiency). Judged with the least-squares error, a flat
# part's slope crossed the bar a quarter to a half more often than the bar says (at 2 % noise,
# 0.1-0.3 % of flat parts failed as a slow degradation over 4-6 sweeps).
THEIL_SEN_SPREAD = {3: 1.0, 4: 1.055, 5: 1.07, 6: 1.083, 7: 1.083, 8: 1.068}
THEIL_SEN_SPREAD_MANY = 1.065


def theil_sen_spread(sweeps: int) -> float:
    """``THEIL_SEN_SPREAD`` for a line of ``sweeps`` sweeps."""
    return THEIL_SEN_SPREAD.get(sweeps, THEIL_SEN_SPREAD_MANY if sweeps > 8 else 1.0)


@dataclass(frozen=True)
class TrendPoint:
    """One sweep's figure (in the trend's unit); ``runs``: how many runs it is the mean of (more
    than 1 where the sweep re-tested the figure: gpudiag.store.trendretest)."""

    sweep_id: str
    started_at: str
    value: float
    runs: int = 1


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
        """The slope over its uncertainty (noise / √Σ(x − x̄)², times ``theil_sen_spread``: the
        slope is Theil–Sen's, not the least squares'): below -3, a fall that noise alone makes
        about once in 700 lines."""
        spread = math.sqrt(sum((x - (self.sweeps - 1) / 2) ** 2 for x in range(self.sweeps)))
        return self.slope / (self.noise * theil_sen_spread(self.sweeps) / spread)

    def to_dict(self) -> dict[str, Any]:
        return {"sweeps": self.sweeps, "slope_per_sweep": self.slope, "slope_pct_per_sweep": self.slope_pct,
                "fitted_first": self.first, "fitted_latest": self.latest, "fitted_change_pct": self.change_pct,
                "noise": self.noise, "noise_pct": self.noise_pct, "noise_dof": self.dof, "slope_z": self.slope_z}


def theil_sen(values: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of the robust line through ``values`` at x = 0, 1, ...: the median of
    the pairwise slopes, and the median of value − slope × x. Raises ValueError for fewer than 2."""
    if len(values) < 2:
        raise ValueError("a line needs two values")
    slope = statistics.median((values[j] - values[i]) / (j - i)
                              for i in range(len(values)) for j in range(i + 1, len(values)))
    return slope, statistics.median(value - slope * x for x, value in enumerate(values))


def residual_squares(values: Sequence[float], runs: Sequence[int] | None = None) -> float:
    """The sum of squared distances of ``values`` (x = 0, 1, ...) from their least-squares line;
    with ``runs`` (how many runs each value is the mean of), the weighted line's, each square
    weighed by its runs: a per-run scatter, as a value of one run has."""
    weights = [float(weight) for weight in runs] if runs is not None else [1.0] * len(values)
    total = math.fsum(weights)
    middle = math.fsum(w * x for x, w in enumerate(weights)) / total
    mean = math.fsum(w * v for w, v in zip(weights, values, strict=True)) / total
    spread = math.fsum(w * (x - middle) ** 2 for x, w in enumerate(weights))
    slope = math.fsum(w * (x - middle) * (v - mean) for x, (w, v) in enumerate(zip(weights, values, strict=True)))
    slope = slope / spread if spread else 0.0
    return math.fsum(w * (v - mean - slope * (x - middle)) ** 2
                     for x, (w, v) in enumerate(zip(weights, values, strict=True)))


@dataclass(frozen=True)
class Noise:
    """A per-sweep noise (a standard deviation, the unit) and the degrees of freedom it rests on."""

    sigma: float
    dof: int


def pooled_noise(series: Iterable[Sequence[float]], runs: Iterable[Sequence[int] | None] | None = None) -> Noise:
    """The per-sweep noise of every series of at least MIN_FIT_SWEEPS values around its own
    least-squares line, pooled (squares over degrees of freedom); 0 with none. ``runs``: for each
    series, how many runs each value is the mean of (residual_squares; None: one each)."""
    squares, dof = 0.0, 0
    for values, weights in zip(series, runs, strict=False) if runs is not None else ((v, None) for v in series):
        if len(values) >= MIN_FIT_SWEEPS:
            squares += residual_squares(values, weights)
            dof += len(values) - 2
    return Noise(math.sqrt(squares / dof) if dof else 0.0, dof)


def fit_trend(values: Sequence[float], pooled: Noise | None = None, runs: Sequence[int] | None = None
              ) -> TrendFit | None:
    """The TrendFit of ``values`` (oldest first); None with fewer than MIN_FIT_SWEEPS values. Its
    noise is ``pooled`` (the host's GPUs': see the module), or its own where there is no pool
    or its own is more than OWN_NOISE_TOLERANCE times the pool's (``runs``: each value's, as
    residual_squares takes them)."""
    if len(values) < MIN_FIT_SWEEPS:
        return None
    slope, intercept = theil_sen(values)
    own = Noise(math.sqrt(residual_squares(values, runs) / (len(values) - 2)), len(values) - 2)
    noise = own if pooled is None or pooled.dof == 0 or own.sigma > OWN_NOISE_TOLERANCE * pooled.sigma else pooled
    floor = abs(intercept) * NOISE_FLOOR_PCT / 100
    return TrendFit(slope, intercept, intercept + slope * (len(values) - 1), max(noise.sigma, floor, 1e-12),
                    len(values), noise.dof if noise.sigma >= floor else 0)


@dataclass(frozen=True)
class SiblingSlope:
    """A GPU's figure against its siblings' over its window: in each sweep its figure over the
    median of the host's other GPUs', less 1 (``ratios``, a fraction; x the sweep's place). A
    GPU's own line cannot tell where it started, so a slide of 2 % a sweep over four sweeps at
    2 % noise is only 2.2 of its slope's standard errors: no bar finds it nineteen times in twenty
    and keeps flat GPUs quiet. Against its siblings, a GPU starts where they are, within what the
    host's GPUs differ by themselves (``spread``: the other GPUs' mean ratios' scatter beyond their
    noise). The slope is fitted with that start held to the siblings' level, as a prior of that
    spread (generalised least squares: the prior one more observation of the level at the first
    sweep, weighted noise² / spread²): with no such spread, a line through the siblings' level,
    3.4 standard errors for the same slide. A GPU whose free line starts more than ``START_Z`` of
    its standard error (and that spread) off its siblings is not held to them (``held`` False): a
    GPU slow before its window began is no slide. ``noise``: the per-sweep noise of the ratio
    (pooled over the host's GPUs as the trend's, its own where far wider) and its ``dof``."""

    ratios: tuple[tuple[int, float], ...]
    slope: float
    start: float
    z: float
    noise: float
    dof: int
    spread: float
    held: bool
    # The runs each ratio is the mean of (empty: one each); a re-tested sweep's weigh more.
    runs: tuple[int, ...] = ()

    @property
    def sweeps(self) -> int:
        return len(self.ratios)

    @property
    def latest(self) -> float:
        """The latest sweep's ratio (a fraction below 0: under its siblings)."""
        return self.ratios[-1][1]

    def at(self, x: float) -> float:
        """The fitted ratio at sweep place ``x``."""
        return self.start + self.slope * x

    def to_dict(self) -> dict[str, Any]:
        return {"sweeps": self.sweeps, "slope_pct_per_sweep": 100 * self.slope, "start_pct": 100 * self.start,
                "latest_pct": 100 * self.latest, "slope_z": self.z, "noise_pct": 100 * self.noise,
                "noise_dof": self.dof, "siblings_spread_pct": 100 * self.spread, "held_to_siblings": self.held,
                "ratios_pct": [[x + 1, 100 * ratio] for x, ratio in self.ratios],
                **({"runs": list(self.runs)} if self.runs else {})}


def sibling_ratios(windows: Sequence[tuple[int, Sequence[TrendPoint]]]) -> dict[int, tuple[tuple[int, float], ...]]:
    """Each GPU's ratio to its siblings in every sweep of its window (``windows``: each GPU's
    points; x the point's place in its window), for a GPU whose every sweep has at least
    MIN_SIBLINGS siblings measured at a positive median."""
    by_sweep: dict[str, dict[int, float]] = {}
    for gpu, points in windows:
        for point in points:
            by_sweep.setdefault(point.sweep_id, {})[gpu] = point.value
    found = {}
    for gpu, points in windows:
        ratios = []
        for x, point in enumerate(points):
            others = [value for other, value in by_sweep[point.sweep_id].items() if other != gpu]
            middle = statistics.median(others) if len(others) >= MIN_SIBLINGS else 0.0
            if middle <= 0:
                break
            ratios.append((x, point.value / middle - 1))
        else:
            if len(ratios) >= MIN_FIT_SWEEPS:
                found[gpu] = tuple(ratios)
    return found


def ratio_noise(ratios: Mapping[int, tuple[tuple[int, float], ...]],
                runs: Mapping[int, Sequence[int]] | None = None) -> Noise:
    """The per-sweep noise of a host's GPUs against their siblings (``ratios``: sibling_ratios),
    pooled over them (``runs``: as sibling_slopes takes them)."""
    return pooled_noise([[ratio for _, ratio in series] for series in ratios.values()],
                        [(runs or {}).get(gpu) for gpu in ratios])


def pooled_noises(noises: Iterable[Noise]) -> Noise:
    """Several noise estimates of one scatter pooled: their squares weighted by their degrees of
    freedom (0 with none)."""
    squares, dof = 0.0, 0
    for noise in noises:
        squares += noise.sigma ** 2 * noise.dof
        dof += noise.dof
    return Noise(math.sqrt(squares / dof) if dof else 0.0, dof)


def fleet_or_own(own: Noise, fleet: Noise | None) -> Noise:
    """The noise to judge a host's figure with: the ``fleet``'s, pooled over its hosts, where it
    rests on more degrees of freedom than the host's ``own`` and that is not past
    HOST_NOISE_TOLERANCE times it; else the host's own."""
    if fleet is not None and fleet.dof > own.dof and own.sigma <= HOST_NOISE_TOLERANCE * fleet.sigma:
        return fleet
    return own


def sibling_slopes(ratios: Mapping[int, tuple[tuple[int, float], ...]], fleet: Noise | None = None,
                   runs: Mapping[int, Sequence[int]] | None = None) -> dict[int, SiblingSlope]:
    """The SiblingSlope of every GPU of ``ratios`` (sibling_ratios), the noise pooled over them,
    or ``fleet``'s (the same figure's, pooled over the fleet's hosts) where that rests on more
    degrees of freedom and the host's own is not past HOST_NOISE_TOLERANCE times it. ``runs``:
    for a GPU, how many runs each of its ratios is the mean of (none given: one each); a ratio of
    k runs weighs k in the fit, its noise the per-run noise over √k."""
    pooled = ratio_noise(ratios, runs)
    if pooled.dof == 0:
        return {}
    pooled = fleet_or_own(pooled, fleet)
    means = {gpu: (math.fsum(r for _, r in series) / len(series), len(series)) for gpu, series in ratios.items()}
    slopes = {}
    for gpu, series in ratios.items():
        others = [mean ** 2 - pooled.sigma ** 2 / count for other, (mean, count) in means.items() if other != gpu]
        spread = math.sqrt(max(0.0, math.fsum(others) / len(others))) if others else math.inf
        weights = tuple((runs or {}).get(gpu) or ())
        counted = len(weights) == len(series) and any(weight != 1 for weight in weights)
        slopes[gpu] = _held_slope(series, pooled, spread, weights if counted else None)
    return slopes


def _held_slope(series: Sequence[tuple[int, float]], pooled: Noise, spread: float,
                weights: Sequence[int] | None = None) -> SiblingSlope:
    """``series``' slope with its start held to 0 within ``spread`` (see SiblingSlope), each
    ratio weighing its ``weights`` (the runs it is the mean of; None: one each)."""
    values = [ratio for _, ratio in series]
    own = Noise(math.sqrt(residual_squares(values, weights) / (len(values) - 2)), len(values) - 2)
    noise = own if own.sigma > OWN_NOISE_TOLERANCE * pooled.sigma else pooled
    sigma = max(noise.sigma, NOISE_FLOOR_PCT / 100)
    ws = [float(w) for w in weights] if weights is not None else [1.0] * len(series)
    xs = [x for x, _ in series]
    count, sx, sxx = math.fsum(ws), math.fsum(w * x for w, x in zip(ws, xs, strict=True)), \
        math.fsum(w * x * x for w, x in zip(ws, xs, strict=True))
    sr = math.fsum(w * r for w, r in zip(ws, values, strict=True))
    sxr = math.fsum(w * x * r for w, (x, r) in zip(ws, series, strict=True))
    # The free least-squares line: its start, and that start's standard error.
    free_d = count * sxx - sx * sx
    free_start = (sxx * sr - sx * sxr) / free_d
    start_se = sigma * math.sqrt(sxx / free_d)
    held = abs(free_start) <= START_Z * math.sqrt(start_se ** 2 + spread ** 2)
    weight = sigma ** 2 / max(spread, NOISE_FLOOR_PCT / 100) ** 2 if held else 0.0
    n = count + weight
    d = n * sxx - sx * sx
    slope = (n * sxr - sx * sr) / d
    start = (sxx * sr - sx * sxr) / d
    z = slope / (sigma * math.sqrt(n / d))
    return SiblingSlope(tuple(series), slope, start, z, sigma, noise.dof if noise.sigma >= NOISE_FLOOR_PCT / 100
                        else 0, spread, held, tuple(int(w) for w in ws) if weights is not None else ())


def median_noise(pooled: Noise, counts: Sequence[int]) -> Noise:
    """The per-sweep noise of the median of a host's GPUs, from their pooled own noise: a median
    of n scatters MEDIAN_EFFICIENCY / √n of one (``counts``: the GPUs each sweep's median rests on;
    their median n). Judged with one GPU's noise, a node losing 2 % a sweep over four sweeps at 2 %
    noise was watched 4 times in 20. Noise common to the node's GPUs in one sweep is not in it;
    a median scattering more than OWN_NOISE_TOLERANCE times this is judged by its own (fit_trend)."""
    gpus = statistics.median(counts) if counts else 1
    return Noise(pooled.sigma * min(1.0, MEDIAN_EFFICIENCY / math.sqrt(max(gpus, 1))), pooled.dof)
