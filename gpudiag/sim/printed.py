"""The JSON lines a simulated node prints: the same records, in the same order and shape, as
``python -m probes`` on a real GPU node (see probes/runner.py and each probe's module).

Here: what a simulated probe is given (``BundleCall``) and gives back (``ProbeOutput``), the
record shapes, and the noise of the samples. A probe draws each record from the node's state
(gpudiag/sim/state.py), the SKU figures of ``gpudiag/data/sku.json`` and a random source per
record, so that a record's noise does not depend on which other probes ran or in which order
threads were scheduled.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIB = 1 << 20
# A timed sample of a probe batches runs to about this long (probes/timing.py), so a probe
# run of ``duration_s`` yields duration_s / SAMPLE_S samples, and at least MIN_SAMPLES.
SAMPLE_S = 0.025
MIN_SAMPLES = 5
# The noise figures of the fleet file are the spread between runs and GPUs; the samples of one
# run scatter this many times less around that run's level (real probes: CV 0.2-0.5 %).
WITHIN_RUN_DIVISOR = 3.0


@dataclass(frozen=True)
class BundleCall:
    """The options of one ``python -m probes`` command line (probes/runner.py)."""

    names: tuple[str, ...]
    duration_s: float = 1.0
    max_gpu_mem_mib: int | None = None
    dtype: str = "bf16"
    sequential: bool = False
    deadline_s: float = 600.0
    pause: bool = False


@dataclass(frozen=True)
class ProbeOutput:
    """One probe's records and the simulated seconds it took."""

    records: tuple[dict[str, Any], ...]
    seconds: float


# ------------------------------------------------------------------------------ record shapes


def record(probe: str, device: str, metric: str, value: float | int | None, unit: str | None, *,
           status: str = "ok", reason: str | None = None, gpu_uuid: str | None = None, samples: int = 0,
           cv: float | None = None, params: Mapping[str, Any] | None = None,
           details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A record with the fields, in the order, of probes/records.py's ``Record.to_dict``."""
    return {"probe": probe, "device": device, "gpu_uuid": gpu_uuid, "metric": metric, "value": value,
            "unit": unit, "samples": samples, "cv": cv, "status": status, "reason": reason,
            "params": dict(params or {}), "details": dict(details or {})}


def not_ok(status: str, probe: str, device: str, metric: str, reason: str, **extra: Any) -> dict[str, Any]:
    """A ``skipped`` or ``error`` record: no value, a reason."""
    return record(probe, device, metric, None, None, status=status, reason=reason, **extra)


def measured(probe: str, device: str, metric: str, unit: str, values: Sequence[float],
             **extra: Any) -> dict[str, Any]:
    """A record whose value is the median of ``values``, with their CV (population SD / mean)."""
    mean = statistics.fmean(values)
    # statistics.pstdev is exact (fractions) and takes a third of a simulated node's time; floats do.
    spread = math.sqrt(math.fsum((value - mean) ** 2 for value in values) / len(values))
    cv = spread / mean if len(values) > 1 and mean else 0.0
    return record(probe, device, metric, statistics.median(values), unit, samples=len(values), cv=cv, **extra)


def sample_count(duration_s: float) -> int:
    """Samples a probe takes in ``duration_s`` seconds of timed load."""
    return max(MIN_SAMPLES, round(duration_s / SAMPLE_S))


def noisy(rng: random.Random, true_value: float, cv: float, count: int) -> list[float]:
    """``count`` samples of one run: a run level drawn with ``cv``, samples scattered around it."""
    level = true_value * rng.gauss(1.0, cv)
    return [level * rng.gauss(1.0, cv / WITHIN_RUN_DIVISOR) for _ in range(count)]
