"""A small job's own level and the rails' noise: each pair's figures pooled over the rails of its
family (backend and line rate: the same hardware and the same measurement), and the spread of
figures that should be equal pooled over many small samples (gpudiag.links.attribution,
gpudiag.links.acrossrails)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from .groups import Family, LinkGroup, LinkThresholds, family, host_bests, judged_gbps, mean_gbps
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
