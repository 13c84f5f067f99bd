"""A host's trends (gpudiag.store.trend) in plain words, and as a sweep's own findings: each
slow degradation and watch said with its slope, its fitted line, the noise that makes it real and
where the line goes; each flagged part one ``slow_degradation`` finding of severity ``watch``."""

from __future__ import annotations

from collections.abc import Sequence

from ..analysis.tails import student_bar
from ..findings import Action, Basis, Finding, Kind, Severity
from ..words import plural
from .trend import MIN_FIT_SWEEPS, SIBLING_WATCH_MARGIN, HostTrends, Trend, own_watch_z
from .trendfit import SiblingSlope


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
    sweeps on (against its siblings where they made it)."""
    if trend.by_siblings and trend.siblings is not None:
        return _sibling_watch_words(host, trend, trend.siblings, watch_z)
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
            f"(per-sweep noise {fit.noise_pct or 0.0:.1f} %; real from "
            f"{_bar_words(own_watch_z(watch_z, trend.gpu), fit.dof)}); "
            f"on its fitted line from {fit.first:.4g}{unit} (sweep {first.sweep_id}) to {fit.latest:.4g}{unit} "
            f"(sweep {latest.sweep_id}), {-fit.change_pct:.1f} % below; {crossing}; in 1 sweep "
            f"{projection.in_1:.4g}{unit} ({-projection.in_1_pct:.1f} % below), in 2 sweeps "
            f"{projection.in_2:.4g}{unit} ({-projection.in_2_pct:.1f} % below){since}")


def _sibling_watch_words(host: str, trend: Trend, siblings: SiblingSlope, watch_z: float) -> str:
    """A watch its siblings made, in plain words: how far under its siblings it slides a sweep and
    why that is real, where it is now, and where its line will be one and two sweeps on."""
    last = siblings.ratios[-1][0]
    held = (f"its start held to its siblings' level within {100 * siblings.spread:.1f} %, what the host's GPUs "
            "differ by themselves" if siblings.held else "fitted freely")
    return (f"watch: {host}: {trend.describe()} falls {-100 * siblings.slope:.1f} % a sweep against the median of "
            f"its siblings over {siblings.sweeps} sweeps ({held}), {-siblings.z:.1f} times its uncertainty "
            f"(per-sweep noise {100 * siblings.noise:.1f} %; real from "
            f"{_bar_words(watch_z + SIBLING_WATCH_MARGIN, siblings.dof)}); "
            f"{-100 * siblings.latest:.1f} % under its siblings at the latest sweep"
            + (f" (the mean of {siblings.runs[-1]} re-test runs)" if siblings.runs and siblings.runs[-1] > 1 else "")
            + ", on its line "
            f"{-100 * siblings.at(last + 1):.1f} % under in 1 sweep and {-100 * siblings.at(last + 2):.1f} % in 2 "
            f"(the warn line: {trend.projection.warn_pct if trend.projection else 0:g} %)"
            + ("" if trend.repair is None else f", since the repair of {trend.repair.describe()}"))


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
    words = [degradation_words(trends.host, trend, trends.threshold_pct, trends.slope_z) if trend.degraded
             else watch_words(trends.host, trend, trends.watch_z) for trend in ordered]
    part = f"{trends.host}:{gpu}" if gpu is not None else trends.host
    value, reference, source, deficit = _figures(worst)
    return Finding(kind=Kind.SLOW_DEGRADATION, severity=Severity.WATCH, host=trends.host, gpu=gpu,
                   evidence="; ".join(words), action=Action.WATCH,
                   action_detail=(f"re-check {part} at the next sweep (gpudiag history {trends.host} shows its "
                                  "trend) and act if it keeps falling; a watch drains nothing"),
                   basis=Basis.HISTORY, metric=worst.figure.split(" ")[0], value=round(value, 3),
                   reference=round(reference, 3), unit=worst.unit, reference_source=source,
                   deficit_pct=round(deficit, 2))


def _figures(trend: Trend) -> tuple[float, float, str, float]:
    """A flagged trend's value, reference, its source and the deficit, from the same figures: for
    a watch its siblings made, the latest sweep's figure, its siblings' median then, and how far
    under them (its own line may run flat or rise where its first sweep drew low); else its fitted
    line at the latest sweep and at the first, and the fitted fall."""
    siblings = trend.siblings
    if trend.by_siblings and not trend.degraded and siblings is not None and trend.points:
        latest = trend.points[-1].value
        return latest, latest / (1 + siblings.latest), "siblings", -100 * siblings.latest
    fit = trend.fit
    assert fit is not None and fit.change_pct is not None  # a flagged trend has a line
    return fit.latest, fit.first, "history", -fit.change_pct
