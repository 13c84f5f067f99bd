"""The fourth reference: a GPU's own siblings, the other GPUs of its node measured on the same
key. They share its host, driver, cooling and power, so a GPU below them is slow itself, in a
job of any size and with or without a baseline; a node slow on every GPU alike (a starved host)
is not seen by them, and is left to the fleet, the baseline and the SKU figure.

Also here, because it is gathered per host in the same pass: each host's noise, the median of its
records' sample CVs per probe and metric, the floor of every spread that judges that host's
results (gpudiag.analysis.reference): a noisy metric needs a larger deficit. It is the host's
own median, so one erratic GPU does not lift its own floor, and what one node prints changes only
its own verdicts.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable

from .measurements import HOST_DEVICES, Measurement
from .noisy import confirmation_bar, too_wide
from .reference import BASELINE, FLEET, MAD_TO_SIGMA, SIBLINGS, KeyReferences, Reference
from .suspicion import Suspect, repeated_once, sibling_judged
from .thresholds import Thresholds

# The variance of a median of n normal values is about this / n times theirs (pi / 2).
MEDIAN_VARIANCE = math.pi / 2
# Probes with one figure per GPU and key (a P2P key names its pair: one figure per node).
SIBLING_PROBES = frozenset({"gemm", "membw", "pcie", "smclock"})


class _Siblings:
    """One host's figures of one key, by device (the median where a device printed several)."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = defaultdict(list)
        self._by_device: dict[str, float] | None = None
        self._highest = 0.0

    def by_device(self) -> dict[str, float]:
        if self._by_device is None:
            self._by_device = {device: statistics.median(values) for device, values in self.values.items()}
            self._highest = max(self._by_device.values())
        return self._by_device

    def highest(self) -> float:
        if self._by_device is None:
            self.by_device()
        return self._highest


class HostGroups:
    """Every host's sibling groups and noise, from a sweep's measurements (gpudiag.analysis.suspects)."""

    def __init__(self, found: Iterable[Measurement]) -> None:
        self._siblings: dict[tuple[str, str], _Siblings] = {}
        cvs: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for m in found:
            info = m.info
            if m.cv is not None:
                cvs[(m.host, info.probe, info.metric)].append(m.cv)
            if info.probe in SIBLING_PROBES and m.device not in HOST_DEVICES:
                group = self._siblings.get((m.host, info.key))
                if group is None:
                    group = self._siblings[(m.host, info.key)] = _Siblings()
                group.values[m.device].append(m.value)
        self._noise = {place: statistics.median(values) for place, values in cvs.items()}

    def noise(self, host: str, probe: str, metric: str) -> float:
        """The median sample CV (a fraction) of ``host``'s records of that probe and metric; 0 unknown."""
        return self._noise.get((host, probe, metric), 0.0)

    def has_siblings(self, host: str, key: str, thresholds: Thresholds) -> bool:
        """Whether ``host`` has ``sibling_min_gpus`` GPUs or more of ``key``."""
        group = self._siblings.get((host, key))
        return group is not None and len(group.values) >= thresholds.sibling_min_gpus

    def sibling_reference(self, host: str, key: str, device: str, value: float, thresholds: Thresholds,
                          key_refs: KeyReferences | None) -> Reference | None:
        """The reference ``device``'s siblings give its ``value``, when it could flag it: None when
        the host has fewer than ``sibling_min_gpus`` GPUs of the key, or ``value`` is not even
        ``deficit_warn`` below the fastest of them. The level is the siblings' median (the GPU
        judged left out); the spread their MAD, at least the key's measured spread (fleet,
        baseline: what healthy GPUs scatter by, estimated on far more values than a node has)
        and ``mad_floor`` of the level."""
        group = self._siblings.get((host, key))  # the hot path of every GPU result: two lookups at most
        if group is None or len(group.values) < thresholds.sibling_min_gpus:
            return None
        if value > group.highest() * (1 - thresholds.deficit_warn_pct / 100):
            return None
        others = [figure for name, figure in group.by_device().items() if name != device]
        level = statistics.median(others)
        mad = statistics.median([abs(figure - level) for figure in others])
        measured = key_refs.measured_spread() if key_refs is not None else 0.0
        sigma = max(MAD_TO_SIGMA * mad, measured, abs(level) * thresholds.mad_floor_pct / 100)
        # A median of n siblings is itself uncertain (its standard error ~ 1.25 sigma / sqrt(n)):
        # the spread of value minus level, so that a GPU is as rarely flagged here as by the fleet.
        spread = sigma * math.sqrt(1 + MEDIAN_VARIANCE / len(others))
        return Reference(level, spread, SIBLINGS, len(others)) if level > 0 else None


def siblings_alone(key_refs: KeyReferences | None) -> bool:
    """Whether a GPU's siblings judge it alone where no other reference flags it: only where its
    key has no measured reference (fleet, baseline) resting on many values (Reference.rests_on_many).
    Where it has one, that level rests on far more values than a node's seven siblings: judging
    every GPU twice at the same z would double the dips flagged, and a GPU slower than fast
    siblings but not below its fleet costs a job nothing. There the siblings only tell a broken
    GPU from its slow host (``Suspect.sibling``). A baseline stored from one node's eight GPUs
    does not: its spread's Student bar is beyond what a GPU 20 % slow reaches."""
    return key_refs is None or not any(ref.rests_on_many() for ref in key_refs.references)


def against_siblings(m: Measurement, groups: HostGroups, key_refs: KeyReferences | None, noise: float,
                      thresholds: Thresholds) -> Suspect | None:
    """``m`` judged against its siblings, when they flag it."""
    sibling = groups.sibling_reference(m.host, m.key, m.device, m.value, thresholds, key_refs)
    sibling = sibling.widened(noise) if sibling is not None else None
    if sibling is None or not sibling.flags(m.value, thresholds):
        return None
    return Suspect(m, sibling, sibling.robust_z(m.value), sibling.deficit_pct(m.value))


