"""A slow NIC (a small job's or a fleet's) and a fleet's slow link seen across their rails: the rails
of one backend and line rate are the same hardware, so a host's pairs on all of them together show
what one rail's few pairs cannot.

In a job of fewer than ``min_hosts`` hosts each rail has a handful of pairs, judged against the
line-rate floor and the job's own level (gpudiag.links.attribution). At 4 % link noise a NIC 8 %
slow sits around the floor: pair by pair it passed as often as not, and a 3-node job with such
a NIC exited 0. Averaged over eight rails, a pair's figure has a third of the noise.

- Each pair's figure is the mean over the rails it was measured on (each rail's figure the
  median of its runs there); the noise of one run is pooled from how those figures scatter
  about their pair's mean, each weighted by its runs (gpudiag.links.levels.run_sd: every pair
  measured on two rails or more; ``MIN_NOISE_DEGREES`` at least), so a rail that differs from
  the others makes the bar wider, never narrower, and a pair's mean has the noise of its own
  runs (a pair re-run is surer than one run once).
- A pair runs at its slower end, so a host's *best* pair (its highest mean) is its NIC's rate
  whenever one partner is healthy. Each host is held against the median of the other hosts'
  bests (one lucky pair is the best of both its ends, and would set the bar alone), at most the
  line rate (no pair runs faster: a level above it is luck).
- A host whose best falls ``deficit_pct`` below that median and ``robust_z`` sigmas of the
  difference (each mean's noise over its rails, at least ``mad_floor_pct`` of the level: the
  rails of one pair share its two hosts) below it is slow with every partner, by more than
  noise: a confirmed ``NicSuspect`` for the backend (no rail: all of them), when at least two
  hosts are not such (its known-good partners). Its rate is then the mean of its pairs with
  them (the best, a maximum, reads high), and its deficit against the median from that. Hosts
  slow alike (two NICs of three, every pair slow) lift nobody above them and name nobody here.
  A host ``HALF_WAY`` there with a partner not yet paired with it is an unconfirmed one, for
  the confirm rounds to pair further.
- A small job whose runs cannot settle it runs every pair again, up to DOUBT_RUNS runs
  (``doubtful_pairs``): where a host is half-way below with every partner paired, or where one
  run is too noisy for a NIC twice the link deficit slow to be found nineteen times in twenty.
- A sample of a job (a paused job's suspects and references) whose every pair sits at the
  line-rate floor shows no host good: each is an unconfirmed suspect, for the job's further
  peers to decide (``_all_at_the_floor``, gpudiag.links.tiebreak).

In a fleet (rails with a fleet level of their own), each rail's figures are first scaled to the
family's level (the median of its rails' levels: a rail's own offset is no host's), and a host
slow so is a ``NicSuspect`` confirmed once ``confirm_partners`` of its own partners are not slow
(two slow links on one node look like its NIC until a third partner is slow with it too):
with fewer, it is left to the confirm rounds, which give it a fresh partner, and as its best
pair must stay slow, the fresh pair must be slow too: the pairs that made it a suspect never
confirm it alone. A host below on its best pair, or half-way there (in a fleet half
``deficit_pct`` too: a best of two or three pairs reads high), is then judged again on the mean
of its pairs with partners not themselves below (``_on_pair_means``). Its level leaves out the
other hosts' best pairs that are its own pairs, and a host with one partner in the family is
such a suspect, never confirmed on that one pair: a fleet of two line rates gave each boundary
400 Gb/s node one 400 Gb/s partner, and a NIC 10 % slow there went unnamed in 34 of 150 16-node
fleets at CV 2 %. Pair by pair,
at 4 % link noise, a NIC 10 % slow is 2.5 sigma below its rail's level and was found in 12
sweeps of 20 on a 48-node fleet; over eight rails, a pair's mean is 7 sigma below.

A fleet's link slow on every rail (both ends fine with other partners) is judged the same way
(gpudiag.links.linksacross): its mean over the scaled rails against the median of the family's
pair means, confirmed on each rail's runs but the lowest once its re-test has run.

Only for backends that the line rate judges (``floor_backends``), with two rails or more and
three hosts or more. A NIC slow on one rail only is left to that rail's judging: averaged with
seven healthy rails it would be diluted, never cleared.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..analysis.noisy import MEDIAN_EFFICIENCY, POWER_Z
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
    rate_floor,
)
from .levels import MIN_NOISE_DEGREES, mean_sd, rail_runs, run_sd
from .linkerrors import listed
from .schedule import Pair

MIN_RAILS = 2
# A small job's host this share of ``robust_z`` below (and ``deficit_pct``), with partners in the
# job not yet paired with it, is a suspect to pair further, not yet a verdict: at 6 % link noise a
# 4-node job's screen paired a NIC 10 % slow with two partners, 3.0 sigma below, and it passed.
HALF_WAY = 0.5
MIN_HOSTS = 3
# Hosts not slow that a slow NIC's verdict needs: slow with each healthy host there is, two at least.
MIN_GOOD = 2
# The runs of each pair (on every rail) a small job's doubt is settled on (doubtful_pairs).
DOUBT_RUNS = 3
# A small job runs its pairs again until a NIC this many times ``deficit_pct`` slow would fall
# past its bar nineteen times in twenty (POWER_Z), or DOUBT_RUNS runs (doubtful_pairs).
POWER_DEFICITS = 2.0


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
    # In a fleet: its partners not slow (``good``) are ``confirm_partners`` or more. A small job's is
    # always confirmed (slow with each healthy host there is).
    confirmed: bool = True
    fleet: bool = False
    # Every pair of these hosts at the line-rate floor (``_all_at_the_floor``): ``level_gbps`` is the
    # floor, and no partner is known good.
    at_floor: bool = False

    @property
    def evidence(self) -> str:
        means = listed(f"{f.peer(self.host)} {fixed(f.gbps)}" for f in self.pairs)
        if self.at_floor:
            return (f"{self.host} at the line-rate floor with every partner across {plural(self.rails, 'rail')} of "
                    f"{self.backend}: its pairs' means (each over its rails) {means} {UNIT}, where a healthy link "
                    f"reaches {fixed(self.level_gbps)} {UNIT}, and every other pair of these hosts as low: which "
                    "NICs are slow cannot be told from them alone")
        scaled = " (each rail scaled to the family's level)" if self.fleet else ""
        text = (f"{self.host} slow with every partner across {plural(self.rails, 'rail')} of {self.backend}: its "
                f"pairs' means (each over its rails{scaled}) {means} {UNIT} vs {fixed(self.level_gbps)} {UNIT}, the "
                f"median of the other hosts' best pairs ({'its partners not slow' if self.fleet else 'healthy'}: "
                f"{listed(self.good) or 'none'}); {deficit_text(self.deficit_pct)}, "
                f"{-self.robust_z:.1f} sigma of the rails' noise")
        if not self.confirmed:
            text += f" (not yet confirmed: {plural(len(self.good), 'partner')} not slow, more wanted)"
        return text


def across_rails(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]],
                 references: Mapping[LinkGroup, GroupReference],
                 thresholds: LinkThresholds, good_above: Mapping[Family, frozenset[str]] | None = None
                 ) -> list[SlowAcrossRails]:
    """The hosts slow with every partner across the rails of a family, a small job's or a fleet's
    (see the module docstring), sorted by family and host. ``good_above``: per family (backend
    and line rate), the hosts whose NIC a higher line rate on the backend shows good."""
    families, fleets = _families(figures, references, thresholds)
    found = []
    for (backend, line_rate), rails in families:
        found += _slow_hosts(backend, line_rate, rails, thresholds,
                             good_above=(good_above or {}).get((backend, line_rate), frozenset()))
    for (backend, line_rate), levels in fleets:
        found += _slow_hosts(backend, line_rate, scaled(levels), thresholds, thresholds.confirm_partners,
                             (good_above or {}).get((backend, line_rate), frozenset()))
    return found


def doubtful_pairs(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]],
                   references: Mapping[LinkGroup, GroupReference], thresholds: LinkThresholds,
                   good_above: Mapping[Family, frozenset[str]] | None = None) -> frozenset[Pair]:
    """The pairs of a small job's families to run again, so that a doubt is settled on more runs
    than one (``_in_doubt``): a host half-way below the others with every partner paired yet not
    past the bar on all its pairs, or runs too few for a NIC POWER_DEFICITS times ``deficit_pct``
    slow to be found nineteen times in twenty. Every pair of such a family measured fewer than
    DOUBT_RUNS times on some rail: the others' pairs too, as they are a host's level. One run of
    a 3-node job at 6 % link noise puts a NIC 10 % slow about 3 sigma under its one healthy pair,
    at a bar of 3.3, and such jobs passed, exit 0, in 3 of 20; on three runs it was found in 20.
    A healthy host that far down by chance is judged on the same bar over all its runs, the first
    among them, so no more often named (0 of 1,350 healthy 3- to 5-node jobs at CV 1-3 %; 2 false
    ``slow_network`` findings in 150 3-node jobs at 6 % link noise before)."""
    families, _ = _families(figures, references, thresholds)
    wanted: set[Pair] = set()
    for key, rails in families:
        line_rate = key[1]
        if not _in_doubt(line_rate, rails, thresholds, (good_above or {}).get(key, frozenset())):
            continue
        per_rail = rail_runs(rails)
        wanted |= {pair for pair, group in per_rail.items() if min(runs for _, runs in group) < DOUBT_RUNS}
    return frozenset(wanted)


_Families = tuple[list[tuple[Family, list[Mapping[Pair, Sequence[float]]]]],
                  list[tuple[Family, list[tuple[float, Mapping[Pair, Sequence[float]]]]]]]


def _families(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]],
              references: Mapping[LinkGroup, GroupReference], thresholds: LinkThresholds) -> _Families:
    """The families judged across their rails, sorted, each with MIN_RAILS rails or more: a small
    job's (each rail's runs) and a fleet's (each rail's fleet level and runs)."""
    families: dict[Family, list[Mapping[Pair, Sequence[float]]]] = defaultdict(list)
    fleets: dict[Family, list[tuple[float, Mapping[Pair, Sequence[float]]]]] = defaultdict(list)
    for group, runs in figures.items():
        reference = references.get(group)
        if group.rail is None or group.backend not in thresholds.floor_backends or reference is None:
            continue
        if reference.fleet_gbps is not None and not reference.job_level:
            fleets[family(group)].append((reference.fleet_gbps, runs))
        else:
            families[family(group)].append(runs)

    def order(item: tuple[Family, object]) -> tuple[str, float]:
        return item[0][0], item[0][1] or 0.0

    return ([(key, rails) for key, rails in sorted(families.items(), key=order) if len(rails) >= MIN_RAILS],
            [(key, levels) for key, levels in sorted(fleets.items(), key=order) if len(levels) >= MIN_RAILS])


def rail_means(rails: Sequence[Mapping[Pair, Sequence[float]]]
               ) -> tuple[dict[Pair, list[float]], float, int, dict[Pair, float]]:
    """Each pair's figures on ``rails``, the noise of one run (gpudiag.links.levels.run_sd) and
    its degrees of freedom, and the noise of each pair's mean over its rails and their runs."""
    counted = rail_runs(rails)
    sigma, degrees = run_sd(counted.values())
    return ({pair: [value for value, _ in group] for pair, group in counted.items()}, sigma, degrees,
            {pair: mean_sd(sigma, [runs for _, runs in group]) for pair, group in counted.items()})


