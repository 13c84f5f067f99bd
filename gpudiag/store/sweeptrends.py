"""A sweep's own trend findings: each host it measured, judged over the store's latest sweeps
(gpudiag.store.trend), a part sliding toward the line (or past it) a ``watch``."""

from __future__ import annotations

from collections.abc import Iterable

from ..analysis.thresholds import Thresholds
from ..findings import Finding
from .repairs import repairs_by_host
from .store import Store
from .trend import SWEEP_TREND_SWEEPS, host_trends, trend_findings


def sweep_trend_findings(store: Store, sweep_id: str, hosts: Iterable[str], thresholds: Thresholds) -> list[Finding]:
    """The ``slow_degradation`` watches of ``hosts`` (those the sweep ``sweep_id`` measured, its
    figures already recorded) over the store's last SWEEP_TREND_SWEEPS sweeps; none for a host
    this sweep has no figure of, or with fewer sweeps than ``history_min_sweeps``. Raises
    StoreError where the store cannot be read."""
    wanted = list(hosts)
    histories = store.recent_figures(wanted, SWEEP_TREND_SWEEPS)
    repairs = repairs_by_host(store, histories)
    found: list[Finding] = []
    for host in wanted:
        rows = histories.get(host, [])
        if len(rows) < thresholds.history_min_sweeps or rows[0]["sweep_id"] != sweep_id:
            continue
        trends = host_trends(host, rows, repairs.get(host, []), thresholds.history_degradation_pct,
                             thresholds.history_min_sweeps, thresholds.history_slope_z,
                             warn_pct=thresholds.deficit_warn_pct)
        found += trend_findings(trends)
    return found
