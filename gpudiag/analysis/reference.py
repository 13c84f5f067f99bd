"""References: what a healthy result of one baseline key measures, from three sources.

- ``fleet``: the live fleet's healthy level, when ``min_peers`` distinct *hosts* have the key
  (two 8-GPU nodes are two peers, not sixteen). Fail-slows only ever pull values down, so the
  level is found from the top: the densest 40 % of the values (the shortest window holding
  them) locates the healthy cluster, the values above it give the spread, values far below it
  are set aside, and the median and MAD of the rest are the level and spread. A third of the
  fleet running slow neither drags the level down nor inflates the spread. The spread that sets
  values aside is at least the typical one of the key's metric (``typical_spreads``, for a key
  of fewer than a thousand values: gpudiag.analysis.suspects.references): a few
  dozen values (a GPU pair's key, one value a host) can crowd at the top by chance, with a
  tight spread above them, and then the healthy values below were set aside too and the level
  came out a spread high (of 2,000 healthy 64-value keys at 3 % noise, 3.7 % sat more than half
  a spread high, up to 1.1; set aside by the typical spread, 0.1 %, up to 0.5, as a median).
  Each *host* weighs
  once, whatever it prints: a value weighs 1 / (its host's values of the key), and the window,
  medians and MAD are weighted (where every host has as many values, the weights are equal and
  these are the plain ones) — a node printing a hundred values cannot outvote the fleet. A key
  of fewer than ``SMALL_FLEET_HOSTS`` hosts (a small job, which is its own fleet:
  gpudiag.analysis.thresholds.small_fleet_thresholds) has too few values for a window to find a
  cluster by: its level is the median of its hosts' medians (``small_fleet_reference``).
- ``baseline``: a stored baseline's median and MAD for the key (same model, driver, parameters).
- ``sku``: the per-SKU figure for the probe, metric and shape, with a spread of ``sku_spread``.
- ``siblings``: the other GPUs of the same node and key (gpudiag.analysis.siblings), which share
  its host, driver, cooling and power: a GPU 8 % slower than its seven siblings is found in a
  1-node job with no baseline, and on a starved host whose every GPU is slow.

A result is judged against every reference it has, so a regression most of the fleet shares is
seen against the baseline or the SKU figure even though the fleet median moved with it.

Noise: a spread is never tighter than what the key's measurements show. The baseline's and the
SKU's spreads are at least the live fleet's (a fleet noisier today than when its baseline was
stored, or than the SKU's fixed spread assumes, must not flag its own noise), and every
reference's spread, judging one host's result, is at least that host's samples' CV
(``widened``): a noisy metric needs a larger deficit. And a key's spread is at least the median
relative fleet spread of its metric's keys (``pool_spreads``): a node's 56 P2P pairs are 56 keys
of one noise, and one key's MAD from a few dozen hosts can come out a third too tight by chance.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import operator
import statistics
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .tails import spread_dof, student_bar
from .thresholds import Thresholds

MAD_TO_SIGMA = 1.4826
# The median of |x - mean| over the upper half of a normal sample, in sigmas.
UPPER_HALF_MEDIAN_SIGMAS = 0.6745
# The densest window holds this share of the values (less than half: it must fit in the
# healthy cluster even when nearly half the fleet is slow).
DENSE_SHARE = 0.4
# Of the windows at most this much wider than the shortest, the highest locates the healthy
# cluster: when the fleet splits in two, the faster half is the healthy one.
DENSE_WIDTH_TOLERANCE = 1.5
# Values this many sigmas below the healthy cluster are set aside before the final median/MAD.
TRIM_SIGMAS = 4.0
# A key fewer hosts measure has its level from their medians (small_fleet_reference): too few
# values for a densest window to find a cluster by.
SMALL_FLEET_HOSTS = 8
# The fewest values such a key's level rests on: a level from a handful (a GPU pair's key, one
# value a host: a 4-node job's P2P keys) is off by half a spread, and named healthy pairs.
SMALL_FLEET_MIN_VALUES = 12
# A measured spread of fewer degrees of freedom (a MAD of fewer than 28 values: a baseline stored
# from one or two nodes) rests on hardly more than a node's own siblings, who judge beside it.
FEW_SPREAD_DOF = 10
FLEET, BASELINE, SKU, SIBLINGS = "fleet", "baseline", "sku", "siblings"
SOURCE_ORDER = (FLEET, BASELINE, SKU, SIBLINGS)


@dataclass(frozen=True)
class Reference:
    """The expected value of a key (in the key's unit), its spread (a robust sigma, same unit),
    where it came from, and how many hosts (fleet) or measurements (baseline) it rests on.
    ``fleet_below``: the fleet's own level already falls below this reference (a shift the
    whole fleet shares, established on hundreds of values), so a value's deficit alone decides
    and no single value needs to stand out against the spread."""

    value: float
    spread: float
    source: str
    peers: int
    fleet_below: bool = False
    # How many values the level was found from (fleet: each host's weighing as one; baseline: its
    # measurements), for the level's own uncertainty (noisy.mean_spread); 0: a fixed figure (SKU).
    level_values: float = 0.0
    # The degrees of freedom its spread rests on where they are few enough to matter (a baseline's
    # MAD of its stored values: tails.spread_dof); 0: a spread of many values, or a fixed one.
    spread_dof: int = 0

    def deficit_pct(self, value: float) -> float:
        """How far ``value`` falls below this reference, in percent (negative: above it)."""
        return 100 * (self.value - value) / self.value

    def robust_z(self, value: float) -> float:
        """``value``'s distance from this reference in robust sigmas (negative: below)."""
        return (value - self.value) / self.spread

    def flags(self, value: float, thresholds: Thresholds) -> bool:
        """True when ``value`` is both far (robust z) and materially (deficit) below."""
        material = self.deficit_pct(value) >= thresholds.deficit_warn_pct
        return material and self.far_below(self.robust_z(value), thresholds)

    def far_below(self, robust_z: float, thresholds: Thresholds) -> bool:
        """Whether ``robust_z`` is far enough below (always, when the fleet's level is below)."""
        return self.fleet_below or robust_z <= self.bar(thresholds.robust_z)

    def bar(self, z: float) -> float:
        """The z a value must reach below this reference for a normal tail beyond ``z``: further
        where its spread rests on few values (the Student bar of ``spread_dof``)."""
        return math.copysign(student_bar(abs(z), self.spread_dof), z)

    def widened(self, noise: float) -> Reference:
        """This reference with a spread of at least ``noise`` (a fraction of its value, e.g. the
        samples' CV of the result judged): a result cannot be judged finer than it was measured."""
        floor = abs(self.value) * noise
        return self if floor <= self.spread else dataclasses.replace(self, spread=floor, spread_dof=0)

    def rests_on_many(self) -> bool:
        """Whether this is a measured level (fleet, baseline) whose spread rests on far more values
        than a node's siblings: not a baseline stored from a node or two (``FEW_SPREAD_DOF``)."""
        return self.source in (FLEET, BASELINE) and not 0 < self.spread_dof < FEW_SPREAD_DOF


