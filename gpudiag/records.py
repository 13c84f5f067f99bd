"""The records the probe bundle prints, read back and checked on the controller side.

The bundle prints one JSON object per line; this module turns them into ``ProbeResult``s, each
checked against its probe's schema at this boundary (gpudiag.schema): every field typed, every
string cleaned of control characters and bounded, every number finite. A line that is no record
at all (a library's ``print`` or warning on stdout) is stray output: skipped, counted and kept
(cleaned) for the report, never fatal to the node's other records. A line that starts a record
and breaks off is an ``error`` record, and so is a record with a value out of range (in its
place: that GPU's measurement is unchecked); a complete JSON object that is not a valid record
(a wrong type, NaN or Infinity, a probe or metric the bundle does not print) raises
``ProbeOutputError``; so does output with no record at all (a node that prints only garbage is
``probe_error``, never silently passed). More than MAX_RECORDS_PER_KEY records of one probe,
device and metric (records that differ only in their parameters, which no node prints: its most
are a NIC's ports and a GPU's P2P pairs) are none of them kept: one ``error`` record on that
device says how many there were, so that measurement is unchecked on that node alone, and the
excess costs the controller no memory past the cap.

Here too, the probe and dtype catalogue, once: the probes the bundle runs (in run order), those it
runs when none is named, each one's headline metric and the GEMM dtypes, all read from the
bundle's probes/catalog.json (gpudiag/bundle/catalog.py), which the bundle itself reads too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .bundle.catalog import catalog
from .errors import ProbeOutputError
from .schema.fields import FieldError, Kind
from .schema.jsonin import NotJson
from .schema.recordcheck import RecordTypeError, check_record, decode_record
from .schema.tables import METRICS, RECORD_FIELDS
from .schema.tables import STATUSES as STATUSES
from .schema.text import clean_text

# The probes of ``python -m probes``, in run order; those that run when none is named (every
# probe but xid, which reads the kernel log: gpudiag triage); the GEMM dtypes.
PROBE_NAMES = catalog().probe_names
DEFAULT_PROBE_NAMES = catalog().default_probe_names
DTYPES = catalog().dtypes
# Each probe's headline metric: the metric its records are named by when it has none of its own.
HEADLINE_METRICS: Mapping[str, str] = catalog().metrics
# How many stray lines are kept (the rest only counted), and how much of each.
STRAY_LINES_KEPT = 5
STRAY_LINE_CHARS = 200
# Every record the bundle writes starts so (probes/records.py keeps "probe" first); text before
# it on the same line is a stray print that lost its newline. A JSON object without a "probe"
# field is some library's log line, not a record.
_RECORD_START = '{"probe":'
_PROBE_FIELD = '"probe":'
# A GPU index longer than this is no GPU's (and int() of thousands of digits is refused).
MAX_INDEX_DIGITS = 6
# Records of one probe, device and metric a node may print: its most are a GPU's P2P pairs (two
# directions to each other GPU) and NIC ports (probes/nicports.py reads 128).
MAX_RECORDS_PER_KEY = 1024


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

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> ProbeResult:
        """A record of a sweep document read back (from the store or a JSON file: checked when it
        was first read), as a ProbeResult."""
        return cls(probe=str(record.get("probe")), device=str(record.get("device")), metric=str(record.get("metric")),
                   value=record.get("value"), unit=record.get("unit"), status=str(record.get("status")),
                   reason=record.get("reason"), gpu_uuid=record.get("gpu_uuid"), samples=record.get("samples") or 0,
                   cv=record.get("cv"), params=record.get("params") or {}, details=record.get("details") or {})


class HostRecords(Protocol):
    """One host's part of a sweep as the analysis reads it: how it ended (``status``, ``error``),
    its facts and its records, typed. A sweep's HostOutcome is one; a host entry of a document
    read back is made one by ``host_records``."""

    @property
    def host(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def error(self) -> str | None: ...

    @property
    def facts(self) -> Mapping[str, Any]: ...

    @property
    def results(self) -> Sequence[ProbeResult]: ...


@dataclass(frozen=True)
class HostEntry:
    """A ``HostRecords`` held as it is (its records already unpacked or read back)."""

    host: str
    status: str
    error: str | None = None
    facts: Mapping[str, Any] = field(default_factory=dict)
    results: tuple[ProbeResult, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def host_records(host: HostRecords | dict[str, Any]) -> HostRecords:
    """``host`` as typed records: a host entry of a sweep document read back as JSON (a dict:
    ``host``, ``status``, ``error``, ``facts``, ``results`` as record dicts) is converted, where
    the JSON boundary is; anything else already is one."""
    if not isinstance(host, dict):
        return host
    results: Iterable[Mapping[str, Any]] = host.get("results") or ()
    return HostEntry(str(host["host"]), str(host.get("status")), host.get("error"), host.get("facts") or {},
                     tuple(record if isinstance(record, ProbeResult) else ProbeResult.from_dict(record)
                           for record in results))


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
    return int(number) if number.isascii() and number.isdigit() and len(number) <= MAX_INDEX_DIGITS else None


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
    counts: dict[tuple[str, str, str], int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{source} line {number}"
        before, record = _split_line(line.strip())
        if before:
            stray.append((where, _stray_text(before)))
        if record:
            result, after = _parse_record(record, where)
            key = (result.probe, result.device, result.metric)
            counts[key] = counts.get(key, 0) + 1
            if counts[key] <= MAX_RECORDS_PER_KEY:
                results.append(result)
            if after:
                stray.append((where, after))
    results = _bounded(results, counts, source)
    if not stray:
        return ProbeOutput(tuple(results))
    kept = tuple(line for _, line in stray[:STRAY_LINES_KEPT])
    return ProbeOutput(tuple(results), StrayOutput(len(stray), kept, stray[0][0]))


def _bounded(results: list[ProbeResult], counts: Mapping[tuple[str, str, str], int],
             source: str) -> list[ProbeResult]:
    """``results`` without the records of a probe, device and metric the node printed more than
    MAX_RECORDS_PER_KEY of, and one ``error`` record for each such (see the module docstring)."""
    over = {key: count for key, count in counts.items() if count > MAX_RECORDS_PER_KEY}
    if not over:
        return results
    kept = [result for result in results if (result.probe, result.device, result.metric) not in over]
    return kept + [ProbeResult(probe=probe, device=device, metric=metric, value=None, unit=None, status="error",
                               reason=f"{source}: the node printed {count} {probe} {metric} records for {device}, "
                                      f"more than any node prints (at most {MAX_RECORDS_PER_KEY}): none is used")
                   for (probe, device, metric), count in over.items()]


def _stray_text(text: str) -> str:
    """A stray line as it is kept: cleaned of control characters, cut to STRAY_LINE_CHARS."""
    return clean_text(text[:4 * STRAY_LINE_CHARS], 4 * STRAY_LINE_CHARS)[:STRAY_LINE_CHARS]


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
    breaks off (the bundle killed mid-line, two writers interleaved) is an error record; one that
    holds NaN or Infinity, or fails its schema (gpudiag.schema), raises ProbeOutputError."""
    try:
        data, end = decode_record(text)
    except json.JSONDecodeError:
        return _broken_record(text, where), ""
    except NotJson as error:
        raise ProbeOutputError(f"{where}: {error}; the node's records cannot be trusted") from error
    except (ValueError, RecursionError) as error:  # an integer too long for Python to read, nesting too deep
        raise ProbeOutputError(f"{where}: a record Python's JSON reader refuses "
                               f"({type(error).__name__}: {clean_text(str(error), 120)})") from error
    try:
        fields = check_record(data, where)
    except RecordTypeError as error:
        raise ProbeOutputError(str(error)) from error
    after = text[end:].strip()
    return ProbeResult(**fields), _stray_text(after) if after else ""


def _broken_record(text: str, where: str) -> ProbeResult:
    """An error record for ``text``, a record cut short: named by what of it survived (what is no
    name of a probe, device or GPU of the bundle is left out)."""

    def field_of(key: str, kind: Kind, default: str | None) -> str | None:
        found = re.search(rf'"{key}": "([^"\\]+)"', text)
        try:
            return kind.check(found.group(1), key) if found else default
        except FieldError:
            return default

    probe = field_of("probe", RECORD_FIELDS["probe"], None) or "bundle"
    metric = field_of("metric", RECORD_FIELDS["metric"], None)
    return ProbeResult(probe=probe, device=field_of("device", RECORD_FIELDS["device"], "host") or "host",
                       metric=metric if metric is not None and metric in METRICS.get(probe, {}) else "record",
                       value=None, unit=None, status="error",
                       reason=f"{where}: a record that breaks off: {clean_text(text, 120)!r}",
                       gpu_uuid=field_of("gpu_uuid", RECORD_FIELDS["gpu_uuid"], None))