def sibling_screen(m: Measurement, groups: HostGroups, key_refs: KeyReferences | None, noise: float,
                   thresholds: Thresholds) -> Suspect | None:
    """``m`` ``deficit_warn`` below its siblings where their spread is too wide for one run to
    show a ``deficit_fail`` deficit (noisy.too_wide): a screened suspect, re-tested in several
    runs and judged on them alone (``below_siblings_again``), never a finding by itself. At 2 %
    noise a GPU 10 % slow was 7.3 % below seven siblings scattering 2.6 %: 2.5 of their spreads."""
    sibling = groups.sibling_reference(m.host, m.key, m.device, m.value, thresholds, key_refs)
    sibling = sibling.widened(noise) if sibling is not None else None
    if sibling is None or sibling.deficit_pct(m.value) < thresholds.deficit_warn_pct \
            or not too_wide(sibling, thresholds):
        return None
    return Suspect(m, sibling, sibling.robust_z(m.value), sibling.deficit_pct(m.value), screened=True)


def siblings_judge(suspect: Suspect) -> Reference | None:
    """The sibling reference judging ``suspect`` on its re-test runs: where no fleet or baseline
    does (alone, or beside the SKU's), or where only their screen took it beside a fleet or
    baseline suspect (a GPU of a starved host, slower than its siblings by less than one run shows)."""
    sibling = sibling_judged(suspect)
    if sibling is None or suspect.reference.source in (FLEET, BASELINE) and not sibling.screened:
        return None
    return sibling.reference


def below_siblings_again(suspect: Suspect, again: Measurement, again_groups: HostGroups, thresholds: Thresholds,
                         runs: int = 1, run_sd: float = 0.0) -> Suspect | None:
    """``suspect`` (judged against its siblings) confirmed by its re-test alone, or None. The
    re-test ran every GPU of the host again, so its figure ``again`` (the mean of its ``runs``
    runs) is judged against the re-test's siblings (``again_groups``: their means); a re-test that
    lost GPUs, against its first siblings."""
    m = suspect.measurement
    if not again_groups.has_siblings(m.host, m.key, thresholds):
        return repeated_once(suspect, again, thresholds)
    second = again_groups.sibling_reference(m.host, m.key, m.device, again.value, thresholds, None)
    if second is None:  # not even deficit_warn below the fastest sibling now
        return None
    return _in_runs(suspect, again.value, second, runs, run_sd, thresholds)


def _in_runs(suspect: Suspect, mean: float, second: Reference, runs: int, run_sd: float,
             thresholds: Thresholds) -> Suspect | None:
    """Judged on the mean of the re-test runs alone (the first run chose it: biased low), at the
    widest of the re-test's sibling spread, the first run's over √runs and the run-to-run noise
    (``run_sd``, a fraction measured over the host's re-tested GPUs; 0: not measured) over √runs:
    each an estimate that seven siblings make rough. The first run and one more, at one run's
    spread, lost a GPU 5 % slow at 1 % noise one time in four, and one 10 % slow at 2 % in five.
    The finding quotes what confirmed it: the re-test's mean against its siblings' level in the
    re-test, with that deficit and z."""
    by_runs = run_sd * abs(second.value) * math.sqrt((1 + MEDIAN_VARIANCE / max(second.peers, 1)) / runs)
    judged = dataclasses.replace(second, spread=max(second.spread, suspect.reference.spread / math.sqrt(runs),
                                                    by_runs))
    deficit, z = judged.deficit_pct(mean), judged.robust_z(mean)
    if deficit < thresholds.retest_deficit_pct or not judged.far_below(z, thresholds):
        return None
    what = "re-test" if runs == 1 else f"mean of {runs} re-test runs"
    note = (f"the {what} {deficit:.1f} % below its siblings' {'figures' if runs == 1 else 'means'}, "
            f"{-z:.1f} sigma of such a {'run' if runs == 1 else 'mean'} (bar {abs(thresholds.robust_z):g})")
    return dataclasses.replace(suspect, measurement=suspect.measurement._replace(value=mean), reference=judged,
                               robust_z=z, deficit_pct=deficit, confirmed=True, note=note)


def below_siblings_in_runs(again: Measurement, runs: int, again_groups: HostGroups, thresholds: Thresholds,
                           run_sd: float) -> Suspect | None:
    """A GPU result no sibling screen chose, judged on its re-test runs' mean (``again``) against
    its siblings' means in the same re-test (``below_siblings_again``), two runs or more, at the
    bar of the host's GPUs judged so together (noisy.confirmation_bar), or None. Its host was
    re-tested as a whole, so the runs are chosen by no figure of this GPU's: a starved host's
    GPU 10 % slower than its siblings, lifted level with them in its first run at 3 % noise, was
    folded into its host's ``slow_node`` in 2 sweeps of 20, while its re-test runs had it 9 %
    under them. (On one run, at the flat bar, a GPU of a node slow as a whole was warned about,
    3.6 % and 3.0 sigma under its siblings.)"""
    reference = again_groups.sibling_reference(again.host, again.key, again.device, again.value, thresholds, None)
    if reference is None or runs < 2:
        return None
    # every GPU of the host is judged so: the bar of that many, as a first run's siblings choose one
    bar = confirmation_bar(reference.peers + 1, thresholds)
    chosen = Suspect(again, reference, reference.robust_z(again.value), reference.deficit_pct(again.value))
    return below_siblings_again(chosen, again, again_groups, dataclasses.replace(thresholds, robust_z=-bar), runs,
                                run_sd)