def scaled(levels: Sequence[tuple[float, Mapping[Pair, Sequence[float]]]]) -> list[dict[Pair, list[float]]]:
    """Each rail's figures (its level, its runs) scaled to the family's level, the median of its rails'."""
    family_level = statistics.median(sorted(level for level, _ in levels))
    return [{pair: [value * family_level / level for value in values] for pair, values in runs.items()}
            for level, runs in levels if level > 0]


def _all_at_the_floor(mine: Mapping[str, Sequence[PairFigure]], line_rate: float | None,
                      thresholds: LinkThresholds) -> float | None:
    """The line-rate floor, where every pair of a sample of a job's hosts (a paused job's
    suspects and reference peers: not the whole job), each the mean of its rails, sits under it
    or over it by less than half ``deficit_pct`` (None: not so). No host is shown good, and the
    hosts' own level cannot be told from one they all share: a paused 16-node job whose two
    references had NICs 10 % slow put all three pairs at 88 % of the line rate, around the floor
    at 6 % link noise, and passed the suspect and both references, exit 0, in 2 jobs of 20. Each
    host is then a suspect, for the job's further peers (gpudiag.links.tiebreak) to decide."""
    floor = rate_floor(line_rate, thresholds)
    if floor is None:
        return None
    near = floor * (1 + thresholds.deficit_pct / 200)
    return floor if all(f.gbps < near for pairs in mine.values() for f in pairs) else None


