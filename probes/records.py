"""The one record shape every probe emits, and how it is written as a JSON line.

A record is one measurement (or the reason there is none) for one device. The controller
reads these lines back; their field names are a contract shared with ``gpudiag``.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

OK = "ok"
SKIPPED = "skipped"
ERROR = "error"
STATUSES = (OK, SKIPPED, ERROR)


@dataclass(frozen=True)
class Record:
    """One measurement of one probe on one device.

    ``value`` is ``None`` whenever ``status`` is not ``ok``; ``reason`` then says why.
    ``params`` are the probe parameters that decide which results may be compared
    (dtype, matrix size, ...); ``details`` is supporting evidence (clocks seen, per-link
    counters, ...). Keys of both carry their unit as a suffix where they have one.
    """

    probe: str
    device: str
    metric: str
    value: float | int | None
    unit: str | None
    status: str = OK
    reason: str | None = None
    gpu_uuid: str | None = None
    samples: int = 0
    cv: float | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {self.status!r}")
        if self.status != OK and self.value is not None:
            raise ValueError("a record that is not ok carries no value")
        if self.status != OK and not self.reason:
            raise ValueError("a record that is not ok must say why (reason)")

    def to_dict(self) -> dict[str, Any]:
        """The record as the JSON object the controller reads (stable key order)."""
        return {
            "probe": self.probe,
            "device": self.device,
            "gpu_uuid": self.gpu_uuid,
            "metric": self.metric,
            "value": _finite_or_none(self.value),
            "unit": self.unit,
            "samples": self.samples,
            "cv": _finite_or_none(self.cv),
            "status": self.status,
            "reason": self.reason,
            "params": dict(self.params),
            "details": dict(self.details),
        }


def skipped(probe: str, device: str, metric: str, reason: str, **extra: Any) -> Record:
    """A record saying this measurement was not taken, and why. Never a pass."""
    return Record(probe=probe, device=device, metric=metric, value=None, unit=None,
                  status=SKIPPED, reason=reason, **extra)


def failed(probe: str, device: str, metric: str, reason: str, **extra: Any) -> Record:
    """A record saying this measurement was attempted and went wrong."""
    return Record(probe=probe, device=device, metric=metric, value=None, unit=None,
                  status=ERROR, reason=reason, **extra)


def measured(probe: str, device: str, metric: str, unit: str, sample_values: Sequence[float],
             **extra: Any) -> Record:
    """A record whose value is the median of ``sample_values``, with their CV attached."""
    if not sample_values:
        raise ValueError("a measurement needs at least one sample")
    return Record(probe=probe, device=device, metric=metric, unit=unit,
                  value=statistics.median(sample_values), samples=len(sample_values),
                  cv=coefficient_of_variation(sample_values), **extra)


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Population standard deviation over mean; 0.0 for fewer than two values or a zero mean."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    if mean == 0:
        return 0.0
    return statistics.pstdev(values) / mean


def write_records(records: Iterable[Record], stream: TextIO) -> None:
    """Write each record as one JSON line and flush, so a reader sees it at once."""
    for record in records:
        stream.write(json.dumps(record.to_dict(), sort_keys=False, allow_nan=False) + "\n")
        stream.flush()


def _finite_or_none(value: float | int | None) -> float | int | None:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
