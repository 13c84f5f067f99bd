"""A slow pair judged again on its runs after the lowest (gpudiag.links.attribution): the run that
made it a suspect was chosen for being slow, so only the runs after it may confirm it, against
the spread of such a figure about its rail's level and at a bar that rises with the pairs so
judged."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import cast

from ..analysis.noisy import LEVEL_ERROR, lasting_variance
from ..words import fixed, plural
from .groups import FLEET, UNIT, Family, GroupReference, LinkGroup, LinkThresholds, PairFigure, family, judged_gbps
from .levels import run_noise
from .schedule import Pair

# The chance that the pairs of one attribution re-tested and judged on their re-runs together
# confirm a healthy one (as gpudiag.analysis.noisy.FAMILY_ALPHA for the GPUs' re-tests).
RETEST_ALPHA = 0.001


@dataclass(frozen=True)
class Retests:
    """What the pairs run twice or more say: how many there are (``count``: the family of
    re-runs judged, which raises the bar) and each family's run-to-run noise (Gb/s, a standard
    deviation; gpudiag.links.levels.run_noise)."""

    count: int = 0
    run_sd_gbps: Mapping[Family, float] = field(default_factory=dict)


def retests_of(figures: Mapping[LinkGroup, Mapping[Pair, Sequence[float]]]) -> Retests:
    """The pairs of ``figures`` run twice or more, and each family's run-to-run noise."""
    return Retests(sum(1 for runs in figures.values() for values in runs.values() if len(values) >= 2),
                   run_noise(figures))


@dataclass(frozen=True)
class Again:
    """A slow pair's runs but the lowest, judged: their figure (Gb/s), its z against the level
    (None where no fleet level judges it), the bar, and the verdict."""

    gbps: float
    robust_z: float | None
    bar: float
    confirmed: bool
    note: str


def judge_again(figure: PairFigure, reference: GroupReference, thresholds: LinkThresholds,
           retests: Retests) -> Again | None:
    """The pair judged on its runs but the lowest (None: run once). The run that made it a suspect
    was chosen for being slow, so it is biased low; which run it was is not known here (the
    attribution is the same whatever the order of its results), and the lowest run is it or lower
    still, so what is left is judged no more harshly than the runs after the suspicion. Their
    figure (``judged_gbps``) must be slow, and where the fleet's own level judges it, far below
    that level: ``robust_z`` or more, at least as many sigmas as make a chance dip among the
    pairs run again so unlikely (``RETEST_ALPHA``), against the spread of such a figure
    (``again_spread``)."""
    if len(figure.runs_gbps) < 2:
        return None
    others = sorted(figure.runs_gbps)[1:]
    gbps = judged_gbps(others)
    run_sd = retests.run_sd_gbps.get(family(reference.group), 0.0)
    if reference.job_level and run_sd > 0:
        # A small job's level spreads as its pairs' figures do, each of the runs it had: once every
        # pair is run again (gpudiag.links.acrossrails.doubtful_pairs), as means of two. The runs
        # after the lowest are judged against the spread of a figure of as many runs: one healthy
        # pair's second run, 2.3 sigma of one run low, read as 3.1 of a mean of two, and failed.
        reference = reference.widened(run_sd * math.sqrt(_shrunk(len(others))))
    slow = reference.is_slow(gbps, thresholds)
    fleet = reference.fleet_gbps
    z, bar = None, -thresholds.robust_z
    if fleet is not None and reference.spread_gbps and not reference.job_level \
            and reference.judged_by(gbps, thresholds) == FLEET:
        z = (gbps - fleet) / again_spread(reference, len(others), run_sd)
        bar = max(bar, NormalDist().inv_cdf(1 - RETEST_ALPHA / max(1, retests.count)))
    confirmed = slow and (z is None or z <= -bar)
    what = f"run {fixed(gbps)}" if len(others) == 1 else f"runs' figure {fixed(gbps)}"
    words = f"its {plural(len(others), 'run')} after the lowest" if len(others) > 1 else "its other"
    note = f"{words} {what} {UNIT}"
    if z is not None:
        note += f", {-z:.1f} sigma of such a figure below the level with its error (bar {bar:.1f})"
    note += ": slow again" if confirmed else ": not slow again"
    return Again(gbps, z, bar, confirmed, note)


def again_spread(reference: GroupReference, runs: int, run_sd: float) -> float:
    """The spread (Gb/s) of a pair's figure of ``runs`` runs about its rail's level: what of the
    rail's spread lasts from run to run (pairs that differ by themselves, a cable), the run-to-run
    noise ``run_sd`` (0: not measured) shrunk by the runs (their mean for two, their median from
    three: pi / 2 of a mean's variance, which a median of three or four is within), and the
    level's own error (``LEVEL_ERROR`` of the wider of the two over the square root of its pairs:
    a rail's level from a dozen pairs is off by half a spread). Unmeasured, the rail's
    spread unshrunk, as coarse as one run. The run that chose the pair is never among the
    runs, so the figure is not biased low; the noise, measured on pairs run again for a low run,
    is if anything too wide."""
    spread = cast(float, reference.spread_gbps)
    level = (LEVEL_ERROR * max(spread, run_sd)) ** 2 / max(1, reference.level_count)
    if run_sd <= 0:
        return math.sqrt(spread ** 2 + level)
    return math.sqrt(lasting_variance(spread, run_sd, reference.level_count, None) + run_sd ** 2 * _shrunk(runs)
                     + level)


def _shrunk(runs: int) -> float:
    """A figure of ``runs`` runs' variance, in one run's: their mean's for two, their median's from
    three (pi / 2 of a mean's, which a median of three or four is within)."""
    return 1 / runs if runs <= 2 else math.pi / (2 * runs)