def _against_the_fast(mine: Mapping[str, Sequence[PairFigure]], best: Mapping[str, PairFigure], named: set[str],
                      noise: Mapping[Pair, float], line_rate: float | None, thresholds: LinkThresholds,
                      good_above: frozenset[str]) -> list[_Below]:
    """A small job's hosts not ``named`` whose best pair falls half ``deficit_pct`` short of the
    best there is, judged on the mean of their pairs with the hosts that reach it (two at least)
    against the median of the pairs among those, at the job's bar (``_family_bar``). A host's best
    pair may be its pair with another slow NIC, lifted by noise: two NICs 10 % slow of four at 6 %
    link noise, their pair 3 % over their others, were each within ``deficit_pct`` of the healthy
    pair on their best, and were named as slow links on single rails instead."""
    top = max(f.gbps for f in best.values())
    fast = ({host for host, f in best.items() if f.gbps >= top * (1 - thresholds.deficit_pct / 200)}
            | (good_above & set(mine))) - named
    means = {(f.a, f.b): f.gbps for pairs in mine.values() for f in pairs}
    among = sorted(pair for pair in means if set(pair) <= fast)
    if len(fast) < MIN_GOOD or not among:
        return []
    level = min(statistics.median(means[pair] for pair in among), line_rate or math.inf)
    found = []
    for host in sorted(set(mine) - fast - named - good_above):
        trusted = [f for f in mine[host] if f.peer(host) in fast]
        if len(trusted) < MIN_GOOD:
            continue
        rate, deficit, z = _on_pairs(trusted, level, _median_noise(among, noise), noise, thresholds)
        if deficit >= thresholds.deficit_pct and z <= -_family_bar(thresholds.robust_z, len(mine)):
            found.append((host, rate, level, deficit, z, True))
    return found


