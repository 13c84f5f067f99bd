"""A sweep's re-test of GPUs sliding against their siblings (gpudiag.store.sweeptrends).

Over four sweeps at 2 % noise a GPU losing 2 % a sweep is 3.4 standard errors of its slope
against its siblings, where a watch needs 3.5: no bar on the first runs alone finds it nineteen
times in twenty and keeps flat GPUs quiet. More runs of the latest sweep do: a GPU whose slide is
at least RETEST_SLIDE_Z of its errors has its host's probe run TREND_RETEST_RUNS times more, and
the mean of those runs (for every GPU of the host: the slide is a ratio to the siblings) is the
sweep's figure in the host's trends, weighing as many runs (gpudiag.store.retests). The runs
are new measurements, so a GPU taken for a low first run is judged without it.

A fleet's flat GPUs reach RETEST_SLIDE_Z by chance about one time in ten, so the re-test is
bounded: at most TREND_RETEST_HOSTS hosts, or TREND_RETEST_SHARE of the sweep's, the steepest
slides first; the rest are judged on their first run, and the sweep says how many.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.identity import HostGpus
from ..analysis.keys import COMPARED_PROBES, result_key
from ..analysis.thresholds import Thresholds
from ..errors import StoreError
from ..hosts import fold_hosts
from ..records import ProbeResult
from ..store.retests import Retested
from ..store.store import Store
from ..store.sweeptrends import RETEST_SLIDE_Z, SlideToRetest, sweep_trends, trend_candidates
from ..store.trend import HostTrends
from ..words import plural
from .fanout import HostOutcome, SweepResult
from .progress import SweepProgress

# How many runs the re-test of a sliding GPU's host makes.
TREND_RETEST_RUNS = 3
# The most hosts a sweep re-tests for their trends: this many, or this share of its hosts.
TREND_RETEST_HOSTS = 8
TREND_RETEST_SHARE = 0.02


@dataclass(frozen=True)
class TrendRetestPlan:
    """What a sweep re-tests for its trends: each host and its probes, the slides that took them
    (``slides``) and those the bound left to their first run (``left``)."""

    probes: dict[str, tuple[str, ...]]
    slides: tuple[SlideToRetest, ...]
    left: tuple[SlideToRetest, ...]

    def describe(self) -> str:
        """``re-testing what may slide, 2 GPUs against their siblings and 1 node median, on 2 hosts, 3 runs``."""
        return (f"re-testing what may slide, {_slides_words(self.slides)}, on {plural(len(self.probes), 'host')}, "
                f"{TREND_RETEST_RUNS} runs")

    def note(self) -> str | None:
        """What the bound left out, in words (None: nothing)."""
        if not self.left:
            return None
        hosts = len({slide.host for slide in self.left})
        return (f"the trend re-test took the steepest slides, on {plural(len(self.probes), 'host')} (its most in this "
                f"sweep); {_slides_words(self.left)} more, each slope at least {RETEST_SLIDE_Z:g} standard error "
                f"down, on {plural(hosts, 'host')} were judged on their first run alone")


def _slides_words(slides: Sequence[SlideToRetest]) -> str:
    """``2 GPUs against their siblings and 1 node median``."""
    gpus = sum(slide.gpu is not None for slide in slides)
    medians = len(slides) - gpus
    return " and ".join(([f"{plural(gpus, 'GPU')} against {'its' if gpus == 1 else 'their'} siblings"] if gpus else [])
                        + ([plural(medians, "node median")] if medians else []))


def plan_trend_retest(slides: Sequence[SlideToRetest], hosts: int) -> TrendRetestPlan:
    """The hosts of ``slides`` (steepest first) to re-test, at most TREND_RETEST_HOSTS or
    TREND_RETEST_SHARE of the sweep's ``hosts``, each with the probes its slides need."""
    bound = max(TREND_RETEST_HOSTS, math.ceil(TREND_RETEST_SHARE * hosts))
    probes: dict[str, set[str]] = {}
    taken, left = [], []
    for slide in slides:
        if slide.host in probes or len(probes) < bound:
            probes.setdefault(slide.host, set()).add(slide.probe)
            taken.append(slide)
        else:
            left.append(slide)
    return TrendRetestPlan({host: tuple(sorted(names)) for host, names in probes.items()}, tuple(taken), tuple(left))