@dataclass(frozen=True)
class KeyReferences:
    """Every reference one key has (at least one), in the order they are preferred."""

    references: tuple[Reference, ...]
    # The highest value any of them flags (a value above it is fine: most are, so most cost one
    # comparison). Derived from ``references`` and the thresholds by key_references.
    cutoff: float = math.inf

    def flagging(self, value: float, thresholds: Thresholds, noise: float = 0.0) -> Reference | None:
        """The first reference (fleet, baseline, SKU) that flags ``value``, or None; each judged
        with a spread of at least ``noise`` (a fraction of its value: the result's samples' CV)."""
        if value > self.cutoff:
            return None
        widened = (ref.widened(noise) for ref in self.references)
        return next((ref for ref in widened if ref.flags(value, thresholds)), None)

    def measured_spread(self) -> float:
        """The widest spread of the measured references (fleet, baseline; not the SKU's fixed
        one), 0 when there is none: what healthy GPUs of this key scatter by."""
        return max((ref.spread for ref in self.references if ref.source in (FLEET, BASELINE)), default=0.0)

    def get(self, source: str) -> Reference | None:
        return next((ref for ref in self.references if ref.source == source), None)

    def expected(self) -> Reference:
        """The one reference a job's pace is measured against: the fleet's level, unless the
        fleet's level itself falls below the baseline or the SKU figure (a shared regression);
        then that one; without a fleet, the baseline, else the SKU figure."""
        fleet = self.get(FLEET)
        below = next((ref for ref in self.references if ref.fleet_below), None)
        return below or fleet or self.references[0]