def _under_the_floor(mine: Mapping[str, Sequence[PairFigure]], best: Mapping[str, PairFigure], named: set[str],
                     line_rate: float | None, thresholds: LinkThresholds,
                     good_above: frozenset[str]) -> list[_Below]:
    """A small job's hosts not ``named`` whose every pair, each the mean of its rails, sits under
    the line-rate floor while two other hosts reach it with each other: a suspect, never passed
    (half-way, False), whatever the others' level says. In a 4-node job at 6 % link noise with
    two NICs 10 % slow, the one healthy pair read 4 % under the line, the slow NICs' pairs 88-89 %
    of it, and with every partner paired neither was even half-way below that level: the job
    passed, exit 0. (A fleet has a level of its own, and one near the floor would make many.)"""
    floor = rate_floor(line_rate, thresholds)
    if floor is None:
        return []
    reaching = [f for pairs in mine.values() for f in pairs
                if f.gbps >= floor and f.a not in named and f.b not in named]
    found = []
    for host in sorted(set(mine) - named - good_above):
        if not mine[host] or any(f.gbps >= floor for f in mine[host]):
            continue
        # and the others' pair above its best by link_deficit: one just over the floor by chance is no level
        above = best[host].gbps * (1 + thresholds.deficit_pct / 100)
        if any(host not in (f.a, f.b) and f.gbps >= above for f in reaching):
            figure = best[host]
            found.append((host, figure.gbps, floor, 100 * (floor - figure.gbps) / floor, 0.0, False))
    return found


