"""A group's levels: its fleet level and spread (``group_reference``), a small job's own level
and the rails' noise: each pair's figures pooled over the rails of its family (backend and line
rate: the same hardware and the same measurement), and the spread of figures that should be
equal pooled over many small samples (gpudiag.links.attribution, gpudiag.links.acrossrails)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from ..analysis.noisy import LEVEL_ERROR, MEDIAN_EFFICIENCY
from ..analysis.reference import MAD_TO_SIGMA, fleet_reference
from ..analysis.tails import student_bar
from .groups import (
    Family,
    GroupBaseline,
    GroupReference,
    LinkBaseline,
    LinkGroup,
    LinkThresholds,
    family,
    group_baseline,
    judged_gbps,
    line_rate_floor,
    mean_gbps,
    rate_floor,
)
from .schedule import Pair


def job_levels(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]],
               thresholds: LinkThresholds) -> dict[Family, float]:
    """Small groups' own level (Gb/s), per family: 3 to ``min_hosts`` - 1 hosts (a small job, a
    paused job's suspects and reference peers) are judged against each other too, so a NIC 8 %
    slow is seen where the line rate's floor would miss it.

    Each pair's figures on all the family's rails (the same hardware) are pooled first: a third
    of one rail's noise at eight. The level is the median of the pair means within
    ``deficit_pct`` of the second-best of the hosts' best pair means: a pair runs at its slower
    end, so a host's best pair is its NIC's rate whenever one partner is healthy, and two hosts
    reach a healthy pair's figure together (2 hosts: no level). Rail by rail, the luckiest runs
    set it 4-6 % high at 4 % noise. Only backends whose figures are the link's (``floor_backends``:
    RDMA, NCCL, or tcp with the operator's line rate): a few tcp streams measure the hosts' CPUs
    as much as the link, and among a handful of hosts that is no reference."""
    small: dict[Family, list[Mapping[Pair, Sequence[float]]]] = defaultdict(list)
    for group, runs in figures.items():
        if 3 <= len(host_bests(runs)) < thresholds.min_hosts and group.backend in thresholds.floor_backends:
            small[family(group)].append(runs)
    levels = {}
    for key, rails in small.items():
        means = {pair: [mean_gbps(values)] for pair, values in rail_figures(rails).items()}
        top = sorted(host_bests(means).values(), reverse=True)[1]
        healthy = sorted(mean for (mean,) in means.values() if mean >= top * (1 - thresholds.deficit_pct / 100))
        levels[key] = statistics.median(healthy)
    return levels

# Degrees of freedom a run-to-run noise needs (pairs run twice give one each).
MIN_NOISE_DEGREES = 4


def run_noise(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]]) -> dict[Family, float]:
    """The measurement's own run-to-run noise per family (Gb/s, a standard deviation): pooled over
    every pair run twice or more on any rail of it; families with fewer than MIN_NOISE_DEGREES
    degrees of freedom are left out."""
    samples: dict[Family, list[Sequence[float]]] = defaultdict(list)
    for group, runs in figures.items():
        samples[family(group)] += runs.values()
    pooled = {key: pooled_sd(values) for key, values in samples.items()}
    return {key: sd for key, (sd, degrees) in pooled.items() if degrees >= MIN_NOISE_DEGREES}


# A pair's figure on one rail this many robust sigmas from its figures' median is a rail's own
# fault (a NIC slow on one rail), never the rails' noise.
RAIL_CLIP_SIGMAS = 4.0


def rail_runs(rails: Iterable[Mapping[Pair, Sequence[float]]]) -> dict[Pair, list[tuple[float, int]]]:
    """Each pair's figure on each of ``rails`` (as ``rail_figures``) with the runs it rests on."""
    pooled: dict[Pair, list[tuple[float, int]]] = defaultdict(list)
    for runs in rails:
        for pair, values in runs.items():
            if values:
                pooled[pair].append((judged_gbps(values), len(values)))
    return pooled


