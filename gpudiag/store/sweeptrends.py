"""A sweep's own trend findings: each host it measured, judged over the store's latest sweeps
(gpudiag.store.trend), a part sliding toward the line (or past it) a ``watch``."""

from __future__ import annotations

from collections.abc import Iterable

from ..analysis.thresholds import Thresholds
from ..findings import Finding
from .repairs import repairs_by_host
from .store import Store
from .trend import NoiseKey, fleet_ratio_noise, fleet_trends, noise_hosts
from .trendfit import Noise
from .trendwords import trend_findings

# How many of the store's latest sweeps (the one being written among them) a sweep's own trends
# rest on: the windows bench/detection.py's history rows measure (3 to 6 sweeps).
SWEEP_TREND_SWEEPS = 6


def sweep_trend_findings(store: Store, sweep_id: str, hosts: Iterable[str], thresholds: Thresholds) -> list[Finding]:
    """The ``slow_degradation`` watches of ``hosts`` (those the sweep ``sweep_id`` measured, its
    figures already recorded) over the store's last SWEEP_TREND_SWEEPS sweeps; none for a host
    this sweep has no figure of, or with fewer sweeps than ``history_min_sweeps``. A GPU's slide
    against its siblings is judged with their scatter pooled over the hosts judged
    (fleet_trends). Raises StoreError where the store cannot be read."""
    wanted = list(hosts)
    histories = store.recent_figures(wanted, SWEEP_TREND_SWEEPS)
    repairs = repairs_by_host(store, histories)
    judged = {host: rows for host in wanted if len(rows := histories.get(host, [])) >= thresholds.history_min_sweeps
              and rows[0]["sweep_id"] == sweep_id}
    trends = fleet_trends(judged, repairs, thresholds.history_degradation_pct, thresholds.history_min_sweeps,
                          thresholds.history_slope_z, warn_pct=thresholds.deficit_warn_pct)
    return [finding for host in judged for finding in trend_findings(trends[host])]


def store_fleet_noise(store: Store, sweeps: int) -> dict[NoiseKey, Noise]:
    """fleet_ratio_noise over every host of the store's last ``sweeps`` sweeps: what ``gpudiag
    history HOST`` judges a GPU's slide against its siblings with, as the sweep does. Raises
    StoreError where the store cannot be read."""
    names = store.recent_hosts(sweeps)
    chosen = noise_hosts(names)
    # Read host by host, a few hundred hosts take as long as a thousand in one read.
    histories = store.recent_figures(chosen if len(chosen) * 4 <= len(names) else None, sweeps)
    return fleet_ratio_noise(histories, repairs_by_host(store, histories))
