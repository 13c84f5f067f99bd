"""A small job's slow NIC seen across its rails: the rails of one backend and line rate are the same
hardware, so a host's pairs on all of them together show what one rail's few pairs cannot.

In a job of fewer than ``min_hosts`` hosts each rail has a handful of pairs, judged against the
line-rate floor and the job's own level (gpudiag.links.attribution). At 4 % link noise a NIC 8 %
slow sits around the floor: pair by pair it passed as often as not, and a 3-node job with such
a NIC exited 0. Averaged over eight rails, a pair's figure has a third of the noise.

- Each pair's figure is the mean over the rails it was measured on (each rail's figure the mean
  of its runs there); the noise of one rail's figure is pooled from how those figures scatter
  about their pair's mean (every pair measured on two rails or more; ``MIN_NOISE_DEGREES`` at
  least), so a rail that differs from the others makes the bar wider, never narrower.
- A pair runs at its slower end, so a host's *best* pair (its highest mean) is its NIC's rate
  whenever one partner is healthy. Each host is held against the median of the other hosts'
  bests (one lucky pair is the best of both its ends, and would set the bar alone).
- A host whose best falls ``deficit_pct`` below that median and ``robust_z`` sigmas of the
  difference (each mean's noise over its rails, at least ``mad_floor_pct`` of the level: the
  rails of one pair share its two hosts) below it is slow with every partner, by more than
  noise: a confirmed ``NicSuspect`` for the backend (no rail: all of them), when at least two
  hosts are not such (its known-good partners). Its rate is then the mean of its pairs with
  them (the best, a maximum, reads high), and its deficit against the median from that. Hosts
  slow alike (two NICs of three, every pair slow) lift nobody above them and name nobody here.

Only for families whose rails have no fleet level (a fleet judges each rail on its own), of
backends that the line rate judges (``floor_backends``), with two rails or more and three hosts
or more. A NIC slow on one rail only is left to that rail's judging: averaged with seven healthy
rails it would be diluted, never cleared.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..words import deficit_text, fixed, plural
from .groups import (
    UNIT,
    Family,
    GroupReference,
    LinkGroup,
    LinkThresholds,
    PairFigure,
    family,
    mean_gbps,
)
from .levels import MIN_NOISE_DEGREES, pooled_sd, rail_figures
from .linkerrors import listed
from .schedule import Pair

MIN_RAILS = 2
MIN_HOSTS = 3
# Hosts not slow that a slow NIC's verdict needs: slow with each healthy host there is, two at least.
MIN_GOOD = 2


@dataclass(frozen=True)
class SlowAcrossRails:
    """``host``'s NIC slow on every rail of ``backend`` at ``line_rate_gbps`` together: its best
    pair's mean ``gbps`` against the job's ``level_gbps``, ``deficit_pct`` and ``robust_z`` (sigma
    of the difference), its ``pairs`` (each the mean of its rails' figures) and the ``good``
    partners that reach the level with each other, over ``rails`` rails."""

    host: str
    backend: str
    line_rate_gbps: float | None
    gbps: float
    level_gbps: float
    deficit_pct: float
    robust_z: float
    pairs: tuple[PairFigure, ...]
    good: tuple[str, ...]
    rails: int

    @property
    def evidence(self) -> str:
        means = listed(f"{f.peer(self.host)} {fixed(f.gbps)}" for f in self.pairs)
        return (f"{self.host} slow with every partner across {plural(self.rails, 'rail')} of {self.backend}: its "
                f"pairs' means (each over its rails) {means} {UNIT} vs {fixed(self.level_gbps)} {UNIT}, the "
                f"median of the other hosts' best pairs (healthy: {listed(self.good)}); "
                f"{deficit_text(self.deficit_pct)}, {-self.robust_z:.1f} sigma of the rails' noise")


def across_rails(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]],
                 references: Mapping[LinkGroup, GroupReference],
                 thresholds: LinkThresholds) -> list[SlowAcrossRails]:
    """The hosts slow with every partner across the rails of a small job's family (see the
    module docstring), sorted by family and host."""
    families: dict[Family, list[Mapping[Pair, Sequence[float]]]] = defaultdict(list)
    for group, runs in figures.items():
        reference = references.get(group)
        if group.rail is None or group.backend not in thresholds.floor_backends or reference is None \
                or (reference.fleet_gbps is not None and not reference.job_level):
            continue
        families[family(group)].append(runs)
    found = []
    for (backend, line_rate), rails in sorted(families.items(), key=lambda item: (item[0][0], item[0][1] or 0.0)):
        if len(rails) >= MIN_RAILS:
            found += _slow_hosts(backend, line_rate, rails, thresholds)
    return found


def _slow_hosts(backend: str, line_rate: float | None, rails: Sequence[Mapping[Pair, Sequence[float]]],
                thresholds: LinkThresholds) -> list[SlowAcrossRails]:
    """The slow hosts of one family (see the module docstring)."""
    per_rail = rail_figures(rails)
    sigma, degrees = pooled_sd(per_rail.values())
    if degrees < MIN_NOISE_DEGREES:
        return []
    figures = {pair: PairFigure(pair[0], pair[1], mean_gbps(values), tuple(sorted(values)), True, True)
               for pair, values in sorted(per_rail.items())}
    mine: dict[str, list[PairFigure]] = defaultdict(list)
    for figure in figures.values():
        mine[figure.a].append(figure)
        mine[figure.b].append(figure)
    if len(mine) < MIN_HOSTS:
        return []
    best = {host: max(pairs, key=lambda f: (f.gbps, f.peer(host))) for host, pairs in mine.items()}
    floor = thresholds.mad_floor_pct / 100
    slow = []
    for host in sorted(mine):
        figure = best[host]
        others = [best[other] for other in mine if other != host]
        level = statistics.median(f.gbps for f in others)
        if level <= 0:  # the others measured nothing: no level to fall below
            continue
        rails_of_others = statistics.median(len(f.runs_gbps) for f in others)
        # each mean's noise over its rails, at least mad_floor of the level: rails of one pair share its hosts
        spread = math.hypot(max(sigma / math.sqrt(len(figure.runs_gbps)), floor * level),
                            max(sigma / math.sqrt(rails_of_others), floor * level))
        deficit, z = 100 * (level - figure.gbps) / level, (figure.gbps - level) / spread
        if deficit >= thresholds.deficit_pct and z <= thresholds.robust_z:
            slow.append((host, figure.gbps, level, deficit, z))
    good = tuple(sorted(set(mine) - {host for host, *_ in slow}))
    if len(good) < MIN_GOOD:
        return []
    found = []
    for host, gbps, level, deficit, z in slow:
        # its rate: the mean of its pairs with the healthy hosts (its best gated it, biased high by the max)
        with_good = [f.gbps for f in mine[host] if f.peer(host) in good]
        rate = mean_gbps(with_good) if with_good else gbps
        found.append(SlowAcrossRails(host, backend, line_rate, rate, level, max(deficit, 100 * (level - rate) / level),
                                     z, tuple(sorted(mine[host], key=lambda f: f.peer(host))), good, len(rails)))
    return found