def key_references(values: Sequence[float], hosts: int, stored: object | None, figure: float | None,
                   thresholds: Thresholds, weights: Sequence[float] | None = None,
                   by_host: Sequence[Sequence[float]] | None = None, trim_spread: float = 0.0) -> KeyReferences | None:
    """The references of one key: ``values`` are its measurements from ``hosts`` distinct hosts
    (``weights``: each value's, 1 / its host's count of values; None: all equal); ``stored`` a
    baseline entry (``median``, ``mad``, ``count``) or None; ``figure`` the SKU figure or None;
    ``trim_spread``: the least spread (a fraction of the level) its fleet level sets values aside
    by (fleet_reference). None when the key has no reference at all."""
    found: list[Reference] = []
    fleet_level = _fleet_level(values, hosts, thresholds, weights, by_host, trim_spread)
    if fleet_level is not None:
        found.append(fleet_level)
    if stored is not None:
        median = float(stored.median)  # type: ignore[attr-defined]
        mad = float(stored.mad)  # type: ignore[attr-defined]
        count = int(stored.count)  # type: ignore[attr-defined]
        found.append(Reference(median, spread(MAD_TO_SIGMA * mad, median, thresholds), BASELINE, count,
                               level_values=count, spread_dof=spread_dof(count)))
    if figure is not None and figure > 0:
        found.append(Reference(figure, max(abs(figure) * thresholds.sku_spread_pct / 100,
                                           spread(0.0, figure, thresholds)), SKU, 0))
    found = [ref for ref in found if ref.value > 0]
    fleet = next((ref for ref in found if ref.source == FLEET), None)
    if fleet is not None:  # a shared regression: the fleet's level itself is below the baseline or SKU
        found = [dataclasses.replace(ref, fleet_below=True) if ref is not fleet and ref.flags(fleet.value, thresholds)
                 else ref for ref in found]
        found = [ref.widened(fleet.spread / fleet.value) for ref in found]
    return with_cutoff(tuple(found), thresholds) if found else None


def _fleet_level(values: Sequence[float], hosts: int, thresholds: Thresholds, weights: Sequence[float] | None,
                 by_host: Sequence[Sequence[float]] | None, trim_spread: float = 0.0) -> Reference | None:
    """The key's live level (None: too few hosts or values). ``by_host`` (each host's values) is
    given for a key of fewer than ``SMALL_FLEET_HOSTS`` hosts: there, fewer than
    ``SMALL_FLEET_MIN_VALUES`` values (a GPU pair's key, one value a host) have no level, three
    hosts or more the small fleet's, and two (a paused suspect and its one reference peer) the
    densest window's, the faster host (a median of two is neither)."""
    if hosts < thresholds.min_peers:
        return None
    if by_host is not None and hosts < SMALL_FLEET_HOSTS:
        if len(values) < SMALL_FLEET_MIN_VALUES:
            return None
        if hosts >= 3:
            return small_fleet_reference(by_host, thresholds.mad_floor_pct, thresholds.deficit_warn_pct)
    return fleet_reference(values, hosts, thresholds.mad_floor_pct, weights, trim_spread)


def typical_spreads(refs: Mapping[str, KeyReferences], metric_of: Mapping[str, Hashable]) -> dict[Hashable, float]:
    """The median relative fleet spread (spread over level) of each metric's keys (``metric_of``:
    key -> GPU model, probe and metric): a node's 56 P2P pairs are 56 keys of one noise."""
    relative: dict[Hashable, list[float]] = defaultdict(list)
    for key, key_refs in refs.items():
        fleet = key_refs.get(FLEET)
        if fleet is not None:
            relative[metric_of[key]].append(fleet.spread / fleet.value)
    return {metric: statistics.median(spreads) for metric, spreads in relative.items()}


