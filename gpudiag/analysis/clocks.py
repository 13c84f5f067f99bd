"""How much of a speed deficit the SM clock explains.

A clocks-event reason (a software power cap, a thermal or hardware slowdown) explains only the
deficit its own clock drop explains: the GPU's mean SM clock under load against its maximum
(gpudiag.analysis.rules.clock_cost_pct), less what the GPUs behind the reference lose the same way when
the reference is their live level (a fleet that all runs at its power limit is not slow against
itself). A reason active in a few samples still counts for the clock it cost; the rest of a
deficit is the GPU's.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from . import rules
from .actions import Cause
from .measurements import Measurement
from .reference import FLEET
from .suspects import COMPUTE_PROBES, Suspect
from .thresholds import Thresholds

SLOWING_REASONS = rules.HARDWARE_REASONS + rules.SOFTWARE_REASONS
# The most GPUs a key's typical clock cost is the median of (every n-th of its measurements, in
# their order): 4,096 put a median within about 2 % of the costs' spread of the whole key's, and a
# key of 80,000 GPUs was read in 40 ms of the analysis after the last host, now a twentieth of them.
TYPICAL_COST_GPUS = 4096


def typical_clock_costs(grouped: Mapping[str, Sequence[Measurement]],
                        costs: Mapping[str, Mapping[str, float | None]]) -> Mapping[str, float]:
    """Per baseline key of a compute probe (``grouped``: the measurements by key,
    measurements.by_key): the median clock cost (percent of the maximum clock) of its GPUs under
    load, over the GPUs whose sampler gave clocks (``costs``: host -> GPU UUID -> its cost,
    rules.clock_cost_pct, worked out as each host was read; TYPICAL_COST_GPUS of them at most).
    Worked out per key when first asked for: only the keys of suspects and shifted groups ever are."""
    return _ClockCosts(grouped, costs)


class _ClockCosts(Mapping[str, float]):
    def __init__(self, grouped: Mapping[str, Sequence[Measurement]],
                 costs: Mapping[str, Mapping[str, float | None]]) -> None:
        self._grouped = grouped
        self._by_host = costs
        self._costs: dict[str, float | None] = {}

    def _values(self, key: str) -> list[float]:
        same = self._grouped.get(key) or ()
        if not same or same[0].probe not in COMPUTE_PROBES:
            return []
        by_host, none = self._by_host, {}
        every = same[::-(-len(same) // TYPICAL_COST_GPUS)]  # the stride rounded up: that many at most
        return [cost for m in every if (cost := by_host.get(m.host, none).get(m.gpu_uuid or "")) is not None]

    def __getitem__(self, key: str) -> float:
        if key not in self._costs:
            values = self._values(key)
            self._costs[key] = statistics.median(values) if values else None
        cost = self._costs[key]
        if cost is None:
            raise KeyError(key)
        return cost

    def __iter__(self) -> Iterator[str]:
        return (key for key in self._grouped if key in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def explained_pct(suspect: Suspect, gpu: rules.GpuTelemetry, typical: Mapping[str, float]) -> float | None:
    """The part of ``suspect``'s deficit (percent) its clock drop explains; None without clocks."""
    cost = rules.clock_cost_pct(gpu.under_load)
    if cost is None:
        return None
    if suspect.reference.source == FLEET:
        cost -= typical.get(suspect.measurement.key, 0.0)
    return max(0.0, cost)


def clock_cause(suspect: Suspect, gpu: rules.GpuTelemetry, typical: Mapping[str, float],
                thresholds: Thresholds) -> Cause | None:
    """``throttled`` (a thermal or hardware slowdown was seen) or ``power_capped`` (the power cap
    alone) when the reasons seen explain the deficit, that is when less than ``deficit_warn`` of
    it is left once the clock drop is taken off; None otherwise (the rest is the GPU's). Without
    clocks, a reason active in ``throttle_share`` of the loaded samples explains it, as NVML
    gives nothing to weigh it by. The clock a reason cost is known to one loaded sample (the
    sampler's granularity): that much more of the deficit may be left."""
    seen = rules.seen_reasons(gpu.under_load)
    slowing = [reason for reason in seen if reason in SLOWING_REASONS]
    capped = rules.POWER_CAP in seen
    explained = explained_pct(suspect, gpu, typical)
    if explained is None:
        active = rules.active_reasons(gpu.under_load, thresholds.throttle_share_pct) or []
        slowing = [reason for reason in slowing if reason in active]
        capped = capped and rules.POWER_CAP in active
    elif suspect.deficit_pct - explained >= thresholds.deficit_warn_pct + _one_sample_pct(gpu.under_load):
        return None
    if slowing:
        return Cause.THROTTLED
    return Cause.POWER_CAPPED if capped else None


def _one_sample_pct(details: Mapping[str, Any]) -> float:
    """What one loaded sample of the slowest clock is worth (percent of the maximum clock): the
    share of samples a reason was active in is known to one sample, so the clock it cost is too."""
    most, low = details.get("sm_clock_max_mhz"), details.get("sm_clock_mhz_min")
    loaded = int(details.get("nvml_samples") or 0) - int(details.get("nvml_samples_idle") or 0)
    if not isinstance(most, (int, float)) or not isinstance(low, (int, float)) or most <= 0 or loaded <= 0:
        return 0.0
    return max(0.0, 100 * (1 - low / most) / loaded)


def explanation(suspect: Suspect, gpu: rules.GpuTelemetry, typical: Mapping[str, float]) -> str:
    """Plain words for how much of the deficit the clock drop explains ('' when no slowing
    reason was seen or the sampler gave no clocks)."""
    explained = explained_pct(suspect, gpu, typical) if rules.seen_reasons(gpu.under_load) else None
    if explained is None:
        return ""
    against = " beyond its peers'" if suspect.reference.source == FLEET else ""
    return (f"the clock drop{against} explains {explained:.1f} % of the {suspect.deficit_pct:.1f} % deficit")