def run_sd(figures: Iterable[Sequence[tuple[float, int]]]) -> tuple[float, int]:
    """The noise of one run (Gb/s, a standard deviation) from figures that should be equal
    (each group of ``figures``: a pair's on its rails, each with the runs it rests on): each
    figure's squared distance from its group's mean weighted by its runs (a figure of k runs
    scatters by a k-th of a run's variance), pooled, and the degrees of freedom (groups of two
    figures or more). A pair re-run on its rails and pairs run once, pooled alike, made the
    noise of one run 17.5 Gb/s where it was 23.5, and a healthy 4-node job's NIC was drained."""
    squares, degrees = 0.0, 0
    for group in figures:
        if len(group) < 2:
            continue
        weight = sum(runs for _, runs in group)
        centre = math.fsum(value * runs for value, runs in group) / weight
        squares += math.fsum(runs * (value - centre) ** 2 for value, runs in group)
        degrees += len(group) - 1
    return (math.sqrt(squares / degrees), degrees) if degrees else (0.0, 0)


def mean_sd(sigma: float, runs: Sequence[int]) -> float:
    """The noise of a mean of figures each resting on ``runs`` runs, ``sigma`` a run's."""
    return sigma * math.sqrt(math.fsum(1 / count for count in runs)) / len(runs) if runs else 0.0


def rail_noise(rails: Iterable[Mapping[Pair, Sequence[float]]]) -> tuple[float, int]:
    """The noise of one run of a pair in a family of ``rails`` (the same hardware), Gb/s, and
    its degrees of freedom: how each pair's figures on the rails scatter about their mean
    (``run_sd``), leaving out a figure ``RAIL_CLIP_SIGMAS`` robust sigmas (the median distance
    from its pair's median, over all pairs) from its pair's median. A small job re-runs a
    handful of pairs: their run-to-run noise, from five degrees of freedom, came out at 7 Gb/s
    where the runs scatter by 16 (4 % noise), and a healthy pair's re-run 6.6 % low failed as a
    slow link. Its eight rails give every pair seven."""
    pooled = rail_runs(rails)
    distances = sorted(abs(value - statistics.median(v for v, _ in group)) for group in pooled.values()
                       if len(group) >= 2 for value, _ in group)
    if not distances:
        return 0.0, 0
    clip = RAIL_CLIP_SIGMAS * MAD_TO_SIGMA * statistics.median(distances)
    kept = []
    for group in pooled.values():
        centre = statistics.median(v for v, _ in group)
        kept.append([(value, runs) for value, runs in group if abs(value - centre) <= clip])
    return run_sd(kept)


def relative_rail_noise(rails: Iterable[Mapping[Pair, Sequence[float]]]) -> tuple[float, int]:
    """``rail_noise`` of each pair's figures over their mean on every rail: a fraction of the
    pair's own level. Link noise scales with the rate: in a job with two NICs 40 % slow, the
    noise of their pairs (the many) set the Gb/s, and a healthy pair's chance dip on one rail
    read 3 sigma deep."""
    rails = list(rails)
    means = {pair: statistics.fmean(values) for pair, values in rail_figures(rails).items() if values}
    return rail_noise({pair: [value / means[pair] for value in values] for pair, values in rail.items()
                       if means.get(pair, 0.0) > 0} for rail in rails)


def pooled_sd(samples: Iterable[Sequence[float]]) -> tuple[float, int]:
    """The standard deviation pooled over ``samples`` of two values or more, each about its own
    mean, and its degrees of freedom (0.0, 0 without any): ``run_sd`` of single runs."""
    return run_sd([(value, 1) for value in values] for values in samples)