def pool_spreads(refs: Mapping[str, KeyReferences], metric_of: Mapping[str, Hashable], thresholds: Thresholds,
                 typical: Mapping[Hashable, float]) -> dict[str, KeyReferences]:
    """``refs`` with every key's spreads at least the median relative fleet spread of the keys of
    its metric (``metric_of``: key -> GPU model, probe and metric; ``typical``: typical_spreads)."""
    pooled = {}
    for key, key_refs in refs.items():
        widened = tuple(ref.widened(typical.get(metric_of[key], 0.0)) for ref in key_refs.references)
        pooled[key] = key_refs if widened == key_refs.references else with_cutoff(widened, thresholds)
    return pooled


def with_cutoff(references: tuple[Reference, ...], thresholds: Thresholds) -> KeyReferences:
    """``references`` as one key's, with the highest value any of them flags (``cutoff``): a value
    above it costs one comparison, and most values of a sweep are above it."""
    return KeyReferences(references, max(_cutoff(ref, thresholds) for ref in references))


def _cutoff(ref: Reference, thresholds: Thresholds) -> float:
    """The highest value ``ref`` flags: ``deficit_warn`` below it, and ``robust_z`` spreads below
    unless the fleet's level is already below it. A hair above, so rounding never hides a suspect."""
    by_deficit = ref.value * (1 - thresholds.deficit_warn_pct / 100)
    by_z = math.inf if ref.fleet_below else ref.value + ref.bar(thresholds.robust_z) * ref.spread
    return min(by_deficit, by_z) + 1e-9 * abs(ref.value)


def small_fleet_reference(by_host: Sequence[Sequence[float]], mad_floor_pct: float,
                          set_aside_pct: float = 0.0) -> Reference:
    """The level and spread of a key that fewer than ``SMALL_FLEET_HOSTS`` hosts measure (each
    of ``by_host``: one host's values): the upper median of the hosts' medians, and the MAD of
    the values about it, each host weighing once. A densest window among a few dozen values finds
    whatever values happen to crowd at the top: three healthy nodes at 3 % noise once gave a
    level 2.7 % high with a spread of 0.7 %, and flagged a GPU on every node. The upper median of
    host medians holds while no more than half the hosts are slow. A host slow as a whole is set
    aside from the spread, as the fleet's far-below values are: its median ``set_aside_pct`` or
    more below the level and ``TRIM_SIGMAS`` of its median's own error (the GPUs' scatter about
    their hosts' medians, over √its values) below it. Kept, its values made the spread of a
    paused suspect and its two reference peers at 2 % noise 3.4 %, and the suspect, 10 % slow on
    every GPU, passed. Raises ValueError when there is no value."""
    hosts = [values for values in by_host if values]
    if not hosts:
        raise ValueError("no values to find a fleet level in")
    medians = [statistics.median(values) for values in hosts]
    # The upper median: fail-slows only pull values down, so where the hosts split in half the
    # faster half is the healthy one (two hosts keep the faster's level too). A 4-node job with two
    # nodes 12 % low in PCIe bandwidth set its level between the halves, each 6 % off it, and
    # passed with nothing said.
    level = statistics.median_high(medians)
    within = MAD_TO_SIGMA * weighted_median([(abs(value - median), 1 / len(values))
                                             for values, median in zip(hosts, medians, strict=True)
                                             for value in values])
    kept = [values for values, median in zip(hosts, medians, strict=True)
            if not slow_as_a_whole(level, median, within / math.sqrt(len(values)), set_aside_pct)]
    mad = weighted_median([(abs(value - level), 1 / len(values)) for values in kept for value in values])
    # Kish's effective count of values weighing 1 / their host's count (all of them where hosts
    # measure alike): a 4-node job with one GPU lost rests on 31 values, not on its 4 hosts (which
    # made its level's error three times a run's, and a GPU 15 % slow at 3 % noise passed).
    count = len(hosts) ** 2 / math.fsum(1 / len(values) for values in hosts)
    return Reference(level, _floored(MAD_TO_SIGMA * mad, level, mad_floor_pct), FLEET, len(medians),
                     level_values=count)