def _with_every_partner(mine: Mapping[str, Sequence[PairFigure]], below: Sequence[_Below],
                        noise: Mapping[Pair, float], line_rate: float | None, thresholds: LinkThresholds
                        ) -> tuple[list[_Below], tuple[str, ...]]:
    """A small job's hosts ``below`` (``_below``), those half-way with every partner paired judged
    on the mean of all their pairs against the median of the job's pairs without them: no pair is
    set aside, so none is chosen for the judging (a host's best pair, a maximum, reads higher the
    more partners it has: a NIC 10 % slow at 6 % link noise, paired with all three partners of a
    4-node job, was no longer half-way below, and passed). Past the bar, slow; else passed, and
    a doubt (the second of the two returned: doubtful_pairs runs its family again)."""
    judged = [entry for entry in below if entry[-1] is not None]
    doubts = []
    for host, *_ in (entry for entry in below if entry[-1] is None):
        rest = [f for other, pairs in mine.items() if other != host for f in pairs if host not in (f.a, f.b)]
        if len(rest) < 2:
            continue
        # each pair of the rest is listed once per end: its median is the pairs' median
        level = min(statistics.median(f.gbps for f in rest), line_rate or math.inf)
        pairs = sorted({(f.a, f.b) for f in rest})
        rate, deficit, z = _on_pairs(mine[host], level, _median_noise(pairs, noise), noise, thresholds)
        if deficit >= thresholds.deficit_pct and z <= -_family_bar(thresholds.robust_z, len(mine)):
            judged.append((host, rate, level, deficit, z, True))
        else:
            doubts.append(host)
    return judged, tuple(doubts)


def _on_pairs(pairs: Sequence[PairFigure], level: float, level_noise: float, noise: Mapping[Pair, float],
              thresholds: LinkThresholds) -> tuple[float, float, float]:
    """The mean of ``pairs`` (each the mean of its rails) against ``level`` (its noise
    ``level_noise``): that mean, its deficit and its z (the mean's noise at least ``mad_floor_pct``
    of the level); without a pair that is a slow link of its own (``_without_a_slow_link``)."""
    pairs = _without_a_slow_link(pairs, thresholds)
    rate = mean_gbps(f.gbps for f in pairs)
    own = math.sqrt(math.fsum(noise[(f.a, f.b)] ** 2 for f in pairs)) / len(pairs)
    spread = math.hypot(max(own, thresholds.mad_floor_pct / 100 * level), level_noise)
    return rate, 100 * (level - rate) / level, (rate - level) / spread


def _without_a_slow_link(pairs: Sequence[PairFigure], thresholds: LinkThresholds) -> Sequence[PairFigure]:
    """``pairs`` (one host's, three or more) without its lowest where that one falls
    ``deficit_pct`` below the median of the others: a NIC slow is slow with every partner, and a
    pair that slow alone is the link's own (judged as a link). A 20 %-slow link of a 48-node
    fleet, with the host's two other pairs 2-3 % low by chance, put the mean of its three pairs
    8 % under the level, and the host's healthy NIC was named slow and drained. A host whose
    pairs are alike (a slow NIC's, a healthy one's) keeps them all: none is chosen for the judging."""
    if len(pairs) < 3:
        return pairs
    lowest = min(pairs, key=lambda f: f.gbps)
    rest = [f for f in pairs if f is not lowest]
    if lowest.gbps < statistics.median(f.gbps for f in rest) * (1 - thresholds.deficit_pct / 100):
        return rest
    return pairs


def _median_noise(pairs: Sequence[Pair], noise: Mapping[Pair, float]) -> float:
    """The noise of the median of ``pairs``' means (a median of n: MEDIAN_EFFICIENCY / √n of one;
    of one or two, their mean: 1 / √n. A 3-node job's level is its one pair without the host
    judged, and was taken as a quarter noisier than it is)."""
    efficiency = MEDIAN_EFFICIENCY if len(pairs) > 2 else 1.0
    return statistics.median(noise[pair] for pair in pairs) * efficiency / math.sqrt(len(pairs))