def retest_means(outcomes: Iterable[Mapping[str, Any]], wanted: Mapping[str, Sequence[str]]
                 ) -> dict[str, list[Retested]]:
    """Per host, each of its compared figures of the ``wanted`` probes as the mean of the runs of
    ``outcomes`` (the re-test's hosts, each run's, with their first-pass facts) that measured it,
    under NVML's index of its GPU; a host no run measured is absent."""
    values: dict[str, dict[tuple[str, int], list[float]]] = {}
    for outcome in outcomes:
        host = str(outcome["host"])
        facts = outcome.get("facts") or {}
        if outcome.get("status") != "ok" or not isinstance(facts, Mapping):
            continue
        gpus = HostGpus(facts)
        for result in outcome.get("results") or ():
            if (result.get("status") != "ok" or result.get("value") is None
                    or result.get("probe") not in COMPARED_PROBES or result.get("probe") not in wanted.get(host, ())):
                continue
            key = result_key(facts, ProbeResult.from_dict(result))
            gpu = gpus.of(result.get("device"), result.get("gpu_uuid")).nvml_index
            if key is not None and gpu is not None:
                values.setdefault(host, {}).setdefault((key, gpu), []).append(float(result["value"]))
    return {host: [Retested(key, gpu, math.fsum(found) / len(found), len(found))
                   for (key, gpu), found in sorted(figures.items())]
            for host, figures in values.items()}


@dataclass(frozen=True)
class SlidesRetested:
    """The re-test of GPUs sliding against their siblings: what it skipped or left out (the
    sweep's notes), whether an interrupt ended it, and the hosts' trends it chose them by where
    it stored nothing (they stand for the sweep's findings; None: judge them again)."""

    notes: tuple[str, ...] = ()
    interrupted: bool = False
    trends: Mapping[str, HostTrends] | None = None


# Runs the probes again: one mapping a run (each host and the probes to run there); every host of
# every run, with its first-pass facts (None: interrupted before any), and whether it was interrupted.
ProbeAgain = Callable[[Sequence[Mapping[str, Iterable[str]]]], tuple[list[HostOutcome] | None, bool]]


def retest_slides(store: Store, first: SweepResult, thresholds: Thresholds, progress: SweepProgress,
                  probe_again: ProbeAgain) -> SlidesRetested:
    """The GPUs of the sweep ``first`` whose slide against their siblings one run cannot settle
    (trend_candidates), their hosts' probes run TREND_RETEST_RUNS times more (``probe_again``),
    and the means kept in the store for the sweep's trends. A store that cannot be read or written
    for it, and a host the re-test measured nothing on, are notes: their trends are judged on the
    first run."""
    ok = [host.host for host in first.hosts if host.ok]
    try:
        trends = sweep_trends(store, first.sweep_id, ok, thresholds)
    except StoreError as error:
        return SlidesRetested((f"the stored sweeps could not be read for the re-test of sliding GPUs ({error})",))
    plan = plan_trend_retest(trend_candidates(trends, thresholds), len(ok))
    if not plan.probes:
        return SlidesRetested(trends=trends)
    notes = [note] if (note := plan.note()) is not None else []
    progress.phase(plan.describe())
    outcomes, stopped = probe_again([plan.probes] * TREND_RETEST_RUNS)
    if stopped:
        return SlidesRetested(tuple(notes), True)
    means = retest_means(outcomes or (), plan.probes)
    if missed := sorted(set(plan.probes) - set(means)):
        notes.append(f"the re-test of sliding GPUs measured nothing on {fold_hosts(missed)}: their trends are judged "
                     "on the first run")
    if not means:
        return SlidesRetested(tuple(notes), trends=trends)
    try:
        for host, figures in means.items():
            store.record_retests(first.sweep_id, host, figures)
    except StoreError as error:
        notes.append(f"the re-test of sliding GPUs could not be stored ({error}): their trends are judged on the "
                     "first run")
    return SlidesRetested(tuple(notes))