def slow_as_a_whole(level: float, median: float, error: float, set_aside_pct: float) -> bool:
    """Whether a host whose values' median is ``median`` (its own error ``error``, in the same
    unit) is slow as a whole against ``level``: ``set_aside_pct`` or more below it, and
    ``TRIM_SIGMAS`` of that error below it. Such a host tells what it runs at, not the level."""
    return level - median >= level * set_aside_pct / 100 > 0 and level - median > TRIM_SIGMAS * error


def fleet_reference(values: Sequence[float], hosts: int, mad_floor_pct: float,
                    weights: Sequence[float] | None = None, trim_spread: float = 0.0) -> Reference:
    """The fleet's healthy level and spread (see the module docstring), the spread at least
    ``mad_floor_pct`` percent of the level; ``weights`` (one per value, None: all equal) make
    each host weigh once. Values are set aside below the healthy cluster by a spread of at least
    ``trim_spread`` (a fraction of its centre; see ``TRIM_SIGMAS``). Raises ValueError when
    ``values`` is empty."""
    if weights is not None and len(set(weights)) > 1:
        return _weighted_fleet_reference(values, weights, hosts, mad_floor_pct, trim_spread)
    # On the sorted values each step is a slice found by bisection (a key of 80,000 values is
    # sorted once): the values above the centre, those kept, their median, and the deviations
    # about it as two sorted runs that one sort merges.
    ordered = sorted(values)
    centre = _densest_centre(ordered)
    above = ordered[bisect.bisect_right(ordered, centre):]
    sigma = _floored((_sorted_median(above) - centre) / UPPER_HALF_MEDIAN_SIGMAS if above else 0.0, centre,
                     max(mad_floor_pct, 100 * trim_spread))
    kept = ordered[bisect.bisect_left(ordered, centre - TRIM_SIGMAS * sigma):]
    level = _sorted_median(kept)
    middle = bisect.bisect_left(kept, level)
    deviations = [level - value for value in reversed(kept[:middle])]
    deviations += [value - level for value in kept[middle:]]
    deviations.sort()
    mad = _sorted_median(deviations)
    return Reference(level, _floored(MAD_TO_SIGMA * mad, level, mad_floor_pct), FLEET, hosts,
                     level_values=len(kept))


def _sorted_median(ordered: Sequence[float]) -> float:
    """statistics.median of values already sorted (without sorting them again)."""
    if not ordered:
        raise statistics.StatisticsError("no median for empty data")
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _densest_centre(ordered: Sequence[float]) -> float:
    """The middle of the highest window holding ``DENSE_SHARE`` of the sorted values that is
    about as narrow as the narrowest (slow values are the suspects, never the fast ones)."""
    window = max(1, math.ceil(len(ordered) * DENSE_SHARE))
    # Relative widths: a slow cluster's values are smaller, so in absolute terms it would look denser.
    # (_relative_width, inline: a sweep's key has tens of thousands of windows.)
    highs = ordered[window - 1:]
    if highs[0] > 0:  # every high end positive (sorted): the same widths, computed without a Python loop
        widths = list(map(operator.truediv, map(operator.sub, highs, ordered), highs))
    else:
        widths = [(high - low) / abs(high) if high else 0.0 for low, high in zip(ordered, highs, strict=False)]
    limit = min(widths) * DENSE_WIDTH_TOLERANCE
    best = next(start for start in range(len(widths) - 1, -1, -1) if widths[start] <= limit)
    return _sorted_median(ordered[best:best + window])


def _weighted_fleet_reference(values: Sequence[float], weights: Sequence[float], hosts: int,
                              mad_floor_pct: float, trim_spread: float = 0.0) -> Reference:
    """``fleet_reference`` with each value weighing its weight (the module docstring)."""
    if not values:
        raise ValueError("no values to find a fleet level in")
    pairs = sorted(zip(values, weights, strict=True))
    centre = _weighted_densest_centre(pairs)
    above = [(value - centre, weight) for value, weight in pairs if value > centre]
    sigma = _floored(weighted_median(above) / UPPER_HALF_MEDIAN_SIGMAS if above else 0.0, centre,
                     max(mad_floor_pct, 100 * trim_spread))
    kept = [(value, weight) for value, weight in pairs if value >= centre - TRIM_SIGMAS * sigma]
    level = weighted_median(kept)
    mad = weighted_median([(abs(value - level), weight) for value, weight in kept])
    # Kish's effective count: as many equal weights as would make the weighted median as sure.
    effective = math.fsum(w for _, w in kept) ** 2 / math.fsum(w * w for _, w in kept)
    return Reference(level, _floored(MAD_TO_SIGMA * mad, level, mad_floor_pct), FLEET, hosts,
                     level_values=effective)