def _family_bar(robust_z: float, hosts: int) -> float:
    """``robust_z``'s one-sided tail shared among ``hosts`` hosts, each judged once (Bonferroni):
    the sigmas one host must fall below so that a healthy job names none as often as one host
    alone would cross ``robust_z``."""
    tail = 0.5 * math.erfc(abs(robust_z) / math.sqrt(2))
    return statistics.NormalDist().inv_cdf(1 - tail / max(hosts, 1))


def _on_pair_means(mine: Mapping[str, Sequence[PairFigure]], below: Sequence[_Below], noise: Mapping[Pair, float],
                   line_rate: float | None, thresholds: LinkThresholds, partners_wanted: int) -> list[_Below]:
    """A fleet's hosts ``below`` (``_below``, and those half-way with every partner paired),
    judged again on the mean of their pairs with partners not below, against the median of the
    pairs among those (a host's best pair, a maximum, reads high, and may be its pair with
    another slow host: three NICs 10 % slow in a paused 16-node job at 4 % link noise, each with
    three healthy partners, read 6-8 % and 2 sigma low on their best pairs, and the job passed,
    exit 0). A host with no partner not below keeps its verdict; one whose pairs with them reach
    the level is below no more, nor is one not past the bar on ``partners_wanted`` such pairs
    (half-way with fewer, it is paired further: a healthy host 3.5 % and 2.9 sigma low on four
    was left ``unchecked``). Those pairs are counted as judged, without one set aside as a slow
    link of its own: a reference of a paused 16-node job, its NIC 10 % slow at 6 % link noise,
    judged on two of its three pairs, was 2.9 sigma under, and passed without a finding. A host
    with one such pair is paired further half-way below on the deficit alone (a NIC's one pair
    reads two sigma lucky one time in forty), and each host's level leaves out its own pairs:
    in a 16-node fleet of two models at 6 % link noise, a NIC 10 % slow half-way below had its
    three pairs in its level, which they pulled down to 4 % over it, and it passed."""
    # those below by the whole deficit leave the level; those only half as far stay in it (taking
    # out every host a little low by chance would lift the level over the rest)
    doubtful = {host for host, _, _, deficit, *_ in below if deficit >= thresholds.deficit_pct}
    kept = [(a, b) for a, b in {(f.a, f.b) for pairs in mine.values() for f in pairs}
            if a not in doubtful and b not in doubtful]
    if not below or len(kept) < MIN_HOSTS:
        return [entry for entry in below if entry[-1] is not None]
    means = {(f.a, f.b): f.gbps for pairs in mine.values() for f in pairs}
    judged = []
    for host, gbps, old_level, deficit, z, past_bar in below:
        trusted = [f for f in mine[host] if f.peer(host) not in doubtful]
        # its level leaves out its own pairs (a host half-way below pulls its own level down to it)
        others = [pair for pair in kept if host not in pair]
        if not trusted or len(others) < MIN_HOSTS:
            if past_bar is not None:
                judged.append((host, gbps, old_level, deficit, z, past_bar))
            continue
        level = min(statistics.median(means[pair] for pair in others), line_rate or math.inf)
        rate, deficit, z = _on_pairs(trusted, level, _median_noise(others, noise), noise, thresholds)
        if deficit >= thresholds.deficit_pct and z <= thresholds.robust_z:
            judged.append((host, rate, level, deficit, z, True))
        elif deficit >= HALF_WAY * thresholds.deficit_pct \
                and (z <= HALF_WAY * thresholds.robust_z or len(trusted) == 1) \
                and len(_without_a_slow_link(trusted, thresholds)) < partners_wanted \
                and len(mine[host]) < len(mine) - 1:
            judged.append((host, rate, level, deficit, z, False))  # half-way as in _below: paired further
    return judged


# A host below the others: host, figure, level, deficit, z, and whether past the bar (False:
# half-way, with a partner not yet paired with it; None: half-way with every partner paired).
_Below = tuple[str, float, float, float, float, bool | None]


