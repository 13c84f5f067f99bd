"""A fleet's link slow on every rail, both ends fine with other partners (``links_across_rails``):
each rail's pairs alone miss it, as they miss a NIC slow on every rail (gpudiag.links.acrossrails).
Pair by pair, a link 10 % slow at 4 % link noise is 2.5 sigma below its rail's level; over eight
rails, each scaled to the family's level, its mean is 7 sigma below."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..words import deficit_text, fixed, plural
from .acrossrails import MIN_HOSTS, MIN_RAILS, rail_means, scaled
from .groups import UNIT, Family, GroupReference, LinkGroup, LinkThresholds, family, mean_gbps
from .levels import MIN_NOISE_DEGREES
from .schedule import Pair


@dataclass(frozen=True)
class SlowLinkAcrossRails:
    """The pair ``a``–``b`` of a fleet slow on every rail of ``backend`` at ``line_rate_gbps``
    together, while both ends are fine with other partners: its mean over the rails (each rail
    scaled to the family's level; ``runs_gbps``: each rail's figure) against ``level_gbps``, the
    median of the family's pair means. ``again_gbps``: the mean over the rails of each rail's runs
    but the lowest (None: some rail was run once), whose deficit and z (``again_z``, sigma of such
    a figure) confirm it past ``bar``."""

    a: str
    b: str
    backend: str
    line_rate_gbps: float | None
    gbps: float
    runs_gbps: tuple[float, ...]
    level_gbps: float
    deficit_pct: float
    robust_z: float
    again_gbps: float | None
    again_z: float | None
    bar: float
    confirmed: bool
    rails: int

    @property
    def evidence(self) -> str:
        text = (f"{self.a} ↔ {self.b} slow across {plural(self.rails, 'rail')} of {self.backend}: the mean of its "
                f"rails' figures (each rail scaled to the family's level) {fixed(self.gbps)} {UNIT} vs "
                f"{fixed(self.level_gbps)} {UNIT}, the median of the family's pairs; {deficit_text(self.deficit_pct)}, "
                f"{-self.robust_z:.1f} sigma of the rails' noise; both ends fine with other partners")
        if self.again_gbps is None:
            return text + " (not yet confirmed by a re-test)"
        verdict = "slow again" if self.confirmed else "not slow again (not yet confirmed by a re-test)"
        return (text + f"; its runs after the lowest on each rail {fixed(self.again_gbps)} {UNIT}, "
                f"{-(self.again_z or 0.0):.1f} sigma of such a figure below (bar {self.bar:.1f}): {verdict}")


def links_across_rails(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]],
                       references: Mapping[LinkGroup, GroupReference], thresholds: LinkThresholds,
                       slow_hosts: frozenset[str], alpha: float) -> list[SlowLinkAcrossRails]:
    """The pairs of a fleet's families slow on every rail together (``SlowLinkAcrossRails``), sorted.
    Pair by pair, a link 10 % slow at 4 % link noise is 2.5 sigma below its rail's level, and a
    48-node fleet's screen found it in 3 sweeps of 5; its mean over eight rails is 7 sigma below.
    A pair is a suspect when that mean falls ``deficit_pct`` and ``robust_z`` sigmas (of a mean
    over its rails) below the median of the family's pair means, while neither end is in
    ``slow_hosts`` (NICs slow on every rail) and each has another pair not so slow. The run that
    chose it cannot confirm it: it is confirmed on each rail's runs but the lowest (a re-test
    gives a second run on every rail), their mean slow too, past ``robust_z`` and past the bar a
    chance dip among the family's pairs reaches with chance ``alpha``."""
    fleets: dict[Family, list[tuple[float, Mapping[Pair, Sequence[float]]]]] = defaultdict(list)
    for group, runs in figures.items():
        reference = references.get(group)
        if group.rail is None or group.backend not in thresholds.floor_backends or reference is None \
                or reference.fleet_gbps is None or reference.job_level:
            continue
        fleets[family(group)].append((reference.fleet_gbps, runs))
    found = []
    for (backend, line_rate), levels in sorted(fleets.items(), key=lambda item: (item[0][0], item[0][1] or 0.0)):
        if len(levels) >= MIN_RAILS:
            found += _slow_pairs(backend, line_rate, scaled(levels), thresholds, slow_hosts, alpha)
    return found


def _slow_pairs(backend: str, line_rate: float | None, rails: Sequence[Mapping[Pair, Sequence[float]]],
                thresholds: LinkThresholds, slow_hosts: frozenset[str], alpha: float) -> list[SlowLinkAcrossRails]:
    per_rail, sigma, degrees, noise = rail_means(rails)
    if degrees < MIN_NOISE_DEGREES or len(per_rail) < MIN_HOSTS:
        return []
    means = {pair: mean_gbps(values) for pair, values in per_rail.items()}
    level = statistics.median(sorted(means.values()))
    floor = thresholds.mad_floor_pct / 100 * level
    level_error = sigma / math.sqrt(len(means))

    def slow(gbps: float, spread: float) -> tuple[bool, float, float]:
        deficit, z = 100 * (level - gbps) / level, (gbps - level) / spread
        return deficit >= thresholds.deficit_pct and z <= thresholds.robust_z, deficit, z

    def spread_of(pair: Pair) -> float:
        return math.hypot(max(noise[pair], floor), level_error)

    suspected = {pair: slow(gbps, spread_of(pair)) for pair, gbps in means.items()}
    flagged = {pair for pair, (is_slow, _, _) in suspected.items() if is_slow}
    partners: dict[str, set[Pair]] = defaultdict(set)
    for pair in means:
        for host in pair:
            partners[host].add(pair)
    bar = max(-thresholds.robust_z, statistics.NormalDist().inv_cdf(1 - alpha / max(1, len(flagged))))
    found = []
    for pair in sorted(flagged):
        if slow_hosts & set(pair) or any(not (partners[host] - {pair} - flagged) for host in pair):
            continue
        _, deficit, z = suspected[pair]
        again = _again_across(rails, pair)
        again_z = None if again is None else (again - level) / spread_of(pair)
        confirmed = again is not None and again_z is not None and \
            100 * (level - again) / level >= thresholds.deficit_pct and again_z <= -bar
        found.append(SlowLinkAcrossRails(pair[0], pair[1], backend, line_rate, means[pair], tuple(per_rail[pair]),
                                         level, deficit, z, again, again_z, bar, confirmed, len(per_rail[pair])))
    return found


def _again_across(rails: Sequence[Mapping[Pair, Sequence[float]]], pair: Pair) -> float | None:
    """The mean over the rails of each rail's runs of ``pair`` but the lowest (their median, the
    mean of two); None where some rail ran it once."""
    figures = []
    for runs in rails:
        values = sorted(runs.get(pair, ()))
        if not values:
            continue
        if len(values) < 2:
            return None
        later = values[1:]
        middle = len(later) // 2
        figures.append(later[middle] if len(later) % 2 else mean_gbps(later[middle - 1:middle + 1]))
    return mean_gbps(figures) if figures else None
