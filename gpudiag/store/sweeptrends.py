"""A sweep's own trend findings: each host it measured, judged over the store's latest sweeps
(gpudiag.store.trend), a part sliding toward the line (or past it) a ``watch``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..analysis.thresholds import Thresholds
from ..findings import Finding
from .repairs import repairs_by_host
from .store import Store
from .trend import LATEST_SHARE, HostTrends, Trend, fleet_trends, latest_below_first
from .trendseries import FleetNoise, fleet_noise, noise_hosts
from .trendwords import trend_findings

# How far (standard errors of its slope) a GPU slides against its siblings before its sweep
# re-tests it (trend_candidates): a watch needs WATCH_SLOPE_Z + SIBLING_WATCH_MARGIN (3.5). A GPU
# losing 2 % a sweep over 4 sweeps at 2 % noise is 3.4 of them on its first runs, watched in 6 of 20
# fleets; its latest sweep re-tested in 3 runs weighs three. Screened at 2, it was watched in 37 of
# 40 8-node fleets and 33 of 40 16-node ones: the misses were mostly never screened. At 1, 39 and
# 37 of 40, and flat fleets no more watched (7 of 60 16-node fleets with a watch, 6 at 2): a flat
# GPU's re-test replaces the low run that chose it. The bound (trendretest) keeps its cost.
RETEST_SLIDE_Z = 1.0
# How many of the store's latest sweeps (the one being written among them) a sweep's own trends
# rest on: the windows bench/detection.py's history rows measure (3 to 6 sweeps).
SWEEP_TREND_SWEEPS = 6


def sweep_trend_findings(trends: Mapping[str, HostTrends]) -> list[Finding]:
    """The ``slow_degradation`` watches of a sweep's hosts' ``trends`` (sweep_trends)."""
    return [finding for host_trends in trends.values() for finding in trend_findings(host_trends)]


@dataclass(frozen=True)
class SlideToRetest:
    """A GPU whose figure slides against its siblings, or a node's median that slides, far enough
    that its sweep re-tests it (trend_candidates): the host, the probe to run again, the GPU
    (None: the node's median), the figure's name and the slope's z (against the siblings for a
    GPU, on its own line for the median)."""

    host: str
    probe: str
    gpu: int | None
    figure: str
    z: float


def trend_candidates(trends: Mapping[str, HostTrends], thresholds: Thresholds) -> list[SlideToRetest]:
    """The GPUs of a sweep's hosts' ``trends`` (sweep_trends, its first pass the latest sweep)
    whose slide against their siblings is at least RETEST_SLIDE_Z of its standard errors and whose
    latest sweep is at least LATEST_SHARE of ``deficit_warn`` under them, and the node medians
    whose own line falls as far with their latest sweep as far under their fitted first: a watch
    that one run cannot settle either way. Steepest first."""
    found = []
    for host, host_trends in trends.items():
        for figure in host_trends.figures:
            probe = figure.figure.split(".", 1)[0]
            for trend in figure.gpus:
                siblings = trend.siblings
                if (trend.gpu is not None and siblings is not None and siblings.z <= -RETEST_SLIDE_Z
                        and -100 * siblings.latest >= LATEST_SHARE * thresholds.deficit_warn_pct):
                    found.append(SlideToRetest(host, probe, trend.gpu, figure.figure, siblings.z))
            if (z := _median_slide(figure.median, thresholds)) is not None:
                found.append(SlideToRetest(host, probe, None, figure.figure, z))
    return sorted(found, key=lambda slide: (slide.z, slide.host, slide.figure, -1 if slide.gpu is None else slide.gpu))


def _median_slide(median: Trend, thresholds: Thresholds) -> float | None:
    """The slope's z of a node's median whose own line falls at least RETEST_SLIDE_Z of its
    standard errors, its latest sweep at least LATEST_SHARE of ``deficit_warn`` under its fitted
    first (None: not so)."""
    fit = median.fit
    if fit is None or not median.points or fit.slope_z > -RETEST_SLIDE_Z:
        return None
    return fit.slope_z if latest_below_first(fit, median.points[-1].value, thresholds.deficit_warn_pct) else None


def sweep_trends(store: Store, sweep_id: str, hosts: Iterable[str], thresholds: Thresholds) -> dict[str, HostTrends]:
    """The trends of ``hosts`` (those the sweep ``sweep_id`` measured, its figures already
    recorded) over the store's last SWEEP_TREND_SWEEPS sweeps; none for a host this sweep has no
    figure of, or with fewer sweeps than ``history_min_sweeps``. A GPU's slide against its
    siblings is judged with their scatter pooled over the hosts judged (fleet_trends), and with the
    sweep's re-test of it where it had one (gpudiag.store.retests). Raises StoreError where the
    store cannot be read."""
    wanted = list(hosts)
    histories = store.recent_figures(wanted, SWEEP_TREND_SWEEPS)
    repairs = repairs_by_host(store, histories)
    judged = {host: rows for host in wanted if len(rows := histories.get(host, [])) >= thresholds.history_min_sweeps
              and rows[0]["sweep_id"] == sweep_id}
    return fleet_trends(judged, repairs, thresholds.history_degradation_pct, thresholds.history_min_sweeps,
                        thresholds.history_slope_z, warn_pct=thresholds.deficit_warn_pct)


def store_fleet_noise(store: Store, sweeps: int) -> FleetNoise:
    """fleet_noise over every host of the store's last ``sweeps`` sweeps: what ``gpudiag
    history HOST`` judges a GPU's slide against its siblings with, as the sweep does. Raises
    StoreError where the store cannot be read."""
    names = store.recent_hosts(sweeps)
    chosen = noise_hosts(names)
    # Read host by host, a few hundred hosts take as long as a thousand in one read.
    histories = store.recent_figures(chosen if len(chosen) * 4 <= len(names) else None, sweeps)
    return fleet_noise(histories, repairs_by_host(store, histories))
