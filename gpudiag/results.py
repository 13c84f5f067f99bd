"""The records the probe bundle prints, read back and checked on the controller side.

The bundle prints one JSON object per line; this module turns them into ``ProbeResult``s and
rejects anything else with ``ProbeOutputError`` (a node that prints garbage is ``probe_error``,
never silently passed).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ProbeOutputError

STATUSES = ("ok", "skipped", "error")


@dataclass(frozen=True)
class ProbeResult:
    """One measurement of one probe on one device, as the node reported it."""

    probe: str
    device: str
    metric: str
    value: float | None
    unit: str | None
    status: str
    reason: str | None = None
    gpu_uuid: str | None = None
    samples: int = 0
    cv: float | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return {"probe": self.probe, "device": self.device, "gpu_uuid": self.gpu_uuid,
                "metric": self.metric, "value": self.value, "unit": self.unit,
                "samples": self.samples, "cv": self.cv, "status": self.status,
                "reason": self.reason, "params": dict(self.params), "details": dict(self.details)}


def device_index(device: object) -> int | None:
    """The GPU index of a record's device (3 for ``cuda:3`` or NVML's ``gpu:3``); None for
    ``cpu``, ``host`` or anything else."""
    _, _, number = str(device).partition(":")
    return int(number) if number.isdigit() else None


def parse_probe_output(text: str, source: str) -> list[ProbeResult]:
    """Every record in ``text`` (JSON lines; blank lines ignored), in order.

    ``source`` names where the text came from, for the error message. Raises
    ProbeOutputError at the first line that is not a valid record.
    """
    results = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            results.append(_parse_line(line, f"{source} line {number}"))
    return results


def _parse_line(line: str, where: str) -> ProbeResult:
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        raise ProbeOutputError(f"{where}: not a JSON record: {line[:120]!r}") from None
    if not isinstance(data, dict):
        raise ProbeOutputError(f"{where}: expected a JSON object, got {type(data).__name__}")
    return ProbeResult(
        probe=_text(data, "probe", where),
        device=_text(data, "device", where),
        metric=_text(data, "metric", where),
        value=_number(data, "value", where),
        unit=_optional_text(data, "unit", where),
        status=_status(data, where),
        reason=_optional_text(data, "reason", where),
        gpu_uuid=_optional_text(data, "gpu_uuid", where),
        samples=_count(data, "samples", where),
        cv=_number(data, "cv", where),
        params=_mapping(data, "params", where),
        details=_mapping(data, "details", where),
    )


def _text(data: dict[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ProbeOutputError(f"{where}: field {key!r} must be a non-empty string, got {value!r}")
    return value


def _optional_text(data: dict[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ProbeOutputError(f"{where}: field {key!r} must be a string or null, got {value!r}")
    return value


def _number(data: dict[str, Any], key: str, where: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProbeOutputError(f"{where}: field {key!r} must be a finite number or null, got {value!r}")
    return value


def _count(data: dict[str, Any], key: str, where: str) -> int:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProbeOutputError(f"{where}: field {key!r} must be a count (integer >= 0), got {value!r}")
    return value


def _mapping(data: dict[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ProbeOutputError(f"{where}: field {key!r} must be an object, got {value!r}")
    return value


def _status(data: dict[str, Any], where: str) -> str:
    status = data.get("status")
    if status not in STATUSES:
        raise ProbeOutputError(f"{where}: field 'status' must be one of {', '.join(STATUSES)}, got {status!r}")
    if status != "ok" and not data.get("reason"):
        raise ProbeOutputError(f"{where}: a {status} record must give a reason")
    return status
