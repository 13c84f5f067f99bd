"""The records the probe bundle prints, read back and checked on the controller side.

The bundle prints one JSON object per line; this module turns them into ``ProbeResult``s. A line
that is no record at all (a library's ``print`` or warning on stdout) is stray output: skipped,
counted and kept for the report, never fatal to the node's other records. A line that starts a
record and breaks off is an ``error`` record; a complete JSON object that is not a valid record
raises ``ProbeOutputError``; so does output with no record at all (a node that prints only garbage
is ``probe_error``, never silently passed).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ProbeOutputError

STATUSES = ("ok", "skipped", "error")
# How many stray lines are kept (the rest only counted), and how much of each.
STRAY_LINES_KEPT = 5
STRAY_LINE_CHARS = 200
# Every record the bundle writes starts so (probes/records.py keeps "probe" first); text before
# it on the same line is a stray print that lost its newline. A JSON object without a "probe"
# field is some library's log line, not a record.
_RECORD_START = '{"probe":'
_PROBE_FIELD = '"probe":'
_DECODER = json.JSONDecoder()


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


@dataclass(frozen=True)
class StrayOutput:
    """Lines of the bundle's stdout that are no record: ``count`` of them, the first few (each cut
    to ``STRAY_LINE_CHARS``) in ``lines``, and where the first was (``first_at``, e.g.
    ``node001 line 3``)."""

    count: int
    lines: tuple[str, ...]
    first_at: str

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "lines": list(self.lines)}

    def describe(self) -> str:
        """``2 lines that are not records, the first: 'UserWarning: ...'``."""
        noun = "line that is not a record" if self.count == 1 else "lines that are not records"
        return f"{self.count} {noun}, the first: {self.lines[0]!r}"


@dataclass(frozen=True)
class ProbeOutput:
    """What the bundle printed: its records in order, and the stray lines between them (None when
    there were none)."""

    results: tuple[ProbeResult, ...]
    stray: StrayOutput | None = None


def device_index(device: object) -> int | None:
    """The GPU index of a record's device (3 for ``cuda:3`` or NVML's ``gpu:3``); None for
    ``cpu``, ``host`` or anything else."""
    _, _, number = str(device).partition(":")
    return int(number) if number.isdigit() else None


def parse_probe_output(text: str, source: str) -> list[ProbeResult]:
    """Every record in ``text`` (JSON lines; blank lines ignored), in order; stray lines skipped.

    ``source`` names where the text came from, for error messages. Raises ProbeOutputError for a
    JSON object that is not a valid record, and for output with stray lines but no record at all.
    """
    output = read_probe_output(text, source)
    if not output.results and output.stray is not None:
        raise stray_only_error(output.stray)
    return list(output.results)


def read_probe_output(text: str, source: str) -> ProbeOutput:
    """The records of ``text`` and its stray lines (see the module docstring).

    Raises ProbeOutputError, naming ``source`` and the line, for a JSON object that is not a valid
    record: the bundle and the controller disagree, so none of its output can be trusted.
    """
    results: list[ProbeResult] = []
    stray: list[tuple[str, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{source} line {number}"
        before, record = _split_line(line.strip())
        if before:
            stray.append((where, before))
        if record:
            result, after = _parse_record(record, where)
            results.append(result)
            if after:
                stray.append((where, after))
    if not stray:
        return ProbeOutput(tuple(results))
    kept = tuple(line[:STRAY_LINE_CHARS] for _, line in stray[:STRAY_LINES_KEPT])
    return ProbeOutput(tuple(results), StrayOutput(len(stray), kept, stray[0][0]))


def stray_only_error(stray: StrayOutput) -> ProbeOutputError:
    """The error for output that held stray lines and no record: names the first line."""
    more = f" ({stray.count} lines, no record)" if stray.count > 1 else " (no record)"
    return ProbeOutputError(f"{stray.first_at}: not a JSON record: {stray.lines[0][:120]!r}{more}")


def _split_line(line: str) -> tuple[str, str]:
    """(stray text, record text) of one stripped line; either may be empty."""
    if line.startswith("{") and _PROBE_FIELD in line:
        return "", line
    start = line.find(_RECORD_START)
    if start < 0:
        return line, ""
    return line[:start].rstrip(), line[start:]


def _parse_record(text: str, where: str) -> tuple[ProbeResult, str]:
    """The record at the start of ``text`` and the stray text after it on the line. A record that
    breaks off (the bundle killed mid-line, two writers interleaved) is an error record."""
    try:
        data, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError:
        return _broken_record(text, where), ""
    return _record(data, where), text[end:].strip()


def _broken_record(text: str, where: str) -> ProbeResult:
    """An error record for ``text``, a record cut short: named by what of it survived."""

    def field_of(key: str, default: str) -> str:
        found = re.search(rf'"{key}": "([^"\\]+)"', text)
        return found.group(1) if found else default

    return ProbeResult(probe=field_of("probe", "bundle"), device=field_of("device", "host"),
                       metric=field_of("metric", "record"), value=None, unit=None, status="error",
                       reason=f"{where}: a record that breaks off: {text[:120]!r}",
                       gpu_uuid=field_of("gpu_uuid", "") or None)


def _record(data: dict[str, Any], where: str) -> ProbeResult:
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
