"""What slow links cost a job: a ring collective runs at the pace of its slowest link, so the
slowest measured pair (against its group's reference) bounds the job, and excluding hosts
recovers what the pairs left among the others allow."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from .attribution import LinkGroup
from .rounds import LinkRun
from .schedule import Pair

UNIT = "Gbit/s"


def link_impact(run: LinkRun, exclude: Iterable[str]) -> dict[str, Any] | None:
    """``link_slowdown_pct`` (percent below the group's reference of the slowest pair's mean),
    ``slowest_link`` (its ends, rail, figure and reference) and ``link_recovered_pct`` (what
    excluding ``exclude`` gives back); None when no compared pair was measured."""
    compared = {ref.group: ref for ref in run.attribution.references if ref.compared}
    references = {group: ref.level_gbps for group, ref in compared.items()}
    figures: dict[tuple[LinkGroup, Pair], list[float]] = defaultdict(list)
    for record in run.records:
        result = record.result
        if result.gbps is not None and result.group in references:
            figures[(result.group, result.pair)].append(result.gbps)
    ratios = sorted(((statistics.fmean(values) / references[group], group, pair)
                     for (group, pair), values in figures.items()),
                    key=lambda item: (item[0], item[1].sort_key(), item[2]))
    if not ratios:
        return None
    left_out = set(exclude)
    slowest_ratio, group, pair = ratios[0]
    kept = [ratio for ratio, _, (a, b) in ratios if a not in left_out and b not in left_out]
    slowdown = max(0.0, 100 * (1 - slowest_ratio))
    remaining = max(0.0, 100 * (1 - kept[0])) if kept else 0.0
    mean = statistics.fmean(figures[(group, pair)])
    return {"link_slowdown_pct": round(slowdown, 2), "link_recovered_pct": round(max(0.0, slowdown - remaining), 2),
            "slowest_link": {"a": pair[0], "b": pair[1], "backend": group.backend, "rail": group.rail,
                             "value": round(mean, 3), "reference": round(references[group], 3),
                             "reference_source": compared[group].reference_source, "unit": UNIT}}