def families_below(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]], thresholds: LinkThresholds,
                   good_elsewhere: Mapping[LinkGroup, frozenset[str]] | None = None) -> dict[Family, float]:
    """Per family (a backend the line rate judges, on two rails or more) whose pairs, each the
    mean of its figures on all the family's rails, are below the line-rate floor as a whole, its
    level: a whole small job's (2 to ``min_hosts`` - 1 hosts) where ``level_below`` finds one, a
    fleet's where even its hosts' best pairs are below the floor (as ``group_reference`` asks of
    one rail), the median of its pairs. Rail by rail, a handful of pairs straddle the floor: a
    4-node job whose every pair ran at 85 % of its line rate (the floor 90 %) at 4 % link noise
    had a pair over the floor on a third of its rails, and those rails judged its equally slow
    NICs against each other: one was drained as a slow_nic in 3 jobs of 10; an 8-node job passed,
    exit 0. Over eight rails a pair has a third of the noise. Not where a rail's pairs sit
    clearly over the floor (``deficit_pct`` over it, by their median): those rails are healthy,
    and the others slow on their own. ``good_elsewhere``: per group, the hosts a higher line rate
    shows good, whose best pairs here are their partners' and say nothing of the family's level
    (as ``group_reference``)."""
    families: dict[Family, list[Mapping[Pair, Sequence[float]]]] = defaultdict(list)
    good: dict[Family, set[str]] = defaultdict(set)
    for group, runs in figures.items():
        hosts = len(host_bests(runs))
        if group.rail is not None and hosts >= 2 and group.backend in thresholds.floor_backends \
                and (thresholds.whole_job or hosts >= thresholds.min_hosts):
            families[family(group)].append(runs)
            good[family(group)] |= (good_elsewhere or {}).get(group, frozenset())
    found = {}
    for key, rails in families.items():
        floor = rate_floor(key[1], thresholds)
        if len(rails) < 2 or floor is None:
            continue
        # every rail at the floor, none clearly over it: two rails at half speed beside six
        # healthy ones put the pairs' means under it as well, and are those rails' own
        near = floor * (1 + thresholds.deficit_pct / 100)
        if any(statistics.median(judged_gbps(values) for values in runs.values()) >= near for runs in rails):
            continue
        counted = rail_runs(rails)
        means = {pair: mean_gbps(value for value, _ in group) for pair, group in counted.items()}
        by_host = host_bests({pair: [value] for pair, value in means.items()})
        bests = sorted(value for host, value in by_host.items() if host not in good[key]) or sorted(by_host.values())
        if len(by_host) < thresholds.min_hosts:
            level = level_below(means, floor) if thresholds.whole_job else None
        else:
            # a best is a maximum of its host's pair means, each with its own noise: the more pairs
            # a host has, the higher it reads
            sigma, _ = run_sd(counted.values())
            margin = statistics.median(mean_sd(sigma, [runs for _, runs in group]) for group in counted.values())
            level = statistics.median(means.values()) if bests_below(bests, floor, thresholds, margin) else None
        if level is not None:
            found[key] = level
    return found