def _below(mine: Mapping[str, Sequence[PairFigure]], best: Mapping[str, PairFigure], noise: Mapping[Pair, float],
           line_rate: float | None, thresholds: LinkThresholds, fleet: bool,
           good_above: frozenset[str]) -> list[_Below]:
    """The hosts below the others' level on their best pairs (see the module docstring)."""
    floor = thresholds.mad_floor_pct / 100
    slow = []
    for host in sorted(mine):
        if host in good_above:
            continue
        figure = best[host]
        # in a fleet, not another host's best that is a pair with this one (its own figure, not a level)
        others = [best[other] for other in mine
                  if other != host and not (fleet and host in (best[other].a, best[other].b))]
        if not others:
            continue
        # No pair runs faster than its line rate: a level above it is a lucky pair's (one that is
        # the best of both its ends set it alone, 5.6 % over the line, and a healthy NIC was drained).
        level = min(statistics.median(f.gbps for f in others), line_rate or math.inf)
        if level <= 0:  # the others measured nothing: no level to fall below
            continue
        others_noise = statistics.median(noise[(f.a, f.b)] for f in others)
        # each mean's noise over its rails and runs, at least mad_floor of the level: rails of one pair share its hosts
        spread = math.hypot(max(noise[(figure.a, figure.b)], floor * level), max(others_noise, floor * level))
        deficit, z = 100 * (level - figure.gbps) / level, (figure.gbps - level) / spread
        if deficit >= thresholds.deficit_pct and z <= thresholds.robust_z and not (fleet and len(mine[host]) < 2):
            slow.append((host, figure.gbps, level, deficit, z, True))
        elif deficit >= thresholds.deficit_pct * (HALF_WAY if fleet else 1.0) \
                and z <= HALF_WAY * thresholds.robust_z:
            # half-way, or a fleet's host with one partner in the family (which end is slow cannot
            # be told): pair it further first; with every partner paired, only a doubt (None). In
            # a fleet, half the deficit too: a best of two or three pairs reads high, and the
            # mean of its pairs decides (_on_pair_means)
            paired = len(mine[host]) >= len(mine) - 1
            slow.append((host, figure.gbps, level, deficit, z, None if paired else False))
    return slow


def _paired(rails: Sequence[Mapping[Pair, Sequence[float]]]
            ) -> tuple[dict[str, list[PairFigure]], dict[str, PairFigure], dict[Pair, float]] | None:
    """A family's pairs, each the mean of its rails: each host's pairs, its best pair, and each
    pair mean's noise (None: too few degrees of freedom to know the noise, or too few hosts)."""
    per_rail, _, degrees, noise = rail_means(rails)
    if degrees < MIN_NOISE_DEGREES:
        return None
    mine: dict[str, list[PairFigure]] = defaultdict(list)
    for pair, values in sorted(per_rail.items()):
        figure = PairFigure(pair[0], pair[1], mean_gbps(values), tuple(sorted(values)), True, True)
        mine[figure.a].append(figure)
        mine[figure.b].append(figure)
    if len(mine) < MIN_HOSTS:
        return None
    return mine, {host: max(pairs, key=lambda f: (f.gbps, f.peer(host))) for host, pairs in mine.items()}, noise


def _in_doubt(line_rate: float | None, rails: Sequence[Mapping[Pair, Sequence[float]]],
              thresholds: LinkThresholds, good_above: frozenset[str]) -> bool:
    """Whether a small job's family leaves a doubt that more runs settle: a host half-way below
    with every partner paired and not past the bar on all its pairs (``_with_every_partner``), or
    runs too few for a NIC ``POWER_DEFICITS`` times ``deficit_pct`` slow to fall past the bar
    nineteen times in twenty (``_too_noisy``)."""
    paired = _paired(rails)
    if paired is None:
        return False
    mine, best, noise = paired
    below = _below(mine, best, noise, line_rate, thresholds, False, good_above)
    return bool(_with_every_partner(mine, below, noise, line_rate, thresholds)[1]) or \
        _too_noisy(mine, noise, thresholds)


