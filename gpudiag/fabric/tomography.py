"""Tomography: the smallest set of fabric parts that explains the slow figures.

Each ``Observation`` is one figure and the parts it crossed: a traced stream (the switches of its
own path) or a pair (the parts its streams cross with ECMP: a part on a share w of its paths is
crossed by one of S streams with chance 1 − (1 − w)^S, and counts where that is at least one
half). Its ``log_ratio`` says how far it fell below the healthy centre (0: at it; log 0.8: 20 %
below), and ``z`` that in spreads of the measured noise.

``find_culprits`` is greedy. For every part still in play: the observations through it, the
sum of their z over the root of their count (a part that slows all its flows drives this far
down however noisy each one is), and the median of their log ratios (the part's effect: most
of its flows must be slow, by at least ``material`` — one noisy flow makes no culprit). A switch
(or a leaf's uplinks together) qualifies only where nearly all its flows are slow (at most
SWITCH_FINE_SHARE of them fine): two slow links of one spine make most of its flows slow, while
the flows between its other leaves stay fine. The part with the lowest z
wins; so do the parts whose observations are exactly its own (nothing tested tells them apart:
with two leaves, leaf1–spine1, spine1–leaf2 and spine1 itself) — a culprit names that set
rather than guess. Its observations then leave play, and the next culprit is sought among the
rest. A culprit needs slow observations from ``min_pairs`` pairs and ``min_hosts`` hosts at
least, so one bad pair, or one NIC, is never a fabric fault.

Pure: the same observations, in any order, give the same culprits.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import NamedTuple

from ..links.schedule import Pair
from .elements import LINK, SWITCH, UPLINKS, Element

# At most this many culprits in one group (a fabric with more broken parts at once is named by
# the first of them, and the rest found when those are fixed).
MAX_CULPRITS = 16
# Observations a part needs to be judged at all.
MIN_OBSERVATIONS = 3
# The most of a switch's flows that may be fine (not even half the material cut below) where the
# switch itself is the culprit: noise, not a part of it that works.
SWITCH_FINE_SHARE = 0.05


class Observation(NamedTuple):
    """One figure: the ``pair`` it belongs to (client first), how far below the centre it fell
    (``log_ratio``, natural log), that in spreads (``z``), the parts it crossed (``elements``)
    and the ``phase`` (screen, confirm) of the run that measured it. (A tuple: a sweep makes one
    for every traced stream.)"""

    pair: Pair
    log_ratio: float
    z: float
    elements: frozenset[Element]
    phase: str


@dataclass(frozen=True)
class Culprit:
    """A part (``elements``: one) or a set of parts nothing tested tells apart (several) that
    explains slow observations: ``log_effect`` (the median log ratio of its observations),
    ``z`` (their summed z over the root of their count), its ``observations`` and how many of
    them were ``slow`` (below the material cut), the ``pairs`` it saw and the ``slow_pairs``
    among them, and the ``hosts`` of those slow pairs."""

    elements: tuple[Element, ...]
    log_effect: float
    z: float
    observations: int
    slow: int
    pairs: tuple[Pair, ...]
    slow_pairs: tuple[Pair, ...]
    hosts: tuple[str, ...]

    @property
    def share_pct(self) -> float:
        """The share of its healthy rate its flows reach, in percent."""
        return 100 * math.exp(self.log_effect)

    @property
    def deficit_pct(self) -> float:
        return 100 - self.share_pct


def z_bar(parts: int, alpha: float = 0.001, least: float = 4.0) -> float:
    """The z a culprit must reach among ``parts`` parts: at least ``least``, and beyond what a
    chance ``alpha`` spread over every part allows (Bonferroni)."""
    return max(least, -NormalDist().inv_cdf(alpha / max(1, parts)))


def find_culprits(observations: Iterable[Observation], material: float, bar: float, *, min_pairs: int = 2,
                  min_hosts: int = 2, min_observations: int = MIN_OBSERVATIONS) -> list[Culprit]:
    """The culprits of ``observations`` (see the module): ``material`` the log ratio a part's
    median must reach (negative: log(0.95) for 5 %), ``bar`` the z (positive) it must fall
    below, each from ``min_observations`` at least, in the order found."""
    remaining = sorted(observations, key=_order)
    culprits: list[Culprit] = []
    while remaining and len(culprits) < MAX_CULPRITS:
        index = _index(remaining)
        # the z first: the median and the rest only for the parts it leaves (few, but for a culprit's)
        stats = {element: _stats(remaining, rows, material) for element, rows in index.items()
                 if len(rows) >= min_observations and _z(remaining, rows) <= -bar}
        eligible = [element for element, stat in stats.items()
                    if stat.median <= material
                    and _enough(remaining, index[element], material, min_pairs, min_hosts)
                    and (element.kind == LINK or stat.fine <= SWITCH_FINE_SHARE * stat.count)]
        if not eligible:
            break
        best = min(eligible, key=lambda e: (stats[e].z, _kind_rank(e), e))
        rows = index[best]
        tied = sorted(e for e, other in index.items() if other == rows)
        culprits.append(_culprit(tuple(tied), remaining, rows, stats[best], material))
        gone = set(rows)
        remaining = [row for i, row in enumerate(remaining) if i not in gone]
    return culprits


@dataclass(frozen=True)
class _Stat:
    count: int
    z: float
    median: float
    fine: int  # observations not even half the material cut below


def _order(row: Observation) -> tuple[object, ...]:
    # rows alike in all of these differ at most in their parts, which no figure depends on the order of
    return (row.pair, row.phase, row.log_ratio, row.z)


def _index(rows: Sequence[Observation]) -> dict[Element, tuple[int, ...]]:
    """Each part's rows, in order. Rows of one path share one set of parts: grouped by it first."""
    by_parts: dict[frozenset[Element], list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_parts[row.elements].append(i)
    index: dict[Element, list[int]] = defaultdict(list)
    for elements, found in by_parts.items():
        for element in elements:
            index[element].extend(found)
    return {element: tuple(sorted(found)) for element, found in index.items()}


def _z(rows: Sequence[Observation], found: Sequence[int]) -> float:
    return math.fsum(rows[i].z for i in found) / math.sqrt(len(found))


def _stats(rows: Sequence[Observation], found: Sequence[int], material: float) -> _Stat:
    z = _z(rows, found)
    fine = sum(1 for i in found if rows[i].log_ratio > material / 2)
    return _Stat(len(found), z, statistics.median(rows[i].log_ratio for i in found), fine)


def _enough(rows: Sequence[Observation], found: Sequence[int], material: float, min_pairs: int,
            min_hosts: int) -> bool:
    slow = [rows[i].pair for i in found if rows[i].log_ratio <= material]
    return len(set(slow)) >= min_pairs and len({host for pair in slow for host in pair}) >= min_hosts


def _kind_rank(element: Element) -> int:
    return {LINK: 0, UPLINKS: 1, SWITCH: 2}.get(element.kind, 3)


def _culprit(elements: tuple[Element, ...], rows: Sequence[Observation], found: Sequence[int], stat: _Stat,
             material: float) -> Culprit:
    pairs = sorted({rows[i].pair for i in found})
    slow_pairs = sorted({rows[i].pair for i in found if rows[i].log_ratio <= material})
    hosts = sorted({host for pair in slow_pairs for host in pair})
    slow = sum(1 for i in found if rows[i].log_ratio <= material)
    return Culprit(elements, stat.median, stat.z, stat.count, slow, tuple(pairs), tuple(slow_pairs), tuple(hosts))


def robust_centre(values: Sequence[float], floor: float) -> tuple[float, float]:
    """(median, 1.4826 × MAD, at least ``floor``) of ``values``; (0, floor) when there are none."""
    if not values:
        return 0.0, floor
    centre = statistics.median(values)
    spread = 1.4826 * statistics.median(abs(v - centre) for v in values)
    return centre, max(spread, floor)


__all__ = ["Culprit", "Observation", "find_culprits", "robust_centre", "z_bar", "LINK", "SWITCH", "UPLINKS"]
