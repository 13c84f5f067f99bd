"""One record the bundle printed, checked against its probe's schema (gpudiag.schema.tables).

``decode_record`` reads the JSON of a line strictly (NaN, Infinity and -Infinity are no JSON);
``check_record`` checks what was read:

- a field of the wrong type, a probe or metric the bundle does not print, a record that is not
  ok without a reason or with a value: the bundle and the controller disagree, and nothing the
  node printed can be trusted — RecordTypeError, which the reader makes the host's
  ``probe_error`` (naming the host, the line, the field and what was expected);
- a value of the right type out of its range (a negative bandwidth, an ok record without its
  value, a count of 1e30, a list of a million items): one bad reading — the record comes back
  as an ``error`` record in its place, on the same probe, device and metric, so the analysis
  reports that GPU's measurement ``unchecked``;
- otherwise the record's fields, every string cleaned of control characters and bounded
  (gpudiag.schema.text), every number finite.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .fields import FieldError, shown
from .jsonin import DECODER
from .tables import METRICS, RECORD_FIELDS, details_shape, params_shape

# What an absent field of a record means (the others are null).
DEFAULTS = {"samples": 0}
# The fields of a record, in the order ProbeResult takes them.
FIELDS = ("probe", "device", "metric", "value", "unit", "status", "reason", "gpu_uuid", "samples", "cv",
          "params", "details")


class RecordTypeError(ValueError):
    """A record the bundle could not have printed: the message names where, the field, what was
    expected and what was there."""


def decode_record(text: str) -> tuple[Any, int]:
    """The JSON value at the start of ``text`` and where it ends. Raises json.JSONDecodeError
    for text that breaks off or is no JSON, NotJson for NaN, Infinity or a float past its range,
    ValueError for a number
    Python will not read (an integer thousands of digits long)."""
    return DECODER.raw_decode(text)


def check_record(data: Any, where: str) -> dict[str, Any]:
    """The fields of the record ``data`` (keyword arguments of ProbeResult), checked and cleaned
    (see the module docstring); ``where`` names the host and line. Raises RecordTypeError."""
    if not isinstance(data, dict):
        raise RecordTypeError(f"{where}: a record must be a JSON object, got {shown(data)}")
    probe, metric = _identity(data, where)
    try:
        fields = _checked_fields(data, probe, metric)
    except FieldError as error:
        if not error.out_of_range:
            raise RecordTypeError(f"{where}: {probe}.{metric} record: {error}; the node's records cannot be trusted "
                                  "(a bundle of another version, or not gpudiag's)") from error
        return _replaced(data, probe, metric, f"{where}: {probe}.{metric}: {error}")
    problem = _value_problem(fields, probe, metric)
    if problem is not None:
        return _replaced(data, probe, metric, f"{where}: {probe}.{metric}: {problem}")
    return fields


def _identity(data: Mapping[str, Any], where: str) -> tuple[str, str]:
    """The record's probe and metric, checked first: every other error names them."""
    try:
        probe = RECORD_FIELDS["probe"].check(data.get("probe"), "probe")
        metric = RECORD_FIELDS["metric"].check(data.get("metric"), "metric")
    except FieldError as error:
        raise RecordTypeError(f"{where}: {error}; the node's records cannot be trusted") from error
    if metric not in METRICS[probe]:
        raise RecordTypeError(f"{where}: field 'metric' must be a metric of {probe}, got {metric!r} (it prints "
                              f"{', '.join(METRICS[probe])}); the node's records cannot be trusted")
    return probe, metric


def _checked_fields(data: Mapping[str, Any], probe: str, metric: str) -> dict[str, Any]:
    """Every field checked against its kind. Raises FieldError."""
    fields = {name: kind.check(data.get(name, DEFAULTS.get(name)), name) for name, kind in RECORD_FIELDS.items()
              if name not in ("probe", "metric")}
    fields["probe"], fields["metric"] = probe, metric
    fields["params"] = params_shape(probe).check(data.get("params", {}), "params")
    fields["details"] = details_shape(probe, metric).check(data.get("details", {}), "details")
    if fields["status"] != "ok":
        if fields["value"] is not None:
            raise FieldError("value", f"null (a {fields['status']} record measured nothing)", fields["value"])
        if not fields["reason"]:
            raise FieldError("reason", f"a reason (a {fields['status']} record must give a reason)",
                             data.get("reason"))
    return {name: fields[name] for name in FIELDS}


def _value_problem(fields: Mapping[str, Any], probe: str, metric: str) -> str | None:
    """Why an ok record's value cannot be used (None: it can): absent where its metric has one,
    or outside the range of its metric."""
    if fields["status"] != "ok":
        return None
    measure = METRICS[probe][metric]
    value = fields["value"]
    if value is None:
        return "an ok record without a value measured nothing" if measure.value_required else None
    if measure.low <= value <= measure.high:
        return None
    unit = f" {measure.unit}" if measure.unit else ""
    return f"value {value:g}{unit} is outside what any GPU or host can measure ({measure.low:g} to " \
           f"{measure.high:g}{unit})"


def _replaced(data: Mapping[str, Any], probe: str, metric: str, why: str) -> dict[str, Any]:
    """An ``error`` record in place of one with a value out of range: the same probe, device,
    metric, GPU and (where they are sound) params, so that the GPU's measurement is unchecked."""
    device = _or_none(lambda: RECORD_FIELDS["device"].check(data.get("device"), "device")) or "host"
    uuid = _or_none(lambda: RECORD_FIELDS["gpu_uuid"].check(data.get("gpu_uuid"), "gpu_uuid"))
    params = _or_none(lambda: params_shape(probe).check(data.get("params", {}), "params")) or {}
    return {"probe": probe, "device": device, "metric": metric, "value": None, "unit": None, "status": "error",
            "reason": f"{why}: not used", "gpu_uuid": uuid, "samples": 0, "cv": None, "params": params,
            "details": {}}


def _or_none(read: Any) -> Any:
    try:
        return read()
    except FieldError:
        return None