def _weighted_densest_centre(pairs: Sequence[tuple[float, float]]) -> float:
    """``_densest_centre`` by weight: the windows of consecutive sorted values holding
    ``DENSE_SHARE`` of the total weight; the middle (weighted median) of the highest of those
    about as narrow as the narrowest."""
    total = math.fsum(weight for _, weight in pairs)
    share = total * DENSE_SHARE - _EPSILON * total
    ends: list[tuple[int, int]] = []  # (start, end) of each window, ends inclusive
    held, end = 0.0, -1
    for start in range(len(pairs)):
        while held < share and end + 1 < len(pairs):
            end += 1
            held += pairs[end][1]
        if held < share:
            break
        ends.append((start, max(start, end)))
        held -= pairs[start][1]
    if not ends:  # rounding left no window: the whole fleet is one
        ends = [(0, len(pairs) - 1)]
    widths = [_relative_width(pairs[first][0], pairs[last][0]) for first, last in ends]
    limit = min(widths) * DENSE_WIDTH_TOLERANCE
    best = max(index for index, width in enumerate(widths) if width <= limit)
    first, last = ends[best]
    return weighted_median(pairs[first:last + 1])


def _relative_width(low: float, high: float) -> float:
    """A window's width as a share of its top value (a window at 0 has width 0)."""
    return (high - low) / abs(high) if high else 0.0


# Weights are sums of 1/n: compared with this relative tolerance, so that rounding never moves a median.
_EPSILON = 1e-9


def weighted_median(pairs: Sequence[tuple[float, float]]) -> float:
    """The weighted median of (value, weight) pairs: the value where half the weight lies on
    either side, the mean of the two values a half falls exactly between (so equal weights give
    ``statistics.median``). Raises ValueError when ``pairs`` is empty."""
    if not pairs:
        raise ValueError("no values: no median")
    ordered = sorted(pairs)
    total = math.fsum(weight for _, weight in ordered)
    half, tolerance = total / 2, _EPSILON * total
    held = 0.0
    for index, (value, weight) in enumerate(ordered):
        held += weight
        if abs(held - half) <= tolerance and index + 1 < len(ordered):
            return (value + ordered[index + 1][0]) / 2
        if held > half:
            return value
    return ordered[-1][0]


def spread(sigma: float, reference: float, thresholds: Thresholds) -> float:
    """``sigma``, at least ``mad_floor`` percent of ``reference``: a perfectly tight fleet flags no noise."""
    return _floored(sigma, reference, thresholds.mad_floor_pct)


def _floored(sigma: float, reference: float, floor_pct: float) -> float:
    return max(sigma, abs(reference) * floor_pct / 100)


def reference_entries(grouped: Mapping[str, Sequence[Any]],
                      refs: Mapping[str, KeyReferences]) -> tuple[dict[str, Any], ...]:
    """What each key was judged against, for the sweep document's ``references``: the key's probe,
    metric, parameters, GPU model and unit, ``reference`` (the one a job's pace is measured
    against: ``KeyReferences.expected``, with its ``source``) and every reference it had by source.
    Reports read a figure against these, so that they quote the reference the findings do.
    ``grouped``: the measurements by key (gpudiag.analysis.measurements.by_key)."""
    entries = []
    for key in sorted(refs):
        info, key_refs = grouped[key][0].info, refs[key]
        expected = key_refs.expected()
        entries.append({"key": key, "probe": info.probe, "metric": info.metric, "params": dict(info.params),
                        "model": info.gpu_model, "unit": info.unit, "reference": round(expected.value, 3),
                        "source": expected.source,
                        "by_source": {ref.source: round(ref.value, 3) for ref in key_refs.references}})
    return tuple(entries)
