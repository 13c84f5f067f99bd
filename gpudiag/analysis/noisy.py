"""Noisy keys: where one run's noise can hide a fail-size deficit, a wider screen and a re-test
of several runs, judged on the re-test runs alone.

A key is noisy where one run shows a ``deficit_fail`` deficit past ``robust_z`` less than nineteen
times in twenty: its measured spread (fleet, baseline) times ``robust_z`` plus ``POWER_Z``
exceeds ``deficit_fail`` (1.29 % with the defaults). At 3 % noise a GPU 8 % slow is 2.7 sigma
below its fleet, and one run and one re-test found it one sweep in five. On such a key:

- the screen widens: a GPU's result ``deficit_warn`` or more below the reference is a suspect
  (``screened``) even where its z does not reach ``robust_z`` (so it does on a key a little
  under noisy, wherever the ``robust_z`` cut lies deeper than ``deficit_warn``: ``screens``;
  there the suspects' runs are planned as below, but no other result is judged on them). A
  screened suspect is never a finding by itself: unconfirmed, it is dropped. Its host is
  re-tested, and every GPU result of the key the runs measured there is judged on them
  (gpudiag.analysis.suspects.confirm), so a slow GPU that noise lifted above the screen in the
  first run is still judged when any result of its host was screened;
- every suspect of the key asks for several re-test runs (``runs``), as many as make a deficit
  in the middle of the warn band stand out at the confirmation bar and past ``retest_deficit``,
  up to ``retest_max_runs`` (``planned_runs``);
- it is confirmed on the mean of its re-test runs alone (the first run chose it, so it is
  biased low and is left out), against the spread of a mean of that many runs: the fleet's
  spread less the run-to-run noise, plus the run-to-run noise over the runs. The run-to-run
  noise is measured, pooled over every re-tested result of the key; where the runs vary less
  than the fleet does (GPUs that differ by themselves, not by chance), that part of the fleet's
  spread stays whole, and no GPU is blamed for its fleet's normal scatter;
- the bar is ``robust_z`` raised, like a Bonferroni correction, so that the many screened
  results of a large fleet together confirm a healthy one about one sweep in a thousand
  (``FAMILY_ALPHA``), then to the Student t quantile for the noise's degrees of freedom.

A GPU pair's P2P key is judged on its runs too, but has no wide screen (``SCREENED_PROBES``): a
pair one run flagged past ``robust_z`` asks for several runs, and is confirmed on their mean
alone, against its metric's run-to-run noise (one host's runs measure all of its pairs).

What one node prints changes only its own verdict: a result whose runs scatter beyond a
chi-square's 99.9 % at the noise the median result shows is left out of the pooled noise, and
the bar's family counts at most 16 results of a key per host.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .measurements import HOST_DEVICES, Measurement
from .reference import BASELINE, FLEET, MAD_TO_SIGMA, KeyReferences, Reference, slow_as_a_whole
from .suspicion import Suspect
from .tails import MAD_LOG_VARIANCE, spread_dof, student_bar
from .thresholds import Thresholds

# Per-GPU probes, one figure per GPU and key, whose noise averages out over runs: a noisy key of
# these has the wide screen.
SCREENED_PROBES = frozenset({"gemm", "membw", "pcie", "smclock"})
# Probes whose noisy keys are judged on several re-test runs alone. P2P too, without the wide
# screen: a GPU pair's key has one value a host, a node 84 of them, and at 3 % noise a screen at
# ``deficit_warn`` would re-test every node; but a pair one run flagged, confirmed by the mean of
# that biased run and one more, named a healthy pair in one sweep of three (64 nodes).
NOISY_PROBES = SCREENED_PROBES | {"p2p"}
# The chance that the results of one sweep judged on their runs together confirm a healthy one.
# One in a hundred named a healthy GPU or P2P pair in 2 of 201 healthy sweeps of a 48-node
# three-model fleet at CV 1-2 % (a P2P pair's one re-test run 3.2 sigma low among a dozen judged,
# a GPU's three runs' mean 4 sigma low among a thousand); a sweep a night should meet such a
# false warning less than once a year.
FAMILY_ALPHA = 0.001
# The power the planned runs give a fault of exactly ``deficit_fail`` (one-sided normal quantile of 95 %).
POWER_Z = 1.645
# The most results of one key that one host counts in the bar's family (a node has at most 16 GPUs).
FAMILY_PER_HOST_KEY = 16
# How far a fleet's spread may exceed its run-to-run noise and still be that noise alone, at the
# least (a fleet of thousands of values): a smaller fleet's spread is itself less sure
# (``lasting_tolerance``).
LASTING_TOLERANCE = 1.15
# Degrees of freedom the pooled run-to-run noise needs before it narrows a mean's spread.
MIN_RUN_DOF = 10
# How far (in their errors together) the level a key's re-test found may lie from its fleet level
# and still be weighed in with it (``retest_level``).
AGREE_ERRORS = 2.0
# Of the means the re-test found its results at, how far from their host's median (in sigmas of
# their MAD) one may lie and still tell what of the key's spread lasts (``retest_lasting``): past
# it, a GPU slow.
LASTING_TRIM = 3.5
# A host's results of a key (re-tested in two runs or more) that its own median needs before they
# tell what its GPUs differ by (``retest_lasting``): half a node.
MIN_HOST_RESULTS = 4
# Results re-tested in two runs or more that a key needs before its re-test tells what of its
# spread outlasts the runs, and its level (``retest_lasting``): a node's eight GPUs.
MIN_LASTING_RESULTS = 8
# A fleet level's own error, in its spreads × 1 / √(values it rests on): the densest-window level
# (gpudiag.analysis.reference) of 2,000 normal samples of 16 to 512 values each scattered 1.6 to
# 1.8 of that, and sat 0.03 to 0.13 spreads high (a plain median: 1.25).
LEVEL_ERROR = 1.8
_NORMAL = statistics.NormalDist()
# A median of n normal values scatters this many times a mean's sigma / √n (√(π / 2)).
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)


def is_noisy(ref: Reference, probe: str, device: str, thresholds: Thresholds) -> bool:
    """Whether ``ref`` (judging one GPU's ``probe`` result) is too noisy for one run to show a
    ``deficit_fail`` deficit past ``robust_z`` nineteen times in twenty (the power the planned
    runs give too: ``planned_runs``)."""
    return ref.source in (FLEET, BASELINE) and probe in NOISY_PROBES and device not in HOST_DEVICES \
        and too_wide(ref, thresholds)


def too_wide(ref: Reference, thresholds: Thresholds) -> bool:
    """Whether one run judged against ``ref`` shows a ``deficit_fail`` deficit past ``robust_z``
    less than nineteen times in twenty (its spread over 1.29 % with the defaults)."""
    return (abs(thresholds.robust_z) + POWER_Z) * ref.spread > thresholds.deficit_fail_pct / 100 * abs(ref.value)


@dataclass(frozen=True)
class Screen:
    """A key's wide screen: its measured reference, the value at or below which a result is
    ``deficit_warn`` below it, and whether the key is noisy (``too_wide``: every GPU result of it
    that a re-test measures in several runs is judged on them, and counts in the bar's family)."""

    reference: Reference
    cutoff: float
    noisy: bool


def key_screen(key_refs: KeyReferences, probe: str, device: str, thresholds: Thresholds) -> Screen | None:
    """The screen of a key whose results ``probe`` measures on GPUs like ``device``; None where
    no measured reference's ``robust_z`` cut lies deeper than ``deficit_warn`` (``screens``), or
    ``probe`` has no screen (SCREENED_PROBES)."""
    if probe not in SCREENED_PROBES or device in HOST_DEVICES:
        return None
    ref = next((r for r in key_refs.references if screens(r, thresholds)), None)
    if ref is None:
        return None
    return Screen(ref, ref.value * (1 - thresholds.deficit_warn_pct / 100), too_wide(ref, thresholds))


def screens(ref: Reference, thresholds: Thresholds) -> bool:
    """Whether ``ref`` (a measured one) needs the wide screen: its ``robust_z`` cut lies deeper
    than ``deficit_warn`` (its spread over 1 % with the defaults). A noisy key's does (``too_wide``);
    so does one a little under it: a 4-node job's 32 values at 1 % noise spread 0.8 to 1.3 % by
    chance, and at 1.25 % a GPU 5 % slow had to read 3.75 % low to be a suspect at all (one run
    in ten did not), where a key 1.3 % wide screened at 3 %."""
    return ref.source in (FLEET, BASELINE) and \
        abs(thresholds.robust_z) * ref.spread > thresholds.deficit_warn_pct / 100 * abs(ref.value)


def confirmation_bar(count: int, thresholds: Thresholds) -> float:
    """The z (a positive number of sigmas) a mean of re-test runs must fall below its reference,
    when ``count`` results are judged on their runs in one sweep (``family_size``)."""
    return max(abs(thresholds.robust_z), _NORMAL.inv_cdf(1 - FAMILY_ALPHA / max(count, 1)))


def measured_run_sd(noise: Mapping[str, RunNoise], key: str) -> float:
    """The run-to-run noise of ``key`` (a fraction) where the re-test measured it on MIN_RUN_DOF
    degrees of freedom or more, else 0 (not measured)."""
    measured = noise.get(key)
    return measured.relative_sd if measured is not None and measured.dof >= MIN_RUN_DOF else 0.0


def planned_runs(ref: Reference, bar: float, thresholds: Thresholds) -> int:
    """The re-test runs whose mean shows a deficit in the middle of the warn band (``warn_band``)
    past ``bar`` and past ``retest_deficit`` nineteen times in twenty, were all of ``ref``'s spread
    run-to-run noise: at least 2, at most ``retest_max_runs``. Planned for a ``deficit_fail``
    deficit alone, two runs judged a GPU 5 % slow at 1 % noise in a 4-node job whose 32 values
    happened to spread 1.4 %, and it passed one time in three."""
    relative = 100 * ref.spread / abs(ref.value)
    target = warn_band(thresholds)
    margin = target - thresholds.retest_deficit_pct
    by_bar = ((bar + POWER_Z) * relative / target) ** 2
    by_deficit = (POWER_Z * relative / margin) ** 2 if margin > 0 else 0.0
    return min(max(math.ceil(max(by_bar, by_deficit)), 2), thresholds.retest_max_runs)


def warn_band(thresholds: Thresholds) -> float:
    """The deficit (percent) the re-test runs are planned to show: halfway from ``deficit_warn``
    to ``deficit_fail`` (4.5 % with the defaults), a fault worth a warning."""
    return (thresholds.deficit_warn_pct + thresholds.deficit_fail_pct) / 2


@dataclass(frozen=True)
class Lasting:
    """What of a key's spread outlasts its runs (GPUs that differ by themselves), measured on the
    re-test (``retest_lasting``): the relative variance of its results' means of runs about their
    host's mean, less the run-to-run noise's share of a mean of that many runs, and its degrees of
    freedom, so that ``_lasting`` weighs it against the fleet's spread; and those means (in the
    key's unit) of each re-tested host, which tell the level its GPUs run at (``retest_level``)."""

    relative_variance: float
    means_variance: float  # the means' own relative variance, before the noise's share is taken off
    noise_share: float  # the run-to-run noise's share of it (relative variance of a mean of that many runs)
    dof: int
    hosts: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class RunNoise:
    """The run-to-run noise of one key (a fraction of its values), pooled over its re-tested
    results, and the degrees of freedom it rests on; ``lasting``: what of the key's spread the
    re-test found to outlast its runs (None: too few results to tell, ``MIN_LASTING_RESULTS``)."""

    relative_sd: float
    dof: int
    lasting: Lasting | None = None


def run_noise(runs: Mapping[tuple[str, ...], Sequence[Measurement]],
              firsts: Mapping[tuple[str, ...], Measurement] | None = None) -> dict[str, RunNoise]:
    """Each key's run-to-run noise, from the re-test runs of every result re-tested twice or more
    (``runs``: each result's re-test measurements): their squares over their degrees of freedom,
    pooled, leaving out a result that scatters beyond what one in a thousand would at the noise
    the median result shows. A node that prints wild figures run after run is left out, and the
    key's noise (which judges every other GPU's mean) is the others'. A key of fewer than
    ``MIN_RUN_DOF`` degrees of freedom has its metric's (GPU model, probe, metric: every key of
    it pooled): a GPU pair's key has one result a host, and one host's six runs measure its 84
    pairs, 420 degrees of freedom of one noise.

    ``firsts``: the first-pass measurement of results that no suspect chose (by repeat key). A
    result re-tested once is measured in two runs with its first: the other GPUs, the other pairs
    of a host re-tested for one of them. Their first run was not chosen for being low, so the two
    runs' scatter is the noise alone (a suspect's first run is never used: it was chosen low).
    With ``firsts`` (a sweep's re-test), each key's noise also carries what its re-test found of
    its lasting spread and level (``retest_lasting``)."""
    found: dict[str, list[tuple[float, int]]] = defaultdict(list)
    metric_of: dict[str, tuple[str | None, str, str]] = {}
    for repeat, values in runs.items():
        unchosen = None if firsts is None or len(values) != 1 else firsts.get(repeat)
        figures = [m.value for m in values] + ([unchosen.value] if unchosen is not None else [])
        if len(figures) < 2:
            continue
        mean = statistics.fmean(figures)
        if mean <= 0:
            continue
        dof = len(figures) - 1
        first = values[0]
        found[first.key].append((sum((figure / mean - 1) ** 2 for figure in figures) / dof, dof))
        metric_of[first.key] = (first.gpu_model, first.probe, first.metric)
    noise = {key: _pooled(results) for key, results in found.items()}
    by_metric: dict[tuple[str | None, str, str], list[tuple[float, int]]] = defaultdict(list)
    for key, results in found.items():
        by_metric[metric_of[key]] += results
    pooled = {metric: _pooled(results) for metric, results in by_metric.items()}
    measured = {key: _metric_or_own(own, pooled[metric_of[key]]) for key, own in noise.items()}
    if firsts is None:
        return measured
    return {key: dataclasses.replace(own, lasting=retest_lasting(runs, key, own)) for key, own in measured.items()}


def retest_lasting(runs: Mapping[tuple[str, ...], Sequence[Measurement]], key: str,
                   noise: RunNoise) -> Lasting | None:
    """What of ``key``'s spread outlasts its runs, and the level its GPUs run at, from its results
    re-tested in two runs or more: each one's runs (never its first, which may have chosen it)
    average to that GPU's own level, and those levels scatter by the lasting spread plus the noise
    of a mean of that many runs. Each GPU's mean is taken against its own host's GPUs
    (``MIN_HOST_RESULTS`` of them at least), so that a host slow as a whole (a node fault, judged
    by its node median) widens nothing: a paused job's suspect 40 % slow on every GPU, re-tested
    with one reference, made the means of 16 GPUs two clusters, a lasting 38 %, and the node
    passed. The few slow GPUs the re-test was for are set aside first, past ``LASTING_TRIM`` MADs
    of the means about their hosts' medians; the rest give a variance about their host's mean, a
    degree of freedom each less one a host. (About a median of eight, or of the others, the MAD
    came out a seventh low, or its middle two means' gap twice over.) What hosts differ by for
    good the fleet's spread tells (``_lasting`` weighs the two). None with fewer than
    ``MIN_LASTING_RESULTS`` such results, or the noise measured too thinly (``MIN_RUN_DOF``).

    The fleet's spread less the run-to-run noise tells the same from one run of each GPU: a
    difference of two estimates, each off by a fifth in a 4-node job. At 3 % noise a 4-node
    job's spread came out 4.65 % and its runs' noise 2.3 %; a lasting 3.4 % was kept, and a GPU
    10 % slow, 12 % below on the mean of six runs, was 3.3 sigma of such a mean and passed."""
    if noise.dof < MIN_RUN_DOF:
        return None
    by_host: dict[str, dict[tuple[str, ...], float]] = defaultdict(dict)
    for repeat, values in runs.items():
        if len(values) >= 2 and values[0].key == key:
            by_host[values[0].host][repeat] = statistics.fmean(m.value for m in values)
    # The GPUs the re-test was for, ten sigmas of such a mean below their host's median, are set
    # aside first: past LASTING_TRIM of the MAD of every mean about its host's median.
    about_median: dict[tuple[str, ...], float] = {}
    hosts = []
    for host_means in by_host.values():
        median = statistics.median(host_means.values())
        if len(host_means) >= MIN_HOST_RESULTS and median > 0:
            hosts.append(host_means)
            about_median.update({repeat: mean / median - 1 for repeat, mean in host_means.items()})
    if len(about_median) < MIN_LASTING_RESULTS:
        return None
    cut = LASTING_TRIM * MAD_TO_SIGMA * statistics.median(abs(deviation) for deviation in about_median.values())
    squares, dof, kept, by_kept_host = 0.0, 0, {}, []
    for host_means in hosts:
        own = {repeat: mean for repeat, mean in host_means.items() if abs(about_median[repeat]) <= cut}
        if len(own) < 2:
            continue
        # about the mean of its host's kept GPUs: a variance with a degree of freedom each, less the host's
        centre = statistics.fmean(own.values())
        squares += math.fsum((mean / centre - 1) ** 2 for mean in own.values())
        dof += len(own) - 1
        kept.update(own)
        by_kept_host.append(tuple(own.values()))
    if len(kept) < MIN_LASTING_RESULTS or dof <= 0:
        return None
    means_variance = squares / dof
    noise_share = noise.relative_sd ** 2 * statistics.fmean(1 / len(runs[repeat]) for repeat in kept)
    return Lasting(max(means_variance - noise_share, 0.0), means_variance, noise_share, dof, tuple(by_kept_host))


def _metric_or_own(own: RunNoise, metric: RunNoise) -> RunNoise:
    """A key's run-to-run noise: its metric's (every key of its GPU model, probe and metric,
    pooled), where the key has fewer than MIN_RUN_DOF degrees of freedom of its own, or where its
    own is within what the metric's noise gives by chance (its variance under the chi-square's
    99.9 % at its degrees of freedom) and the metric rests on more: a GPU pair's P2P key has one
    result a host, and four re-tested hosts measured it with 20 degrees of freedom, where the
    same metric over the hosts' 84 pairs had 1,265. The Student bar of 20 degrees of freedom, 6.0
    where 1,265 give 4.8, let a pair 10 % slow at 3 % noise, 5.5 sigma below on six runs, pass in
    half of such sweeps. A key noisier than its metric allows keeps its own."""
    if own.dof < MIN_RUN_DOF:
        return metric
    if metric.dof > own.dof and own.relative_sd ** 2 <= metric.relative_sd ** 2 * _chi_square_far(own.dof):
        return metric
    return own


def _pooled(results: Sequence[tuple[float, int]]) -> RunNoise:
    """The pooled noise of results given as (variance, degrees of freedom), without the wild ones."""
    typical = statistics.median(variance / _chi_square_median(dof) for variance, dof in results)
    kept = [(variance, dof) for variance, dof in results if variance <= typical * _chi_square_far(dof)]
    dof = sum(d for _, d in kept)
    return RunNoise(math.sqrt(sum(variance * d for variance, d in kept) / dof), dof)


def _chi_square_median(dof: int) -> float:
    """The median of a chi-square over its degrees of freedom: exact for 1 and 2, else Wilson and
    Hilferty's (within 0.6 % at 3, closer beyond)."""
    if dof <= 2:
        return 0.45494 if dof == 1 else math.log(2)
    return (1 - 2 / (9 * dof)) ** 3


def _chi_square_far(dof: int) -> float:
    """The 99.9 % quantile of a chi-square over its degrees of freedom (Wilson and Hilferty: 11.1
    for 1, exactly 10.8; 7.1 for 2, exactly 6.9)."""
    spread = math.sqrt(2 / (9 * dof))
    return (1 - 2 / (9 * dof) + 3.09 * spread) ** 3


def family_size(results: Iterable[tuple[str, str]]) -> int:
    """How many results judged on their runs one sweep holds (``results``: each one's host and
    key), each host counting at most ``FAMILY_PER_HOST_KEY`` of a key: a node printing a thousand
    GPUs does not raise the bar every other node is judged at."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for place in results:
        counts[place] += 1
    return sum(min(count, FAMILY_PER_HOST_KEY) for count in counts.values())


def mean_spread(ref: Reference, runs: int, noise: RunNoise | None, floor_pct: float,
                level_variance: float | None = None) -> float:
    """The spread of a mean of ``runs`` re-test runs about ``ref``: what of ``ref``'s spread is not
    run-to-run noise (GPUs that differ by themselves), plus the run-to-run noise over ``runs``.
    A fleet's spread within ``lasting_tolerance`` of its run-to-run noise is all that noise: the
    two estimates differ by that much by chance (1.15 with thousands of values), and the difference of
    their squares would otherwise keep half the fleets' means as coarse as two runs.
    Without enough runs to measure the noise, as coarse as one run. Plus the reference level's own
    error (``LEVEL_ERROR``, of the wider of the fleet's spread and the measured noise: a level found
    from a few values can sit a spread high, and its spread come out tight): nothing in a fleet of
    thousands of values, but a 4-node job's level from 32 values is off by a third of a spread, as
    much as a mean of six runs scatters, and a GPU pair's level from 16 hosts by nearly half
    (``level_variance``, where given: that error's square as the re-test found it, ``retest_level``).
    Never below ``floor_pct`` of the reference."""
    floor = abs(ref.value) * floor_pct / 100
    measured = noise is not None and noise.dof >= MIN_RUN_DOF
    per_run = noise.relative_sd * abs(ref.value) if noise is not None and measured else 0.0
    if level_variance is not None:
        level = level_variance
    else:
        level = (LEVEL_ERROR * max(ref.spread, per_run)) ** 2 / ref.level_values if ref.level_values > 0 else 0.0
    if not measured:
        return max(math.sqrt(ref.spread ** 2 + level), floor)
    return max(math.sqrt(_lasting(ref, per_run, noise) + per_run ** 2 / runs + level), floor)


def _lasting(ref: Reference, per_run: float, noise: RunNoise) -> float:
    """What of ``ref``'s spread outlasts the runs (a variance in the square of its unit): from the
    fleet's spread (``lasting_variance``) and, where the re-test measured it (``Lasting``), the
    two weighed by how sure each is. An estimate of a variance scatters by what it estimates
    times √(2 / its degrees of freedom): the fleet's spread of single runs carries the whole
    run-to-run noise, the re-test's means of six runs a sixth of it, so where GPUs differ little by
    themselves the re-test knows far better, and where they differ much more than the runs do,
    the two count by their degrees of freedom. Both are weighed at the larger of the two, never
    each at its own: an estimate low by chance would weigh itself up, and name GPUs for what they
    differ by. A 4-node job's 32 single values spread 4.65 % at 3 % noise by chance, a lasting
    3.4 % where its GPUs' means of six runs showed none, and two GPUs 10 % slow passed."""
    from_fleet = lasting_variance(ref.spread, per_run, ref.level_values, noise.dof)
    lasting = noise.lasting
    if lasting is None or ref.value == 0:
        return from_fleet
    scale = ref.value ** 2
    fleet, retest = from_fleet / scale, lasting.relative_variance
    fleet_dof = spread_dof(ref.level_values)
    weighed_at = max(fleet, retest)
    fleet_scatter = weighed_at + (per_run / ref.value) ** 2
    retest_scatter = weighed_at + lasting.noise_share
    if retest_scatter <= 0:  # runs that never varied, on GPUs that never differ: nothing lasts
        return 0.0
    fleet_weight = fleet_dof / fleet_scatter ** 2
    retest_weight = lasting.dof / retest_scatter ** 2
    if fleet_weight + retest_weight <= 0:
        return from_fleet
    return (fleet * fleet_weight + retest * retest_weight) / (fleet_weight + retest_weight) * scale


def lasting_tolerance(values: float, dof: int | None) -> float:
    """How far a spread measured over ``values`` values may exceed a run-to-run noise measured
    with ``dof`` degrees of freedom (None: many) and still be that noise alone: the two estimates'
    one-sided 95 % ratio, at least ``LASTING_TOLERANCE``. A 4-node job's spread from 32 values is
    off by a fifth, and 1.15 kept a part of it as lasting in one job of ten at 3 % noise (all of it
    run-to-run): a 10 %-slow GPU's mean of six runs was then judged as coarse as two runs, and
    missed. A fleet of thousands of values keeps 1.15. ``values`` 0 (not known): 1.15."""
    if values <= 0:
        return LASTING_TOLERANCE
    log_variance = MAD_LOG_VARIANCE / values + (1 / (2 * dof) if dof else 0.0)
    return max(LASTING_TOLERANCE, math.exp(POWER_Z * math.sqrt(log_variance)))


def lasting_variance(spread: float, run_sd: float, values: float, dof: int | None) -> float:
    """What of a ``spread`` (over ``values`` values) outlasts a run-to-run noise ``run_sd`` (with
    ``dof`` degrees of freedom), as a variance in the square of their unit: 0 where the spread is
    within ``lasting_tolerance`` of the noise (the two estimates differ that much by chance)."""
    return max(spread ** 2 - (lasting_tolerance(values, dof) * run_sd) ** 2, 0.0)


def with_fleet_spread(ref: Reference, noise: RunNoise | None) -> RunNoise | None:
    """``noise`` (a key's measured run-to-run noise) pooled with ``ref``'s spread where that
    spread is all run-to-run noise (within ``lasting_tolerance`` of it): then both estimate one
    sigma, the spread of ``level_values`` values with the degrees of freedom a MAD of as many
    normal values has (``MAD_LOG_VARIANCE``: a third of them). Two re-tested hosts measure the
    noise with 15 degrees of freedom, which raised a 3.4-sigma bar to 4.3, and a GPU 5 % slow at
    1 % noise, its re-test 4.1 sigma below, passed; the fleet's 128 values knew that noise with
    47 more. ``noise`` unchanged where the spread outlasts it, where the runs scatter more than
    the fleet's spread allows (the noise of the re-test is its own), or where either is not
    measured."""
    if noise is None or noise.dof < MIN_RUN_DOF or ref.level_values <= 0 or ref.value == 0:
        return noise
    fleet_sd, tolerance = ref.spread / abs(ref.value), lasting_tolerance(ref.level_values, noise.dof)
    if not noise.relative_sd / tolerance <= fleet_sd <= tolerance * noise.relative_sd:
        return noise  # the spread outlasts the runs, or the runs scatter more than the fleet did
    fleet_dof = spread_dof(ref.level_values)
    dof = noise.dof + fleet_dof
    return RunNoise(math.sqrt((noise.relative_sd ** 2 * noise.dof + fleet_sd ** 2 * fleet_dof) / dof), dof,
                    noise.lasting)


@dataclass(frozen=True)
class RunsVerdict:
    """A noisy suspect's re-test runs judged: their mean, its deficit and z against the
    reference, and whether that confirms it."""

    mean: float
    deficit_pct: float
    robust_z: float
    confirmed: bool
    note: str
    reference: Reference  # what the mean was judged against (``retest_level``'s)


def retest_level(ref: Reference, noise: RunNoise | None, set_aside_pct: float) -> tuple[Reference, float | None]:
    """``ref`` (a fleet level) with the level the re-test found its GPUs at weighed in, where the
    two agree within ``AGREE_ERRORS`` of their errors, and that level's error as a variance (None:
    ``ref`` as it is, its error from its values: ``mean_spread``). A 4-node job's level from 32
    single runs is off by a third of a spread, the median of two dozen GPUs' means of six runs by
    a tenth. The level is never raised by it (the lower of the fleet's and the pooled one: no GPU
    is judged against a level its re-test did not reach). Any other reference, or one without such
    a re-test, as it is. At 3 % noise a GPU 10 % slow whose six runs read 6.8 % below a 4-node
    job's level stood 3.7 sigma of such a mean below it, the level's own error as large as the
    runs' noise, where the bar was 4.4.

    The re-test's level is the median of the means of its hosts that run at the fleet's level
    (``level_hosts``): a host slow as a whole, re-tested for that, tells what it runs at, not the
    fleet. In a 3-node job with one node 10 % slow on every GPU, re-tested with one reference,
    the median of their 16 means fell between the two hosts, 3.7 % under the fleet's level, and
    the node, 5 % under that, was named by one GPU of eight."""
    lasting = noise.lasting if noise is not None else None
    if lasting is None or ref.source != FLEET or ref.level_values <= 0 or ref.value <= 0:
        return ref, None
    per_run = noise.relative_sd * ref.value
    fleet_error = LEVEL_ERROR * max(ref.spread, per_run) / math.sqrt(ref.level_values)
    means = [mean for host in level_hosts(lasting, ref.value, set_aside_pct) for mean in host]
    if len(means) < MIN_HOST_RESULTS:
        return ref, None
    centre = statistics.median(means)
    retest_error = MEDIAN_EFFICIENCY * math.sqrt(lasting.means_variance) * centre / math.sqrt(len(means))
    if abs(centre - ref.value) > AGREE_ERRORS * math.hypot(fleet_error, retest_error):
        return ref, None
    if retest_error <= 0:
        return dataclasses.replace(ref, value=min(ref.value, centre)), 0.0
    weights = (1 / fleet_error ** 2, 1 / retest_error ** 2)
    pooled = (ref.value * weights[0] + centre * weights[1]) / sum(weights)
    return dataclasses.replace(ref, value=min(ref.value, pooled)), 1 / sum(weights)


def level_hosts(lasting: Lasting, level: float, set_aside_pct: float) -> list[tuple[float, ...]]:
    """The re-tested hosts' means (``Lasting.hosts``) but those of a host slow as a whole against
    ``level`` (reference.slow_as_a_whole, as a small fleet's level sets such a host aside), its
    median's own error the means' scatter about their hosts over √its means."""
    within = math.sqrt(lasting.means_variance)
    kept = []
    for means in lasting.hosts:
        median = statistics.median(means)
        if not slow_as_a_whole(level, median, within * median / math.sqrt(len(means)), set_aside_pct):
            kept.append(means)
    return kept


def judge_runs(ref: Reference, values: Iterable[float], noise: RunNoise | None, bar: float,
               thresholds: Thresholds) -> RunsVerdict:
    """The mean of ``values`` (a result's re-test runs) against ``ref``: confirmed when it falls
    ``retest_deficit`` below and ``bar`` spreads of such a mean below (or the fleet's own level
    is below ``ref``)."""
    figures = list(values)
    mean = statistics.fmean(figures)
    first_level = ref.value
    ref, level_variance = retest_level(ref, noise, thresholds.deficit_warn_pct)
    noise = with_fleet_spread(ref, noise)
    spread = mean_spread(ref, len(figures), noise, thresholds.mad_floor_pct, level_variance)
    deficit = ref.deficit_pct(mean)
    z = (mean - ref.value) / spread
    measured = "run-to-run noise not measured: one run's spread"
    if noise is not None and noise.dof >= MIN_RUN_DOF:
        measured = f"run-to-run noise {100 * noise.relative_sd:.1f} % over {noise.dof} degrees of freedom"
        bar = student_bar(bar, noise.dof)  # an estimated noise: the t quantile of the same tail
    elif ref.spread_dof > 0:
        # The reference's spread alone: a MAD of its values, as unsure as they are few.
        measured += f", the {ref.source}'s from {ref.level_values:g} values"
        bar = student_bar(bar, ref.spread_dof)
    confirmed = deficit >= thresholds.retest_deficit_pct and (ref.fleet_below or z <= -bar)
    what, such = ("re-test", "run") if len(figures) == 1 else (f"mean of {len(figures)} re-test runs", "mean")
    against = "" if ref.value == first_level else f" the level with its key's re-test ({ref.value:.1f})"
    note = (f"the {what} {deficit:.1f} % below{against}, {-z:.1f} sigma of such a {such} "
            f"(bar {bar:.1f}; {measured})")
    return RunsVerdict(mean, deficit, z, confirmed, note, ref)


def noisy_in_runs(runs: Mapping[tuple[str, ...], Sequence[Measurement]], suspects: Sequence[Suspect],
                   refs: Mapping[str, KeyReferences], thresholds: Thresholds) -> dict[tuple[str, ...], Screen]:
    """The GPU results of noisy keys measured in two runs or more that are no suspect, with their
    key's screen (gpudiag.analysis.suspects.confirm judges each on its runs' mean)."""
    taken = {s.measurement.repeat_key for s in suspects}
    screens: dict[str, Screen | None] = {}
    found: dict[tuple[str, ...], Screen] = {}
    for key, values in runs.items():
        first = values[0]
        if len(values) < 2 or key in taken or first.device in HOST_DEVICES or first.key not in refs:
            continue
        if first.key not in screens:
            screens[first.key] = key_screen(refs[first.key], first.probe, first.device, thresholds)
        screen = screens[first.key]
        if screen is not None and screen.noisy:
            found[key] = screen
    return found