def bests_below(bests: Sequence[float], floor: float, thresholds: LinkThresholds, margin: float = 0.0) -> bool:
    """Whether a fleet's hosts' best pairs (``bests``, sorted) sit below the line-rate ``floor``:
    their level, and the median of their upper half (half the hosts reaching it with each other is
    no group below its line rate), that one by more than ``margin`` over the floor (a family's
    pairs over all its rails: one pair mean's noise, what a host's best of several reads high by;
    healthy hosts reach their line rate, several such noises over the floor). A 16-node job at
    85 % of its line rate (the floor 90 %) at 6 % link noise was below its floor on its screen,
    then, its confirm rounds giving its hosts more pairs, their best pairs' upper half read 0.1 %
    over the floor, and it passed with nothing said."""
    return fleet_reference(bests, len(bests), thresholds.mad_floor_pct).value < floor \
        and statistics.median(bests[len(bests) // 2:]) < floor + margin


def rail_figures(rails: Iterable[Mapping[Pair, Sequence[float]]]) -> dict[Pair, list[float]]:
    """Each pair's figure on each of ``rails`` (the median of its runs there, as it is judged), pooled: the rails of
    one family are the same hardware (job_levels, gpudiag.links.acrossrails)."""
    return {pair: [value for value, _ in group] for pair, group in rail_runs(rails).items()}


# A line-rate floor within this many sigmas of the healthy level cuts into healthy noise; told
# only from this many pairs above it (a spread from a handful of pairs is too rough to tell).
FLOOR_CUT_SIGMAS = 3.0
FLOOR_CUT_PAIRS = 24


def group_reference(group: LinkGroup, runs: Mapping[Pair, Sequence[float]], thresholds: LinkThresholds,
                    baseline: GroupBaseline | None = None, job: float | None = None,
                    trim_spread: float = 0.0, good_elsewhere: frozenset[str] = frozenset(),
                    family_below: float | None = None) -> GroupReference:
    """The group's references (see GroupReference). ``job``: the small groups' level of its
    family (``job_levels``), used where the group has too few hosts for a fleet level, unless
    that level is itself below the line-rate floor or the baseline's cutoff (every host is then
    slow with every partner: which of them cannot be told, and the floor and the baseline judge
    alone). ``trim_spread``: the least spread (a fraction of the level) the fleet level sets
    pairs aside by (gpudiag.analysis.reference.fleet_reference). ``good_elsewhere``: hosts whose
    NIC a group of a higher line rate shows good; their best pairs here are their partners' and
    say nothing of the group's level (an 8-node fleet of four 400 and four 200 Gb/s hosts, two of
    the 200s at 75 %: the 400s' only 200 Gb/s pairs were with those two, and the group's best pairs
    read it below its line rate, a slow_network, in 12 sweeps of 20). ``family_below``: the
    family's level where its pairs over all its rails together are below the floor
    (``families_below``): this rail is below it too, whatever its own few pairs show (a small
    job's rail takes that level)."""
    means = sorted(judged_gbps(values) for values in runs.values())
    best = host_bests(runs)
    floor = line_rate_floor(group, thresholds)
    members = tuple(sorted(best))
    below = None
    if len(best) < thresholds.min_hosts and thresholds.whole_job:
        below = family_below or level_below({pair: judged_gbps(values) for pair, values in runs.items()}, floor)
    if below is not None:
        # Every pair below the line rate, alike or with a NIC slower still: the job's network as a
        # whole (a LinkShift), its pairs judged among themselves only beyond what "alike" allows.
        return GroupReference(group, len(best), len(means), below, below * (ALIKE - 1) / 3, floor, shifted=True,
                              baseline=baseline, members=members, job_level=True)
    if len(best) < thresholds.min_hosts:
        if job is None or len(best) < 3 or (floor is not None and job < floor) or (
                baseline is not None and job < baseline.cutoff_gbps):
            return GroupReference(group, len(best), len(means), None, None, floor, baseline=baseline, members=members)
        return GroupReference(group, len(best), len(means), job, job * thresholds.mad_floor_pct / 100, floor,
                              baseline=baseline, members=members, job_level=True)
    # A host's best pair is healthy unless its own NIC (or every partner's) is slow: if even the
    # best figures sit below the floor, the whole group is below its line rate. Not where half the
    # hosts or more reach it with each other: three slow NICs among six hosts left their densest
    # level below the floor on half the rails, and the fabric was blamed beside the three NICs.
    bests = sorted(value for host, value in best.items() if host not in good_elsewhere) or sorted(best.values())
    shifted = floor is not None and (family_below is not None or bests_below(bests, floor, thresholds))
    basis = means if floor is None or shifted else [value for value in means if value >= floor] or means
    fleet = fleet_reference(basis, len(best), thresholds.mad_floor_pct, trim_spread=trim_spread)
    if basis is not means and len(basis) >= FLOOR_CUT_PAIRS and fleet.value - FLOOR_CUT_SIGMAS * fleet.spread <= floor:
        # The floor cuts into the healthy pairs' own noise (at 12 % run-to-run noise a fifth of
        # them fall under it): leaving out the pairs under it lifted the level and shrank the
        # spread, and healthy pairs became slow links. Then every pair is the basis (the level
        # is found from the top, slow pairs set aside by their distance from it). Where the
        # floor lies far below the healthy cluster, it only sets aside slow pairs: in a small
        # fabric most pairs may touch a slow NIC, and the cut keeps them out of the level.
        fleet = fleet_reference(means, len(best), thresholds.mad_floor_pct, trim_spread=trim_spread)
    if group.line_rate_gbps and fleet.value > group.line_rate_gbps:
        # No pair runs faster than its line rate: a level above it is a few lucky pairs' (a rail of
        # a paused job's six hosts at 6 % link noise came out at 111 % of the line, and a pair with
        # a NIC 10 % slow read 29 % under it: a slow link beside the NIC).
        fleet = dataclasses.replace(fleet, value=group.line_rate_gbps)
    # The fleet level itself materially below the baseline: a regression the fabric shares (past
    # both levels' own errors: group_references, once the family's spread is known).
    below_baseline = baseline is not None and baseline.deficit_pct(fleet.value) >= thresholds.deficit_pct
    return GroupReference(group, len(best), len(means), fleet.value, fleet.spread, floor, shifted, baseline,
                          below_baseline, members, level_pairs=fleet.level_values)


def _below_past_errors(level: float, spread: float, values: float, baseline: GroupBaseline, robust_z: float) -> bool:
    """Whether a fleet ``level`` (of ``values`` pair figures, ``spread`` Gb/s apart) sits below
    ``baseline``'s median by more than the two levels' own errors allow, ``robust_z`` of them
    together: the fleet's, ``LEVEL_ERROR`` of its spread over √values; the baseline's, a median's
    (``MEDIAN_EFFICIENCY``) of its spread over √count. A baseline of 16 pair figures at 6 % link
    noise sits 2 % off by itself; a rail of a healthy 32-node fleet at 2.5 % below it read 6 % below
    its 3.7 %-high baseline, and was a `fleet_shift` (1 sweep in 10 of that bench row at CV 3 %)."""
    error = math.hypot(LEVEL_ERROR * spread / math.sqrt(max(values, 1.0)),
                       MEDIAN_EFFICIENCY * baseline.spread_gbps / math.sqrt(max(baseline.count, 1)))
    return error <= 0 or (level - baseline.median_gbps) / error <= robust_z


# Pair figures within this ratio of each other run alike: one cause they share slows them all.
ALIKE = 1.15


def network_below(means: Sequence[float], floor: float | None) -> bool:
    """Whether a small group's pair figures (``means``, sorted) all fall below the line-rate
    ``floor`` and run alike (the fastest within ALIKE of the slowest): its network as a whole is
    slow — the fabric, or every one of its NICs — which no part of it can be told from."""
    return floor is not None and bool(means) and means[0] > 0 and means[-1] < floor and means[-1] <= means[0] * ALIKE


def level_below(figures: Mapping[Pair, float], floor: float | None) -> float | None:
    """A small group's level where its network as a whole is below the line-rate ``floor``
    (None where it is not), from each pair's figure (``figures``): every pair alike below it
    (``network_below``: their median), or every pair below it and half the hosts or more with
    best pairs alike (within ALIKE of the fastest: the median of the pairs among them), a NIC or
    two slower still judged against that level. A 4-node job at 58 % of its line rate with one
    NIC at 46 % named that NIC and left the other three hosts unchecked, the network unnamed.
    (The hosts' best pairs themselves sit high, the best of a few noisy figures: at 6 % noise
    a healthy pair 18 % under them was failed as a slow link.)"""
    means = sorted(figures.values())
    if network_below(means, floor):
        return statistics.median(means)
    if floor is None or not means or means[0] <= 0 or means[-1] >= floor:
        return None
    bests = host_bests({pair: [value] for pair, value in figures.items()})
    top = max(bests.values())
    alike = {host for host, best in bests.items() if best * ALIKE >= top}
    among = [value for (a, b), value in figures.items() if a in alike and b in alike]
    return statistics.median(among) if 2 * len(alike) >= len(bests) and among else None


def slow_on_this_rail(runs: Mapping[Pair, Sequence[float]], elsewhere: Mapping[Pair, Sequence[float]],
                      sigma: float, dof: int = 0, *, floor: float, robust_z: float) -> bool:
    """Whether a small job's rail whose pairs all run below the line-rate ``floor`` (``level_below``)
    is slow as a whole: the pairs that reach the floor on the family's other rails (``elsewhere``:
    their figures on each) fall here below their figures there, together, by more than chance,
    ``robust_z`` sigmas of the rails' noise (``sigma``, a run's, a fraction of the pair's level:
    ``relative_rail_noise``; 0: not known, and the rail is taken as it reads), raised to the
    Student bar of its ``dof`` degrees of freedom (a 2-node job's one pair gives its rails' noise
    seven: at 6 % link noise a rail's dip 3.1 of such sigmas deep failed its network). In a 3-node
    job with one NIC 10 % slow at 6 % link noise, the healthy pair dipped under the floor beside the
    NIC's two on some rail in half such jobs, and the fabric was failed as a whole."""
    if sigma <= 0:
        return True
    falls, variance, judged = 0.0, 0.0, []
    for pair, values in runs.items():
        there = elsewhere.get(pair, ())
        if not values or not there or mean_gbps(there) < floor:
            continue  # slow on the other rails too: its NIC's, or the whole network's
        level = mean_gbps(there)
        # A pair run again was chosen by its lowest run: its other runs judge it (again.judge_again).
        kept = sorted(values)[1:] if len(values) >= 2 else values
        falls += judged_gbps(kept) / level - 1
        variance += sigma ** 2 * (1 / len(kept) + 1 / len(there))
        judged.append(len(values))
    if judged == [1]:
        # One pair's one run is no rail's verdict: a link's noise has a long lower tail, and in a
        # 4-node job with two NICs at 60 % at 4 % link noise the one healthy pair's single run fell
        # 12 % on one rail (3.8 of the rails' sigmas) in 2 jobs of 20, and failed the network. Its
        # rail is judged pair by pair, and the pair is run again.
        return False
    # Those pairs' falls together: a whole rail 20 % slow at 4 % link noise left one pair of five
    # within chance of its other rails now and then, and pair by pair the 5-node job passed.
    return variance == 0 or falls / math.sqrt(variance) <= -student_bar(abs(robust_z), dof)


def host_bests(runs: Mapping[Pair, Sequence[float]]) -> dict[str, float]:
    """Each host's best pair figure (a pair's judged figure: the median of its runs), Gb/s."""
    best: dict[str, float] = {}
    for pair, values in runs.items():
        for host in pair:
            best[host] = max(best.get(host, 0.0), judged_gbps(values))
    return best


def group_references(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]], thresholds: LinkThresholds,
                     baseline: LinkBaseline | None, good_elsewhere: Mapping[LinkGroup, frozenset[str]] | None = None
                     ) -> dict[LinkGroup, GroupReference]:
    """Each group's references (sorted by group; gpudiag.links.attribution). Where the family's
    rails have a fleet level, each rail's level is found setting pairs aside by the family's
    spread, its spread is at least the family's (``family_spreads``: every pair about its own
    rail's level), and the level's own error (``level_error_gbps``) joins the spread in every z.
    A small job's spread is at least the noise its rails show (``rail_noise``), else its pairs'
    run-to-run noise; and a rail of it whose pairs all run below the floor is slow as a whole
    only where that is no chance dip of pairs that reach the floor on its other rails
    (``slow_on_this_rail``). ``good_elsewhere``: per group, the hosts a higher line rate shows
    good (group_reference)."""
    good = good_elsewhere or {}
    jobs = job_levels(figures, thresholds)
    below = families_below(figures, thresholds, good)
    references = {group: group_reference(group, figures[group], thresholds,
                                         group_baseline(group, baseline, thresholds), jobs.get(family(group)),
                                         good_elsewhere=good.get(group, frozenset()),
                                         family_below=below.get(family(group)))
                  for group in sorted(figures, key=LinkGroup.sort_key)}
    spreads: dict[Family, list[float]] = defaultdict(list)
    for group, reference in references.items():
        if reference.spread_gbps is not None and not reference.job_level:
            spreads[family(group)].append(reference.spread_gbps)
    trims = {key: statistics.median(sorted(values)) for key, values in spreads.items()}
    # A rail's twenty pairs can crowd at its top by chance, with a tight spread above them; the
    # pairs below it were then set aside and the level came out a spread high: of 4,000 healthy
    # 17-pair rails, one in seven sat more than half a spread high, and 4 sweeps in 134 of a
    # healthy 48-node fleet at CV 1.5-2 % drained a NIC "slow with its partners" against such a
    # level (bench/detection_confirm.py's healthy mixed fleet). Every
    # rail's level is found again setting pairs aside by its family's spread (as a GPU pair's key
    # is: gpudiag.analysis.suspects.references), whatever its own spread came out.
    for group, reference in references.items():
        trim, level = trims.get(family(group)), reference.fleet_gbps
        if level and trim and not reference.job_level and reference.spread_gbps is not None:
            references[group] = group_reference(group, figures[group], thresholds,
                                                group_baseline(group, baseline, thresholds), jobs.get(family(group)),
                                                trim / level, good.get(group, frozenset()), below.get(family(group)))
    # Where no rail of the family has a fleet's spread (a small job), the spread of one rail's
    # figure about its pair's other rails (``rail_noise``), else the run-to-run noise of the
    # re-tested pairs (chosen for a low first run, and few): never to widen a fleet's.
    noise = run_noise(figures)
    pooled = family_spreads(figures, references, trims)
    floors = {key: pooled.get(key) or _small_job_noise(figures, key) or noise.get(key, 0.0)
              for key in {family(group) for group in figures}}
    for group, reference in references.items():
        if reference.shifted and reference.job_level and reference.floor_gbps is not None \
                and family(group) not in below and not slow_on_this_rail(
                figures[group], _elsewhere(figures, group),
                *_relative_noise(figures, group, floors, reference.fleet_gbps),
                floor=reference.floor_gbps, robust_z=thresholds.robust_z):
            references[group] = group_reference(group, figures[group], dataclasses.replace(thresholds, whole_job=False),
                                                group_baseline(group, baseline, thresholds), jobs.get(family(group)),
                                                good_elsewhere=good.get(group, frozenset()))
    return {group: _past_errors(_with_level_error(reference.widened(floors[family(group)])), thresholds)
            for group, reference in references.items()}