def _too_noisy(mine: Mapping[str, Sequence[PairFigure]], noise: Mapping[Pair, float],
               thresholds: LinkThresholds) -> bool:
    """Whether some host, judged on the mean of all its pairs against the median of the others'
    (``_with_every_partner``), would see a NIC ``POWER_DEFICITS`` times ``deficit_pct`` slow fall
    past the family's bar less than nineteen times in twenty, on the runs so far."""
    level = statistics.median(f.gbps for pairs in mine.values() for f in pairs)
    bar = _family_bar(thresholds.robust_z, len(mine)) + POWER_Z
    for host, pairs in mine.items():
        rest = sorted({(f.a, f.b) for other, others in mine.items() if other != host for f in others
                       if host not in (f.a, f.b)})
        if not rest:
            continue
        own = math.sqrt(math.fsum(noise[(f.a, f.b)] ** 2 for f in pairs)) / len(pairs)
        spread = math.hypot(max(own, thresholds.mad_floor_pct / 100 * level), _median_noise(rest, noise))
        if POWER_DEFICITS * thresholds.deficit_pct / 100 * level < bar * spread:
            return True
    return False


def _slow_hosts(backend: str, line_rate: float | None, rails: Sequence[Mapping[Pair, Sequence[float]]],
                thresholds: LinkThresholds, partners_wanted: int | None = None,
                good_above: frozenset[str] = frozenset()) -> list[SlowAcrossRails]:
    """The slow hosts of one family (see the module docstring). ``partners_wanted``: in a fleet,
    the partners not slow that confirm a host (None: a small job's rule, every host not slow).
    In a fleet, a host with one partner in the family is never confirmed here (its partner could as
    well be): below on that pair, it is a suspect for the confirm rounds to pair further. In a
    fleet or a small job, no host is slow whose NIC a higher line rate on the backend
    shows good (``good_above``: a 400 Gb/s node paired once with a 200 Gb/s one, slow, read as
    slow with every partner; in a 6-node job of two models such a node was left unchecked); as a
    partner, such a host counts as not slow only when ``good_above`` shows it good."""
    paired = _paired(rails)
    if paired is None:
        return []
    mine, best, noise = paired
    fleet = partners_wanted is not None
    slow = _below(mine, best, noise, line_rate, thresholds, fleet, good_above)
    slow = _on_pair_means(mine, slow, noise, line_rate, thresholds, partners_wanted) \
        if partners_wanted is not None else \
        _with_every_partner(mine, slow, noise, line_rate, thresholds)[0]
    if not fleet:
        if not thresholds.whole_job and (floor := _all_at_the_floor(mine, line_rate, thresholds)) is not None:
            return [SlowAcrossRails(host, backend, line_rate, best[host].gbps, floor,
                                    100 * (floor - best[host].gbps) / floor, 0.0,
                                    tuple(sorted(mine[host], key=lambda f: f.peer(host))), (), len(rails),
                                    confirmed=False, at_floor=True)
                    for host in sorted(set(mine) - good_above)]
        slow += _against_the_fast(mine, best, {host for host, *_ in slow}, noise, line_rate, thresholds, good_above)
        slow += _under_the_floor(mine, best, {host for host, *_ in slow}, line_rate, thresholds, good_above)
    untold = {host for host, pairs in mine.items() if fleet and len(pairs) < 2 and host not in good_above}
    good = tuple(sorted(set(mine) - {host for host, *_ in slow} - untold))
    if len(good) < MIN_GOOD:
        return []
    found = []
    for host, gbps, level, deficit, z, past_bar in slow:
        # its rate: the mean of its pairs with the healthy hosts (its best gated it, biased high by the max)
        with_good = [f.gbps for f in mine[host] if f.peer(host) in good]
        rate = mean_gbps(with_good) if with_good else gbps
        partners = good if partners_wanted is None else tuple(sorted({f.peer(host) for f in mine[host]} & set(good)))
        confirmed = past_bar and (partners_wanted is None or len(partners) >= partners_wanted)
        found.append(SlowAcrossRails(host, backend, line_rate, rate, level, max(deficit, 100 * (level - rate) / level),
                                     z, tuple(sorted(mine[host], key=lambda f: f.peer(host))), partners, len(rails),
                                     confirmed, partners_wanted is not None))
    return found
