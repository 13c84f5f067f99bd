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

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable

from .measurements import HOST_DEVICES, Measurement
from .reference import BASELINE, FLEET, MAD_TO_SIGMA, SIBLINGS, KeyReferences, Reference
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
    key has no measured reference (fleet, baseline). Where it has one, that level rests on far
    more values than a node's seven siblings: judging every GPU twice at the same z would double
    the dips flagged, and a GPU slower than fast siblings but not below its fleet costs a job
    nothing. There the siblings only tell a broken GPU from its slow host (``Suspect.sibling``)."""
    return key_refs is None or all(ref.source not in (FLEET, BASELINE) for ref in key_refs.references)