def _past_errors(reference: GroupReference, thresholds: LinkThresholds) -> GroupReference:
    """``reference`` below its baseline only where its level is past both levels' own errors
    (``_below_past_errors``), each judged with the family's spread at least: the baseline measured
    the same hardware, and its own MAD of a few pair figures is rough."""
    base, level, spread = reference.baseline, reference.fleet_gbps, reference.spread_gbps
    if not reference.baseline_shifted or base is None or level is None or spread is None:
        return reference
    wide = dataclasses.replace(base, spread_gbps=max(base.spread_gbps, spread))
    if _below_past_errors(level, spread, reference.level_count, wide, thresholds.robust_z):
        return reference
    return dataclasses.replace(reference, baseline_shifted=False)


def _elsewhere(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]],
               group: LinkGroup) -> dict[Pair, list[float]]:
    """Each pair's figure on the other rails of ``group``'s family."""
    return rail_figures(runs for other, runs in figures.items() if other != group and family(other) == family(group))


def _relative_noise(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]], group: LinkGroup,
                    floors: Mapping[Family, float], level: float | None) -> tuple[float, int]:
    """The noise of ``group``'s family's other rails as a fraction of a pair's level, and its
    degrees of freedom (``relative_rail_noise``); with too few, the family's ``floors`` over
    ``level`` (0 degrees). Not the rail's own: a whole rail 20 % slow at 4 % link noise sat near
    the outlier clip, widened the noise it was judged by to 7 %, and a 3-node job passed."""
    sigma, degrees = relative_rail_noise(runs for other, runs in figures.items()
                                         if family(other) == family(group) and other != group)
    if degrees >= MIN_NOISE_DEGREES:
        return sigma, degrees
    return (floors[family(group)] / level if level else 0.0), 0


