"""A group's levels: its fleet level and spread (``group_reference``), a small job's own level
and the rails' noise: each pair's figures pooled over the rails of its family (backend and line
rate: the same hardware and the same measurement), and the spread of figures that should be
equal pooled over many small samples (gpudiag.links.attribution, gpudiag.links.acrossrails)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from ..analysis.reference import fleet_reference
from .groups import (
    Family,
    GroupBaseline,
    GroupReference,
    LinkGroup,
    LinkThresholds,
    family,
    judged_gbps,
    line_rate_floor,
    mean_gbps,
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


def pooled_sd(samples: Iterable[Sequence[float]]) -> tuple[float, int]:
    """The standard deviation pooled over ``samples`` of two values or more, each about its own
    mean, and its degrees of freedom (0.0, 0 without any)."""
    squares, degrees = 0.0, 0
    for values in samples:
        if len(values) >= 2:
            centre = mean_gbps(values)
            squares += math.fsum((value - centre) ** 2 for value in sorted(values))
            degrees += len(values) - 1
    return (math.sqrt(squares / degrees), degrees) if degrees else (0.0, 0)


def rail_figures(rails: Iterable[Mapping[Pair, Sequence[float]]]) -> dict[Pair, list[float]]:
    """Each pair's figure on each of ``rails`` (the median of its runs there, as it is judged), pooled: the rails of
    one family are the same hardware (job_levels, gpudiag.links.acrossrails)."""
    pooled: dict[Pair, list[float]] = defaultdict(list)
    for runs in rails:
        for pair, values in runs.items():
            if values:
                pooled[pair].append(judged_gbps(values))
    return pooled


# A line-rate floor within this many sigmas of the healthy level cuts into healthy noise; told
# only from this many pairs above it (a spread from a handful of pairs is too rough to tell).
FLOOR_CUT_SIGMAS = 3.0
FLOOR_CUT_PAIRS = 24


def group_reference(group: LinkGroup, runs: Mapping[Pair, Sequence[float]], thresholds: LinkThresholds,
                    baseline: GroupBaseline | None = None, job: float | None = None,
                    trim_spread: float = 0.0) -> GroupReference:
    """The group's references (see GroupReference). ``job``: the small groups' level of its
    family (``job_levels``), used where the group has too few hosts for a fleet level, unless
    that level is itself below the line-rate floor or the baseline's cutoff (every host is then
    slow with every partner: which of them cannot be told, and the floor and the baseline judge
    alone). ``trim_spread``: the least spread (a fraction of the level) the fleet level sets
    pairs aside by (gpudiag.analysis.reference.fleet_reference)."""
    means = sorted(judged_gbps(values) for values in runs.values())
    best = host_bests(runs)
    floor = line_rate_floor(group, thresholds)
    members = tuple(sorted(best))
    if len(best) < thresholds.min_hosts and thresholds.whole_job and network_below(means, floor):
        # Every pair alike and below the line rate: the job's network as a whole (a LinkShift),
        # its pairs judged among themselves only beyond what "alike" allows.
        level = statistics.median(means)
        return GroupReference(group, len(best), len(means), level, level * (ALIKE - 1) / 3, floor, shifted=True,
                              baseline=baseline, members=members, job_level=True)
    if len(best) < thresholds.min_hosts:
        if job is None or len(best) < 3 or (floor is not None and job < floor) or (
                baseline is not None and job < baseline.cutoff_gbps):
            return GroupReference(group, len(best), len(means), None, None, floor, baseline=baseline, members=members)
        return GroupReference(group, len(best), len(means), job, job * thresholds.mad_floor_pct / 100, floor,
                              baseline=baseline, members=members, job_level=True)
    # A host's best pair is healthy unless its own NIC (or every partner's) is slow: if even the
    # best figures sit below the floor, the whole group is below its line rate.
    best_level = fleet_reference(sorted(best.values()), len(best), thresholds.mad_floor_pct).value
    shifted = floor is not None and best_level < floor
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
    # The fleet level itself materially below the baseline: a regression the fabric shares.
    below_baseline = baseline is not None and baseline.deficit_pct(fleet.value) >= thresholds.deficit_pct
    return GroupReference(group, len(best), len(means), fleet.value, fleet.spread, floor, shifted, baseline,
                          below_baseline, members, level_pairs=fleet.level_values)


# Pair figures within this ratio of each other run alike: one cause they share slows them all.
ALIKE = 1.15


def network_below(means: Sequence[float], floor: float | None) -> bool:
    """Whether a small group's pair figures (``means``, sorted) all fall below the line-rate
    ``floor`` and run alike (the fastest within ALIKE of the slowest): its network as a whole is
    slow — the fabric, or every one of its NICs — which no part of it can be told from."""
    return floor is not None and bool(means) and means[0] > 0 and means[-1] < floor and means[-1] <= means[0] * ALIKE


def host_bests(runs: Mapping[Pair, Sequence[float]]) -> dict[str, float]:
    """Each host's best pair figure (a pair's judged figure: the median of its runs), Gb/s."""
    best: dict[str, float] = {}
    for pair, values in runs.items():
        for host in pair:
            best[host] = max(best.get(host, 0.0), judged_gbps(values))
    return best
