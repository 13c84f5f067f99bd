"""What slow links cost a job: a ring collective runs at the pace of its slowest link, so the
slowest measured pair (against its group's reference) bounds the job, and excluding hosts
recovers what the pairs left among the others allow. A network below its line rate as a whole,
and a slow switch link, cost it too, and excluding hosts recovers neither: ``with_network``
makes the job's slowdown the larger of what its GPUs and its network cost."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from .attribution import LinkGroup
from .groups import judged_gbps
from .rounds import LinkRun
from .schedule import Pair

UNIT = "Gbit/s"


def link_impact(run: LinkRun, exclude: Iterable[str]) -> dict[str, Any] | None:
    """``link_slowdown_pct`` (percent below the group's reference of the slowest pair's judged
    figure, the median of its runs),
    ``slowest_link`` (its ends, rail, figure and reference) and ``link_recovered_pct`` (what
    excluding ``exclude`` gives back); None when no compared pair was measured."""
    compared = {ref.group: ref for ref in run.attribution.references if ref.compared}
    references = {group: ref.level_gbps for group, ref in compared.items()}
    figures: dict[tuple[LinkGroup, Pair], list[float]] = defaultdict(list)
    for record in run.records:
        result = record.result
        if result.gbps is not None and result.group in references:
            figures[(result.group, result.pair)].append(result.gbps)
    ratios = sorted(((judged_gbps(values) / references[group], group, pair)
                     for (group, pair), values in figures.items()),
                    key=lambda item: (item[0], item[1].sort_key(), item[2]))
    if not ratios:
        return None
    left_out = set(exclude)
    slowest_ratio, group, pair = ratios[0]
    kept = [ratio for ratio, _, (a, b) in ratios if a not in left_out and b not in left_out]
    slowdown = max(0.0, 100 * (1 - slowest_ratio))
    remaining = max(0.0, 100 * (1 - kept[0])) if kept else 0.0
    mean = judged_gbps(figures[(group, pair)])
    return {"link_slowdown_pct": round(slowdown, 2), "link_recovered_pct": round(max(0.0, slowdown - remaining), 2),
            "slowest_link": {"a": pair[0], "b": pair[1], "backend": group.backend, "rail": group.rail,
                             "value": round(mean, 3), "reference": round(references[group], 3),
                             "reference_source": compared[group].reference_source, "unit": UNIT}}


def with_network(impact: Mapping[str, Any], run: LinkRun, fabric_slowdown_pct: float | None = None) -> dict[str, Any]:
    """``impact`` (the GPUs' estimate, with ``link_impact``'s fields) with the network counted:
    ``gpu_slowdown_pct`` (the GPUs' part as it was), ``network_slowdown_pct`` (the largest of the
    slowest pair's, each confirmed shift below the line rate, and ``fabric_slowdown_pct``: what a
    slow switch link costs the collectives that cross it), and ``slowdown_pct`` and
    ``recovered_pct`` the larger part's (a synchronous job waits for the slower of the two; None
    where the GPUs were not compared: the job's slowdown is then unknown, not the network's
    alone); unchanged when the network has no figure."""
    shifts = [100 * (s.reference_gbps - s.fleet_gbps) / s.reference_gbps
              for s in run.attribution.shifts if s.confirmed and s.baseline_gbps is None]
    parts = [value for value in (impact.get("link_slowdown_pct"), fabric_slowdown_pct, *shifts) if value is not None]
    if not parts:
        return dict(impact)
    network = max(parts)
    gpu = impact.get("slowdown_pct")
    # what excluding hosts leaves: of the GPUs' part, and of the network's (only the slowest pair's part recovers)
    gpu_left = None if gpu is None else gpu - (impact.get("recovered_pct") or 0.0)
    link_left = (impact.get("link_slowdown_pct") or 0.0) - (impact.get("link_recovered_pct") or 0.0)
    network_left = max([link_left, *(p for p in (fabric_slowdown_pct, *shifts) if p is not None)])
    both = {**impact, "gpu_slowdown_pct": gpu, "network_slowdown_pct": round(network, 2)}
    if gpu is None or gpu_left is None:
        return both
    slowdown, left = max(network, gpu), max(network_left, gpu_left)
    return {**both, "slowdown_pct": round(slowdown, 2), "recovered_pct": round(max(0.0, slowdown - left), 2)}