def _small_job_noise(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]], key: Family) -> float:
    """The rails' noise of the family ``key`` (``rail_noise``); 0.0 with fewer than
    ``MIN_NOISE_DEGREES`` degrees of freedom."""
    sigma, degrees = rail_noise(runs for group, runs in figures.items() if family(group) == key)
    return sigma if degrees >= MIN_NOISE_DEGREES else 0.0


# Pairs this many of their rail's spreads from its level are no rail's noise (a slow NIC's, a
# slow link's), and pairs this many of the family's robust sigmas from it are left out of its spread.
GROSS_SIGMAS, CLIP_SIGMAS = 5.0, 4.0


def family_spreads(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]],
                   references: Mapping[LinkGroup, GroupReference],
                   typical: Mapping[Family, float]) -> dict[Family, float]:
    """Each family's spread (Gb/s, a standard deviation): pooled over its rails with a fleet level
    (not a small job's), every pair figure about its own rail's level, a rail's degrees of
    freedom its pairs less one. Pairs ``GROSS_SIGMAS`` of their rail's own spread (the MAD of the
    pairs its level kept, or the family's ``typical`` one, the median of its rails', where that
    is wider) from the level are left out, and then those ``CLIP_SIGMAS`` of the family's robust
    sigma (1.4826 × the median distance of the rest): a slow NIC's or link's pairs, half a small
    fleet's, never widen it by their own size. The rails of one family are the same hardware: one
    rail's MAD from twenty pairs is off by a quarter either way, and even the median of eight such
    came out at 0.74 of the noise in a healthy sweep that then drained a NIC; the pooled figure
    from a hundred and more pairs is within a tenth."""
    distances: dict[Family, list[list[float]]] = defaultdict(list)
    for group, reference in references.items():
        level, spread = reference.fleet_gbps, reference.spread_gbps
        if level is None or spread is None or reference.job_level:
            continue
        gross = GROSS_SIGMAS * max(spread, typical.get(family(group), 0.0))
        distances[family(group)].append([d for d in sorted(judged_gbps(values) - level
                                                           for values in figures[group].values()) if abs(d) <= gross])
    spreads = {}
    for key, rails in distances.items():
        every = sorted(abs(d) for rail in rails for d in rail)
        if not every:
            continue
        clip = CLIP_SIGMAS * MAD_TO_SIGMA * statistics.median(every)
        kept = [[d for d in rail if abs(d) <= clip] for rail in rails]
        degrees = sum(len(rail) - 1 for rail in kept if len(rail) >= 2)
        if degrees:
            spreads[key] = math.sqrt(math.fsum(sorted(d * d for rail in kept if len(rail) >= 2 for d in rail))
                                     / degrees)
    return spreads


def _with_level_error(reference: GroupReference) -> GroupReference:
    """A fleet level's own error (``LEVEL_ERROR`` spreads over the square root of the pairs it
    rests on: a rail's level from seventeen pairs is off by 0.3 to 0.4 of a spread), carried into
    every z against it; a small job's level, the median of a handful of pairs pooled over its
    rails, is judged by the deficit and the floor as before."""
    if reference.fleet_gbps is None or reference.spread_gbps is None or reference.job_level or not reference.pairs:
        return reference
    return dataclasses.replace(reference, level_error_gbps=LEVEL_ERROR * reference.spread_gbps
                               / math.sqrt(reference.level_count))
